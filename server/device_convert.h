// Conversions between the kiln.v1 device messages and Kiln's device types.
#pragma once

#include "common/status.h"
#include "device/backends/precision.h"
#include "device/tensor.h"
#include "kiln/v1/device.pb.h"

namespace kiln::server {

/// kiln.v1.Tensor -> device::Tensor in float32 (FP32, FP16, BF16, INT32, INT64 accepted; others
/// INVALID_ARGUMENT). The byte count must equal product(shape) x element size; the message names
/// the tensor, the expected and the received byte counts.
Result<device::Tensor> FromProto(const kiln::v1::Tensor& t);

/// float32 device::Tensor -> kiln.v1.Tensor ("FP32", little-endian raw_data).
void ToProto(const std::string& name, const device::Tensor& t, kiln::v1::Tensor* out);

/// kiln.v1.Precision -> PrecisionConfig; unset fields keep TT-NN's conv defaults.
/// INVALID_ARGUMENT for values the config rejects (e.g. bfloat4_b activations).
Result<device::PrecisionConfig> FromProto(const kiln::v1::Precision& p);
/// The resolved config back as a message (every field set).
void ToProto(const device::PrecisionConfig& c, kiln::v1::Precision* out);

}  // namespace kiln::server
