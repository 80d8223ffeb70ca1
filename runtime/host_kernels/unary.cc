// Element-wise unary host kernels (ONNX operator definitions, onnx/docs/Operators.md).
// * oneDNN 2.6 eltwise for float32 (float16 / bfloat16 computed in float32): Relu (relu),
//   LeakyRelu (relu with alpha), Elu (elu), Selu (elu with alpha·gamma, then linear gamma),
//   Sigmoid (logistic), HardSigmoid (linear alpha, beta, then clip [0, 1]), HardSwish (hardswish:
//   x·relu6(x + 3)/6 = ONNX's alpha 1/6, beta 0.5), Tanh, Softplus (soft_relu), Exp, Sqrt,
//   Abs, Neg (linear −1), Reciprocal (pow alpha 1, beta −1), Round (round: oneDNN rounds half to
//   even, like ONNX Round and numpy.round), Clip (clip).
// * Typed, our own: Floor, Ceil, Sign, Erf (oneDNN 2.6 has no such eltwise), Log (see DnnStages); float64 for every op;
//   integer types where the schema allows them: Relu (int8..int64, opset 14), Abs, Neg, Sign, Clip
//   (every numeric type, exact; oneDNN computes integers through f32).
// * Every type: Identity and Dropout (inference: the identity, mask all true), Cast (every type to
//   every type, device::Tensor::CastTo's rules; STRING / COMPLEX are INVALID_ARGUMENT).
// Clip's bounds come from the min / max attributes before opset 11 and from inputs 1 / 2 from 11
// on (absent = unbounded); min > max gives max everywhere, as numpy.clip in onnx's reference.
// Memory: one output shaped like the input (Fp32Bytes, kernel_util.h; Cast: up to 8-byte elements).
#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/convplan/host_tensor.h"
#include "device/dtype_dispatch.h"
#include "runtime/host_kernels/kernel_util.h"
#include "runtime/host_kernels/onednn_util.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;
using device::DataType;
using alg = dnnl::algorithm;

enum class U { kRelu, kLeakyRelu, kElu, kSelu, kSigmoid, kHardSigmoid, kHardSwish, kTanh, kSoftplus, kExp, kLog,
               kSqrt, kAbs, kNeg, kReciprocal, kFloor, kCeil, kRound, kErf, kSign };

struct Attrs {
  double alpha = 0, beta = 0, gamma = 0;
};

Result<Attrs> ParseAttrs(U u, const fe::Node& n) {
  Attrs a;
  auto get = [&](const char* k, float def, double& out) -> Status {
    auto v = n.GetFloat(k, def);
    if (!v.ok()) return v.status();
    out = *v;
    return Status::Ok();
  };
  switch (u) {
    case U::kLeakyRelu: KILN_RETURN_IF_ERROR(get("alpha", 0.01f, a.alpha)); break;
    case U::kElu: KILN_RETURN_IF_ERROR(get("alpha", 1.0f, a.alpha)); break;
    case U::kSelu:
      KILN_RETURN_IF_ERROR(get("alpha", 1.67326319217681884765625f, a.alpha));
      KILN_RETURN_IF_ERROR(get("gamma", 1.05070102214813232421875f, a.gamma));
      break;
    case U::kHardSigmoid:
      KILN_RETURN_IF_ERROR(get("alpha", 0.2f, a.alpha));
      KILN_RETURN_IF_ERROR(get("beta", 0.5f, a.beta));
      break;
    default: break;
  }
  return a;
}

struct Stage {
  alg algorithm;
  float alpha = 0, beta = 0;
};

