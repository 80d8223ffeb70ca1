// The ConvPlan executor (target kiln_convplan_runner): runs a ConvPlan (compiler/convplan/plan.h)
// on a device backend, host ops in fp32, optionally next to an fp32 reference computed in the same
// run, and reports per layer. This is the single entry point of `kiln run --local`, of the
// DeviceService (wrapped as a WorkerPool job with MakeRunJob) and of tests.
//
// Usage (kiln run --local / DeviceService):
//   auto model = onnx_fe::LoadModel(bytes);                        // compiler/onnx/loader.h
//   auto plan = convplan::BuildConvPlan(*model);                   // plan.h; cache it per model:
//   auto shared = std::make_shared<const convplan::ConvPlan>(std::move(*plan));  // immutable
//   // in process:
//   auto dev = device::DefaultBackendRegistry().Create("tt-emu");  // device/backends/builtin.h
//   auto result = convplan::RunConvPlan(*shared, inputs, **dev, options, &token, progress);
//   // or on the worker pool:
//   auto out = std::make_shared<convplan::RunResult>();
//   pool->Submit({.backend = "tt-emu", .client_id = peer,
//                 .work = convplan::MakeRunJob(shared, inputs, options, out), .progress = fn});
//   // after the JobHandle is done with OK: *out holds outputs + per-layer report.
// When the pool runs several devices on few cores, set RunOptions::reference_threads (the fp32
// reference chain otherwise uses every core inside each job).
//
// Execution
// * Inputs: `RunInputs` by graph input name; any dtype device::Tensor accepts (converted to fp32),
//   rank and known dims must match the plan's input (INVALID_ARGUMENT otherwise); symbolic dims
//   take the given size. An absent input is generated: seeded uniform random in [-1, 1) with
//   RunOptions::input_seed (same seed + same input name → same data), symbolic dims bound to 1;
//   an input with an unknown (not symbolic) dim cannot be generated → INVALID_ARGUMENT.
//   Unknown input names → INVALID_ARGUMENT.
// * Device ops go to `device` with RunOptions::precision; fused activations are passed to the
//   backend (when its capabilities().activations lists them; otherwise applied on the host in fp32
//   and flagged in the report). K-split parts run as separate device convs (no bias, no activation) whose partial
//   results are summed on the host in fp32, then bias and activation are applied on the host; a
//   residual add and its activation are always host fp32 (no backend has an eltwise op).
// * Host ops run in fp32 (MaxPool / AveragePool through the fp32 reference backend, the rest in
//   plain C++). Host values are fp32 row-major tensors; integer tensors (e.g. Reshape shapes
//   computed at run time) are carried as fp32 values, constant ones are read exactly.
// * Modes (RunMode):
//     kChained  — the device output of each op feeds the next op (what a real deployment sees);
//                 with compare_to_reference an independent fp32 chain runs alongside and every op
//                 is compared with its fp32 counterpart (so errors accumulate).
//     kPerLayer — every device op is fed the fp32 REFERENCE input (isolates each layer's own
//                 error); the reference chain is always computed. Graph outputs are the device
//                 results where a device op produced them, else the reference values.
// * Comparison: per op, PCC of device vs reference output computed as tt-metal's comp_pcc
//   (device/numerics/pcc.h, tt-numerics.md §9.3) on all the op's outputs concatenated, max abs
//   error, and the threshold of tt-metal's run_conv rule for the resolved precision
//   (tt-numerics.md §9.1: ConvPccThreshold with Cin·kh·kw = total input channels times kernel
//   area, and the op's device activation; ConvTransposePccThreshold for transposed convs);
//   RunOptions::pcc_threshold > 0 replaces the rule (tt-metal's "custom PCC"). pass = comp_pcc's
//   pass at that threshold. Host ops are reported (timing, and PCC / max error when compared) but
//   have no threshold and always pass.
// * Cancellation: `cancel` is checked before every op (and backends check it inside long ops):
//   CANCELLED or DEADLINE_EXCEEDED is returned as the run's status.
// * Progress: `progress` (may be empty) is called after every op with step = 1-based op index,
//   total = number of ops, message = "conv1 conv2d 3.2 ms pcc=0.99987".
// * Errors: INVALID_ARGUMENT (inputs, shapes the backend rejects — message names the op),
//   UNIMPLEMENTED (backend lacks an op), CANCELLED / DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
//   INTERNAL. Nothing throws (exceptions from inside are turned into INTERNAL /
//   RESOURCE_EXHAUSTED).
// * Thread safety: RunConvPlan reads the plan only; any number of runs may share one plan.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "compiler/convplan/plan.h"
#include "device/backends/backend.h"
#include "device/backends/precision.h"
#include "device/tensor.h"

