// The host-kernel registry of the runtime: the ONE list of ONNX op types that run on the host,
// with their kernels (runtime/host_kernels/<family>.cc, one file per kernel family) and, per
// (op type, element type), which implementation runs: oneDNN 2.6 primitives (f32 / bf16 / f16 /
// s32 / s8 / u8 are what oneDNN computes) or typed kernels of our own (int64, int16, uint16/32/64,
// bool, float64, and pure data movement / index arithmetic for every type).
//
// compiler/convplan learns which host ops exist from this registry through the HostOpSupport
// interface it declares (compiler/convplan/host_op_support.h): callers pass HostKernels() to
// convplan::BuildConvPlan, which also evaluates constant subgraphs with it at plan time. The
// support check, the planner's error message and the executor all read this registry; nothing
// else lists host ops.
//
// Kernel contract (every kernel registered here)
// * Semantics are ONNX's for the node's opset (onnx/docs/Operators.md); each family file states
//   the forms it supports and where it follows onnx's reference implementation
//   (onnx/reference/ops) instead of oneDNN's semantics. Tensors are row-major (Layout::kNCHW) and
//   carry their ONNX element type (compiler/convplan/host_tensor.h maps the types); outputs have
//   the element type the op's schema gives them. Integer-valued control inputs (shapes, axes,
//   pads, indices) are int64 / int32 tensors read exactly (IntsOf, kernel_util.h).
// * Element types: HostKernel::dtypes lists, for the element type of input `type_input`, the types
//   the kernel runs and the path each takes (KernelPath). The registry refuses any other type
//   before calling the kernel (INVALID_ARGUMENT naming the op, the type and the types it runs).
// * run(node, inputs, ctx): `inputs` has one entry per node input (nullptr for an omitted optional
//   input); input `type_input` has one of the kernel's listed types (the registry checks). Returns one tensor per node output (omitted
//   optional outputs get an empty Tensor). Errors: INVALID_ARGUMENT naming the node
//   (onnx_fe::Node::Describe()) for bad shapes / attributes / unsupported forms, the errors of
//   ctx.fp32 for kernels that delegate to it, CANCELLED / DEADLINE_EXCEEDED from ctx.cancel,
//   RESOURCE_EXHAUSTED when an output cannot be allocated. Kernels never throw on bad input.
// * Cancellation: when ctx.cancel is set, a kernel checks it at least every ~50 ms of work and
//   returns its status; CancelPoll (runtime/host_kernels/kernel_util.h) does it every
//   kCancelPollWork elementary steps (~1–10 ms of scalar work on one core). Kernels that delegate
//   pass the token on (ExecContext::cancel).
// * estimate_bytes(node, input_shapes): the bytes the kernel allocates for its outputs and
//   scratch, from the input shapes (one per node input; {} for an
//   omitted one) and the node's attributes alone. Where a size depends on input VALUES (Pad from
//   opset 11: the pads input), the estimate assumes the smallest case the shapes allow, which is
//   stated at the kernel. Saturates at INT64_MAX; never fails. A kernel whose sizes depend on
//   input values the output shapes reveal (Resize's scales) also gives
//   estimate_bytes_with_outputs(node, input_shapes, output_shapes), used where shape inference
//   knows every output shape. Either way the run's estimate (runtime/memory_estimate.cc) never
//   counts an op at less than its outputs' inferred bytes.
//
// Adding a kernel: add a HostKernel to an existing family's Register function, or create
// runtime/host_kernels/<family>.cc defining `void RegisterHostKernels_<family>(HostKernelRegistry&)`
// and add <family> to KILN_HOST_KERNEL_FAMILIES in runtime/CMakeLists.txt (which generates the
// call; no other file changes).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "compiler/convplan/host_op_support.h"
#include "compiler/onnx/ir.h"
#include "device/backends/backend.h"
#include "device/tensor.h"

