#include "runtime/host_kernels/onednn_exec.h"

namespace kiln::runtime::host_kernels::onednn {

dnnl::engine& Engine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

dnnl::memory::desc Plain(const Shape& dims, dnnl::memory::data_type dt, const Shape& strides) {
  return dnnl::memory::desc(Dims(dims), dt, Dims(strides.empty() ? RowMajorStrides(dims) : strides));
}

dnnl::memory Reordered(const dnnl::memory& user, const dnnl::memory::desc& want, dnnl::stream& s) {
  if (user.get_desc() == want) return user;
  dnnl::memory m(want, Engine());
  dnnl::reorder(user, m).execute(s, const_cast<dnnl::memory&>(user), m);
  return m;
}

Result<const Tensor*> AsFloat32(const Tensor& t, Tensor& owned) {
  if (t.dtype() == device::DataType::kFloat32) return &t;
  auto f = t.ToFloat32();
  if (!f.ok()) return f.status();
  owned = std::move(*f);
  return &owned;
}

}  // namespace kiln::runtime::host_kernels::onednn
