// compiler/convplan — IR → ConvPlan (target kiln_convplan).
//
// A ConvPlan is the ordered list of operations that runs one ONNX model's conv layers on a device
// backend (device/backends/backend.h) and everything else on the host. It is built from the
// immutable IR of the ONNX front end (compiler/onnx/ir.h) and is independent of any backend: the
// executor (runtime/executor.h) runs it on one.
//
// Pipeline of BuildConvPlan():
//   0. Constant folding (compiler/convplan/fold_constants.h): nodes the model alone decides
//      (subgraphs of constants, Shape of statically shaped tensors) are evaluated with the host
//      kernels and become constants of the plan's model (ConvPlan::folded_nodes counts them).
//   1. CheckSupported — every remaining node's op type must be a device op (Conv, ConvTranspose)
//      or a host op of the HostOpSupport passed in (compiler/convplan/host_op_support.h; the
//      runtime's host kernel registry, runtime/host_kernels/registry.h, is the one list) for its
//      element type; otherwise INVALID_ARGUMENT counting the unsupported nodes by op type
//      (bounded message, see CheckSupported), before any other work.
//   2. Lowering — one PlanOp per IR node, in the IR's topological order: a 1-D or 2-D Conv /
//      ConvTranspose whose weights and bias are constants (initializers, Constant nodes, such a
//      constant behind a Cast to FLOAT, or values folded in step 0) becomes a DeviceOp with
//      explicit pads (auto_pad, ConvTranspose output_shape resolved with
//      device/backends/conv_geometry.h, ONNX Conv-11 / ConvTranspose-11 text). A conv whose
//      weights or bias are computed at run time (a graph input, a host op's output), and every
//      3-D conv, becomes a HostOp run by the host conv kernel (runtime/host_kernels/conv.cc) on
//      every backend: a device needs its weights before the run (TT-NN prepares them on the host)
//      and its API is 2-D. Every other node is a HostOp.
//   3. Rewrite passes, one rule per file under compiler/convplan/passes/ in the style of ONNX
//      Runtime's graph optimizer, run by the pass manager (compiler/convplan/passes/pass_manager.h,
//      which declares the pipeline order) to a fixed point: BatchNormalization folding, activation
//      fusions (Relu, Relu6, Sigmoid, SiLU, Gelu), device Add (an Add of two same-shape feature
//      maps, one from a device conv, becomes a kAdd device op; Relu / relu6 after it fuse into
//      it), residual Add (with DeviceAdd disabled: the Add fused into the conv), Concat → K-split,
//      sibling-conv merging, dead host-op removal. A fusion never applies when an intermediate tensor has
//      another consumer or is a graph output. PlanOptions::disabled_passes switches passes off by
//      name; a pipeline that does not converge is INTERNAL naming the passes still firing.
//
// Host ops run in the runtime in their ONNX element types (runtime/executor.h, kernels in
// runtime/host_kernels/).
//
// Tensor conventions: feature maps NCHW (rank 4) or NCW (rank 3, 1-D convs); device weights are
// rank 4, OIHW for conv2d and IOHW for conv_transpose2d, 1-D convs carry H = 1 (kernel height 1,
// pad 0, stride 1, dilation 1 on H) exactly as device/backends/backend.h expects.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/status.h"
#include "compiler/convplan/host_op_support.h"
#include "compiler/onnx/ir.h"
#include "device/backends/backend.h"
#include "device/tensor.h"

