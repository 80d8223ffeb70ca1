// Runs one DeviceOp of a ConvPlan (compiler/convplan/plan.h) on one backend
// (device/backends/backend.h), for the executor (runtime/executor.h) — on the device backend and,
// for the comparison, on the fp32 reference.
//
// Computation, for K parts x_k = inputs[k] with weights[k] (DeviceOp's definition):
//   y = Σ_k conv(x_k, weights[k]) + bias     one part: a single backend call with bias and the
//                                            fused activation; K parts: one backend call per part
//                                            (no bias, no activation), partial results summed on
//                                            the host in fp32, then bias added on the host
//   y = activation(y)                        on the host in fp32 for K-splits (it applies to the
//                                            sum) and when `caps.activations` lacks it
//                                            (DeviceOpRun::activation_on_host)
//   y = residual_activation(y + residual)    fused into the backend's prepared conv when it offers
//                                            that (caps.fused_residual, one part, activation on
//                                            the device, a PreparedConvs cache given), else host fp32;
//                                            the same fp32 result either way
// kAdd: y = activation(inputs[0] + inputs[1]) by Backend::Add (caps.add, the activation in
// caps.add_activations), else on the host in fp32 (DeviceOpRun::activation_on_host when it has one).
// 1-D ops (spatial_rank 1) run as (N, C, 1, W) and come back as (N, C, W). Outputs are fp32 NCHW
// row-major, or in the backend's preferred layout when the caller asks to keep it (RunDeviceOp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "compiler/convplan/plan.h"
#include "device/backends/backend.h"
#include "device/backends/precision.h"
#include "device/tensor.h"

namespace kiln::runtime {

class PreparedConvs;

/// Result of one device op on one backend, before the output split.
struct DeviceOpRun {
  device::Tensor y;                 ///< all O output channels
  double device_seconds = 0.0;      ///< OpReport::seconds summed over the K parts
  double host_seconds = 0.0;        ///< host glue: K-split sum, bias / activation, residual add
  int64_t macs = 0;                 ///< OpReport::macs summed
  std::string implementation;       ///< first part's OpReport::implementation
  std::string blocking;             ///< first part's OpReport::blocking
  std::optional<device::ProgramReport> program;  ///< first part's OpReport::program (tt-emu)
  bool activation_on_host = false;  ///< a non-none fused activation ran on the host
};

/// Runs `op` on `backend` (whose capabilities are `caps`) with `inputs` (one per DeviceOp::inputs
/// entry) and `residual` (null unless DeviceOp::residual is set), at `precision`, checking `cancel`
/// (may be null; backends check it inside long ops). `prepared` (may be null; runtime/prepared_convs.h,
/// for the plan `op` belongs to and for `backend`) supplies the conv2d parts of plan op `op_index`
/// prepared once instead of per call. Layout: inputs may come in either layout; with
/// `keep_backend_layout` 2-D ops run in caps.preferred_layout (inputs converted to it) and
/// DeviceOpRun::y stays in it — for values only the executor reads, which converts them to NCHW
/// where host ops or graph outputs need row-major; otherwise y is NCHW. Either way the values are
/// the same. Errors: INVALID_ARGUMENT for an input of the
/// wrong rank or a residual of another shape than the conv output, INTERNAL when K parts disagree
/// in shape, the backend's errors unchanged.
Result<DeviceOpRun> RunDeviceOp(const convplan::DeviceOp& op, device::Backend& backend,
                                const device::BackendCapabilities& caps, const std::vector<const device::Tensor*>& inputs,
                                const device::Tensor* residual, const device::PrecisionConfig& precision,
                                const device::CancelToken* cancel, PreparedConvs* prepared = nullptr,
                                size_t op_index = 0, bool keep_backend_layout = false);

/// `t` in `layout` (a copy when it already is): a tiled transpose per image for float32 rank 3/4,
/// Tensor::ToLayout otherwise. Errors as Tensor::ToLayout.
Result<device::Tensor> ConvertLayout(const device::Tensor& t, device::Layout layout);

/// Splits `y` into the op's output slices (DeviceOp::outputs order; channels [begin, end) of
/// dim 1). One slice covering every channel moves `y` without a copy.
Result<std::vector<device::Tensor>> SplitOutputs(const convplan::DeviceOp& op, device::Tensor y);

}  // namespace kiln::runtime

namespace kiln::runtime {

/// The bytes one DeviceOp allocates while it runs on any backend, from its input shapes (one per
/// DeviceOp::inputs entry, logical NCHW / NCW) alone — the device op path's memory estimate, the
/// counterpart of the host kernels' estimate_bytes (runtime/host_kernels/registry.h), summed by
/// EstimateRunMemory (runtime/memory_estimate.h). An upper bound for both built-in backends,
/// per K part (parts run one at a time; their outputs are summed into one fp32 tensor):
///   activations  N·Hp·Wp·RoundUp(C,32)·4   the padded input in device words: tt-emu's
///                                          tilized copy (device/backends/tt_emu/conv_engine.cc
///                                          Prepare, one 32-bit word per element, channels padded
///                                          to the tile's 32), oneDNN's blocked reorder (8/16)
///   partials     N·OH·OW·RoundUp(O,32)·4   tt-emu's accumulators / oneDNN's blocked dst
///   weights      RoundUp(O,32)·RoundUp(C/group·kH·kW,32)·4 · 2 (converted + prepared copies)
///   outputs      2 · N·O·OH·OW·4           the backend's result and the op's fp32 NCHW result
/// (conv_transpose: the same terms with the transposed conv's input and output; add: three
/// tensors of the output's size). Saturates at INT64_MAX.
int64_t DeviceOpBytes(const convplan::DeviceOp& op, const std::vector<std::vector<int64_t>>& input_shapes);

}  // namespace kiln::runtime