namespace kiln::convplan {

enum class RunMode { kChained = 0, kPerLayer = 1 };
/// "chained" / "per_layer".
const char* RunModeName(RunMode mode);
/// "chained" | "per_layer" (also "per-layer", case-insensitive); INVALID_ARGUMENT otherwise.
Result<RunMode> ParseRunMode(std::string_view name);

/// Graph input name → tensor.
using RunInputs = std::map<std::string, device::Tensor>;

struct RunOptions {
  RunMode mode = RunMode::kChained;
  /// Compute the fp32 reference chain and compare every op (forced on for kPerLayer).
  bool compare_to_reference = true;
  /// Precision for the device backend (ignored by the fp32 reference backend).
  device::PrecisionConfig precision;
  /// Seed for generated (absent) inputs.
  uint64_t input_seed = 0;
  /// > 0: use this PCC threshold for every device op instead of tt-metal's rule.
  double pcc_threshold = 0.0;
  /// fp32 backend for the reference chain and host pooling. Null: the executor creates a
  /// "reference" backend per run (MakeReferenceBackend) with `reference_threads` OpenMP threads
  /// (0 = all cores) — or reuses `device` when that is itself the reference backend.
  device::Backend* reference = nullptr;
  int reference_threads = 0;
};

/// One op of the run.
struct LayerReport {
  std::string name;                 ///< PlanOp::name
  std::string op;                   ///< "conv2d", "conv_transpose2d", or the host ONNX op type
  bool on_device = false;
  std::vector<std::string> source_nodes;  ///< ONNX nodes folded into this op
  std::string activation;           ///< device ops: fused activation ("relu", "none", ...)
  std::string residual;             ///< device ops: residual tensor added after it ("" = none)
  std::string residual_activation;  ///< device ops with a residual: activation after the add
  int k_parts = 1;                  ///< device ops: number of K-split parts (device calls)
  bool activation_on_host = false;  ///< device ops: the activation was applied on the host in fp32
                                    ///< (K-split, or the backend does not offer it fused)
  std::vector<std::vector<int64_t>> input_shapes;   ///< logical, in PlanOp::Inputs() order
  std::vector<std::vector<int64_t>> output_shapes;  ///< logical, in PlanOp::Outputs() order
  double seconds = 0.0;             ///< wall time of the op on the device (device ops, sum over K
                                    ///< parts, backend-reported) or on the host (host ops)
  double host_seconds = 0.0;        ///< host-side glue of a device op (K-split sum, residual add)
  int64_t macs = 0;                 ///< device ops: multiply-accumulates (OpReport::macs, summed)
  std::string implementation;       ///< OpReport::implementation (device ops)
  std::string blocking;             ///< OpReport::blocking (tt-emu's K blocking)
  bool compared = false;            ///< false when no reference was computed
  double pcc = 0.0;                 ///< comp_pcc value (tt-numerics.md §9.3)
  double max_abs_error = 0.0;       ///< max |device - reference| over the op's outputs
  double threshold = 0.0;           ///< tt-metal rule (device ops; 0 for host ops)
  bool pass = true;                 ///< comp_pcc pass at `threshold` (host ops: always true)
};

struct RunResult {
  /// Graph outputs in model order: (declared output name, fp32 tensor, NCHW row-major).
  std::vector<std::pair<std::string, device::Tensor>> outputs;
  std::vector<LayerReport> layers;
  std::string backend;                  ///< device backend name
  bool backend_honours_precision = false;
  /// RunOptions::precision with defaults resolved (fp32_dest_acc_en set per TT-NN's rule).
  device::PrecisionConfig precision;
  RunMode mode = RunMode::kChained;
  bool compared = false;
  bool all_pass = true;                 ///< every compared device op passed
  std::vector<std::string> generated_inputs;  ///< inputs that were absent and generated
  double total_seconds = 0.0;           ///< wall time of the whole run
};

/// Progress callback type (device/backends/backend.h): step, total, message.
using ProgressFn = device::ProgressFn;

/// Runs `plan` on `device` (see the header comment). `cancel` and `progress` may be null / empty.
Result<RunResult> RunConvPlan(const ConvPlan& plan, const RunInputs& inputs, device::Backend& device,
                              const RunOptions& options, const device::CancelToken* cancel = nullptr,
                              const ProgressFn& progress = {});

/// A fixed-width text table of the report (one row per layer: name, op, output shape, time, PCC,
/// max error, threshold, pass), for `kiln run --report table` and `make demo`.
std::string FormatReportTable(const RunResult& result);

}  // namespace kiln::convplan
