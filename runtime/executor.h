// The ConvPlan executor (library kiln_runtime, runtime/): runs a ConvPlan
// (compiler/convplan/plan.h) on a device backend, host ops in their ONNX element types,
// optionally next to an fp32 reference computed in the same run, and reports per layer. This is
// the single entry point of `kiln run --local`, of the DeviceService (wrapped as a scheduler job by
// its caller; the runtime knows no scheduler) and of tests.
//
// Usage:
//   auto model = onnx_fe::LoadModel(bytes);                               // compiler/onnx/loader.h
//   auto plan = convplan::BuildConvPlan(*model, runtime::HostKernels());  // plan.h; cache it per model:
//   auto shared = std::make_shared<const convplan::ConvPlan>(std::move(*plan));  // immutable
//   auto dev = device::DefaultBackendRegistry().Create("tt-emu");         // device/backends/builtin.h
//   auto result = runtime::RunConvPlan(*shared, inputs, **dev, options, &token, progress);
//   std::cout << runtime::FormatReportTable(*result);                      // runtime/report_table.h
// When several runs share few cores, set RunOptions::reference_threads (the fp32 reference chain
// otherwise uses every core inside each run).
//
// Responsibilities, one file each: this loop and value lifetime (executor.cc), inputs
// (runtime/inputs.h), one device op on a backend (runtime/device_op_runner.h), the accuracy policy
// (runtime/accuracy.h), host kernels (runtime/host_kernels/registry.h), the text report
// (runtime/report_table.h).
//
// Execution
// * Inputs: `RunInputs` by graph input name, checked and converted to fp32; absent inputs are
//   generated with RunOptions::input_seed (rules in runtime/inputs.h). INVALID_ARGUMENT for
//   unknown names, shapes that do not match, inputs that cannot be generated.
// * Device ops go to `device` with RunOptions::precision (runtime/device_op_runner.h: fused
//   activations passed to the backend when its capabilities().activations lists them, otherwise
//   applied on the host in fp32 and flagged in the report; K-split parts summed on the host; the
//   residual add fused into the backend where it can, else host fp32; device adds on the
//   backend's Add — on tt-emu the card's ttnn.add unless precision.host_add). Without a reference chain,
//   device-op outputs stay in the backend's preferred layout between device ops and are converted
//   to row-major for host ops and graph outputs; RunOptions::prepared keeps convs prepared across
//   runs (runtime/prepared_convs.h).
// * Host ops run through the host-kernel registry (runtime/host_kernels/registry.h). Host values
//   are row-major tensors of their ONNX element type (compiler/convplan/host_tensor.h): int64
//   shapes stay exact, bool masks stay bool. Device ops compute in fp32: other floating inputs are
//   converted on the way in and the outputs back to the input's type. Nodes folded at plan time
//   (ConvPlan::folded_nodes) are constants of the plan's model.
// * Value lifetime: every tensor is dropped (from both chains) after the last op that reads it,
//   except graph outputs; model constants are converted to tensors once per run, on first use.
// * Modes (RunMode):
//     kChained  — the device output of each op feeds the next op (what a real deployment sees);
//                 with compare_to_reference an independent fp32 chain runs alongside and every op
//                 is compared with its fp32 counterpart (so errors accumulate).
//     kPerLayer — every device op is fed the fp32 REFERENCE input (isolates each layer's own
//                 error); the reference chain is always computed. Graph outputs are the device
//                 results where a device op produced them, else the reference values.
// * Comparison: per op, comp_pcc of device vs reference output, max abs error and pass at the
//   threshold of tt-metal's run_conv rule for the resolved precision (policy in
//   runtime/accuracy.h); RunOptions::pcc_threshold > 0 replaces the rule. Host ops are reported
//   (timing, and PCC / max error when compared) but have no threshold and always pass.
// * Cancellation: `cancel` is checked before every op (backends check it inside long ops, host
//   kernels at least every ~50 ms of work): CANCELLED or DEADLINE_EXCEEDED is returned as the
//   run's status.
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
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "compiler/convplan/plan.h"
#include "device/backends/backend.h"
#include "device/backends/precision.h"
#include "device/tensor.h"
#include "runtime/inputs.h"