// The oneDNN eltwise chain of `u` (empty: oneDNN 2.6 has no such eltwise).
std::vector<Stage> DnnStages(U u, const Attrs& a) {
  const float al = static_cast<float>(a.alpha), be = static_cast<float>(a.beta);
  switch (u) {
    case U::kRelu: return {{alg::eltwise_relu, 0.f, 0.f}};
    case U::kLeakyRelu: return {{alg::eltwise_relu, al, 0.f}};
    case U::kElu: return {{alg::eltwise_elu, al, 0.f}};
    case U::kSelu: return {{alg::eltwise_elu, al, 0.f}, {alg::eltwise_linear, static_cast<float>(a.gamma), 0.f}};
    case U::kSigmoid: return {{alg::eltwise_logistic, 0.f, 0.f}};
    case U::kHardSigmoid: return {{alg::eltwise_linear, al, be}, {alg::eltwise_clip, 0.f, 1.f}};
    case U::kHardSwish: return {{alg::eltwise_hardswish, 0.f, 0.f}};
    case U::kTanh: return {{alg::eltwise_tanh, 0.f, 0.f}};
    case U::kSoftplus: return {{alg::eltwise_soft_relu, 0.f, 0.f}};
    case U::kExp: return {{alg::eltwise_exp, 0.f, 0.f}};
    case U::kSqrt: return {{alg::eltwise_sqrt, 0.f, 0.f}};
    case U::kAbs: return {{alg::eltwise_abs, 0.f, 0.f}};
    case U::kNeg: return {{alg::eltwise_linear, -1.f, 0.f}};
    case U::kReciprocal: return {{alg::eltwise_pow, 1.f, -1.f}};
    case U::kRound: return {{alg::eltwise_round, 0.f, 0.f}};
    // Log: oneDNN's jit log gives log(1) = -1.4e-6, outside onnx's backend-test atol 1e-7
    // (node/test_log_example), so std::log.
    case U::kLog: case U::kFloor: case U::kCeil: case U::kErf: case U::kSign: return {};
  }
  return {};
}

// ONNX's definition of `u` in double (the typed path for floating types).
double ApplyF(U u, double x, const Attrs& a) {
  switch (u) {
    case U::kRelu: return x > 0 ? x : 0;
    case U::kLeakyRelu: return x >= 0 ? x : a.alpha * x;
    case U::kElu: return x >= 0 ? x : a.alpha * (std::exp(x) - 1);
    case U::kSelu: return x > 0 ? a.gamma * x : a.gamma * a.alpha * (std::exp(x) - 1);
    case U::kSigmoid: return 1 / (1 + std::exp(-x));
    case U::kHardSigmoid: return std::clamp(a.alpha * x + a.beta, 0.0, 1.0);
    case U::kHardSwish: return x * std::clamp(x / 6 + 0.5, 0.0, 1.0);
    case U::kTanh: return std::tanh(x);
    case U::kSoftplus: return std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0);
    case U::kExp: return std::exp(x);
    case U::kLog: return std::log(x);
    case U::kSqrt: return std::sqrt(x);
    case U::kAbs: return std::fabs(x);
    case U::kNeg: return -x;
    case U::kReciprocal: return 1 / x;
    case U::kFloor: return std::floor(x);
    case U::kCeil: return std::ceil(x);
    case U::kRound: return std::nearbyint(x);  // default rounding mode: half to even
    case U::kErf: return std::erf(x);
    case U::kSign: return std::isnan(x) ? x : static_cast<double>((x > 0) - (x < 0));
  }
  return x;
}

// Integer forms (Relu, Abs, Neg, Sign), exact in the element type (Neg wraps like numpy).
template <typename T>
T ApplyI(U u, T x) {
  switch (u) {
    case U::kRelu: return x > 0 ? x : T{0};
    case U::kAbs:
      if constexpr (std::is_signed_v<T>) return x < 0 ? static_cast<T>(-x) : x;
      return x;
    case U::kNeg: return static_cast<T>(T{0} - x);
    case U::kSign: return static_cast<T>((x > T{0}) - (x < T{0}));
    default: return x;
  }
}

// Applies `f` to every element (typed path), checking the cancel token.
template <typename T, typename F>
Status MapTyped(const T* a, T* b, int64_t count, const device::CancelToken* cancel, F f) {
  return ForRowChunks(count, 1, cancel, [&](int64_t i0, int64_t n) {
    for (int64_t i = i0; i < i0 + n; ++i) b[i] = f(a[i]);
    return Status::Ok();
  });
}

