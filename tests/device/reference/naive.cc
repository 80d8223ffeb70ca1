#include "tests/device/reference/naive.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <vector>

namespace kiln::device::testing {
namespace {

Tensor MakeOrDie(std::vector<int64_t> shape) {
  auto t = Tensor::Zeros(std::move(shape));
  if (!t.ok()) std::abort();
  return std::move(*t);
}

}  // namespace

Tensor NaiveConv2d(const Tensor& x, const Tensor& w, const Tensor* b, const Conv2dParams& p) {
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t O = w.dim(0), Cg = w.dim(1), KH = w.dim(2), KW = w.dim(3);
  const int64_t G = p.group, Og = O / G;
  const int64_t OH = (H + p.pads[0] + p.pads[2] - ((KH - 1) * p.dilations[0] + 1)) / p.strides[0] + 1;
  const int64_t OW = (W + p.pads[1] + p.pads[3] - ((KW - 1) * p.dilations[1] + 1)) / p.strides[1] + 1;
  Tensor y = MakeOrDie({N, O, OH, OW});
  const float* xd = x.data<float>();
  const float* wd = w.data<float>();
  float* yd = y.data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      const int64_t g = o / Og;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = b ? b->data<float>()[o] : 0.0;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < KH; ++kh) {
              const int64_t ih = oh * p.strides[0] - p.pads[0] + kh * p.dilations[0];
              if (ih < 0 || ih >= H) continue;
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t iw = ow * p.strides[1] - p.pads[1] + kw * p.dilations[1];
                if (iw < 0 || iw >= W) continue;
                acc += static_cast<double>(xd[((n * C + g * Cg + c) * H + ih) * W + iw]) *
                       wd[((o * Cg + c) * KH + kh) * KW + kw];
              }
            }
          yd[((n * O + o) * OH + oh) * OW + ow] = ApplyActivation(p.activation, static_cast<float>(acc));
        }
    }
  (void)C;
  return y;
}

Tensor NaiveConvTranspose2d(const Tensor& x, const Tensor& w, const Tensor* b, const ConvTranspose2dParams& p) {
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t Og = w.dim(1), KH = w.dim(2), KW = w.dim(3);
  const int64_t G = p.group, Cg = C / G, O = Og * G;
  const int64_t OH = p.strides[0] * (H - 1) + p.output_padding[0] + (KH - 1) * p.dilations[0] + 1 - p.pads[0] - p.pads[2];
  const int64_t OW = p.strides[1] * (W - 1) + p.output_padding[1] + (KW - 1) * p.dilations[1] + 1 - p.pads[1] - p.pads[3];
  std::vector<double> acc(static_cast<std::size_t>(N * O * OH * OW), 0.0);
  const float* xd = x.data<float>();
  const float* wd = w.data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t g = c / Cg;
      for (int64_t ih = 0; ih < H; ++ih)
        for (int64_t iw = 0; iw < W; ++iw) {
          const double v = xd[((n * C + c) * H + ih) * W + iw];
          for (int64_t oo = 0; oo < Og; ++oo)
            for (int64_t kh = 0; kh < KH; ++kh) {
              const int64_t oh = ih * p.strides[0] - p.pads[0] + kh * p.dilations[0];
              if (oh < 0 || oh >= OH) continue;
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t ow = iw * p.strides[1] - p.pads[1] + kw * p.dilations[1];
                if (ow < 0 || ow >= OW) continue;
                acc[static_cast<std::size_t>(((n * O + g * Og + oo) * OH + oh) * OW + ow)] +=
                    v * wd[((c * Og + oo) * KH + kh) * KW + kw];
              }
            }
        }
    }
  Tensor y = MakeOrDie({N, O, OH, OW});
  float* yd = y.data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < OH * OW; ++i) {
        const std::size_t idx = static_cast<std::size_t>((n * O + o) * OH * OW + i);
        yd[idx] = ApplyActivation(p.activation, static_cast<float>(acc[idx] + (b ? b->data<float>()[o] : 0.0)));
      }
  return y;
}

Tensor NaivePool2d(const Tensor& x, const Pool2dParams& p) {
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t in[2] = {H, W};
  int64_t out[2];
  for (int i = 0; i < 2; ++i) {
    const int64_t dk = (p.kernel[i] - 1) * p.dilations[i] + 1;
    const int64_t span = in[i] + p.pads[i] + p.pads[2 + i] - dk;
    out[i] = (p.ceil_mode ? (span + p.strides[i] - 1) / p.strides[i] : span / p.strides[i]) + 1;
    if (p.ceil_mode && (out[i] - 1) * p.strides[i] >= in[i] + p.pads[i]) --out[i];
  }
  Tensor y = MakeOrDie({N, C, out[0], out[1]});
  const float* xd = x.data<float>();
  float* yd = y.data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t oh = 0; oh < out[0]; ++oh)
        for (int64_t ow = 0; ow < out[1]; ++ow) {
          double mx = -std::numeric_limits<double>::infinity(), sum = 0;
          int64_t valid = 0, padded = 0;
          for (int64_t kh = 0; kh < p.kernel[0]; ++kh) {
            const int64_t ih = oh * p.strides[0] - p.pads[0] + kh * p.dilations[0];
            for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
              const int64_t iw = ow * p.strides[1] - p.pads[1] + kw * p.dilations[1];
              const bool in_padded = ih >= -p.pads[0] && ih < H + p.pads[2] && iw >= -p.pads[1] && iw < W + p.pads[3];
              if (in_padded) ++padded;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              const double v = xd[((n * C + c) * H + ih) * W + iw];
              mx = std::max(mx, v);
              sum += v;
              ++valid;
            }
          }
          double r;
          if (p.kind == PoolKind::kMax) r = mx;
          else r = sum / static_cast<double>(p.count_include_pad ? padded : valid);
          yd[((n * C + c) * out[0] + oh) * out[1] + ow] = static_cast<float>(r);
        }
  return y;
}

}  // namespace kiln::device::testing
