// Element-wise binary and variadic host kernels with numpy broadcasting (onnx/docs/Broadcasting.md;
// operator definitions in onnx/docs/Operators.md): Add, Sub, Mul, Div, Pow, Min, Max, Sum, Mean
// (Min / Max / Sum / Mean take 1..N inputs, folded left to right), Equal, Greater, Less (bool
// outputs), PRelu (see PRelu below). Shapes that do not broadcast are INVALID_ARGUMENT naming the node.
// Paths:
// * float32 (float16 / bfloat16 computed in float32): oneDNN 2.6 binary (add, sub, mul, div, min,
//   max, eq, gt, lt; comparisons write u8 0 / 1 straight into the bool output). oneDNN broadcasts
//   only its second source, so a first input smaller than the output is swapped with the second
//   where the op allows (Add, Mul, Min, Max, Equal; Greater ↔ Less) or else expanded first.
//   Pow: oneDNN 2.6 binary has no pow, so Pow with a one-element exponent is eltwise pow and any
//   other exponent is typed (std::pow per element). Mean divides the sum with eltwise linear.
// * Typed, our own: float64 and every integer type (oneDNN computes s32 / s8 / u8 through f32
//   and saturates, while ONNX integer arithmetic is exact and wraps like numpy). Integer Div
//   truncates toward zero, as onnx's reference (onnx/backend/test/case/node/div.py: numpy `x / y`
//   then astype); a zero divisor gives 0 (numpy leaves it undefined). Integer Pow with an integer
//   exponent is exact (by squaring; a negative exponent gives 0 unless the base is ±1), with a
//   floating exponent std::pow truncated toward zero (numpy's astype).
// Memory: one output of the broadcast shape (plus an expanded copy of input 0 when it must be).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "device/dtype_dispatch.h"
#include "runtime/host_kernels/kernel_util.h"
#include "runtime/host_kernels/onednn_util.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;
using device::DataType;

enum class B { kAdd, kSub, kMul, kDiv, kPow, kMin, kMax, kEqual, kGreater, kLess };

bool IsCompare(B b) { return b == B::kEqual || b == B::kGreater || b == B::kLess; }

Shape PadRank(const Shape& s, size_t rank) {
  Shape r(rank - s.size(), 1);
  r.insert(r.end(), s.begin(), s.end());
  return r;
}

// `t` materialised in broadcast shape `out` (any type; data movement).
Result<Tensor> ExpandTo(const Tensor& t, const Shape& out) {
  auto y = Make(out, t.dtype());
  if (!y.ok()) return y.status();
  const size_t es = device::DataTypeSize(t.dtype());
  const std::vector<int64_t> st = BroadcastStrides(t.shape(), out);
  std::vector<int64_t> idx(out.size(), 0);
  const std::byte* src = t.raw().data();
  std::byte* dst = y->raw().data();
  for (int64_t i = 0; i < y->num_elements(); ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < out.size(); ++d) off += idx[d] * st[d];
    std::memcpy(dst + i * es, src + off * es, es);
    NextIndex(idx, out);
  }
  return y;
}

// Typed broadcast loop: out[i] = f(a[ia], b[ib]).
template <typename TA, typename TB, typename TO, typename F>
Status BroadcastLoop(const TA* pa, const Shape& sa_shape, const TB* pb, const Shape& sb_shape, TO* py,
                     const Shape& s, const device::CancelToken* cancel, F f) {
  const std::vector<int64_t> sa = BroadcastStrides(sa_shape, s), sb = BroadcastStrides(sb_shape, s);
  std::vector<int64_t> idx(s.size(), 0);
  int64_t count = 1;
  for (int64_t d : s) count *= d;
  CancelPoll poll(cancel);
  int64_t ia = 0, ib = 0;
  for (int64_t i = 0; i < count; ++i) {
    py[i] = f(pa[ia], pb[ib]);
    for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
      if (++idx[d] < s[d]) {
        ia += sa[d];
        ib += sb[d];
        break;
      }
      ia -= sa[d] * (s[d] - 1);
      ib -= sb[d] * (s[d] - 1);
      idx[d] = 0;
    }
    if ((i & (kCancelPollWork - 1)) == kCancelPollWork - 1) KILN_RETURN_IF_ERROR(poll.Tick(kCancelPollWork));
  }
  return Status::Ok();
}

