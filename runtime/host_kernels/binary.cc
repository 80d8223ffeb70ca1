// Element-wise binary host kernels with numpy-style broadcasting (ONNX Broadcasting.md): Add,
// Sub, Mul, Div. Shapes that do not broadcast are INVALID_ARGUMENT naming the node. Memory: one
// output of the broadcast shape.
#include <algorithm>

#include "runtime/host_kernels/kernel_util.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;

template <typename F>
Out Binary(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx, F f) {
  auto xa = Required(n, in, 0, "first input");
  if (!xa.ok()) return xa.status();
  auto xb = Required(n, in, 1, "second input");
  if (!xb.ok()) return xb.status();
  const Tensor& a = **xa;
  const Tensor& b = **xb;
  auto shape = BroadcastShape(a.shape(), b.shape());
  if (!shape.ok()) return Err(n, shape.status().message());
  auto y = Make(*shape);
  if (!y.ok()) return y.status();
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* py = y->data<float>();
  CancelPoll poll(ctx.cancel);
  const int64_t count = y->num_elements();
  if (a.shape() == b.shape()) {
    for (int64_t i0 = 0; i0 < count; i0 += kCancelPollWork) {
      const int64_t end = std::min(count, i0 + kCancelPollWork);
      for (int64_t i = i0; i < end; ++i) py[i] = f(pa[i], pb[i]);
      KILN_RETURN_IF_ERROR(poll.Tick(end - i0));
    }
  } else {
    const Shape& s = *shape;
    std::vector<int64_t> sa = BroadcastStrides(a.shape(), s), sb = BroadcastStrides(b.shape(), s);
    std::vector<int64_t> idx(s.size(), 0);
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
  }
  return Outputs(std::move(*y));
}

template <float (*f)(float, float)>
Out Arithmetic(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  return Binary(n, in, ctx, f);
}

float Add(float p, float q) { return p + q; }
float Sub(float p, float q) { return p - q; }
float Mul(float p, float q) { return p * q; }
float Div(float p, float q) { return p / q; }

int64_t BroadcastBytes(const fe::Node&, const std::vector<Shape>& s) {
  if (s.size() < 2) return s.empty() ? 0 : Fp32Bytes(s[0]);
  auto b = BroadcastShape(s[0], s[1]);
  return b.ok() ? Fp32Bytes(*b) : 0;
}

}  // namespace

void RegisterHostKernels_binary(HostKernelRegistry& r) {
  r.Add({{"Add"}, BroadcastBytes, Arithmetic<Add>});
  r.Add({{"Sub"}, BroadcastBytes, Arithmetic<Sub>});
  r.Add({{"Mul"}, BroadcastBytes, Arithmetic<Mul>});
  r.Add({{"Div"}, BroadcastBytes, Arithmetic<Div>});
}

}  // namespace kiln::runtime::host_kernels
