// Host kernels that generate tensors from shapes and scalars (onnx/docs/Operators.md):
// * Shape-1/13/15: the input's shape as int64, any input element type; Shape-15's `start` / `end`
//   count from the end when negative and are clamped to [0, rank] (an empty result when
//   end <= start).
// * ConstantOfShape-9: the int64 `input` gives the shape (non-negative dims; an empty input is a
//   scalar); every element is the 1-element `value` tensor attribute, of its element type, or
//   float32 0 without it.
// * Range-11: start / limit / delta scalars of one numeric type T; the output has
//   max(ceil((limit - start) / delta), 0) elements, element i being start + i·delta accumulated in
//   T as the operator's function body (Loop with prev + delta) defines it (float16 / bfloat16:
//   each sum rounded back to T). Integer counts are exact (128-bit); floating counts divide in
//   double after subtracting in T, as onnxruntime's Range does. delta 0 is INVALID_ARGUMENT.
// Memory: Shape: rank int64 values; ConstantOfShape / Range depend on input values: the one
// element of their smallest non-empty case.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/float16.h"
#include "compiler/convplan/host_tensor.h"
#include "device/dtype_dispatch.h"
#include "runtime/host_kernels/kernel_util.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;
using device::DataType;

Out ShapeOp(const fe::Node& n, const Tensor& x) {
  const int64_t r = x.rank();
  auto start = n.GetInt("start", 0);
  if (!start.ok()) return start.status();
  auto end = n.GetInt("end", r);
  if (!end.ok()) return end.status();
  auto clamp = [r](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
  const int64_t s = clamp(*start), e = clamp(*end);
  std::vector<int64_t> dims;
  for (int64_t d = s; d < e; ++d) dims.push_back(x.dim(static_cast<int>(d)));
  auto y = Int64Tensor({static_cast<int64_t>(dims.size())}, dims);
  if (!y.ok()) return y.status();
  return Outputs(std::move(*y));
}

int64_t ShapeBytes(const fe::Node&, const std::vector<Shape>& s) {
  return s.empty() ? 0 : TensorBytes({static_cast<int64_t>(s[0].size())}, 8);
}

Out ConstantOfShape(const fe::Node& n, const Tensor& shape_t, const HostKernelContext& ctx) {
  if (shape_t.rank() != 1) return Err(n, "input must be 1-D, got " + device::ShapeToString(shape_t.shape()));
  const std::vector<int64_t> shape = IntsOf(shape_t);
  for (int64_t d : shape) {
    if (d < 0) return Err(n, "negative dim in shape " + device::ShapeToString(shape));
  }
  Tensor value;
  if (const fe::Attribute* v = n.FindAttribute("value"); v != nullptr && !v->from_default) {
    if (!v->t || !v->t->constant) return Err(n, "'value' must be a tensor");
    auto t = convplan::ConstantTensor(*v->t);
    if (!t.ok()) return Err(n, t.status().message());
    if (t->num_elements() != 1) return Err(n, "'value' must hold one element, got " + std::to_string(t->num_elements()));
    value = std::move(*t);
  } else {
    auto t = Make({1}, DataType::kFloat32);
    if (!t.ok()) return t.status();
    value = std::move(*t);
  }
  auto y = Make(shape, value.dtype());
  if (!y.ok()) return y.status();
  const size_t es = device::DataTypeSize(value.dtype());
  const std::byte* v = value.raw().data();
  std::byte* p = y->raw().data();
  CancelPoll poll(ctx.cancel);
  for (int64_t i = 0; i < y->num_elements(); ++i) {
    std::memcpy(p + i * static_cast<int64_t>(es), v, es);
    if ((i & (kCancelPollWork - 1)) == kCancelPollWork - 1) KILN_RETURN_IF_ERROR(poll.Tick(kCancelPollWork));
  }
  return Outputs(std::move(*y));
}

int64_t OneElementBytes(const fe::Node&, const std::vector<Shape>&) { return 8; }

// Range in storage type T of element type kT.
template <typename T, DataType kT>
Out RangeOf(const fe::Node& n, const Tensor& start_t, const Tensor& limit_t, const Tensor& delta_t,
            const HostKernelContext& ctx) {
  auto get = [](const Tensor& t) {
    const T raw = t.data<T>()[0];
    if constexpr (kT == DataType::kFloat16) {
      return HalfToFloat(raw);
    } else if constexpr (kT == DataType::kBFloat16) {
      return BFloat16ToFloat(raw);
    } else {
      return raw;
    }
  };
  using V = decltype(get(start_t));  // the arithmetic type: T, or float for the 16-bit floats
  auto round = [](V v) -> V {
    if constexpr (kT == DataType::kFloat16) {
      return HalfToFloat(FloatToHalf(v));
    } else if constexpr (kT == DataType::kBFloat16) {
      return BFloat16ToFloat(FloatToBFloat16(v));
    } else {
      return v;
    }
  };
  auto store = [](V v) -> T {
    if constexpr (kT == DataType::kFloat16) {
      return FloatToHalf(v);
    } else if constexpr (kT == DataType::kBFloat16) {
      return FloatToBFloat16(v);
    } else {
      return static_cast<T>(v);
    }
  };
  const V start = get(start_t), limit = get(limit_t), delta = get(delta_t);
  if (delta == V{0}) return Err(n, "delta is 0");
  int64_t count = 0;
  if constexpr (std::is_integral_v<V>) {
    const __int128 d = static_cast<__int128>(limit) - static_cast<__int128>(start);
    const __int128 s = static_cast<__int128>(delta);
    __int128 c = d / s;
    if (c * s != d) c += 1;  // ceil for quotients > 0 (same signs); <= 0 means empty
    if (c > std::numeric_limits<int64_t>::max()) return Err(n, "too many elements");
    count = c > 0 ? static_cast<int64_t>(c) : 0;
  } else {
    const double c = std::ceil(static_cast<double>(round(limit - start)) / static_cast<double>(delta));
    if (std::isnan(c)) return Err(n, "start, limit or delta is NaN");
    if (c >= 9.2e18) return Err(n, "too many elements");
    count = c > 0 ? static_cast<int64_t>(c) : 0;
  }
  auto y = Make({count}, kT);
  if (!y.ok()) return y.status();
  T* p = y->template data<T>();
  CancelPoll poll(ctx.cancel);
  V v = start;
  for (int64_t i = 0; i < count; ++i) {
    p[i] = store(v);
    if (i + 1 < count) {
      if constexpr (std::is_integral_v<V>) {
        v = static_cast<V>(v + delta);  // stays within [start, limit): no overflow
      } else {
        v = round(v + delta);
      }
    }
    if ((i & (kCancelPollWork - 1)) == kCancelPollWork - 1) KILN_RETURN_IF_ERROR(poll.Tick(kCancelPollWork));
  }
  return Outputs(std::move(*y));
}

Out Range(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  const char* names[] = {"start", "limit", "delta"};
  for (size_t i = 0; i < 3; ++i) {
    const Tensor* t = In(in, i);
    if (t == nullptr) return Err(n, std::string(names[i]) + " missing");
    if (t->num_elements() != 1 || t->rank() > 1) {
      return Err(n, std::string(names[i]) + " must be a scalar, got " + device::ShapeToString(t->shape()));
    }
    if (t->dtype() != in[0]->dtype()) {
      return Err(n, std::string(names[i]) + " is " + device::DataTypeName(t->dtype()) + ", start is " +
                        device::DataTypeName(in[0]->dtype()));
    }
  }
  return device::VisitDataType(in[0]->dtype(), [&](auto tag) -> Out {
    using T = typename decltype(tag)::type;
    return RangeOf<T, decltype(tag)::kType>(n, *in[0], *in[1], *in[2], ctx);
  });
}

}  // namespace

void RegisterHostKernels_generate(HostKernelRegistry& r) {
  r.Add({{"Shape"}, ShapeBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext&) -> Out {
           auto x = Required(n, in, 0, "data input");
           if (!x.ok()) return x.status();
           return ShapeOp(n, **x);
         },
         AllDTypes(KernelPath::kTyped)});
  r.Add({{"ConstantOfShape"}, OneElementBytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto x = Required(n, in, 0, "input");
           if (!x.ok()) return x.status();
           return ConstantOfShape(n, **x, ctx);
         },
         DTypes({DataType::kInt64}, KernelPath::kTyped)});
  r.Add({{"Range"}, OneElementBytes, Range, NumericDTypes(KernelPath::kTyped)});
}

}  // namespace kiln::runtime::host_kernels
