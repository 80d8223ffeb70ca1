// The device backend interface: the narrow boundary between Kiln's scheduling (sched/scheduler.h)
// and whatever executes conv-style ops — the fp32 `reference` backend
// (oneDNN), the `tt-emu` Tensix emulator, later a remote `kiln-worker` proxy or a real-card `ttnn`
// backend.
//
// Modelled after Triton's backend API, scaled down:
//   Triton TRITONBACKEND_Backend        → Backend (name, capabilities, stateless op entry points)
//   TRITONBACKEND_ModelInstance         → PreparedConv (weights prepared once for one input shape,
//                                         executed many times; the reference backend keeps its
//                                         oneDNN primitive and reordered weights here)
//   TRITONBACKEND_Request / Response    → op arguments + ExecContext in, Result<Tensor> + OpReport out
//   backend registration by name        → BackendRegistry ("reference", "tt-emu", ...)
//
// Contract for every implementation
// * Thread safety: a Backend object may be called from several threads at once (the scheduler,
//   sched/scheduler.h, normally gives each device its own Backend instance, but a backend must
//   not rely on it). A PreparedConv is used by one thread at a time.
// * No exception escapes: failures are kiln::Status. Codes: INVALID_ARGUMENT (shapes, dtypes,
//   parameters inconsistent — the message names the offending value), UNIMPLEMENTED (a valid op or
//   option the backend does not support; see Capabilities), CANCELLED / DEADLINE_EXCEEDED (the
//   cancel token fired), RESOURCE_EXHAUSTED (allocation), INTERNAL (library failure).
// * Tensors: float32 host tensors (device/tensor.h). Feature maps are rank 4, logical shape
//   (N, C, H, W); a backend whose Capabilities::accepts_nhwc is true also takes Layout::kNHWC
//   inputs and then returns its output in the input's layout; otherwise only kNCHW. Weights are
//   always row-major (kNCHW) OIHW for conv2d and IOHW for conv_transpose2d, bias is [O] (or
//   absent). 1-D convs are expressed as 2-D ones with H = 1 (kernel height 1, pads/strides/
//   dilations of the H axis 0/1/1).
// * Semantics are ONNX's (Conv-11, ConvTranspose-11, MaxPool-12, AveragePool-11, with the
//   corrected ceil_mode rule of onnx PR #5741 / PyTorch). auto_pad, ConvTranspose output_shape and
//   similar model-level conveniences are resolved to explicit pads before calling a backend:
//   device/backends/conv_geometry.h has the helpers.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "device/backends/precision.h"
#include "device/numerics/types.h"
#include "device/tensor.h"

namespace kiln::device {

// ---------------------------------------------------------------------------------------------
// Op parameters

// Activation (the one fused-activation type, its semantics and ActivationName / ParseActivation)
// is defined in device/numerics/types.h and re-exported here.
using numerics::Activation;
using numerics::ActivationName;
using numerics::ParseActivation;

/// The activation applied to one float, in fp32 as defined in device/numerics/types.h; for host
/// code, the tt-emu epilogue and tests.
float ApplyActivation(Activation a, float x);

/// conv2d: input (N, C, H, W); weights OIHW (O, C/group, kH, kW); bias [O] optional;
/// output (N, O, OH, OW) with OH = floor((H + pad_h_begin + pad_h_end - ((kH-1)·dH + 1)) / sH) + 1.
struct Conv2dParams {
  std::array<int64_t, 2> strides{1, 1};      ///< (sH, sW), >= 1
  /// ONNX order: (h_begin, w_begin, h_end, w_end); each >= 0; asymmetric allowed.
  std::array<int64_t, 4> pads{0, 0, 0, 0};
  std::array<int64_t, 2> dilations{1, 1};    ///< (dH, dW), >= 1
  int64_t group = 1;                         ///< C and O must both be divisible by it
  Activation activation = Activation::kNone;

