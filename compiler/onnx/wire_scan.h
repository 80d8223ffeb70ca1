// Internal to compiler/onnx: an iterative pre-scan of the protobuf wire format of a ModelProto.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::onnx_fe::internal {

struct WireScan {
  enum class Outcome { kOk, kMalformed, kTooManyNodes, kTooDeep };
  Outcome outcome = Outcome::kOk;
  std::string detail;      // for kMalformed: what and where
  size_t node_count = 0;   // nodes seen (main graph + subgraphs); exact when kOk
  size_t max_depth = 0;    // deepest subgraph nesting seen (main graph = 0)
};

/// Walks the wire format of a serialized onnx.ModelProto without building it, following only
/// ModelProto.graph(7) -> GraphProto.node(1) -> NodeProto.attribute(5) -> AttributeProto.g(6) /
/// graphs(11) -> GraphProto ..., and skipping every other field by its length. Uses an explicit
/// stack (no recursion) and stops as soon as `max_nodes` or `max_depth` is exceeded, so a hostile
/// file costs O(bytes) time and O(max_depth) memory. Field numbers: onnx/onnx.proto.
WireScan ScanModelWire(std::string_view bytes, size_t max_nodes, size_t max_depth);

}  // namespace kiln::onnx_fe::internal