template <typename T>
T IntPow(T base, int64_t e) {
  if (e < 0) {
    if (base == T{1}) return T{1};
    if constexpr (std::is_signed_v<T>) {
      if (base == T{-1}) return (e % 2 == 0) ? T{1} : T{-1};
    }
    return T{0};
  }
  using W = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
  W r = 1, b = static_cast<W>(base);
  while (e > 0) {
    if (e & 1) r = static_cast<W>(static_cast<uint64_t>(r) * static_cast<uint64_t>(b));
    b = static_cast<W>(static_cast<uint64_t>(b) * static_cast<uint64_t>(b));
    e >>= 1;
  }
  return static_cast<T>(r);
}

// The typed scalar op (float64 and integer element types; also float32 Pow).
template <typename T>
T Arith(B op, T x, T y) {
  switch (op) {
    case B::kAdd:
      if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<std::make_unsigned_t<T>>(x) + static_cast<std::make_unsigned_t<T>>(y));
      return x + y;
    case B::kSub:
      if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<std::make_unsigned_t<T>>(x) - static_cast<std::make_unsigned_t<T>>(y));
      return x - y;
    case B::kMul:
      if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<std::make_unsigned_t<T>>(x) * static_cast<std::make_unsigned_t<T>>(y));
      return x * y;
    case B::kDiv:
      if constexpr (std::is_integral_v<T>) {
        if (y == T{0}) return T{0};
        if constexpr (std::is_signed_v<T>) {
          if (x == std::numeric_limits<T>::min() && y == T{-1}) return x;
        }
      }
      return static_cast<T>(x / y);
    case B::kMin: return std::min(x, y);
    case B::kMax: return std::max(x, y);
    default: return x;
  }
}

template <typename T>
uint8_t Compare(B op, T x, T y) {
  return op == B::kEqual ? x == y : op == B::kGreater ? x > y : x < y;
}

dnnl::algorithm DnnAlg(B op) {
  switch (op) {
    case B::kAdd: return dnnl::algorithm::binary_add;
    case B::kSub: return dnnl::algorithm::binary_sub;
    case B::kMul: return dnnl::algorithm::binary_mul;
    case B::kDiv: return dnnl::algorithm::binary_div;
    case B::kMin: return dnnl::algorithm::binary_min;
    case B::kMax: return dnnl::algorithm::binary_max;
    case B::kEqual: return dnnl::algorithm::binary_eq;
    case B::kGreater: return dnnl::algorithm::binary_gt;
    case B::kLess: return dnnl::algorithm::binary_lt;
    case B::kPow: break;
  }
  return dnnl::algorithm::binary_add;
}

