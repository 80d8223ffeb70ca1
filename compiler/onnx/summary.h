// Summary of an ONNX model's top level, read without shape inference or checking (much cheaper
// than LoadModel on large models): the model store uses it to reject bytes that are not an onnx
// ModelProto and to describe what it stored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace kiln::onnx_fe {

struct OnnxSummary {
  int64_t opset = 0;  ///< default-domain ("" or "ai.onnx") opset import; 0 if none
  std::vector<std::string> inputs;   ///< graph inputs that are not initializers
  std::vector<std::string> outputs;
  int64_t node_count = 0;  ///< top-level graph nodes
  std::string producer_name;
};

/// Parses `size` bytes at `data` as an onnx ModelProto (protobuf wire format).
/// INVALID_ARGUMENT if they do not parse, or if the model has no graph.
Result<OnnxSummary> SummarizeOnnx(const void* data, size_t size);

}  // namespace kiln::onnx_fe
