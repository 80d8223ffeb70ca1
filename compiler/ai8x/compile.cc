// CompileAi8x: the pipeline of compiler/ai8x/pipeline.h over one network, and its last pass,
// Report (FillReport).
#include "compiler/ai8x/compile.h"

#include <algorithm>
#include <cctype>
#include <unordered_map>

#include "compiler/ai8x/kernel_memory.h"
#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/pipeline.h"

namespace kiln::ai8x {
namespace {

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

Result<InputFormat> ParseInputFormat(const std::string& text) {
  std::string t = Lower(text);
  if (t.empty() || t == "auto") return InputFormat::kAuto;
  if (t == "hwc") return InputFormat::kHWC;
  if (t == "chw") return InputFormat::kCHW;
  return InvalidArgument("input format must be auto, HWC or CHW, not '" + text + "'");
}

void FillReport(Network& net, const Ai8xOptions& resolved_options, Ai8xCompileResult& r) {
  r.resolved = resolved_options;
  r.resolved.input_format = net.chw_input ? InputFormat::kCHW : InputFormat::kHWC;
  r.resolved.use_fifos = net.use_fifo;
  // Diagnostics name final layer positions.
  net.Reindex();
  std::unordered_map<std::string, int> by_name;
  bool named = std::any_of(net.diagnostics.begin(), net.diagnostics.end(),
                           [](const Diagnostic& d) { return !d.layer_name.empty(); });
  for (size_t i = 0; named && i < net.layers.size(); ++i) by_name[net.layers[i].name] = static_cast<int>(i);
  for (Diagnostic& d : net.diagnostics) {
    if (d.layer_name.empty()) continue;
    auto it = by_name.find(d.layer_name);
    d.layer = it == by_name.end() ? -1 : it->second;  // -1: the layer was fused away
  }
  r.ok = std::none_of(net.diagnostics.begin(), net.diagnostics.end(),
                      [](const Diagnostic& d) { return d.severity == Severity::kError; });

  const ChipSpec& spec = net.spec();
  r.resources.layers = static_cast<int>(net.layers.size());
  r.resources.max_layers = spec.max_layers;
  r.resources.kernel_words_per_processor = spec.kernel_words_small;
  r.resources.bias_bytes_capacity = int64_t{spec.bias_bytes_per_group} * spec.num_groups;
  r.resources.data_instance_bytes = spec.data_instance_bytes;
  KernelMemoryMap kernel_memory;
  r.layers.reserve(net.layers.size());
  std::vector<int> twins(net.layers.size());  // before the loop below moves names out
  for (size_t i = 0; i < net.layers.size(); ++i) twins[i] = KernelTwin(net, i);
  for (size_t i = 0; i < net.layers.size(); ++i) {
    Layer& l = net.layers[i];  // not read after this loop: names and node lists move out
    Ai8xLayerSummary s;
    s.index = static_cast<int>(i);
    s.name = std::move(l.name);
    s.op = l.op == OpKind::kLinear ? "linear" : OpKindName(l.op);
    if (l.operands > 1) s.op += std::string("+") + EltwiseName(l.eltwise);
    if (l.pool != PoolType::kNone) s.op += l.pool == PoolType::kMax ? "+maxpool" : "+avgpool";
    s.onnx_nodes = std::move(l.onnx_nodes);
    s.in_channels = l.in_shape.c;
    s.out_channels = l.out_shape.c;
    s.in_shape = ShapeString(l.in_shape, l.one_d);
    s.out_shape = ShapeString(l.out_shape, l.one_d);
    s.processors = l.placed.processors;
    s.output_processors = l.placed.output_processors;
    s.in_offset = l.placed.in_offset;
    s.out_offset = l.placed.out_offset;
    s.data_in_bytes = DataInBytes(net, l);
    s.data_out_bytes = DataOutBytes(net, l);
    s.kernel_words = twins[i] >= 0 ? 0 : KernelWords(net, l);
    s.bias_bytes = BiasBytes(l);
    s.streaming = l.placed.streaming;
    r.resources.bias_bytes_used += s.bias_bytes;
    r.resources.streaming_layers += l.placed.streaming ? 1 : 0;
    r.resources.data_bytes_peak = std::max<int64_t>(
        r.resources.data_bytes_peak,
        std::max<int64_t>(l.placed.out_offset + s.data_out_bytes, l.placed.in_offset + s.data_in_bytes));
    if (l.has_weights()) kernel_memory.Place(l.placed.processors, s.kernel_words);
    r.layers.push_back(std::move(s));
  }
  r.resources.max_kernel_words_used = kernel_memory.MaxFill();
  r.izer_flags = net.izer_flags;  // filled by the passes that need a flag (Network::RequireIzerFlag)
  r.diagnostics = std::move(net.diagnostics);
}

Result<Ai8xCompileResult> CompileAi8xNetwork(Network net, const Ai8xOptions& options) {
  net.chip = options.chip;
  net.lift_limits = options.lift_layer_limit;
  net.Reindex();
  PassContext ctx(net, options);
  KILN_RETURN_IF_ERROR(RunPipeline(ctx, "CheckWeightOrder"));
  return std::move(ctx.result);
}

Result<Ai8xCompileResult> CompileAi8x(const onnx_fe::Model& model, const Ai8xOptions& options) {
  Network net;
  net.chip = options.chip;
  net.lift_limits = options.lift_layer_limit;
  PassContext ctx(net, options);
  ctx.graph = &model.graph();
  KILN_RETURN_IF_ERROR(RunPipeline(ctx));
  return std::move(ctx.result);
}

}  // namespace kiln::ai8x
