// Normalisation host kernels (ONNX operator definitions, onnx/docs/Operators.md), float32 through
// oneDNN 2.6 (float16 / bfloat16 computed in float32), float64 typed where registered:
// * BatchNormalization, inference: y = (x − mean)·scale/sqrt(var + epsilon) + B per channel of
//   dim 1 (oneDNN batch_normalization with global stats, scale and shift; x viewed as [N, C, rest, 1]).
//   Training (training_mode = 1 from opset 14, or running / saved statistics outputs requested
//   before 14) is FAILED_PRECONDITION naming the node: Kiln computes inference only.
// * InstanceNormalization: per (n, c) over the spatial dims, population variance (oneDNN
//   batch_normalization computing its statistics on [1, N·C, rest], scale / B repeated per n).
// * LayerNormalization (opset 17): normalises over dims [axis, rank) (axis default −1); Scale and
//   B broadcast to those dims; optional outputs Mean and InvStdDev (float32, stash_type 1), shaped
//   like X with the normalised dims set to 1 (oneDNN layer_normalization over [outer, inner]).
// * LRN: y = x / (bias + alpha/size · Σ x²)^beta over channels c − ⌊(size−1)/2⌋ … c + ⌈(size−1)/2⌉
//   (oneDNN lrn_across_channels for odd size; oneDNN centres an even window symmetrically, unlike
//   ONNX, so even sizes and float64 are typed).
// * Softmax / LogSoftmax: over the 2-D coercion at `axis` (default 1) before opset 13, along `axis`
//   (default −1) from 13 on (oneDNN softmax_v2, softmax_accurate / softmax_log); float64 typed,
//   max-subtracted.
// Each chunks its oneDNN calls along the outer dimension and checks the cancel token between them.
// Memory: one output shaped like the input (plus float32 copies of float16 / bfloat16 data).
#include <algorithm>
#include <cmath>
#include <limits>

#include "device/dtype_dispatch.h"
#include "runtime/host_kernels/kernel_util.h"
#include "runtime/host_kernels/onednn_util.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;
using device::DataType;
using nf = dnnl::normalization_flags;

// `t` as float32 values (any floating type).
Result<std::vector<float>> Floats(const Tensor& t) {
  auto f = t.CastTo(DataType::kFloat32);
  if (!f.ok()) return f.status();
  return std::vector<float>(f->span<float>().begin(), f->span<float>().end());
}

int64_t Prod(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t d = from; d < to && d < s.size(); ++d) p *= s[d];
  return p;
}

// oneDNN batch normalization over rows of x viewed as [rows, C, S] (chunked along rows).
// global: use mean / var; else statistics from the data (rows must then be 1 per call).
Status DnnBatchNorm(const fe::Node& n, const float* x, float* y, int64_t rows, int64_t C, int64_t S,
                    const float* scale, const float* shift, const float* mean, const float* var, float eps,
                    bool global, const device::CancelToken* cancel) {
  return DnnGuard(n, [&] {
    const int64_t per_call = global ? rows : 1;
    return ForRowChunks(global ? rows : rows, C * S, cancel, [&](int64_t r0, int64_t cnt) {
      for (int64_t k = 0; k < cnt; k += per_call) {
        const int64_t m = std::min(per_call, cnt - k);
        const auto md = DnnDesc({m, C, S, 1});  // 4-D: oneDNN 2.6 has its ncsp jit bnorm for nchw, only ref for ncw
        const auto cd = DnnDesc({C});
        nf flags = nf::use_scale | nf::use_shift;
        if (global) flags = flags | nf::use_global_stats;
        dnnl::batch_normalization_forward::desc d(dnnl::prop_kind::forward_inference, md, eps, flags);
        dnnl::batch_normalization_forward prim(dnnl::batch_normalization_forward::primitive_desc(d, DnnEngine()));
        const int64_t off = (r0 + k) * C * S;
        const int64_t coff = global ? 0 : (r0 + k) * C;
        std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, DnnMem(md, x + off)},
                                                      {DNNL_ARG_DST, DnnMem(md, y + off)},
                                                      {DNNL_ARG_SCALE, DnnMem(cd, scale + coff)},
                                                      {DNNL_ARG_SHIFT, DnnMem(cd, shift + coff)}};
        if (global) {
          args[DNNL_ARG_MEAN] = DnnMem(cd, mean);
          args[DNNL_ARG_VARIANCE] = DnnMem(cd, var);
        }
        DnnExecute(prim, args);
      }
      return Status::Ok();
    });
  });
}