namespace kiln::convplan {

/// Which backend entry point a DeviceOp calls.
enum class DeviceOpKind { kConv2d, kConvTranspose2d, kAdd };
/// "conv2d" / "conv_transpose2d" / "add" (the names OpReport::op uses).
const char* DeviceOpKindName(DeviceOpKind kind);

/// One output tensor of a DeviceOp: channels [channel_begin, channel_end) of the op's result.
/// A normal conv has one slice covering all its output channels; merged sibling convs have one per
/// original conv.
struct OutputSlice {
  std::string tensor;
  int64_t channel_begin = 0;
  int64_t channel_end = 0;
};

/// An op executed on the device backend.
///
/// kAdd (Backend::Add; the card's ttnn.add): y = add_activation(inputs[0] + inputs[1]), two
/// feature maps of one shape, no weights, one output slice covering every channel.
///
/// Convs — computation (runtime/device_op_runner.h), for K parts x_k = inputs[k] with weights[k]:
///   y   = Σ_k conv(x_k, weights[k]) + bias             (K-split: partial convs summed in fp32 on
///                                                        the host; one part: a single device call)
///   y   = activation(y)                                 (fused into the device call when one part)
///   y   = residual_activation(y + residual)             (only when `residual` is set; fp32, on
///                                                        the host or fused by the backend:
///                                                        runtime/device_op_runner.h)
///   outputs[i].tensor = y[:, channel_begin:channel_end]
struct DeviceOp {
  DeviceOpKind kind = DeviceOpKind::kConv2d;
  /// 2 for Conv2d / ConvTranspose2d; 1 for the 1-D forms, whose (N, C, W) tensors are executed as
  /// (N, C, 1, W).
  int spatial_rank = 2;
  /// Input tensor names: one, or several for a K-split (the channel parts of a removed Concat, in
  /// order).
  std::vector<std::string> inputs;
  /// One rank-4 fp32 weight tensor per input: OIHW slices (kConv2d, split along I) or IOHW slices
  /// (kConvTranspose2d, split along the first dim). BatchNormalization is already folded in.
  std::vector<device::Tensor> weights;
  /// [O] fp32, or absent.
  std::optional<device::Tensor> bias;
  /// Geometry for kConv2d (activation member = the fused activation); pads already explicit.
  device::Conv2dParams conv;
  /// Geometry for kConvTranspose2d (activation member = the fused activation); pads explicit,
  /// output_shape already turned into pads / output_padding.
  device::ConvTranspose2dParams conv_transpose;
  /// Residual tensor added after the activation ("" = none); same shape as the conv output.
  std::string residual;
  /// Activation applied after the residual add.
  device::Activation residual_activation = device::Activation::kNone;
  /// kAdd: the fused activation (none, relu, relu6 — what the plan's passes fuse into an add).
  device::Activation add_activation = device::Activation::kNone;
  std::vector<OutputSlice> outputs;

  /// The fused activation (conv.activation, conv_transpose.activation or add_activation).
  device::Activation activation() const;
  void set_activation(device::Activation a);
  /// Total output channels O (kAdd: the channels of its output slice).
  int64_t out_channels() const;
  /// Total input channels C (sum over the K parts; kAdd: 0, it has no weights).
  int64_t in_channels() const;
  /// Kernel (kH, kW) of the weights ((0, 0) without weights).
  std::pair<int64_t, int64_t> kernel() const;
  int64_t group() const;
};

/// An ONNX node executed on the host (a host kernel of runtime/host_kernels/), in its ONNX element
/// types.
struct HostOp {
  /// A copy of the IR node (op type, attributes with schema defaults, inputs, outputs).
  onnx_fe::Node node;
};

/// One step of a plan.
struct PlanOp {
  /// Name of the op's main ONNX node ("conv1"); merged siblings: names joined with "+".
  std::string name;
  /// "conv2d" / "conv_transpose2d" / "add" for device ops, the ONNX op type for host ops.
  std::string op;
  /// Every ONNX node this op stands for (conv, folded BN, fused activation nodes, Add, Concat...).
  std::vector<std::string> source_nodes;
  /// What the passes did to it, e.g. "FoldBatchNorm(bn1)", "FuseRelu(relu1)".
  std::vector<std::string> fusions;
  std::variant<DeviceOp, HostOp> body;

