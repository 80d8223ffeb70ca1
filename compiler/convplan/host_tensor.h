// ONNX element types ↔ host tensor element types, and model constants as host tensors.
//
// Host values of a plan (runtime/executor.h) carry their ONNX element type end to end: an int64
// shape stays int64 (exact above 2^24), a bool mask stays bool, a float64 input stays float64.
// Only device ops (Conv / ConvTranspose on a backend, device/backends/backend.h) compute in fp32.
// This file is the one mapping between onnx_fe::DataType (compiler/onnx/ir.h, the numbers of
// onnx.proto TensorProto.DataType) and device::DataType (device/tensor.h).
#pragma once

#include <memory>

#include "common/status.h"
#include "compiler/onnx/ir.h"
#include "device/tensor.h"

namespace kiln::convplan {

/// The host element type of an ONNX element type. FAILED_PRECONDITION for STRING and the complex
/// types ("has element type STRING, which Kiln does not compute with"), INVALID_ARGUMENT for
/// UNDEFINED / unknown values.
Result<device::DataType> HostDataType(onnx_fe::DataType type);
/// The ONNX element type of a host element type (total).
onnx_fe::DataType OnnxDataType(device::DataType type);

/// The constant `t` (initializer or Constant node; t.constant set) as a row-major host tensor of
/// its ONNX element type and shape, values exact (ConstantData's ints() / doubles() for integer,
/// bool and double data). INVALID_ARGUMENT when `t` has no constant value or an unusable type.
/// A constant whose shape the IR does not know statically is returned as rank 1.
Result<device::Tensor> ConstantTensor(const onnx_fe::Tensor& t);

/// The inverse: `t`'s values as IR constant data (fp32 view always; exact ints() for integer and
/// bool types, doubles() for float64), for constants computed at plan time. Row-major tensors only.
Result<std::shared_ptr<const onnx_fe::ConstantData>> ToConstantData(const device::Tensor& t);

}  // namespace kiln::convplan
