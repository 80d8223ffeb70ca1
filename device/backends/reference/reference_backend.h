// The fp32 reference backend ("reference"): conv2d, conv_transpose2d and max/average pooling in
// float32 with oneDNN (libdnnl 2.x, CPU engine), ONNX semantics (device/backends/backend.h).
//
// * Accepts NCHW and NHWC inputs (output in the input's layout). Internally oneDNN chooses the
//   memory format (format_tag::any): activations are reordered to it and back, weights are
//   reordered once per call — or once per PreparedConv (PrepareConv2d), which also keeps the
//   primitive; use that for repeated execution. oneDNN's own primitive cache is on as well.
//   capabilities().preferred_layout is the activation format oneDNN picks by itself on this CPU
//   (NHWC with AVX-512 brgconv; NCHW is reported where it picks a blocked format): inputs in it
//   need no reorder. PrepareConv2dResidual fuses a residual add as oneDNN's sum post-op (the
//   output buffer preloaded with the addend; fp32 add, rounding as the separate Add), only where
//   oneDNN's own output format is the caller's layout (else UNIMPLEMENTED: forcing the format can
//   select another kernel and summation order).
//   Environment: KILN_REFERENCE_FORMAT=nhwc runs convs directly on NHWC activations when an
//   optimised kernel takes them (skips the activation reorders; same speed on AVX2, see the .cc).
// * Ignores ExecContext::precision (always fp32; capabilities().honours_precision is false) and
//   records the precision it was given in the report unchanged.
// * Pooling: ONNX's ceil_mode is mapped onto oneDNN's explicit padding_r (the extra right padding
//   ceil_mode implies); average pooling with count_include_pad = 1 and ceil_mode is computed so
//   that the ceil_mode overhang is not counted (PyTorch / ONNX Runtime), i.e. oneDNN's
//   pooling_avg_include_padding over the explicit pads only, with the divisor corrected on the
//   overhanging border windows. count_include_pad = 0 → pooling_avg_exclude_padding.
// * Cancellation is checked before each op (oneDNN primitives are not interruptible).
// * Thread-safe: oneDNN primitives run on the calling thread with oneDNN's OpenMP/threadpool
//   runtime; each call creates (or takes from the cache) its own primitive and stream.
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "device/backends/backend.h"

namespace kiln::device {

/// A new reference backend. `options.settings`: "threads" = N — run every op with at most N
/// OpenMP threads (0 / absent: all cores; set it when several devices share the cores, e.g.
/// "reference:2" on 2 cores → threads=1). Unknown keys or bad values → INVALID_ARGUMENT.
Result<std::unique_ptr<Backend>> MakeReferenceBackend(const BackendOptions& options = {});

/// The settings MakeReferenceBackend takes (key, default, help), as registered.
const std::vector<BackendSetting>& ReferenceBackendSettings();

/// Registers "reference" → MakeReferenceBackend with ReferenceBackendSettings().
Status RegisterReferenceBackend(BackendRegistry& registry);

}  // namespace kiln::device