  bool on_device() const { return std::holds_alternative<DeviceOp>(body); }
  DeviceOp& device() { return std::get<DeviceOp>(body); }
  const DeviceOp& device() const { return std::get<DeviceOp>(body); }
  HostOp& host() { return std::get<HostOp>(body); }
  const HostOp& host() const { return std::get<HostOp>(body); }
  /// Names of the tensors the op reads (device: inputs + residual; host: the node's non-empty
  /// inputs, constants included).
  std::vector<std::string> Inputs() const;
  /// Names of the tensors the op writes.
  std::vector<std::string> Outputs() const;
};

/// A runtime input of the plan (graph input that is not an initializer).
struct PlanInput {
  std::string name;
  onnx_fe::DataType dtype = onnx_fe::DataType::kFloat;
  /// Declared / inferred shape; symbolic dims (e.g. "batch") are bound at run time.
  onnx_fe::Shape shape;
};

/// The plan: ops in execution order (every op's inputs are graph inputs, constants or outputs of
/// earlier ops).
struct ConvPlan {
  /// The model the plan was built from, after constant folding; keeps the constant tensors host
  /// ops read alive.
  std::shared_ptr<const onnx_fe::Model> model;
  std::vector<PlanInput> inputs;
  /// Graph outputs in model order (name as declared, tensor that carries it).
  std::vector<onnx_fe::GraphOutput> outputs;
  std::vector<PlanOp> ops;
  /// Number of ONNX nodes evaluated when the plan was built (compiler/convplan/fold_constants.h):
  /// they are not in `ops`, and `model` is the folded model, whose constants hold their values.
  int64_t folded_nodes = 0;
  /// Every model constant a host op reads, converted once when the plan was built (host tensors
  /// of their ONNX element type, compiler/convplan/host_tensor.h), so runs share them instead of
  /// converting per run. Immutable; by tensor name.
  std::map<std::string, std::shared_ptr<const device::Tensor>> host_constants;
  /// Log of the rewrites applied, in order ("FoldBatchNorm: bn1 into conv1").
  std::vector<std::string> rewrites;

  size_t num_device_ops() const;
  /// The constant `name` of the model, or nullptr.
  const onnx_fe::ConstantData* FindConstant(const std::string& name) const;
  /// One line per op: "conv1 conv2d [x] -> [y] relu (FoldBatchNorm(bn1), FuseRelu(r1))".
  std::string ToString() const;
};

/// Rounds of the pass pipeline after which a plan that still rewrites is INTERNAL
/// (compiler/convplan/passes/pass_manager.h).
inline constexpr int kMaxPassRounds = 64;

/// Which passes run: all of the pipeline (compiler/convplan/passes/pass_manager.cc) by default.
struct PlanOptions {
  /// Names of passes to skip ("FuseRelu", "MergeSiblingConvs", ...); an unknown name is
  /// INVALID_ARGUMENT listing the pipeline.
  std::vector<std::string> disabled_passes;
  /// See kMaxPassRounds (>= 1).
  int max_rounds = kMaxPassRounds;
};

/// Bounds of CheckSupported's message: at most this many node names per op type, and about this
/// many bytes in all (the message reaches clients as a gRPC status message).
inline constexpr size_t kUnsupportedNamesPerType = 3;
inline constexpr size_t kUnsupportedMessageBytes = 1024;

/// Step 1 of the pipeline: OK, or INVALID_ARGUMENT "model has 317 unsupported node(s): ReduceMax
/// x120: 'a', 'b', 'c', ...; Relu (int32) x1: 'r' (device ops: Conv, ConvTranspose; 41 op types
/// run on the host)" — grouped by op type (and by the element type a host kernel lacks, from
/// HostOpSupport::CheckHostNode), with counts and the first kUnsupportedNamesPerType node names
/// (ONNX original names when they had one), at most ~kUnsupportedMessageBytes long. A node is
/// unsupported when its domain is not ai.onnx or it is neither Conv / ConvTranspose nor runnable
/// on the host.
Status CheckSupported(const onnx_fe::Graph& graph, const HostOpSupport& host_ops);

/// Steps 1–2 of BuildConvPlan (check + lowering), no rewrites: one PlanOp per IR node.
Result<ConvPlan> LowerModel(std::shared_ptr<const onnx_fe::Model> model, const HostOpSupport& host_ops);

/// Builds the plan (see the header comment); `host_ops` says which ops the host executes (pass
/// runtime::HostKernels(), runtime/host_kernels/registry.h). Errors: INVALID_ARGUMENT for
/// unsupported nodes (all listed), convs with more than 3 spatial dims, inconsistent attributes of
/// a device conv (message names the node), unknown disabled passes; INTERNAL when
/// the passes do not converge; never throws.
Result<ConvPlan> BuildConvPlan(std::shared_ptr<const onnx_fe::Model> model, const HostOpSupport& host_ops,
                               const PlanOptions& options = {});

}  // namespace kiln::convplan
