// libFuzzer target over the ONNX loader (compiler/onnx): any byte string must yield a Model or an
// error Status; never a crash, hang, leak or sanitizer report. Built with clang-14
// (-fsanitize=fuzzer,address,undefined) by scripts/fuzz-onnx.sh; the same entry point is linked
// into onnx_fuzz_corpus_replay (any compiler), which replays tests/fuzz/corpus and the small
// models of tests/data/onnx as a regression test.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "compiler/onnx/loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::onnx_fe::LoadOptions options;
  options.limits.max_model_bytes = 1 << 20;
  options.limits.max_nodes = 20'000;
  options.limits.max_graph_depth = 8;
  options.limits.max_total_tensor_bytes = 64 << 20;
  kiln::onnx_fe::LoadError error;
  auto model = kiln::onnx_fe::LoadModel(std::string_view(reinterpret_cast<const char*>(data), size), options, &error);
  if (!model.ok()) {
    // The structured error and the Status must agree.
    if (model.status().code() != error.code) __builtin_trap();
    return 0;
  }
  // Walk the IR through the public API.
  const kiln::onnx_fe::Graph& g = (*model)->graph();
  size_t sum = 0;
  for (const auto& node : g.nodes()) {
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (const auto* c = g.ConstantInput(node, i)) sum += c->size();
      sum += g.Consumers(node.inputs[i]).size();
      (void)g.StaticInputShape(node, i);
    }
    for (const auto& out : node.outputs) {
      if (g.Producer(out).has_value()) ++sum;
    }
    (void)node.GetInt("axis");
    (void)node.GetInts("pads", {});
  }
  for (const auto& out : g.outputs()) {
    if (g.FindTensor(out.tensor) != nullptr) ++sum;
  }
  auto bound = (*model)->BindSymbols({{"N", 1}, {"batch", 1}});
  if (!bound.ok()) __builtin_trap();
  return static_cast<int>(sum & 0);
}
