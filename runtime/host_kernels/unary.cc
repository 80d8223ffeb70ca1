// Element-wise unary host kernels: Relu, Sigmoid, Tanh, Erf, Sqrt, Abs, Neg, Identity, Dropout
// (inference: the identity; a requested mask output is an empty tensor), Clip (bounds from the
// min / max attributes before opset 11 and from inputs 1 / 2 from 11 on; absent = unbounded) and
// Cast (values stay fp32: to a float type unchanged, to BOOL 0 / 1, to an integer type truncated
// toward zero; STRING / COMPLEX are INVALID_ARGUMENT). ONNX operator definitions
// (onnx/docs/Operators.md). Memory: one output shaped like the input.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/host_kernels/kernel_util.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;

template <typename F>
Out Unary(const fe::Node& n, const Tensor& x, const HostKernelContext& ctx, F f) {
  auto y = Make(x.shape());
  if (!y.ok()) return y.status();
  const float* a = x.data<float>();
  float* b = y->data<float>();
  CancelPoll poll(ctx.cancel);
  const int64_t count = x.num_elements();
  for (int64_t i0 = 0; i0 < count; i0 += kCancelPollWork) {
    const int64_t end = std::min(count, i0 + kCancelPollWork);
    for (int64_t i = i0; i < end; ++i) b[i] = f(a[i]);
    KILN_RETURN_IF_ERROR(poll.Tick(end - i0));
  }
  return Outputs(std::move(*y), n.outputs.size());
}

// A kernel applying `f` to the first input.
template <float (*f)(float)>
Out Elementwise(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto x = Required(n, in, 0, "first input");
  if (!x.ok()) return x.status();
  return Unary(n, **x, ctx, f);
}

float Relu(float v) { return v > 0.0f ? v : 0.0f; }
float Sigmoid(float v) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(v)))); }
float Tanh(float v) { return std::tanh(v); }
float Erf(float v) { return std::erf(v); }
float Sqrt(float v) { return std::sqrt(v); }
float Abs(float v) { return std::fabs(v); }
float Neg(float v) { return -v; }
float Same(float v) { return v; }

Out Clip(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto x = Required(n, in, 0, "first input");
  if (!x.ok()) return x.status();
  float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
  if (n.opset_version < 11) {
    auto mn = n.GetFloat("min", lo), mx = n.GetFloat("max", hi);
    if (!mn.ok() || !mx.ok()) return Err(n, "bad min/max");
    lo = *mn;
    hi = *mx;
  } else {
    if (const Tensor* t = In(in, 1); t != nullptr && t->num_elements() > 0) lo = t->data<float>()[0];
    if (const Tensor* t = In(in, 2); t != nullptr && t->num_elements() > 0) hi = t->data<float>()[0];
  }
  return Unary(n, **x, ctx, [lo, hi](float v) { return std::min(std::max(v, lo), hi); });
}

Out Cast(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto x = Required(n, in, 0, "first input");
  if (!x.ok()) return x.status();
  auto to = n.GetInt("to");
  if (!to.ok()) return to.status();
  const auto t = static_cast<fe::DataType>(*to);
  switch (t) {
    case fe::DataType::kFloat:
    case fe::DataType::kDouble:
    case fe::DataType::kFloat16:
    case fe::DataType::kBFloat16:
      return Unary(n, **x, ctx, [](float v) { return v; });
    case fe::DataType::kBool:
      return Unary(n, **x, ctx, [](float v) { return v != 0.0f ? 1.0f : 0.0f; });
    case fe::DataType::kString:
    case fe::DataType::kUndefined:
    case fe::DataType::kComplex64:
    case fe::DataType::kComplex128:
      return Err(n, std::string("cast to ") + fe::DataTypeName(t) + " is not supported");
    default:
      return Unary(n, **x, ctx, [](float v) { return std::trunc(v); });
  }
}

}  // namespace

void RegisterHostKernels_unary(HostKernelRegistry& r) {
  r.Add({{"Relu"}, SameAsInput0Bytes, Elementwise<Relu>});
  r.Add({{"Sigmoid"}, SameAsInput0Bytes, Elementwise<Sigmoid>});
  r.Add({{"Tanh"}, SameAsInput0Bytes, Elementwise<Tanh>});
  r.Add({{"Erf"}, SameAsInput0Bytes, Elementwise<Erf>});
  r.Add({{"Sqrt"}, SameAsInput0Bytes, Elementwise<Sqrt>});
  r.Add({{"Abs"}, SameAsInput0Bytes, Elementwise<Abs>});
  r.Add({{"Neg"}, SameAsInput0Bytes, Elementwise<Neg>});
  r.Add({{"Identity", "Dropout"}, SameAsInput0Bytes, Elementwise<Same>});
  r.Add({{"Clip"}, SameAsInput0Bytes, Clip});
  r.Add({{"Cast"}, SameAsInput0Bytes, Cast});
}

}  // namespace kiln::runtime::host_kernels
