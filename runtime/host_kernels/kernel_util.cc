#include "runtime/host_kernels/kernel_util.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "common/float16.h"
#include "device/dtype_dispatch.h"

namespace kiln::runtime::host_kernels {

Status Err(const onnx_fe::Node& n, const std::string& msg) { return InvalidArgument(n.Describe() + ": " + msg); }

Result<Tensor> Make(Shape shape, device::DataType dtype) { return Tensor::Zeros(std::move(shape), dtype); }

const Tensor* In(const HostKernelInputs& in, size_t i) { return i < in.size() ? in[i] : nullptr; }

Result<const Tensor*> Required(const onnx_fe::Node& n, const HostKernelInputs& in, size_t i, const char* what) {
  const Tensor* t = In(in, i);
  if (t == nullptr) return Err(n, std::string(what) + " missing");
  return t;
}

std::vector<int64_t> IntsOf(const Tensor& t) {
  std::vector<int64_t> v;
  v.reserve(static_cast<size_t>(t.num_elements()));
  device::VisitDataType(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr device::DataType kT = decltype(tag)::kType;
    for (T x : t.span<T>()) {
      if constexpr (kT == device::DataType::kFloat16) {
        v.push_back(std::llround(HalfToFloat(x)));
      } else if constexpr (kT == device::DataType::kBFloat16) {
        v.push_back(std::llround(BFloat16ToFloat(x)));
      } else if constexpr (std::is_floating_point_v<T>) {
        v.push_back(static_cast<int64_t>(std::llround(x)));
      } else {
        v.push_back(static_cast<int64_t>(x));
      }
    }
  });
  return v;
}

Result<Tensor> Int64Tensor(Shape shape, const std::vector<int64_t>& values) {
  auto t = Tensor::Zeros(std::move(shape), device::DataType::kInt64);
  if (!t.ok()) return t.status();
  if (static_cast<size_t>(t->num_elements()) != values.size()) return Internal("Int64Tensor: size mismatch");
  std::copy(values.begin(), values.end(), t->data<int64_t>());
  return t;
}

int64_t NormAxis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

void NextIndex(std::vector<int64_t>& idx, const Shape& shape) {
  for (size_t d = idx.size(); d-- > 0;) {
    if (++idx[d] < shape[d]) return;
    idx[d] = 0;
  }
}

std::vector<int64_t> RowMajorStrides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

Result<Shape> BroadcastShape(const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) {
      return InvalidArgument("shapes " + device::ShapeToString(a) + " and " + device::ShapeToString(b) +
                             " do not broadcast");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> BroadcastStrides(const Shape& s, const Shape& out) {
  std::vector<int64_t> st = RowMajorStrides(s);
  std::vector<int64_t> r(out.size(), 0);
  const size_t off = out.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) r[off + i] = s[i] == 1 ? 0 : st[i];
  return r;
}

std::vector<Tensor> Outputs(Tensor t, size_t num_outputs) {
  std::vector<Tensor> out;
  out.push_back(std::move(t));
  for (size_t k = 1; k < num_outputs; ++k) out.emplace_back();
  return out;
}

int64_t Fp32Bytes(const Shape& shape) { return TensorBytes(shape, 4); }

int64_t TensorBytes(const Shape& shape, int64_t element_size) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t bytes = element_size;
  for (int64_t d : shape) {
    if (d <= 0) return 0;
    if (bytes > kMax / d) return kMax;
    bytes *= d;
  }
  return bytes;
}

int64_t AddBytes(int64_t a, int64_t b) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  return a > kMax - b ? kMax : a + b;
}

int64_t SameAsInput0Bytes(const onnx_fe::Node&, const std::vector<Shape>& input_shapes) {
  return input_shapes.empty() ? 0 : Fp32Bytes(input_shapes[0]);
}

}  // namespace kiln::runtime::host_kernels
