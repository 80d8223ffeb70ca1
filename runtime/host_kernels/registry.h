// The host-kernel registry of the runtime: the ONE list of ONNX op types that run on the host in
// fp32, with their kernels (runtime/host_kernels/<family>.cc, one file per kernel family).
//
// compiler/convplan learns which host ops exist from this registry through the HostOpSupport
// interface it declares (compiler/convplan/host_op_support.h): callers pass HostKernels() to
// convplan::BuildConvPlan. Nothing else lists host ops.
//
// Kernel contract (every kernel registered here)
// * Semantics are ONNX's for the node's opset (onnx/docs/Operators.md); each family file states
//   the forms it supports. Every tensor is fp32, row-major (Layout::kNCHW); integer-valued inputs
//   (shapes, axes, pads) are read from the fp32 values, rounded to the nearest integer.
// * run(node, inputs, ctx): `inputs` has one entry per node input (nullptr for an omitted optional
//   input), all float32 (the registry checks). Returns one tensor per node output (omitted
//   optional outputs get an empty Tensor). Errors: INVALID_ARGUMENT naming the node
//   (onnx_fe::Node::Describe()) for bad shapes / attributes / unsupported forms, the errors of
//   ctx.fp32 for kernels that delegate to it, CANCELLED / DEADLINE_EXCEEDED from ctx.cancel,
//   RESOURCE_EXHAUSTED when an output cannot be allocated. Kernels never throw on bad input.
// * Cancellation: when ctx.cancel is set, a kernel checks it at least every ~50 ms of work and
//   returns its status; CancelPoll (runtime/host_kernels/kernel_util.h) does it every
//   kCancelPollWork elementary steps (~1–10 ms of scalar work on one core). Kernels that delegate
//   pass the token on (ExecContext::cancel).
// * estimate_bytes(node, input_shapes): the bytes the kernel allocates for its outputs and
//   scratch (fp32, 4 bytes per element), from the input shapes (one per node input; {} for an
//   omitted one) and the node's attributes alone. Where a size depends on input VALUES (Pad from
//   opset 11: the pads input), the estimate assumes the smallest case the shapes allow, which is
//   stated at the kernel. Saturates at INT64_MAX; never fails.
//
// Adding a kernel: add a HostKernel to an existing family's Register function, or create
// runtime/host_kernels/<family>.cc defining `void RegisterHostKernels_<family>(HostKernelRegistry&)`
// and add <family> to KILN_HOST_KERNEL_FAMILIES in runtime/CMakeLists.txt (which generates the
// call; no other file changes).
#pragma once

#include <cstdint>
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

/// One kernel: the ONNX op types (default domain) it implements, its memory estimate and its run
/// function (contract in the header comment).
struct HostKernel {
  std::vector<std::string> op_types;
  HostKernelBytesFn estimate_bytes = nullptr;
  HostKernelFn run = nullptr;
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

  // convplan::HostOpSupport
  bool SupportsHostOp(std::string_view op_type) const override { return Find(op_type) != nullptr; }
  std::vector<std::string> HostOpTypes() const override;

  /// Runs the kernel of node.op_type. INVALID_ARGUMENT ("<node>: host ops take float32 tensors")
  /// for a non-float32 input, UNIMPLEMENTED ("<node>: not a host op") for an unregistered op type,
  /// else the kernel's result.
  Result<std::vector<device::Tensor>> Run(const onnx_fe::Node& node, const HostKernelInputs& inputs,
                                          const HostKernelContext& ctx) const;

  /// The kernel's memory estimate (contract above); UNIMPLEMENTED for an unregistered op type.
  Result<int64_t> EstimateBytes(const onnx_fe::Node& node, const std::vector<std::vector<int64_t>>& input_shapes) const;

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
