// Output-size and padding arithmetic for conv / conv-transpose / pooling, per axis, with ONNX
// semantics. Used by backends (validation), by the conv plan (resolving auto_pad and
// ConvTranspose output_shape to explicit pads before calling a backend) and by tests.
// All sizes are element counts; every function returns INVALID_ARGUMENT for non-positive
// kernel / stride / dilation, negative pads, or a result < 1 (the message gives the numbers).
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>

#include "common/status.h"

namespace kiln::device {

/// Extent of a dilated kernel: (k - 1) * d + 1.
inline int64_t DilatedKernel(int64_t k, int64_t d) { return (k - 1) * d + 1; }

/// Conv: floor((in + pb + pe - dilated_k) / s) + 1 (ONNX Conv).
Result<int64_t> ConvOutputSize(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe);

/// ConvTranspose: s * (in - 1) + output_padding + dilated_k - pb - pe (ONNX ConvTranspose).
Result<int64_t> ConvTransposeOutputSize(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb,
                                        int64_t pe, int64_t output_padding);

/// Pooling: floor or ceil((in + pb + pe - dilated_k) / s) + 1; with ceil_mode the last window must
/// start inside in + pb (else one less) — the corrected rule of onnx PR #5741, as PyTorch and
/// current ONNX Runtime compute it.
Result<int64_t> PoolOutputSize(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe,
                               bool ceil_mode);

/// ONNX auto_pad values.
enum class AutoPad { kNotSet, kValid, kSameUpper, kSameLower };
/// "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER" (as in the ONNX attribute); INVALID_ARGUMENT else.
Result<AutoPad> ParseAutoPad(std::string_view s);

/// Conv / pooling auto_pad → (pad_begin, pad_end) for one axis (ONNX Conv-11):
/// VALID → (0, 0); SAME_*: out = ceil(in / s), total = max(0, (out - 1) * s + dilated_k - in),
/// SAME_UPPER puts the odd element at the end, SAME_LOWER at the beginning. kNotSet → INVALID_ARGUMENT.
Result<std::pair<int64_t, int64_t>> ConvAutoPad(AutoPad mode, int64_t in, int64_t k, int64_t s,
                                                int64_t d);

/// ConvTranspose pads for one axis that make the output `out` long (ONNX ConvTranspose-11 text):
/// total = s * (in - 1) + output_padding + dilated_k - out (must be >= 0);
/// SAME_UPPER: begin = total / 2, end = total - total / 2; otherwise (NOTSET with output_shape,
/// SAME_LOWER): begin = total - total / 2, end = total / 2.
/// ConvTranspose auto_pad SAME_* without output_shape uses out = in * s.
Result<std::pair<int64_t, int64_t>> ConvTransposePadsForOutput(AutoPad mode, int64_t in, int64_t k,
                                                               int64_t s, int64_t d,
                                                               int64_t output_padding, int64_t out);

}  // namespace kiln::device
