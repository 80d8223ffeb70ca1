// Internal to compiler/onnx: decoding of onnx::TensorProto payloads into ConstantData.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "compiler/onnx/ir.h"
#include "onnx/onnx_pb.h"

namespace kiln::onnx_fe::internal {

/// Outcome of checking a tensor payload: empty `error` when fine.
struct PayloadCheck {
  StatusCode code = StatusCode::kOk;
  std::string error;          // message without the tensor name
  uint64_t element_count = 0;
  uint64_t payload_bytes = 0;  // bytes as stored in the model (raw or typed field)
};

/// Checks a tensor without decoding it: supported element type, dims >= 0 (no overflow), not
/// external, not a segment, exactly one data field, element count x element size == bytes.
/// Sources: onnx.proto TensorProto comments (raw_data is little-endian; which typed field holds
/// which type; FLOAT16/BFLOAT16 bits packed in int32_data).
PayloadCheck CheckTensorPayload(const onnx::TensorProto& t);

/// Decodes a tensor that passed CheckTensorPayload. May move the payload out of `t` (raw_data /
/// float_data are taken over, not copied, when they already hold little-endian fp32 on a
/// little-endian host); `t` must not be used for its data afterwards.
std::shared_ptr<const ConstantData> DecodeTensor(onnx::TensorProto& t);

}  // namespace kiln::onnx_fe::internal