namespace kiln::runtime {

/// What a kernel runs with.
struct HostKernelContext {
  /// fp32 backend for kernels that delegate (MaxPool / AveragePool → Pool2d).
  device::Backend& fp32;
  /// Checked during long kernels (see the contract above); may be null.
  const device::CancelToken* cancel = nullptr;
};

using HostKernelInputs = std::vector<const device::Tensor*>;
using HostKernelFn = Result<std::vector<device::Tensor>> (*)(const onnx_fe::Node& node, const HostKernelInputs& inputs,
                                                              const HostKernelContext& ctx);
using HostKernelBytesFn = int64_t (*)(const onnx_fe::Node& node, const std::vector<std::vector<int64_t>>& input_shapes);
using HostKernelBytesWithOutputsFn = int64_t (*)(const onnx_fe::Node& node,
                                                 const std::vector<std::vector<int64_t>>& input_shapes,
                                                 const std::vector<std::vector<int64_t>>& output_shapes);

/// Which implementation computes one (op, element type).
enum class KernelPath {
  kOneDnn,  ///< a oneDNN 2.6 primitive (libdnnl)
  kTyped,   ///< Kiln's own typed C++ (data movement, index arithmetic, types oneDNN lacks)
};
/// "oneDNN" / "typed".
const char* KernelPathName(KernelPath path);

struct DTypePath {
  device::DataType dtype = device::DataType::kFloat32;
  KernelPath path = KernelPath::kTyped;
};

/// Every element type, all on `path` (for data-movement kernels that copy elements of any type).
std::vector<DTypePath> AllDTypes(KernelPath path);
/// The given types, all on `path`.
std::vector<DTypePath> DTypes(std::initializer_list<device::DataType> types, KernelPath path);

/// One kernel: the ONNX op types (default domain) it implements, its memory estimate, its run
/// function (contract in the header comment) and the element types it runs.
struct HostKernel {
  std::vector<std::string> op_types;
  HostKernelBytesFn estimate_bytes = nullptr;
  HostKernelFn run = nullptr;
  /// Element types of input `type_input` the kernel runs, with the path each takes. The default
  /// is a float32-only kernel of our own.
  std::vector<DTypePath> dtypes = {{device::DataType::kFloat32, KernelPath::kTyped}};
  /// The input whose element type selects the path (ONNX's "T" constraint; Where: 1).
  int type_input = 0;
  /// Optional: the estimate from the output shapes too (see the contract above).
  HostKernelBytesWithOutputsFn estimate_bytes_with_outputs = nullptr;
};

class HostKernelRegistry final : public convplan::HostOpSupport {
 public:
  /// Registers `kernel` for each of its op types. A repeated op type, no op type or a null
  /// function is recorded in status() (ALREADY_EXISTS / INVALID_ARGUMENT) and the kernel is not
  /// added.
  void Add(HostKernel kernel);
  /// OK unless an Add was rejected.
  const Status& status() const { return status_; }

  /// The kernel of `op_type`, or nullptr.
  const HostKernel* Find(std::string_view op_type) const;
  /// The path of (op_type, dtype), or nullptr when the op or the type is not supported.
  const DTypePath* FindPath(std::string_view op_type, device::DataType dtype) const;
  /// "float32 (oneDNN), int64 (typed)": the types `kernel` runs.
  static std::string DescribeTypes(const HostKernel& kernel);

  // convplan::HostOpSupport
  bool SupportsHostOp(std::string_view op_type) const override { return Find(op_type) != nullptr; }
  std::string CheckHostNode(const onnx_fe::Node& node, const onnx_fe::Graph& graph) const override;
  std::vector<std::string> HostOpTypes() const override;

  /// Runs the kernel of node.op_type. UNIMPLEMENTED ("<node>: not a host op") for an unregistered
  /// op type, INVALID_ARGUMENT ("<node>: Relu has no host kernel for int32 (it runs float32
  /// (oneDNN))") for an element type the kernel does not list, else the kernel's result.
  Result<std::vector<device::Tensor>> Run(const onnx_fe::Node& node, const HostKernelInputs& inputs,
                                          const HostKernelContext& ctx) const;

  /// Run() with a single-thread fp32 reference backend and no cancel token (plan-time folding).
  Result<std::vector<device::Tensor>> EvaluateHostOp(const onnx_fe::Node& node,
                                                     const std::vector<const device::Tensor*>& inputs) const override;

  /// The kernel's memory estimate (contract above); UNIMPLEMENTED for an unregistered op type.
  /// `output_shapes`, one per node output when shape inference knows them all (else empty), select
  /// estimate_bytes_with_outputs where the kernel has one.
  Result<int64_t> EstimateBytes(const onnx_fe::Node& node, const std::vector<std::vector<int64_t>>& input_shapes,
                                const std::vector<std::vector<int64_t>>& output_shapes = {}) const;

 private:
  std::vector<HostKernel> kernels_;
  std::unordered_map<std::string, size_t> by_type_;
  Status status_;
};

/// The built-in registry: every family of runtime/host_kernels/, registered on first use
/// (thread-safe); immutable afterwards. A rejected registration is a build defect: the process
/// aborts at first use with the message (every runtime test reaches it).
const HostKernelRegistry& HostKernels();

}  // namespace kiln::runtime