  bool operator==(const Conv2dParams&) const = default;
};

/// conv_transpose2d (ONNX ConvTranspose): input (N, C, H, W); weights IOHW (C, O/group, kH, kW);
/// bias [O] optional; output (N, O, OH, OW) with
/// OH = sH·(H-1) + output_padding_h + ((kH-1)·dH + 1) - pad_h_begin - pad_h_end.
/// output_padding must be < max(stride, dilation) per axis (ONNX / PyTorch).
struct ConvTranspose2dParams {
  std::array<int64_t, 2> strides{1, 1};
  std::array<int64_t, 4> pads{0, 0, 0, 0};   ///< ONNX order (h_begin, w_begin, h_end, w_end)
  std::array<int64_t, 2> dilations{1, 1};
  std::array<int64_t, 2> output_padding{0, 0};
  int64_t group = 1;
  Activation activation = Activation::kNone;

  bool operator==(const ConvTranspose2dParams&) const = default;
};

enum class PoolKind : int { kMax = 0, kAverage = 1 };

/// pool2d (ONNX MaxPool / AveragePool): input (N, C, H, W) → (N, C, OH, OW).
/// OH = floor_or_ceil((H + pb + pe - ((kH-1)·dH + 1)) / sH) + 1; with ceil_mode the last window
/// must start inside the input or the begin padding (else OH -= 1) — onnx PR #5741 / PyTorch.
/// Max: padding never wins (it is -inf). Average: count_include_pad = true divides by the window
/// size clipped to the explicitly padded input (the part added by ceil_mode beyond the end pad is
/// never counted, as PyTorch / ONNX Runtime); false divides by the number of real input elements.
/// Dilations apply to both kinds (AveragePool dilations are ONNX opset 19; accepted here).
struct Pool2dParams {
  PoolKind kind = PoolKind::kMax;
  std::array<int64_t, 2> kernel{1, 1};       ///< (kH, kW), >= 1
  std::array<int64_t, 2> strides{1, 1};
  std::array<int64_t, 4> pads{0, 0, 0, 0};   ///< ONNX order; each < the dilated kernel extent
  std::array<int64_t, 2> dilations{1, 1};
  bool ceil_mode = false;
  bool count_include_pad = false;            ///< AveragePool only (ONNX default 0)

  bool operator==(const Pool2dParams&) const = default;
};

// ---------------------------------------------------------------------------------------------
// Execution context

/// Cooperative cancellation and deadline, shared between the requester and the executing backend.
/// Backends call Check() before an op and, for long ops, every few milliseconds of work.
class CancelToken {
 public:
  using Clock = std::chrono::steady_clock;

  CancelToken() = default;
  explicit CancelToken(Clock::time_point deadline) : deadline_(deadline), has_deadline_(true) {}

  /// Requests cancellation; idempotent, thread-safe.
  void Cancel() { cancelled_.store(true, std::memory_order_release); }
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  bool has_deadline() const { return has_deadline_; }
  Clock::time_point deadline() const { return deadline_; }
  /// OK, CANCELLED ("cancelled by client") or DEADLINE_EXCEEDED.
  Status Check() const;