// oneDNN eltwise chain over a float32 buffer (in place when src == dst), in cancellable chunks.
Status DnnEltwise(const fe::Node& n, const std::vector<Stage>& stages, const float* src, float* dst, int64_t count,
                  const device::CancelToken* cancel) {
  return DnnGuard(n, [&] {
    return ForRowChunks(count, 1, cancel, [&](int64_t i0, int64_t len) {
      const dnnl::memory::desc md = DnnDesc({len});
      for (size_t s = 0; s < stages.size(); ++s) {
        dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, stages[s].algorithm, md, stages[s].alpha,
                                      stages[s].beta);
        dnnl::eltwise_forward prim(dnnl::eltwise_forward::primitive_desc(d, DnnEngine()));
        DnnExecute(prim, {{DNNL_ARG_SRC, DnnMem(md, (s == 0 ? src : dst) + i0)}, {DNNL_ARG_DST, DnnMem(md, dst + i0)}});
      }
      return Status::Ok();
    });
  });
}

// Float types: oneDNN when `stages` is non-empty, else `f` per element in double.
template <typename F>
Out FloatUnary(const fe::Node& n, const Tensor& x, const HostKernelContext& ctx, const std::vector<Stage>& stages,
               F f) {
  if (x.dtype() == DataType::kFloat64) {
    auto y = Make(x.shape(), DataType::kFloat64);
    if (!y.ok()) return y.status();
    KILN_RETURN_IF_ERROR(MapTyped(x.data<double>(), y->data<double>(), x.num_elements(), ctx.cancel, f));
    return Outputs(std::move(*y), n.outputs.size());
  }
  Tensor holder;
  auto xf = AsFloat32(x, holder);
  if (!xf.ok()) return xf.status();
  auto y = Make(x.shape());
  if (!y.ok()) return y.status();
  if (!stages.empty()) {
    KILN_RETURN_IF_ERROR(DnnEltwise(n, stages, (*xf)->data<float>(), y->data<float>(), x.num_elements(), ctx.cancel));
  } else {
    KILN_RETURN_IF_ERROR(MapTyped((*xf)->data<float>(), y->data<float>(), x.num_elements(), ctx.cancel,
                                  [&](float v) { return static_cast<float>(f(static_cast<double>(v))); }));
  }
  auto out = FromFloat32(std::move(*y), x.dtype());
  if (!out.ok()) return out.status();
  return Outputs(std::move(*out), n.outputs.size());
}

template <U u>
Out Elementwise(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto x = Required(n, in, 0, "first input");
  if (!x.ok()) return x.status();
  auto attrs = ParseAttrs(u, n);
  if (!attrs.ok()) return attrs.status();
  const Attrs a = *attrs;
  const Tensor& t = **x;
  if (device::IsIntegral(t.dtype())) {
    return device::VisitDataType(t.dtype(), [&](auto tag) -> Out {
      using T = typename decltype(tag)::type;
      if constexpr (device::IsIntegral(decltype(tag)::kType)) {
        auto y = Make(t.shape(), t.dtype());
        if (!y.ok()) return y.status();
        KILN_RETURN_IF_ERROR(
            MapTyped(t.data<T>(), y->template data<T>(), t.num_elements(), ctx.cancel, [](T v) { return ApplyI(u, v); }));
        return Outputs(std::move(*y), n.outputs.size());
      } else {
        return Err(n, "unreachable");
      }
    });
  }
  return FloatUnary(n, t, ctx, DnnStages(u, a), [a](double v) { return ApplyF(u, v, a); });
}

template <typename T>
T BoundOf(const Tensor* t, T fallback) {
  if (t == nullptr || t->num_elements() == 0) return fallback;
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(IntsOf(*t)[0]);
  } else {
    auto f = t->CastTo(DataType::kFloat64);
    return f.ok() ? static_cast<T>(f->data<double>()[0]) : fallback;
  }
}

