#include "runtime/host_kernels/registry.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "compiler/convplan/host_tensor.h"
#include "device/backends/builtin.h"
#include "device/backends/reference/reference_backend.h"

namespace kiln::runtime {

namespace host_kernels {
// Generated from KILN_HOST_KERNEL_FAMILIES (runtime/CMakeLists.txt): calls every family's
// RegisterHostKernels_<family>.
void RegisterAllFamilies(HostKernelRegistry& registry);
}  // namespace host_kernels

const char* KernelPathName(KernelPath path) { return path == KernelPath::kOneDnn ? "oneDNN" : "typed"; }

std::vector<DTypePath> AllDTypes(KernelPath path) {
  std::vector<DTypePath> v;
  for (device::DataType t : device::kAllDataTypes) v.push_back({t, path});
  return v;
}

std::vector<DTypePath> DTypes(std::initializer_list<device::DataType> types, KernelPath path) {
  std::vector<DTypePath> v;
  for (device::DataType t : types) v.push_back({t, path});
  return v;
}

void HostKernelRegistry::Add(HostKernel kernel) {
  if (kernel.op_types.empty() || kernel.run == nullptr || kernel.estimate_bytes == nullptr ||
      kernel.dtypes.empty() || kernel.type_input < 0) {
    if (status_.ok()) status_ = InvalidArgument("host kernel without op types, functions or element types");
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

const DTypePath* HostKernelRegistry::FindPath(std::string_view op_type, device::DataType dtype) const {
  const HostKernel* k = Find(op_type);
  if (k == nullptr) return nullptr;
  for (const DTypePath& p : k->dtypes) {
    if (p.dtype == dtype) return &p;
  }
  return nullptr;
}

std::string HostKernelRegistry::DescribeTypes(const HostKernel& kernel) {
  if (kernel.dtypes.size() == std::size(device::kAllDataTypes)) {
    return std::string("every type (") + KernelPathName(kernel.dtypes[0].path) + ")";
  }
  std::string s;
  for (const DTypePath& p : kernel.dtypes) {
    s += std::string(s.empty() ? "" : ", ") + device::DataTypeName(p.dtype) + " (" + KernelPathName(p.path) + ")";
  }
  return s;
}

std::string HostKernelRegistry::CheckHostNode(const onnx_fe::Node& node, const onnx_fe::Graph& graph) const {
  const HostKernel* k = Find(node.op_type);
  if (k == nullptr) return "not a host op";
  const size_t ti = static_cast<size_t>(k->type_input);
  if (ti >= node.inputs.size() || node.inputs[ti].empty()) return "";  // e.g. Constant: no inputs
  const onnx_fe::Tensor* t = graph.FindTensor(node.inputs[ti]);
  if (t == nullptr || t->dtype == onnx_fe::DataType::kUndefined) return "";  // decided at run time
  auto dtype = convplan::HostDataType(t->dtype);
  if (!dtype.ok()) return onnx_fe::DataTypeName(t->dtype);
  return FindPath(node.op_type, *dtype) != nullptr ? "" : device::DataTypeName(*dtype);
}

Result<std::vector<device::Tensor>> HostKernelRegistry::Run(const onnx_fe::Node& node, const HostKernelInputs& inputs,
                                                            const HostKernelContext& ctx) const {
  const HostKernel* k = Find(node.op_type);
  if (k == nullptr) return Unimplemented(node.Describe() + ": not a host op");
  const size_t ti = static_cast<size_t>(k->type_input);
  if (ti < inputs.size() && inputs[ti] != nullptr && FindPath(node.op_type, inputs[ti]->dtype()) == nullptr) {
    return InvalidArgument(node.Describe() + ": " + node.op_type + " has no host kernel for " +
                           device::DataTypeName(inputs[ti]->dtype()) + " (it runs " + DescribeTypes(*k) + ")");
  }
  return k->run(node, inputs, ctx);
}

Result<std::vector<device::Tensor>> HostKernelRegistry::EvaluateHostOp(
    const onnx_fe::Node& node, const std::vector<const device::Tensor*>& inputs) const {
  // Plan-time evaluation runs on one thread: kernels that delegate (pooling) use a single-thread
  // fp32 reference backend created on first use.
  static std::once_flag once;
  static std::unique_ptr<device::Backend> fp32;
  static Status fp32_status;
  std::call_once(once, [] {
    device::BackendOptions bo;
    bo.settings[device::kReferenceThreadsSetting] = "1";
    auto r = device::MakeReferenceBackend(bo);
    if (r.ok()) {
      fp32 = std::move(*r);
    } else {
      fp32_status = r.status();
    }
  });
  if (fp32 == nullptr) return fp32_status;
  return Run(node, inputs, HostKernelContext{*fp32, nullptr});
}

Result<int64_t> HostKernelRegistry::EstimateBytes(const onnx_fe::Node& node,
                                                  const std::vector<std::vector<int64_t>>& input_shapes,
                                                  const std::vector<std::vector<int64_t>>& output_shapes) const {
  const HostKernel* k = Find(node.op_type);
  if (k == nullptr) return Unimplemented(node.Describe() + ": not a host op");
  if (k->estimate_bytes_with_outputs != nullptr && !output_shapes.empty()) {
    return k->estimate_bytes_with_outputs(node, input_shapes, output_shapes);
  }
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
