#include "compiler/onnx/summary.h"

#include <google/protobuf/io/coded_stream.h>
#include <onnx/onnx_pb.h>

#include <climits>

#include <cstdint>
#include <string_view>
#include <unordered_set>

#include "common/limits.h"
#include "compiler/onnx/wire_scan.h"

namespace kiln::onnx_fe {

Result<OnnxSummary> SummarizeOnnx(const void* data, size_t size) {
  if (size > kMaxModelBytes) {
    return InvalidArgument("model is " + std::to_string(size) + " bytes, over kMaxModelBytes (" +
                           std::to_string(kMaxModelBytes) + "): protobuf cannot parse more");
  }
  google::protobuf::io::CodedInputStream in(static_cast<const uint8_t*>(data),
                                            static_cast<int>(size));
  in.SetTotalBytesLimit(INT_MAX);
  in.SetRecursionLimit(256);
  onnx::ModelProto model;
  if (!model.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage()) {
    // The loader's wire scan (load_parse.cc) says what and where, as `kiln run --local` would.
    const internal::WireScan scan =
        internal::ScanModelWire(std::string_view(static_cast<const char*>(data), size), SIZE_MAX, 256);
    if (scan.outcome == internal::WireScan::Outcome::kMalformed) {
      return InvalidArgument("bytes are not an ONNX model (the protobuf data is truncated or corrupt: " + scan.detail +
                             ")");
    }
    return InvalidArgument("bytes are not an ONNX model (protobuf ModelProto parse failed)");
  }
  if (!model.has_graph()) return InvalidArgument("ONNX model has no graph");
  OnnxSummary s;
  for (const auto& imp : model.opset_import()) {
    if (imp.domain().empty() || imp.domain() == "ai.onnx") s.opset = imp.version();
  }
  const auto& g = model.graph();
  std::unordered_set<std::string> inits;
  for (const auto& t : g.initializer()) inits.insert(t.name());
  for (const auto& v : g.input()) {
    if (!inits.count(v.name())) s.inputs.push_back(v.name());
  }
  for (const auto& v : g.output()) s.outputs.push_back(v.name());
  s.node_count = g.node_size();
  s.producer_name = model.producer_name();
  return s;
}

}  // namespace kiln::onnx_fe
