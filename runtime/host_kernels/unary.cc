// Element-wise unary host kernels: Relu, Sigmoid, Tanh, Erf, Sqrt, Abs, Neg (fp32), Identity and
// Dropout (inference: the identity, mask all true; every type), Clip (bounds from the min / max
// attributes before opset 11 and from inputs 1 / 2 from 11 on; absent = unbounded) and Cast (every
// type to every type, device::Tensor::CastTo's rules; STRING / COMPLEX are INVALID_ARGUMENT). ONNX operator definitions
// (onnx/docs/Operators.md). Memory: one output shaped like the input.
#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/convplan/host_tensor.h"
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
    for (int k : {1, 2}) {
      const Tensor* t = In(in, k);
      if (t == nullptr || t->num_elements() == 0) continue;
      auto f = t->ToFloat32();
      if (!f.ok()) return f.status();
      (k == 1 ? lo : hi) = f->data<float>()[0];
    }
  }
  return Unary(n, **x, ctx, [lo, hi](float v) { return std::min(std::max(v, lo), hi); });
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

// Identity, and Dropout in inference (onnx Dropout-12/13: training_mode false → output = input,
// mask = all true).
Out Copy(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext&) {
  auto x = Required(n, in, 0, "first input");
  if (!x.ok()) return x.status();
  std::vector<Tensor> out = Outputs(Tensor(**x), n.outputs.size());
  if (n.op_type == "Dropout" && n.outputs.size() > 1 && !n.outputs[1].empty()) {
    auto mask = Make((*x)->shape(), device::DataType::kBool);
    if (!mask.ok()) return mask.status();
    std::fill(mask->raw().begin(), mask->raw().end(), std::byte{1});
    out[1] = std::move(*mask);
  }
  return out;
}

// A Cast output has at most 8-byte elements.
int64_t CastBytes(const fe::Node&, const std::vector<Shape>& s) { return s.empty() ? 0 : TensorBytes(s[0], 8); }

}  // namespace

void RegisterHostKernels_unary(HostKernelRegistry& r) {
  r.Add({{"Relu"}, SameAsInput0Bytes, Elementwise<Relu>});
  r.Add({{"Sigmoid"}, SameAsInput0Bytes, Elementwise<Sigmoid>});
  r.Add({{"Tanh"}, SameAsInput0Bytes, Elementwise<Tanh>});
  r.Add({{"Erf"}, SameAsInput0Bytes, Elementwise<Erf>});
  r.Add({{"Sqrt"}, SameAsInput0Bytes, Elementwise<Sqrt>});
  r.Add({{"Abs"}, SameAsInput0Bytes, Elementwise<Abs>});
  r.Add({{"Neg"}, SameAsInput0Bytes, Elementwise<Neg>});
  r.Add({{"Identity", "Dropout"}, SameAsInput0Bytes, Copy, AllDTypes(KernelPath::kTyped)});
  r.Add({{"Clip"}, SameAsInput0Bytes, Clip});
  r.Add({{"Cast"}, CastBytes, Cast, AllDTypes(KernelPath::kTyped)});
}

}  // namespace kiln::runtime::host_kernels