Out Clip(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto x = Required(n, in, 0, "first input");
  if (!x.ok()) return x.status();
  const Tensor& t = **x;
  if (n.opset_version < 11) {
    const float inf = std::numeric_limits<float>::infinity();
    auto mn = n.GetFloat("min", -inf), mx = n.GetFloat("max", inf);
    if (!mn.ok() || !mx.ok()) return Err(n, "bad min/max");
    const float lo = *mn, hi = *mx;
    if (lo <= hi) return FloatUnary(n, t, ctx, {{alg::eltwise_clip, lo, hi}}, [](double v) { return v; });
    return FloatUnary(n, t, ctx, {}, [hi](double) { return static_cast<double>(hi); });
  }
  if (device::IsIntegral(t.dtype())) {
    return device::VisitDataType(t.dtype(), [&](auto tag) -> Out {
      using T = typename decltype(tag)::type;
      const T lo = BoundOf<T>(In(in, 1), std::numeric_limits<T>::lowest());
      const T hi = BoundOf<T>(In(in, 2), std::numeric_limits<T>::max());
      auto y = Make(t.shape(), t.dtype());
      if (!y.ok()) return y.status();
      if constexpr (device::IsIntegral(decltype(tag)::kType)) {
        KILN_RETURN_IF_ERROR(MapTyped(t.data<T>(), y->template data<T>(), t.num_elements(), ctx.cancel,
                                      [lo, hi](T v) { return std::min(std::max(v, lo), hi); }));
      }
      return Outputs(std::move(*y), n.outputs.size());
    });
  }
  const double inf = std::numeric_limits<double>::infinity();
  const double lo = BoundOf<double>(In(in, 1), -inf), hi = BoundOf<double>(In(in, 2), inf);
  std::vector<Stage> stages;
  if (lo <= hi) stages.push_back({alg::eltwise_clip, static_cast<float>(lo), static_cast<float>(hi)});
  return FloatUnary(n, t, ctx, stages, [lo, hi](double v) { return std::min(std::max(v, lo), hi); });
}

Out Cast(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext&) {
  auto x = Required(n, in, 0, "first input");
  if (!x.ok()) return x.status();
  auto to = n.GetInt("to");
  if (!to.ok()) return to.status();
  auto t = convplan::HostDataType(static_cast<fe::DataType>(*to));
  if (!t.ok()) return Err(n, "cast target " + t.status().message());
  auto y = (*x)->CastTo(*t);
  if (!y.ok()) return y.status();
  return Outputs(std::move(*y), n.outputs.size());
}

// Identity, and Dropout in inference or with ratio 0 (onnx Dropout-12/13: output = input,
// mask = all true; compiler/onnx/load_build.cc refuses the random training-mode forms).
Out Copy(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext&) {
  auto x = Required(n, in, 0, "first input");
  if (!x.ok()) return x.status();
  if (n.op_type == "Dropout") {
    // Run-time ratio / training_mode (the loader refuses constant random forms): training with a
    // ratio other than 0 draws a random mask, which Kiln does not emulate.
    auto scalar = [&](size_t i, double fallback) -> double {
      const Tensor* t = In(in, i);
      if (t == nullptr || t->num_elements() == 0) return fallback;
      auto f = t->CastTo(DataType::kFloat64);
      return f.ok() ? f->data<double>()[0] : fallback;
    };
    if (scalar(2, 0.0) != 0.0 && scalar(1, 0.5) != 0.0) {
      return FailedPrecondition(n.Describe() + ": training-mode Dropout with a non-zero ratio draws a random "
                                "mask; Kiln computes inference");
    }
  }
  std::vector<Tensor> out = Outputs(Tensor(**x), n.outputs.size());
  if (n.op_type == "Dropout" && n.outputs.size() > 1 && !n.outputs[1].empty()) {
    auto mask = Make((*x)->shape(), DataType::kBool);
    if (!mask.ok()) return mask.status();
    std::fill(mask->raw().begin(), mask->raw().end(), std::byte{1});
    out[1] = std::move(*mask);
  }
  return out;
}

// A Cast output has at most 8-byte elements.
int64_t CastBytes(const fe::Node&, const std::vector<Shape>& s) { return s.empty() ? 0 : TensorBytes(s[0], 8); }

constexpr DataType kF32 = DataType::kFloat32, kF16 = DataType::kFloat16, kBF16 = DataType::kBFloat16,
                   kF64 = DataType::kFloat64;