 private:
  std::atomic<bool> cancelled_{false};
  Clock::time_point deadline_{};
  bool has_deadline_ = false;
};

/// Progress of a running job or plan run (e.g. one event per executed layer). Shared by the
/// scheduler (sched/) and the plan executor, which know nothing of each other.
struct JobProgress {
  int64_t step = 0;   ///< 1-based index of the step just finished
  int64_t total = 0;  ///< total steps, 0 if unknown
  std::string message;
};
using ProgressFn = std::function<void(const JobProgress&)>;

/// What a backend says about one executed op (filled when ExecContext::report is set).
/// The device program that ran a conv, as the run report shows it (proto/kiln/v1/device.proto
/// ConvProgram; filled by tt-emu from device/backends/tt_emu/program.h, empty for other backends).
struct ProgramReport {
  std::string path;                 ///< "conv2d", "matmul", "depthwise_2d", "depthwise_1d"
  bool kernel_stride_folded = false;
  ShardLayout shard_layout = ShardLayout::kAuto;
  bool shard_layout_auto = false;
  Board board = Board::kDefault;
  int grid_x = 0, grid_y = 0, num_cores = 0, num_cores_nhw = 0, num_cores_c = 0;
  int cin_align = 0;
  int64_t cin_padded = 0;
  int k_blocks = 0;
  int act_block_h_ntiles = 0, act_block_w_ntiles = 0;
  bool l1_acc_effective = false;
  DeviceDType partials_dtype = DeviceDType::kBFloat16, pack_src_dtype = DeviceDType::kBFloat16,
              act_dtype = DeviceDType::kBFloat16;
  int64_t l1_bytes_per_core = 0;
  std::vector<std::string> notes;
};

struct OpReport {
  std::string op;              ///< "conv2d", "conv_transpose2d", "pool2d", "add"
  std::string backend;         ///< Backend::name()
  std::string implementation;  ///< e.g. oneDNN's impl name "brg:avx2", "jit:avx2", or "exact"
  /// How K was blocked (tt-emu: e.g. "K=576 in 3 blocks of 192 (act_block_w=6 tiles), partials
  /// bfloat16"); empty where not applicable.
  std::string blocking;
  PrecisionConfig precision;   ///< the precision actually applied (defaults resolved)
  std::vector<int64_t> output_shape;
  int64_t macs = 0;            ///< multiply-accumulates of the op (conv: N·O·OH·OW·(C/group)·kH·kW)
  double seconds = 0.0;        ///< wall time inside the backend
  std::vector<std::pair<std::string, std::string>> notes;  ///< free-form key/value details
  std::optional<ProgramReport> program;  ///< tt-emu convs: the program emulated
};

/// Per-call execution options. All pointers may be null.
struct ExecContext {
  PrecisionConfig precision;             ///< ignored by the fp32 reference backend
  const CancelToken* cancel = nullptr;   ///< checked before the op and during long ops
  OpReport* report = nullptr;            ///< filled on success (and best-effort on failure)
};

// ---------------------------------------------------------------------------------------------
// Backend

struct BackendCapabilities {
  bool conv2d = true;
  bool conv_transpose2d = true;
  bool pool2d = false;
  bool accepts_nhwc = false;           ///< Layout::kNHWC inputs accepted (output follows input)
  /// The activation layout the backend's conv2d computes in without converting (kNHWC only with
  /// accepts_nhwc). The runtime (runtime/device_op_runner.h) may keep feature maps in it between
  /// device ops; results are the same in either layout.
  Layout preferred_layout = Layout::kNCHW;
  bool honours_precision = false;      ///< false: computes in fp32 whatever ExecContext::precision says
  bool deterministic = true;           ///< same inputs → bit-identical outputs
  bool prepared_ops = false;           ///< PrepareConv2d is specialised (not the generic wrapper)
  bool fused_residual = false;         ///< PrepareConv2dResidual is implemented (else UNIMPLEMENTED)
  /// Add is implemented (else UNIMPLEMENTED), with these fused activations (others: UNIMPLEMENTED).
  bool add = false;
  std::vector<Activation> add_activations;
  std::vector<Activation> activations; ///< fused activations supported
  std::string description;             ///< one line for `kiln devices`
  /// The upstream sources (files and commits) the backend's behaviour follows, "" if none
  /// (tt-emu: the tt-metal files of docs/specs/tt-metal-followed.md); shown by `kiln devices` and
  /// carried in every run's response.
  std::string sources;
};

class PreparedConv;

/// A device backend. See the contract in the header comment.
class Backend {
 public:
  virtual ~Backend() = default;

  /// Registry name: "reference", "tt-emu", ...
  virtual std::string name() const = 0;
  virtual BackendCapabilities capabilities() const = 0;