Out BatchNorm(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  for (size_t i = 0; i < 5; ++i) {
    if (In(in, i) == nullptr) return Err(n, "missing input");
  }
  auto training = n.GetInt("training_mode", 0);
  if (!training.ok()) return training.status();
  bool stats_out = false;
  for (size_t k = 1; k < n.outputs.size(); ++k) stats_out = stats_out || !n.outputs[k].empty();
  if (*training != 0 || stats_out) {
    return Status(StatusCode::kFailedPrecondition,
                  n.Describe() + ": training-mode BatchNormalization (batch statistics, running / saved "
                                 "statistics outputs) is not supported; Kiln computes inference only");
  }
  const Tensor& x = *in[0];
  if (x.rank() < 2) return Err(n, "input must have rank >= 2");
  const int64_t C = x.dim(1);
  for (size_t i = 1; i < 5; ++i) {
    if (in[i]->num_elements() != C) return Err(n, "parameters must have C values");
  }
  auto eps = n.GetFloat("epsilon", 1e-5f);
  if (!eps.ok()) return eps.status();
  std::vector<float> p[4];
  for (size_t i = 0; i < 4; ++i) {
    auto f = Floats(*in[i + 1]);
    if (!f.ok()) return f.status();
    p[i] = std::move(*f);
  }
  const int64_t S = Prod(x.shape(), 2, x.shape().size());
  if (x.dtype() == DataType::kFloat64) {
    auto y = Make(x.shape(), DataType::kFloat64);
    if (!y.ok()) return y.status();
    CancelPoll poll(ctx.cancel);
    for (int64_t nn = 0; nn < x.dim(0); ++nn) {
      for (int64_t c = 0; c < C; ++c) {
        KILN_RETURN_IF_ERROR(poll.Tick(S));
        const double f = p[0][c] / std::sqrt(static_cast<double>(p[3][c]) + *eps);
        const double* px = x.data<double>() + (nn * C + c) * S;
        double* py = y->data<double>() + (nn * C + c) * S;
        for (int64_t k = 0; k < S; ++k) py[k] = (px[k] - p[2][c]) * f + p[1][c];
      }
    }
    return Outputs(std::move(*y), n.outputs.size());
  }
  Tensor h;
  auto xf = AsFloat32(x, h);
  if (!xf.ok()) return xf.status();
  auto y = Make(x.shape());
  if (!y.ok()) return y.status();
  if (x.num_elements() > 0) {
    KILN_RETURN_IF_ERROR(DnnBatchNorm(n, (*xf)->data<float>(), y->data<float>(), x.dim(0), C, S, p[0].data(),
                                      p[1].data(), p[2].data(), p[3].data(), *eps, true, ctx.cancel));
  }
  auto out = FromFloat32(std::move(*y), x.dtype());
  if (!out.ok()) return out.status();
  return Outputs(std::move(*out), n.outputs.size());
}

Out InstanceNorm(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  for (size_t i = 0; i < 3; ++i) {
    if (In(in, i) == nullptr) return Err(n, "missing input");
  }
  const Tensor& x = *in[0];
  if (x.rank() < 3) return Err(n, "input must have rank >= 3");
  const int64_t N = x.dim(0), C = x.dim(1), S = Prod(x.shape(), 2, x.shape().size());
  if (in[1]->num_elements() != C || in[2]->num_elements() != C) return Err(n, "scale and B must have C values");
  auto eps = n.GetFloat("epsilon", 1e-5f);
  if (!eps.ok()) return eps.status();
  auto sc = Floats(*in[1]);
  auto sh = Floats(*in[2]);
  if (!sc.ok()) return sc.status();
  if (!sh.ok()) return sh.status();
  std::vector<float> scale, shift;  // repeated per n: the statistics run over [1, N·C, S]
  for (int64_t k = 0; k < N; ++k) {
    scale.insert(scale.end(), sc->begin(), sc->end());
    shift.insert(shift.end(), sh->begin(), sh->end());
  }
  Tensor h;
  auto xf = AsFloat32(x, h);
  if (!xf.ok()) return xf.status();
  auto y = Make(x.shape());
  if (!y.ok()) return y.status();
  if (x.num_elements() > 0) {
    // Each oneDNN call normalises the channels of one image: rows = N, statistics per call.
    KILN_RETURN_IF_ERROR(DnnBatchNorm(n, (*xf)->data<float>(), y->data<float>(), N, C, S, scale.data(), shift.data(),
                                      nullptr, nullptr, *eps, false, ctx.cancel));
  }
  auto out = FromFloat32(std::move(*y), x.dtype());
  if (!out.ok()) return out.status();
  return Outputs(std::move(*out), n.outputs.size());
}