// float32 / float16 / bfloat16 on `path`, float64 typed, plus `ints` typed.
std::vector<DTypePath> FloatPaths(KernelPath path, std::initializer_list<DataType> ints = {}) {
  std::vector<DTypePath> v = DTypes({kF32, kF16, kBF16}, path);
  v.push_back({kF64, KernelPath::kTyped});
  for (DataType t : ints) v.push_back({t, KernelPath::kTyped});
  return v;
}

constexpr std::initializer_list<DataType> kSignedInts = {DataType::kInt8, DataType::kInt16, DataType::kInt32,
                                                         DataType::kInt64};
constexpr std::initializer_list<DataType> kAllInts = {DataType::kInt8,   DataType::kInt16,  DataType::kInt32,
                                                      DataType::kInt64,  DataType::kUInt8,  DataType::kUInt16,
                                                      DataType::kUInt32, DataType::kUInt64};

}  // namespace

void RegisterHostKernels_unary(HostKernelRegistry& r) {
  const KernelPath dnn = KernelPath::kOneDnn, typed = KernelPath::kTyped;
  r.Add({{"Relu"}, SameAsInput0Bytes, Elementwise<U::kRelu>, FloatPaths(dnn, kSignedInts)});
  r.Add({{"LeakyRelu"}, SameAsInput0Bytes, Elementwise<U::kLeakyRelu>, FloatPaths(dnn)});
  r.Add({{"Elu"}, SameAsInput0Bytes, Elementwise<U::kElu>, FloatPaths(dnn)});
  r.Add({{"Selu"}, SameAsInput0Bytes, Elementwise<U::kSelu>, FloatPaths(dnn)});
  r.Add({{"Sigmoid"}, SameAsInput0Bytes, Elementwise<U::kSigmoid>, FloatPaths(dnn)});
  r.Add({{"HardSigmoid"}, SameAsInput0Bytes, Elementwise<U::kHardSigmoid>, FloatPaths(dnn)});
  r.Add({{"HardSwish"}, SameAsInput0Bytes, Elementwise<U::kHardSwish>, FloatPaths(dnn)});
  r.Add({{"Tanh"}, SameAsInput0Bytes, Elementwise<U::kTanh>, FloatPaths(dnn)});
  r.Add({{"Softplus"}, SameAsInput0Bytes, Elementwise<U::kSoftplus>, FloatPaths(dnn)});
  r.Add({{"Exp"}, SameAsInput0Bytes, Elementwise<U::kExp>, FloatPaths(dnn)});
  r.Add({{"Log"}, SameAsInput0Bytes, Elementwise<U::kLog>, FloatPaths(typed)});
  r.Add({{"Sqrt"}, SameAsInput0Bytes, Elementwise<U::kSqrt>, FloatPaths(dnn)});
  r.Add({{"Abs"}, SameAsInput0Bytes, Elementwise<U::kAbs>, FloatPaths(dnn, kAllInts)});
  r.Add({{"Neg"}, SameAsInput0Bytes, Elementwise<U::kNeg>, FloatPaths(dnn, kSignedInts)});
  r.Add({{"Reciprocal"}, SameAsInput0Bytes, Elementwise<U::kReciprocal>, FloatPaths(dnn)});
  r.Add({{"Round"}, SameAsInput0Bytes, Elementwise<U::kRound>, FloatPaths(dnn)});
  r.Add({{"Floor"}, SameAsInput0Bytes, Elementwise<U::kFloor>, FloatPaths(typed)});
  r.Add({{"Ceil"}, SameAsInput0Bytes, Elementwise<U::kCeil>, FloatPaths(typed)});
  r.Add({{"Erf"}, SameAsInput0Bytes, Elementwise<U::kErf>, FloatPaths(typed)});
  r.Add({{"Sign"}, SameAsInput0Bytes, Elementwise<U::kSign>, FloatPaths(typed, kAllInts)});
  r.Add({{"Clip"}, SameAsInput0Bytes, Clip, FloatPaths(dnn, kAllInts)});
  r.Add({{"Identity", "Dropout"}, SameAsInput0Bytes, Copy, AllDTypes(typed)});
  r.Add({{"Cast"}, CastBytes, Cast, AllDTypes(typed)});
}

}  // namespace kiln::runtime::host_kernels