// oneDNN binary over float32 a, b (any broadcast) into y (f32 or, for comparisons, u8).
Status DnnBinary(const fe::Node& n, B op, const Tensor& a0, const Tensor& b0, const Shape& out, void* y,
                 const device::CancelToken* cancel) {
  const Tensor* a = &a0;
  const Tensor* b = &b0;
  int64_t count = 1;
  for (int64_t d : out) count *= d;
  if (count == 0) return Status::Ok();
  const size_t rank = std::max<size_t>(out.size(), 1);
  const Shape so = PadRank(out, rank);
  Tensor expanded;
  if (PadRank(a->shape(), rank) != so) {
    const bool swappable = op == B::kAdd || op == B::kMul || op == B::kMin || op == B::kMax || IsCompare(op);
    if (swappable && PadRank(b->shape(), rank) == so) {
      std::swap(a, b);
      if (op == B::kGreater) op = B::kLess;
      else if (op == B::kLess) op = B::kGreater;
    } else {
      auto e = ExpandTo(*a, out);
      if (!e.ok()) return e.status();
      expanded = std::move(*e);
      a = &expanded;
    }
  }
  // The full rank is kept (no leading 1s dropped): oneDNN's jit binary recognises its broadcast
  // strategies (per channel = dim 1, per spatial, scalar) by position and falls back to its slow
  // reference implementation otherwise.
  const Shape sb = PadRank(b->shape(), rank);
  const auto dst_dt = IsCompare(op) ? dnnl::memory::data_type::u8 : dnnl::memory::data_type::f32;
  const size_t dst_es = IsCompare(op) ? 1 : 4;
  int64_t row = 1, b_row = 1;
  for (size_t d = 1; d < so.size(); ++d) {
    row *= so[d];
    b_row *= sb[d];
  }
  const float* pa = a->data<float>();
  const float* pb = b->data<float>();
  return DnnGuard(n, [&] {
    return ForRowChunks(so[0], row, cancel, [&](int64_t r0, int64_t cnt) {
      Shape s0 = so, s1 = sb;
      s0[0] = cnt;
      if (s1[0] != 1) s1[0] = cnt;
      const auto md0 = DnnDesc(s0), md1 = DnnDesc(s1), mdd = DnnDesc(s0, dst_dt);
      dnnl::binary::desc d(DnnAlg(op), md0, md1, mdd);
      dnnl::binary prim(dnnl::binary::primitive_desc(d, DnnEngine()));
      DnnExecute(prim, {{DNNL_ARG_SRC_0, DnnMem(md0, pa + r0 * row)},
                        {DNNL_ARG_SRC_1, DnnMem(md1, pb + (sb[0] == 1 ? 0 : r0 * b_row))},
                        {DNNL_ARG_DST, DnnMem(mdd, static_cast<std::byte*>(y) + r0 * row * dst_es)}});
      return Status::Ok();
    });
  });
}

// Pow: base `a` of any numeric type, exponent `b` of any numeric type; output a's type.
Result<Tensor> PowOp(const fe::Node& n, const Tensor& a, const Tensor& b, const Shape& out,
                     const device::CancelToken* cancel) {
  if (IsDnnFloat(a.dtype()) && b.num_elements() == 1) {
    Tensor ha;
    auto af = AsFloat32(a, ha);
    if (!af.ok()) return af.status();
    auto e = b.CastTo(DataType::kFloat32);
    if (!e.ok()) return e.status();
    const float beta = e->data<float>()[0];
    auto y = Make(out);
    if (!y.ok()) return y.status();
    Tensor src;
    const float* ps = (*af)->data<float>();
    if ((*af)->num_elements() != y->num_elements()) {
      auto ex = ExpandTo(**af, out);
      if (!ex.ok()) return ex.status();
      src = std::move(*ex);
      ps = src.data<float>();
    }
    float* py = y->data<float>();
    KILN_RETURN_IF_ERROR(DnnGuard(n, [&] {
      return ForRowChunks(y->num_elements(), 1, cancel, [&](int64_t i0, int64_t len) {
        const auto md = DnnDesc({len});
        dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_pow, md, 1.f, beta);
        dnnl::eltwise_forward prim(dnnl::eltwise_forward::primitive_desc(d, DnnEngine()));
        DnnExecute(prim, {{DNNL_ARG_SRC, DnnMem(md, ps + i0)}, {DNNL_ARG_DST, DnnMem(md, py + i0)}});
        return Status::Ok();
      });
    }));
    return FromFloat32(std::move(*y), a.dtype());
  }
  Tensor ha;
  const Tensor* base = &a;
  if (a.dtype() == DataType::kFloat16 || a.dtype() == DataType::kBFloat16) {
    auto af = AsFloat32(a, ha);
    if (!af.ok()) return af.status();
    base = *af;
  }
  auto y = Make(out, base->dtype());
  if (!y.ok()) return y.status();
  Status st = device::VisitDataType(base->dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    if constexpr (decltype(tag)::kType == DataType::kFloat16 || decltype(tag)::kType == DataType::kBFloat16 ||
                  decltype(tag)::kType == DataType::kBool) {
      return Err(n, "unsupported base type");
    } else {
      if (device::IsIntegral(b.dtype()) && std::is_integral_v<T>) {
        auto e = b.CastTo(DataType::kInt64);
        if (!e.ok()) return e.status();
        return BroadcastLoop(base->data<T>(), base->shape(), e->data<int64_t>(), b.shape(), y->data<T>(), out, cancel,
                             [](T x, int64_t p) { return IntPow(x, p); });
      }
      auto e = b.CastTo(DataType::kFloat64);
      if (!e.ok()) return e.status();
      return BroadcastLoop(base->data<T>(), base->shape(), e->data<double>(), b.shape(), y->data<T>(), out, cancel,
                           [](T x, double p) {
                             const double v = std::pow(static_cast<double>(x), p);
                             if constexpr (std::is_integral_v<T>) {
                               if (!(v >= static_cast<double>(std::numeric_limits<T>::lowest()) &&
                                     v <= static_cast<double>(std::numeric_limits<T>::max()))) {
                                 return T{0};
                               }
                             }
                             return static_cast<T>(v);
                           });
    }
  });
  KILN_RETURN_IF_ERROR(st);
  return FromFloat32(std::move(*y), a.dtype());
}