  /// 2-D convolution (grouped, dilated, strided, asymmetric pads) + optional bias + activation.
  virtual Result<Tensor> Conv2d(const Tensor& input, const Tensor& weights, const Tensor* bias,
                                const Conv2dParams& params, const ExecContext& ctx) = 0;

  /// 2-D transposed convolution with ONNX semantics (groups, dilations, asymmetric pads,
  /// output_padding) + optional bias + activation.
  virtual Result<Tensor> ConvTranspose2d(const Tensor& input, const Tensor& weights,
                                         const Tensor* bias, const ConvTranspose2dParams& params,
                                         const ExecContext& ctx) = 0;

  /// Max / average pooling. Default: UNIMPLEMENTED (capabilities().pool2d is false).
  virtual Result<Tensor> Pool2d(const Tensor& input, const Pool2dParams& params,
                                const ExecContext& ctx);

  /// Element-wise add of two feature maps of one shape (no broadcasting) + fused activation:
  ///   y = act(a + b)
  /// as the device computes it (TT-NN: ttnn.add with the activation fused, in the feature maps'
  /// device dtype; the reference: one fp32 add, rounded once). `a` and `b`: float32, rank >= 2,
  /// logical shape (N, C, ...), equal shapes and layout tags (kNHWC only with accepts_nhwc); the
  /// output has that shape and layout. Errors: INVALID_ARGUMENT (shape / layout / dtype mismatch,
  /// naming both shapes), UNIMPLEMENTED (capabilities().add false, or `act` not in
  /// capabilities().add_activations), CANCELLED / DEADLINE_EXCEEDED. Default: UNIMPLEMENTED.
  virtual Result<Tensor> Add(const Tensor& a, const Tensor& b, Activation act, const ExecContext& ctx);

  /// Prepares a conv2d for repeated execution on inputs of exactly `input_shape` / `input_layout`
  /// (weights copied or converted now). The default implementation keeps copies of weights and bias
  /// and calls Conv2d() on each Run(); backends override it to cache primitives and converted
  /// weights. Errors as Conv2d (shapes are validated here).
  virtual Result<std::unique_ptr<PreparedConv>> PrepareConv2d(
      std::vector<int64_t> input_shape, Layout input_layout, const Tensor& weights,
      const Tensor* bias, const Conv2dParams& params, const PrecisionConfig& precision);

