// Which ONNX op types run on the host, as BuildConvPlan (compiler/convplan/plan.h) needs to know.
//
// compiler/convplan does not implement host ops: the kernels and the one list of host ops live in
// runtime/host_kernels/ (runtime/host_kernels/registry.h, whose registry implements this
// interface). BuildConvPlan takes the support as an argument, so the list is written exactly once
// — where the kernels register — and compiler/ never includes runtime/.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln::convplan {

class HostOpSupport {
 public:
  virtual ~HostOpSupport() = default;
  /// True when a node of ONNX op type `op_type` (default domain) can run on the host.
  virtual bool SupportsHostOp(std::string_view op_type) const = 0;
  /// Every supported op type, sorted (CheckSupported lists them in its error message).
  virtual std::vector<std::string> HostOpTypes() const = 0;
};

}  // namespace kiln::convplan
