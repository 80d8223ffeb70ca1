// Stages CheckSize and Parse (compiler/onnx/load_stages.h): untrusted bytes to onnx::ModelProto,
// with every cap that can be checked before the model is built (compiler/onnx/wire_scan.h).
#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <climits>

#include "common/limits.h"
#include "compiler/onnx/load_stages.h"
#include "compiler/onnx/wire_scan.h"

namespace kiln::onnx_fe::internal {
namespace {

constexpr size_t kProtobufMaxBytes = static_cast<size_t>(kMaxModelBytes);

}  // namespace

Status CheckSize(LoadContext& ctx) {
  const std::string_view bytes = ctx.bytes;
  if (bytes.empty()) return ctx.Fail(StatusCode::kInvalidArgument, "the model is empty (0 bytes)");
  if (bytes.size() > kProtobufMaxBytes) {
    return ctx.FailLimit("the model is " + std::to_string(bytes.size()) +
                         " bytes, over kMaxModelBytes (2 GiB - 1, common/limits.h): protobuf cannot parse more and external "
                         "data is not accepted");
  }
  if (bytes.size() > ctx.options.limits.max_model_bytes) {
    return ctx.FailLimit("the model is " + std::to_string(bytes.size()) + " bytes, over the limit of " +
                         std::to_string(ctx.options.limits.max_model_bytes) + " bytes (LoaderLimits::max_model_bytes)");
  }
  return Status::Ok();
}

Status Parse(LoadContext& ctx) {
  const std::string_view bytes = ctx.bytes;
  const auto& lim = ctx.options.limits;
  const WireScan scan = ScanModelWire(bytes, lim.max_nodes, lim.max_graph_depth);
  switch (scan.outcome) {
    case WireScan::Outcome::kOk: break;
    case WireScan::Outcome::kMalformed:
      return ctx.Fail(StatusCode::kInvalidArgument,
                      "not a valid ONNX model (the protobuf data is truncated or corrupt: " + scan.detail + ")");
    case WireScan::Outcome::kTooManyNodes:
      return ctx.FailLimit("the model has more than " + std::to_string(lim.max_nodes) +
                           " nodes (LoaderLimits::max_nodes, counting subgraphs)");
    case WireScan::Outcome::kTooDeep:
      return ctx.FailLimit("subgraphs are nested more than " + std::to_string(lim.max_graph_depth) +
                           " levels deep (LoaderLimits::max_graph_depth)");
  }
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  // ModelProto > GraphProto > NodeProto > AttributeProto > GraphProto ...: 3 message levels per
  // subgraph level, plus value_info types, tensors and slack.
  const size_t depth_limit = std::max<size_t>(100, 3 * (lim.max_graph_depth + 1) + 32);
  in.SetRecursionLimit(static_cast<int>(std::min<size_t>(depth_limit, 10000)));
  in.SetTotalBytesLimit(INT_MAX);
  if (!ctx.model.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage()) {
    return ctx.Fail(StatusCode::kInvalidArgument,
                    "not a valid ONNX model (protobuf parsing failed: the file is truncated, corrupt, nested too "
                    "deeply, or not an ONNX ModelProto)");
  }
  if (!ctx.model.has_graph()) {
    return ctx.Fail(StatusCode::kInvalidArgument, "not a valid ONNX model (no graph; is this an ONNX file?)");
  }
  return Status::Ok();
}

}  // namespace kiln::onnx_fe::internal