  /// As PrepareConv2d, for a conv followed by a residual add (ONNX Conv [+ activation] + Add
  /// [+ activation]): PreparedConv::RunResidual computes
  ///   y = residual_activation(activation(conv(x) + bias) + addend)
  /// in fp32 with the same rounding as the separate ops (each intermediate an fp32 value).
  /// Default: UNIMPLEMENTED (capabilities().fused_residual false); a backend may also answer
  /// UNIMPLEMENTED for one shape or layout it cannot fuse — callers then run the add themselves.
  virtual Result<std::unique_ptr<PreparedConv>> PrepareConv2dResidual(
      std::vector<int64_t> input_shape, Layout input_layout, const Tensor& weights, const Tensor* bias,
      const Conv2dParams& params, Activation residual_activation, const PrecisionConfig& precision);
};

/// A conv prepared for one input shape (Triton's model instance). One thread at a time.
class PreparedConv {
 public:
  virtual ~PreparedConv() = default;
  /// Runs on `input` (shape and layout must equal the prepared ones, else INVALID_ARGUMENT).
  /// `ctx.precision` is ignored: the precision was fixed by PrepareConv2d.
  virtual Result<Tensor> Run(const Tensor& input, const ExecContext& ctx) = 0;
  /// For a conv from PrepareConv2dResidual: as Run, plus the fused residual add; `addend` has the
  /// output's logical shape and the input's layout (else INVALID_ARGUMENT). Default (and for a
  /// conv from PrepareConv2d): UNIMPLEMENTED.
  virtual Result<Tensor> RunResidual(const Tensor& input, const Tensor& addend, const ExecContext& ctx);
  /// Output shape (N, O, OH, OW), logical.
  virtual const std::vector<int64_t>& output_shape() const = 0;
};

// ---------------------------------------------------------------------------------------------
// Shape validation shared by all backends (so that every backend rejects the same things with
// the same messages). Each returns the logical output shape or INVALID_ARGUMENT.

Result<std::vector<int64_t>> ValidateConv2d(const Tensor& input, const Tensor& weights,
                                            const Tensor* bias, const Conv2dParams& params);
Result<std::vector<int64_t>> ValidateConv2dShapes(const std::vector<int64_t>& input_shape,
                                                  const std::vector<int64_t>& weight_shape,
                                                  const std::vector<int64_t>* bias_shape,
                                                  const Conv2dParams& params);
Result<std::vector<int64_t>> ValidateConvTranspose2d(const Tensor& input, const Tensor& weights,
                                                     const Tensor* bias,
                                                     const ConvTranspose2dParams& params);
Result<std::vector<int64_t>> ValidatePool2d(const Tensor& input, const Pool2dParams& params);
/// Add's checks (see Backend::Add): OK or INVALID_ARGUMENT.
Status ValidateAdd(const Tensor& a, const Tensor& b);
/// The exact fp32 sum a + b (one IEEE rounding per element), then ApplyActivation, in a's layout:
/// the reference backend's add and tt-emu's host_add. Errors: ValidateAdd's, RESOURCE_EXHAUSTED.
Result<Tensor> AddFp32(const Tensor& a, const Tensor& b, Activation act);

// ---------------------------------------------------------------------------------------------
// Registry

/// Options a backend factory receives. `settings` carries backend-specific keys, e.g. tt-emu's
/// "level" = "exact" | "fast", or a remote worker's "address"; each backend declares the keys it
/// takes (BackendSetting) when it registers.
struct BackendOptions {
  int device_index = 0;  ///< which device of this backend (one Backend per device)
  std::map<std::string, std::string> settings;
};

/// One key of BackendOptions::settings as a backend declares it.
struct BackendSetting {
  std::string key;            ///< e.g. "level"
  std::string default_value;  ///< the value the factory uses when the key is absent, e.g. "exact"
  std::string help;           ///< one line, e.g. for `--help` or `kiln devices`

  bool operator==(const BackendSetting&) const = default;
};

/// The error every factory returns for a key it does not declare:
/// INVALID_ARGUMENT "<who>: unknown setting '<key>' (known: <declared keys, comma-separated>)".
Status UnknownBackendSetting(std::string_view who, std::string_view key,
                             const std::vector<BackendSetting>& declared);

using BackendFactory = std::function<Result<std::unique_ptr<Backend>>(const BackendOptions&)>;

/// Name → factory and declared settings. Thread-safe. The built-in backends, their names and the
/// default backend are in device/backends/builtin.h.
class BackendRegistry {
 public:
  /// `settings`: the keys the factory accepts, with defaults and help (Settings() returns them).
  /// ALREADY_EXISTS if `name` is taken; INVALID_ARGUMENT for an empty name or factory.
  Status Register(const std::string& name, BackendFactory factory,
                  std::vector<BackendSetting> settings = {});
  /// NOT_FOUND (listing the registered names) or the factory's error.
  Result<std::unique_ptr<Backend>> Create(const std::string& name,
                                          const BackendOptions& options = {}) const;
  /// The settings `name` declared at registration. NOT_FOUND as Create.
  Result<std::vector<BackendSetting>> Settings(const std::string& name) const;
  bool Contains(const std::string& name) const;
  /// Sorted names.
  std::vector<std::string> Names() const;

 private:
  struct Entry {
    BackendFactory factory;
    std::vector<BackendSetting> settings;
  };
  Status UnknownBackend(const std::string& name) const;

  mutable std::mutex mu_;
  std::map<std::string, Entry> factories_;
};

}  // namespace kiln::device
