// Normalisation host kernels (ONNX operator definitions): BatchNormalization in inference form
// (y = (x − mean) · scale / sqrt(var + epsilon) + B per channel of dim 1; training outputs are
// empty tensors) and Softmax (over the 2-D coercion at `axis`, default 1, before opset 13; along
// `axis`, default −1, from 13 on; max-subtracted, double accumulation). Memory: one output shaped
// like the input.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/host_kernels/kernel_util.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;

Out BatchNorm(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  for (size_t i = 0; i < 5; ++i) {
    if (In(in, i) == nullptr) return Err(n, "missing input");
  }
  const Tensor& x = *in[0];
  if (x.rank() < 2) return Err(n, "input must have rank >= 2");
  const int64_t C = x.dim(1);
  for (size_t i = 1; i < 5; ++i) {
    if (in[i]->num_elements() != C) return Err(n, "parameters must have C values");
  }
  auto eps = n.GetFloat("epsilon", 1e-5f);
  if (!eps.ok()) return eps.status();
  auto y = Make(x.shape());
  if (!y.ok()) return y.status();
  int64_t inner = 1;
  for (int d = 2; d < x.rank(); ++d) inner *= x.dim(d);
  const float *s = in[1]->data<float>(), *b = in[2]->data<float>(), *m = in[3]->data<float>(), *v = in[4]->data<float>();
  CancelPoll poll(ctx.cancel);
  for (int64_t nn = 0; nn < x.dim(0); ++nn) {
    for (int64_t c = 0; c < C; ++c) {
      KILN_RETURN_IF_ERROR(poll.Tick(inner));
      const double f = s[c] / std::sqrt(static_cast<double>(v[c]) + *eps);
      const float* px = x.data<float>() + (nn * C + c) * inner;
      float* py = y->data<float>() + (nn * C + c) * inner;
      for (int64_t k = 0; k < inner; ++k) py[k] = static_cast<float>((px[k] - m[c]) * f + b[c]);
    }
  }
  std::vector<Tensor> out;
  out.push_back(std::move(*y));
  for (size_t k = 1; k < n.outputs.size(); ++k) out.emplace_back();
  return out;
}

Out Softmax(const fe::Node& n, const Tensor& x, const HostKernelContext& ctx) {
  const int64_t def = n.opset_version >= 13 ? -1 : 1;
  auto axis = n.GetInt("axis", def);
  if (!axis.ok()) return axis.status();
  const int64_t a = NormAxis(*axis, x.rank());
  if (a < 0 || a >= std::max(x.rank(), 1)) return Err(n, "axis out of range");
  int64_t outer = 1, len = 1, inner = 1;
  if (n.opset_version >= 13) {
    for (int64_t d = 0; d < a; ++d) outer *= x.dim(static_cast<int>(d));
    len = x.dim(static_cast<int>(a));
    for (int64_t d = a + 1; d < x.rank(); ++d) inner *= x.dim(static_cast<int>(d));
  } else {
    for (int64_t d = 0; d < a; ++d) outer *= x.dim(static_cast<int>(d));
    for (int64_t d = a; d < x.rank(); ++d) len *= x.dim(static_cast<int>(d));
  }
  auto y = Make(x.shape());
  if (!y.ok()) return y.status();
  const float* p = x.data<float>();
  float* q = y->data<float>();
  CancelPoll poll(ctx.cancel);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      KILN_RETURN_IF_ERROR(poll.Tick(3 * len));
      const int64_t base = o * len * inner + i;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < len; ++k) mx = std::max(mx, p[base + k * inner]);
      double sum = 0;
      for (int64_t k = 0; k < len; ++k) sum += std::exp(static_cast<double>(p[base + k * inner] - mx));
      for (int64_t k = 0; k < len; ++k) {
        q[base + k * inner] = static_cast<float>(std::exp(static_cast<double>(p[base + k * inner] - mx)) / sum);
      }
    }
  }
  std::vector<Tensor> out;
  out.push_back(std::move(*y));
  return out;
}

}  // namespace

void RegisterHostKernels_normalization(HostKernelRegistry& r) {
  r.Add({{"BatchNormalization"}, SameAsInput0Bytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto x = Required(n, in, 0, "first input");
           if (!x.ok()) return x.status();
           return BatchNorm(n, in, ctx);
         }});
  r.Add({{"Softmax"}, SameAsInput0Bytes,
         [](const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) -> Out {
           auto x = Required(n, in, 0, "first input");
           if (!x.ok()) return x.status();
           return Softmax(n, **x, ctx);
         }});
}

}  // namespace kiln::runtime::host_kernels