Out LayerNorm(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto xr = Required(n, in, 0, "first input");
  if (!xr.ok()) return xr.status();
  auto sr = Required(n, in, 1, "Scale");
  if (!sr.ok()) return sr.status();
  const Tensor& x = **xr;
  auto axis = n.GetInt("axis", -1);
  auto eps = n.GetFloat("epsilon", 1e-5f);
  if (!axis.ok()) return axis.status();
  if (!eps.ok()) return eps.status();
  const int64_t a = NormAxis(*axis, x.rank());
  if (a < 0 || a >= std::max(x.rank(), 1)) return Err(n, "axis out of range");
  const Shape& s = x.shape();
  const Shape norm_shape(s.begin() + a, s.end());
  const int64_t outer = Prod(s, 0, static_cast<size_t>(a)), inner = Prod(s, static_cast<size_t>(a), s.size());
  // Scale / B broadcast to the normalised dims.
  std::vector<float> par[2];
  for (int k = 0; k < 2; ++k) {
    const Tensor* t = In(in, 1 + k);
    if (t == nullptr) {
      par[k].assign(static_cast<size_t>(inner), k == 0 ? 1.f : 0.f);
      continue;
    }
    auto f = t->CastTo(DataType::kFloat32);
    if (!f.ok()) return f.status();
    auto bs = BroadcastShape(norm_shape, f->shape());
    if (!bs.ok() || *bs != norm_shape) return Err(n, "Scale / B do not broadcast to the normalised dims");
    const std::vector<int64_t> st = BroadcastStrides(f->shape(), norm_shape);
    std::vector<int64_t> idx(norm_shape.size(), 0);
    for (int64_t i = 0; i < inner; ++i) {
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * st[d];
      par[k].push_back(f->data<float>()[off]);
      NextIndex(idx, norm_shape);
    }
  }
  Tensor h;
  auto xf = AsFloat32(x, h);
  if (!xf.ok()) return xf.status();
  auto y = Make(s);
  if (!y.ok()) return y.status();
  std::vector<float> mean(static_cast<size_t>(outer)), var(static_cast<size_t>(outer));
  const float* px = (*xf)->data<float>();
  float* py = y->data<float>();
  if (x.num_elements() > 0) {
    KILN_RETURN_IF_ERROR(DnnGuard(n, [&] {
      return ForRowChunks(outer, inner, ctx.cancel, [&](int64_t r0, int64_t cnt) {
        const auto md = DnnDesc({cnt, inner});
        const auto sd = DnnDesc({cnt});
        const auto cd = DnnDesc({inner});
        dnnl::layer_normalization_forward::desc d(dnnl::prop_kind::forward_training, md, *eps,
                                                  nf::use_scale | nf::use_shift);
        dnnl::layer_normalization_forward prim(dnnl::layer_normalization_forward::primitive_desc(d, DnnEngine()));
        DnnExecute(prim, {{DNNL_ARG_SRC, DnnMem(md, px + r0 * inner)},
                          {DNNL_ARG_DST, DnnMem(md, py + r0 * inner)},
                          {DNNL_ARG_SCALE, DnnMem(cd, par[0].data())},
                          {DNNL_ARG_SHIFT, DnnMem(cd, par[1].data())},
                          {DNNL_ARG_MEAN, DnnMem(sd, mean.data() + r0)},
                          {DNNL_ARG_VARIANCE, DnnMem(sd, var.data() + r0)}});
        return Status::Ok();
      });
    }));
  }
  auto out = FromFloat32(std::move(*y), x.dtype());
  if (!out.ok()) return out.status();
  std::vector<Tensor> outs = Outputs(std::move(*out), n.outputs.size());
  Shape stat_shape(s.begin(), s.begin() + a);
  stat_shape.resize(s.size(), 1);
  for (size_t k = 1; k < 3 && k < n.outputs.size(); ++k) {
    if (n.outputs[k].empty()) continue;
    auto t = Make(stat_shape);
    if (!t.ok()) return t.status();
    for (int64_t i = 0; i < outer; ++i) {
      t->data<float>()[i] = k == 1 ? mean[i] : static_cast<float>(1.0 / std::sqrt(static_cast<double>(var[i]) + *eps));
    }
    outs[k] = std::move(*t);
  }
  return outs;
}