namespace kiln::runtime {

class PreparedConvs;  // runtime/prepared_convs.h

enum class RunMode { kChained = 0, kPerLayer = 1 };
/// "chained" / "per_layer".
const char* RunModeName(RunMode mode);
/// "chained" | "per_layer" (also "per-layer", case-insensitive); INVALID_ARGUMENT otherwise.
Result<RunMode> ParseRunMode(std::string_view name);

struct LayerReport;

struct RunOptions {
  RunMode mode = RunMode::kChained;
  /// Compute the fp32 reference chain and compare every op (forced on for kPerLayer).
  bool compare_to_reference = true;
  /// Precision for the device backend (ignored by the fp32 reference backend).
  device::PrecisionConfig precision;
  /// Per-layer precision by PlanOp::name (device ops only; the caller has merged each over
  /// `precision`, api/convert.h MergePrecision): the named ops run at theirs, the rest at
  /// `precision`. A name that is no device op of the plan is INVALID_ARGUMENT
  /// (CheckLayerPrecisionNames). Ignored, like `precision`, by the fp32 reference backend.
  std::map<std::string, device::PrecisionConfig> layer_precision;
  /// Seed for generated (absent) inputs.
  uint64_t input_seed = 0;
  /// > 0: use this PCC threshold for every device op instead of tt-metal's rule.
  double pcc_threshold = 0.0;
  /// fp32 backend for the reference chain and host pooling. Null: the executor creates a
  /// "reference" backend per run (MakeReferenceBackend) with `reference_threads` OpenMP threads
  /// (0 = all cores) — or reuses `device` when that is itself the reference backend.
  device::Backend* reference = nullptr;
  int reference_threads = 0;
  /// Convs prepared once for repeated runs of this plan on one backend instance (owned by the
  /// caller, runtime/prepared_convs.h); used for the chains whose backend it was made for, ignored
  /// otherwise. Null: every conv is prepared per call (one run pays that once per op anyway).
  PreparedConvs* prepared = nullptr;
  /// Called after every op, on the running thread, with the op's 1-based index, the number of ops
  /// and its finished report row (the row RunResult::layers will hold). May be empty.
  std::function<void(size_t index, size_t total, const LayerReport& layer)> on_layer;
};

/// One op of the run.
struct LayerReport {
  std::string name;                 ///< convplan::PlanOp::name
  std::string op;                   ///< "conv2d", "conv_transpose2d", "add", or the host ONNX op type
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
  std::optional<device::ProgramReport> program;  ///< OpReport::program (tt-emu: the program emulated)
  bool compared = false;            ///< false when no reference was computed
  double pcc = 0.0;                 ///< comp_pcc value (runtime/accuracy.h)
  double max_abs_error = 0.0;       ///< max |device - reference| over the op's outputs
  double threshold = 0.0;           ///< tt-metal rule (device ops; 0 for host ops)
  bool pass = true;                 ///< comp_pcc pass at `threshold` (host ops: always true)
  /// Device ops on a backend that honours precision: the precision the op ran with (its
  /// RunOptions::layer_precision entry, else RunOptions::precision; fp32_dest_acc_en resolved as
  /// RunResult::precision). Unset for host ops and on the fp32 reference.
  std::optional<device::PrecisionConfig> precision;
  bool layer_precision_set = false;  ///< RunOptions::layer_precision named this op
};

struct RunResult {
  /// Graph outputs in model order: (declared output name, tensor of the output's ONNX element
  /// type, NCHW row-major).
  std::vector<std::pair<std::string, device::Tensor>> outputs;
  std::vector<LayerReport> layers;
  std::string backend;                  ///< device backend name
  bool backend_honours_precision = false;
  std::string backend_sources;          ///< BackendCapabilities::sources of the device backend
  /// RunOptions::precision with defaults resolved (fp32_dest_acc_en set per TT-NN's rule).
  device::PrecisionConfig precision;
  RunMode mode = RunMode::kChained;
  bool compared = false;
  bool all_pass = true;                 ///< every compared device op passed
  std::vector<std::string> generated_inputs;  ///< inputs that were absent and generated
  int64_t folded_nodes = 0;             ///< convplan::ConvPlan::folded_nodes (not in `layers`)
  double total_seconds = 0.0;           ///< wall time of the whole run
};

/// OK when every key of `layer_precision` names a device op of `plan`; else INVALID_ARGUMENT
/// "layer_precision: 'x' is no device layer of the model (its device layers: conv1, conv2, ...)"
/// (the first few names).
Status CheckLayerPrecisionNames(const convplan::ConvPlan& plan,
                                const std::map<std::string, device::PrecisionConfig>& layer_precision);

/// Progress callback (device/backends/backend.h): step, total, message.
using ProgressFn = device::ProgressFn;

/// Runs `plan` on `device` (see the header comment). `cancel` and `progress` may be null / empty.
Result<RunResult> RunConvPlan(const convplan::ConvPlan& plan, const RunInputs& inputs, device::Backend& device,
                              const RunOptions& options, const device::CancelToken* cancel = nullptr,
                              const ProgressFn& progress = {});

}  // namespace kiln::runtime
