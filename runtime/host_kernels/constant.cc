// Constant host kernel (ONNX Constant): the `value` tensor attribute (other forms such as
// value_float are INVALID_ARGUMENT); normally the loader has already folded Constant nodes into
// initializers. Memory: the value's size.
#include "compiler/convplan/host_tensor.h"
#include "runtime/host_kernels/kernel_util.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;

Out Constant(const fe::Node& n, const HostKernelInputs&, const HostKernelContext&) {
  const fe::Attribute* v = n.FindAttribute("value");
  if (v == nullptr || !v->t || !v->t->constant) return Err(n, "only the 'value' form is supported");
  auto t = convplan::ConstantTensor(*v->t);
  if (!t.ok()) return t.status();
  return Outputs(std::move(*t));
}

int64_t ConstantBytes(const fe::Node& n, const std::vector<Shape>&) {
  const fe::Attribute* v = n.FindAttribute("value");
  if (v == nullptr || !v->t || !v->t->constant) return 0;
  return AddBytes(0, static_cast<int64_t>(v->t->constant->size()) * 8);
}

}  // namespace

void RegisterHostKernels_constant(HostKernelRegistry& r) { r.Add({{"Constant"}, ConstantBytes, Constant, AllDTypes(KernelPath::kTyped)}); }

}  // namespace kiln::runtime::host_kernels