Out Lrn(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto xr = Required(n, in, 0, "first input");
  if (!xr.ok()) return xr.status();
  const Tensor& x = **xr;
  if (x.rank() < 2) return Err(n, "input must have rank >= 2");
  auto size = n.GetInt("size");
  auto alpha = n.GetFloat("alpha", 1e-4f), beta = n.GetFloat("beta", 0.75f), bias = n.GetFloat("bias", 1.0f);
  if (!size.ok()) return size.status();
  if (!alpha.ok() || !beta.ok() || !bias.ok()) return Err(n, "bad alpha / beta / bias");
  if (*size < 1) return Err(n, "size must be >= 1");
  const int64_t N = x.dim(0), C = x.dim(1), S = Prod(x.shape(), 2, x.shape().size());
  if (x.dtype() != DataType::kFloat64 && *size % 2 == 1) {
    Tensor h;
    auto xf = AsFloat32(x, h);
    if (!xf.ok()) return xf.status();
    auto y = Make(x.shape());
    if (!y.ok()) return y.status();
    const float* px = (*xf)->data<float>();
    float* py = y->data<float>();
    if (x.num_elements() > 0) {
      KILN_RETURN_IF_ERROR(DnnGuard(n, [&] {
        return ForRowChunks(N, C * S, ctx.cancel, [&](int64_t r0, int64_t cnt) {
          const auto md = DnnDesc({cnt, C, S, 1});
          dnnl::lrn_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::lrn_across_channels, md,
                                    *size, *alpha, *beta, *bias);
          dnnl::lrn_forward prim(dnnl::lrn_forward::primitive_desc(d, DnnEngine()));
          DnnExecute(prim, {{DNNL_ARG_SRC, DnnMem(md, px + r0 * C * S)}, {DNNL_ARG_DST, DnnMem(md, py + r0 * C * S)}});
          return Status::Ok();
        });
      }));
    }
    auto out = FromFloat32(std::move(*y), x.dtype());
    if (!out.ok()) return out.status();
    return Outputs(std::move(*out), n.outputs.size());
  }
  // Typed: onnx's window (reference onnx/backend/test/case/node/lrn.py).
  auto xd = x.CastTo(DataType::kFloat64);
  if (!xd.ok()) return xd.status();
  auto y = Make(x.shape(), DataType::kFloat64);
  if (!y.ok()) return y.status();
  const int64_t lo = (*size - 1) / 2, hi = *size / 2;
  const double* px = xd->data<double>();
  double* py = y->data<double>();
  CancelPoll poll(ctx.cancel);
  for (int64_t b = 0; b < N; ++b) {
    for (int64_t c = 0; c < C; ++c) {
      KILN_RETURN_IF_ERROR(poll.Tick(S * *size));
      for (int64_t k = 0; k < S; ++k) {
        double sq = 0;
        for (int64_t j = std::max<int64_t>(0, c - lo); j <= std::min(C - 1, c + hi); ++j) {
          const double v = px[(b * C + j) * S + k];
          sq += v * v;
        }
        const int64_t i = (b * C + c) * S + k;
        py[i] = px[i] / std::pow(*bias + *alpha / static_cast<double>(*size) * sq, *beta);
      }
    }
  }
  auto out = y->CastTo(x.dtype());
  if (!out.ok()) return out.status();
  return Outputs(std::move(*out), n.outputs.size());
}

