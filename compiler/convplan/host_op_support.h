// Which ONNX nodes run on the host, and their evaluation at plan time, as BuildConvPlan
// (compiler/convplan/plan.h) needs them.
//
// compiler/convplan does not implement host ops: the kernels and the one list of host ops live in
// runtime/host_kernels/ (runtime/host_kernels/registry.h, whose registry implements this
// interface). BuildConvPlan takes the support as an argument, so the list is written exactly once
// — where the kernels register — and compiler/ never includes runtime/.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "compiler/onnx/ir.h"
#include "device/tensor.h"

namespace kiln::convplan {

class HostOpSupport {
 public:
  virtual ~HostOpSupport() = default;
  /// True when a node of ONNX op type `op_type` (default domain) can run on the host for some
  /// element type.
  virtual bool SupportsHostOp(std::string_view op_type) const = 0;
  /// "" when `node` (of `graph`, whose tensors carry the element types the loader inferred) can run
  /// on the host; otherwise a short reason naming what is missing, e.g. "int32" for an element type
  /// the op has no kernel for, or "not a host op".
  virtual std::string CheckHostNode(const onnx_fe::Node& node, const onnx_fe::Graph& graph) const = 0;
  /// Every supported op type, sorted.
  virtual std::vector<std::string> HostOpTypes() const = 0;
  /// Evaluates `node` with every input given (nullptr for an omitted optional input), exactly as a
  /// run would (plan-time constant folding, compiler/convplan/passes/fold_constants.cc). Errors
  /// are the kernel's.
  virtual Result<std::vector<device::Tensor>> EvaluateHostOp(const onnx_fe::Node& node,
                                                             const std::vector<const device::Tensor*>& inputs) const = 0;
};

}  // namespace kiln::convplan