// One binary step: a op b.
Result<Tensor> BinaryOp(const fe::Node& n, B op, const Tensor& a, const Tensor& b, const device::CancelToken* cancel) {
  auto out = BroadcastShape(a.shape(), b.shape());
  if (!out.ok()) return Err(n, out.status().message());
  if (op == B::kPow) return PowOp(n, a, b, *out, cancel);
  if (a.dtype() != b.dtype()) {
    return Err(n, std::string("inputs have different element types ") + device::DataTypeName(a.dtype()) + " and " +
                      device::DataTypeName(b.dtype()));
  }
  const DataType out_type = IsCompare(op) ? DataType::kBool : a.dtype();
  if (IsDnnFloat(a.dtype())) {
    Tensor ha, hb;
    auto af = AsFloat32(a, ha);
    if (!af.ok()) return af.status();
    auto bf = AsFloat32(b, hb);
    if (!bf.ok()) return bf.status();
    auto y = Make(*out, IsCompare(op) ? DataType::kBool : DataType::kFloat32);
    if (!y.ok()) return y.status();
    KILN_RETURN_IF_ERROR(DnnBinary(n, op, **af, **bf, *out, y->raw().data(), cancel));
    return IsCompare(op) ? std::move(*y) : FromFloat32(std::move(*y), a.dtype());
  }
  auto y = Make(*out, out_type);
  if (!y.ok()) return y.status();
  Status st = device::VisitDataType(a.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    constexpr DataType kT = decltype(tag)::kType;
    if constexpr (kT == DataType::kFloat16 || kT == DataType::kBFloat16) {
      return Err(n, "unreachable");
    } else {
      if (IsCompare(op)) {
        return BroadcastLoop(a.data<T>(), a.shape(), b.data<T>(), b.shape(), y->data<uint8_t>(), *out, cancel,
                             [op](T x, T z) { return Compare(op, x, z); });
      }
      if constexpr (kT == DataType::kBool) {
        return Err(n, "arithmetic on bool");
      } else {
        return BroadcastLoop(a.data<T>(), a.shape(), b.data<T>(), b.shape(), y->data<T>(), *out, cancel,
                             [op](T x, T z) { return Arith(op, x, z); });
      }
    }
  });
  KILN_RETURN_IF_ERROR(st);
  return y;
}

template <B op>
Out Binary(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto a = Required(n, in, 0, "first input");
  if (!a.ok()) return a.status();
  auto b = Required(n, in, 1, "second input");
  if (!b.ok()) return b.status();
  auto y = BinaryOp(n, op, **a, **b, ctx.cancel);
  if (!y.ok()) return y.status();
  return Outputs(std::move(*y));
}