// Softmax (log = false) / LogSoftmax (log = true).
template <bool kLog>
Out Softmax(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto xr = Required(n, in, 0, "first input");
  if (!xr.ok()) return xr.status();
  const Tensor& x = **xr;
  const int64_t def = n.opset_version >= 13 ? -1 : 1;
  auto axis = n.GetInt("axis", def);
  if (!axis.ok()) return axis.status();
  const int64_t a = NormAxis(*axis, x.rank());
  if (a < 0 || a >= std::max(x.rank(), 1)) return Err(n, "axis out of range");
  const Shape& s = x.shape();
  int64_t outer = Prod(s, 0, static_cast<size_t>(a)), len = 1, inner = 1;
  if (n.opset_version >= 13) {
    len = x.rank() == 0 ? 1 : s[static_cast<size_t>(a)];
    inner = Prod(s, static_cast<size_t>(a) + 1, s.size());
  } else {
    len = Prod(s, static_cast<size_t>(a), s.size());
  }
  if (x.dtype() == DataType::kFloat64) {
    auto y = Make(s, DataType::kFloat64);
    if (!y.ok()) return y.status();
    const double* p = x.data<double>();
    double* q = y->data<double>();
    CancelPoll poll(ctx.cancel);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        KILN_RETURN_IF_ERROR(poll.Tick(3 * len));
        const int64_t base = o * len * inner + i;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t k = 0; k < len; ++k) mx = std::max(mx, p[base + k * inner]);
        double sum = 0;
        for (int64_t k = 0; k < len; ++k) sum += std::exp(p[base + k * inner] - mx);
        for (int64_t k = 0; k < len; ++k) {
          const double v = p[base + k * inner] - mx;
          q[base + k * inner] = kLog ? v - std::log(sum) : std::exp(v) / sum;
        }
      }
    }
    return Outputs(std::move(*y), n.outputs.size());
  }
  Tensor h;
  auto xf = AsFloat32(x, h);
  if (!xf.ok()) return xf.status();
  auto y = Make(s);
  if (!y.ok()) return y.status();
  const float* px = (*xf)->data<float>();
  float* py = y->data<float>();
  if (x.num_elements() > 0) {
    KILN_RETURN_IF_ERROR(DnnGuard(n, [&] {
      return ForRowChunks(outer, len * inner, ctx.cancel, [&](int64_t r0, int64_t cnt) {
        const auto md = DnnDesc({cnt, len, inner});
        dnnl::softmax_v2_forward::desc d(dnnl::prop_kind::forward_inference,
                                         kLog ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, md,
                                         md, 1);
        dnnl::softmax_v2_forward prim(dnnl::softmax_v2_forward::primitive_desc(d, DnnEngine()));
        DnnExecute(prim, {{DNNL_ARG_SRC, DnnMem(md, px + r0 * len * inner)},
                          {DNNL_ARG_DST, DnnMem(md, py + r0 * len * inner)}});
        return Status::Ok();
      });
    }));
  }
  auto out = FromFloat32(std::move(*y), x.dtype());
  if (!out.ok()) return out.status();
  return Outputs(std::move(*out), n.outputs.size());
}

// LayerNormalization: Y plus the two [outer] statistics.
int64_t LayerNormBytes(const fe::Node& n, const std::vector<Shape>& s) {
  return AddBytes(SameAsInput0Bytes(n, s), s.empty() ? 0 : Fp32Bytes(s[0]));
}

std::vector<DTypePath> Floats(bool f64) {
  std::vector<DTypePath> v = DTypes({DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}, KernelPath::kOneDnn);
  if (f64) v.push_back({DataType::kFloat64, KernelPath::kTyped});
  return v;
}

}  // namespace

void RegisterHostKernels_normalization(HostKernelRegistry& r) {
  r.Add({{"BatchNormalization"}, SameAsInput0Bytes, BatchNorm, Floats(true)});
  r.Add({{"InstanceNormalization"}, SameAsInput0Bytes, InstanceNorm, Floats(false)});
  r.Add({{"LayerNormalization"}, LayerNormBytes, LayerNorm, Floats(false)});
  r.Add({{"LRN"}, SameAsInput0Bytes, Lrn, Floats(true)});
  r.Add({{"Softmax"}, SameAsInput0Bytes, Softmax<false>, Floats(true)});
  r.Add({{"LogSoftmax"}, SameAsInput0Bytes, Softmax<true>, Floats(true)});
}

}  // namespace kiln::runtime::host_kernels
