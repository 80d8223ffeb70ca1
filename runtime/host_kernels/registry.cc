#include "runtime/host_kernels/registry.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace kiln::runtime {

namespace host_kernels {
// Generated from KILN_HOST_KERNEL_FAMILIES (runtime/CMakeLists.txt): calls every family's
// RegisterHostKernels_<family>.
void RegisterAllFamilies(HostKernelRegistry& registry);
}  // namespace host_kernels

void HostKernelRegistry::Add(HostKernel kernel) {
  if (kernel.op_types.empty() || kernel.run == nullptr || kernel.estimate_bytes == nullptr) {
    if (status_.ok()) status_ = InvalidArgument("host kernel without op types or functions");
    return;
  }
  for (const std::string& t : kernel.op_types) {
    if (by_type_.count(t) != 0) {
      if (status_.ok()) status_ = Status(StatusCode::kAlreadyExists, "host kernel for '" + t + "' registered twice");
      return;
    }
  }
  for (const std::string& t : kernel.op_types) by_type_[t] = kernels_.size();
  kernels_.push_back(std::move(kernel));
}

const HostKernel* HostKernelRegistry::Find(std::string_view op_type) const {
  auto it = by_type_.find(std::string(op_type));
  return it == by_type_.end() ? nullptr : &kernels_[it->second];
}

std::vector<std::string> HostKernelRegistry::HostOpTypes() const {
  std::vector<std::string> v;
  v.reserve(by_type_.size());
  for (const auto& [t, i] : by_type_) v.push_back(t);
  std::sort(v.begin(), v.end());
  return v;
}

Result<std::vector<device::Tensor>> HostKernelRegistry::Run(const onnx_fe::Node& node, const HostKernelInputs& inputs,
                                                            const HostKernelContext& ctx) const {
  for (const device::Tensor* t : inputs) {
    if (t != nullptr && t->dtype() != device::DataType::kFloat32) {
      return InvalidArgument(node.Describe() + ": host ops take float32 tensors");
    }
  }
  const HostKernel* k = Find(node.op_type);
  if (k == nullptr) return Unimplemented(node.Describe() + ": not a host op");
  return k->run(node, inputs, ctx);
}

Result<int64_t> HostKernelRegistry::EstimateBytes(const onnx_fe::Node& node,
                                                  const std::vector<std::vector<int64_t>>& input_shapes) const {
  const HostKernel* k = Find(node.op_type);
  if (k == nullptr) return Unimplemented(node.Describe() + ": not a host op");
  return k->estimate_bytes(node, input_shapes);
}

const HostKernelRegistry& HostKernels() {
  static const HostKernelRegistry* registry = [] {
    auto* r = new HostKernelRegistry();
    host_kernels::RegisterAllFamilies(*r);
    if (!r->status().ok()) {
      std::fprintf(stderr, "kiln: host kernel registry: %s\n", r->status().ToString().c_str());
      std::abort();
    }
    return r;
  }();
  return *registry;
}

}  // namespace kiln::runtime