// Sum / Mean (op = kAdd), Min, Max over 1..N inputs.
template <B op, bool kMean = false>
Out Variadic(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  if (in.empty() || in[0] == nullptr) return Err(n, "needs at least one input");
  Tensor acc = *in[0];
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i] == nullptr) return Err(n, "input " + std::to_string(i) + " missing");
    auto y = BinaryOp(n, op, acc, *in[i], ctx.cancel);
    if (!y.ok()) return y.status();
    acc = std::move(*y);
  }
  if constexpr (kMean) {
    const double k = 1.0 / static_cast<double>(in.size());
    if (acc.dtype() == DataType::kFloat64) {
      for (double& v : acc.span<double>()) v *= k;
    } else {
      Tensor h;
      auto f = AsFloat32(acc, h);
      if (!f.ok()) return f.status();
      Tensor y = **f;
      float* p = y.data<float>();
      KILN_RETURN_IF_ERROR(DnnGuard(n, [&] {
        const auto md = DnnDesc({y.num_elements()});
        dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_linear, md,
                                      static_cast<float>(k), 0.f);
        dnnl::eltwise_forward prim(dnnl::eltwise_forward::primitive_desc(d, DnnEngine()));
        DnnExecute(prim, {{DNNL_ARG_SRC, DnnMem(md, p)}, {DNNL_ARG_DST, DnnMem(md, p)}});
        return Status::Ok();
      }));
      auto back = FromFloat32(std::move(y), acc.dtype());
      if (!back.ok()) return back.status();
      acc = std::move(*back);
    }
  }
  return Outputs(std::move(acc));
}

// PRelu: y = x < 0 ? slope·x : x, slope broadcast to x (unidirectional, onnx PRelu-9+). float32:
// oneDNN prelu (weights of x's rank, each dim 1 or x's); float64 and integers typed.
Out PRelu(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto xr = Required(n, in, 0, "first input");
  if (!xr.ok()) return xr.status();
  auto sr = Required(n, in, 1, "slope");
  if (!sr.ok()) return sr.status();
  const Tensor& x = **xr;
  Tensor slope_in = **sr;
  if (n.opset_version < 7 && slope_in.rank() == 1 && x.rank() >= 2 && slope_in.dim(0) == x.dim(1) && x.dim(1) != 1) {
    // PRelu-6: a [C] slope is per channel (dim 1), before PRelu-7 made it numpy broadcasting.
    Shape cs(static_cast<size_t>(x.rank() - 1), 1);
    cs[0] = x.dim(1);
    auto rs = slope_in.Reshaped(cs);
    if (!rs.ok()) return rs.status();
    slope_in = std::move(*rs);
  }
  auto bs = BroadcastShape(x.shape(), slope_in.shape());
  if (!bs.ok() || *bs != x.shape()) return Err(n, "slope " + device::ShapeToString(slope_in.shape()) +
                                                   " does not broadcast to the input " + device::ShapeToString(x.shape()));
  auto slope = slope_in.CastTo(x.dtype());
  if (!slope.ok()) return slope.status();
  if (IsDnnFloat(x.dtype())) {
    Tensor hx, hs;
    auto xf = AsFloat32(x, hx);
    if (!xf.ok()) return xf.status();
    auto sf = AsFloat32(*slope, hs);
    if (!sf.ok()) return sf.status();
    auto y = Make(x.shape());
    if (!y.ok()) return y.status();
    const size_t rank = std::max<size_t>(x.shape().size(), 1);
    const Shape sx = PadRank(x.shape(), rank), sw = PadRank(slope->shape(), rank);
    int64_t row = 1, w_row = 1;
    for (size_t d = 1; d < rank; ++d) {
      row *= sx[d];
      w_row *= sw[d];
    }
    const float* px = (*xf)->data<float>();
    const float* pw = (*sf)->data<float>();
    float* py = y->data<float>();
    if (x.num_elements() > 0) {
      KILN_RETURN_IF_ERROR(DnnGuard(n, [&] {
        return ForRowChunks(sx[0], row, ctx.cancel, [&](int64_t r0, int64_t cnt) {
          Shape s0 = sx, s1 = sw;
          s0[0] = cnt;
          if (s1[0] != 1) s1[0] = cnt;
          const auto md = DnnDesc(s0), wd = DnnDesc(s1);
          dnnl::prelu_forward::desc d(dnnl::prop_kind::forward_inference, md, wd);
          dnnl::prelu_forward prim(dnnl::prelu_forward::primitive_desc(d, DnnEngine()));
          DnnExecute(prim, {{DNNL_ARG_SRC, DnnMem(md, px + r0 * row)},
                            {DNNL_ARG_WEIGHTS, DnnMem(wd, pw + (sw[0] == 1 ? 0 : r0 * w_row))},
                            {DNNL_ARG_DST, DnnMem(md, py + r0 * row)}});
          return Status::Ok();
        });
      }));
    }
    auto out = FromFloat32(std::move(*y), x.dtype());
    if (!out.ok()) return out.status();
    return Outputs(std::move(*out));
  }
  auto y = Make(x.shape(), x.dtype());
  if (!y.ok()) return y.status();
  Status st = device::VisitDataType(x.dtype(), [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    constexpr DataType kT = decltype(tag)::kType;
    if constexpr (kT == DataType::kFloat16 || kT == DataType::kBFloat16 || kT == DataType::kBool) {
      return Err(n, "unreachable");
    } else {
      return BroadcastLoop(x.data<T>(), x.shape(), slope->data<T>(), slope->shape(), y->data<T>(), x.shape(),
                           ctx.cancel, [](T v, T a) { return v < T{0} ? static_cast<T>(a * v) : v; });
    }
  });
  KILN_RETURN_IF_ERROR(st);
  return Outputs(std::move(*y));
}

