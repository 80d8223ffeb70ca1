// NumPy .npy files (format versions 1.0, 2.0, 3.0) ↔ kiln::device::Tensor, for `kiln run`
// inputs/outputs and test data. Element types: float16/32/64 ('f2', 'f4', 'f8'), int8/16/32/64
// ('i1' … 'i8'), uint8/16/32/64 ('u1' … 'u8') and bool ('b1'), little- or big-endian (read;
// written little-endian), C or Fortran order (read; written in C order). Tensors come back with
// Layout::kNCHW (row-major), shape as stored (a 0-d array → shape {}).
// Errors: NOT_FOUND (file missing), INVALID_ARGUMENT / DATA_LOSS (bad magic, header, truncated
// data, unsupported dtype — the message says which), INTERNAL (write failure).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "device/tensor.h"

namespace kiln::device {

/// Parses an in-memory .npy image.
Result<Tensor> ParseNpy(std::string_view bytes);
/// Reads and parses `path`.
Result<Tensor> ReadNpy(const std::string& path);
/// The .npy (version 1.0) image of `t`, in C order (an NHWC tensor is written in logical NCHW order).
/// bfloat16 tensors are written as float32 (NumPy has no bfloat16). INVALID_ARGUMENT otherwise never.
Result<std::string> SerializeNpy(const Tensor& t);
/// Writes SerializeNpy(t) to `path` (tmp file + rename).
Status WriteNpy(const std::string& path, const Tensor& t);

}  // namespace kiln::device