// One output of the broadcast shape of all inputs (fp32 bound, kernel_util.h).
int64_t BroadcastBytes(const fe::Node&, const std::vector<Shape>& s) {
  if (s.empty()) return 0;
  Shape out = s[0];
  for (size_t i = 1; i < s.size(); ++i) {
    auto b = BroadcastShape(out, s[i]);
    if (!b.ok()) return 0;
    out = *b;
  }
  return Fp32Bytes(out);
}

constexpr DataType kF32 = DataType::kFloat32, kF16 = DataType::kFloat16, kBF16 = DataType::kBFloat16;

// float32 / float16 / bfloat16 on oneDNN, float64 and `ints` typed.
std::vector<DTypePath> Paths(std::initializer_list<DataType> ints, bool with_bool = false) {
  std::vector<DTypePath> v = DTypes({kF32, kF16, kBF16}, KernelPath::kOneDnn);
  v.push_back({DataType::kFloat64, KernelPath::kTyped});
  for (DataType t : ints) v.push_back({t, KernelPath::kTyped});
  if (with_bool) v.push_back({DataType::kBool, KernelPath::kTyped});
  return v;
}

constexpr std::initializer_list<DataType> kInts = {DataType::kInt8,   DataType::kInt16,  DataType::kInt32,
                                                   DataType::kInt64,  DataType::kUInt8,  DataType::kUInt16,
                                                   DataType::kUInt32, DataType::kUInt64};

}  // namespace

void RegisterHostKernels_binary(HostKernelRegistry& r) {
  r.Add({{"Add"}, BroadcastBytes, Binary<B::kAdd>, Paths(kInts)});
  r.Add({{"Sub"}, BroadcastBytes, Binary<B::kSub>, Paths(kInts)});
  r.Add({{"Mul"}, BroadcastBytes, Binary<B::kMul>, Paths(kInts)});
  r.Add({{"Div"}, BroadcastBytes, Binary<B::kDiv>, Paths(kInts)});
  r.Add({{"Pow"}, BroadcastBytes, Binary<B::kPow>, Paths({DataType::kInt32, DataType::kInt64})});
  r.Add({{"Min"}, BroadcastBytes, Variadic<B::kMin>, Paths(kInts)});
  r.Add({{"Max"}, BroadcastBytes, Variadic<B::kMax>, Paths(kInts)});
  r.Add({{"Sum"}, BroadcastBytes, Variadic<B::kAdd>, Paths({})});
  r.Add({{"Mean"}, BroadcastBytes, Variadic<B::kAdd, true>, Paths({})});
  r.Add({{"Equal"}, BroadcastBytes, Binary<B::kEqual>, Paths(kInts, true)});
  r.Add({{"Greater"}, BroadcastBytes, Binary<B::kGreater>, Paths(kInts)});
  r.Add({{"Less"}, BroadcastBytes, Binary<B::kLess>, Paths(kInts)});
  r.Add({{"PRelu"}, BroadcastBytes, PRelu,
         Paths({DataType::kInt32, DataType::kInt64, DataType::kUInt32, DataType::kUInt64})});
}

}  // namespace kiln::runtime::host_kernels
