// Pooling host kernels through oneDNN 2.6 (pooling_v2_forward, reduction):
// * MaxPool (ONNX MaxPool-12) and AveragePool (AveragePool-11; dilations as in AveragePool-19):
//   1-D, 2-D and 3-D (X rank 3..5); kernel_shape, strides, dilations, pads, auto_pad,
//   ceil_mode with the corrected rule of device/backends/conv_geometry.h PoolOutputSize (the last
//   window starts inside the input or the begin pad; onnx PR #5741, PyTorch), count_include_pad.
//   ceil_mode's overhang becomes extra oneDNN padding_r; with count_include_pad = 1 the overhang
//   is not counted in the divisor (PyTorch / ONNX Runtime; same correction as the reference
//   backend's Pool2d, device/backends/reference/reference_backend.cc CorrectIncludePadDivisor).
// * MaxPool's Indices output (int64, ONNX: flat indices into X, padding not counted,
//   storage_order 0 row-major / 1 column-major over the spatial axes, batch and channel offsets
//   included, first maximum in window order wins as in ONNX Runtime's MaxPool) is our own loop; so
//   is MaxPool for float64 (exact). Pools run per (n, c) plane: X is viewed as [1, N·C, spatial].
// * GlobalAveragePool / GlobalMaxPool: X of any rank >= 3 viewed as [N·C, spatial] and reduced
//   by oneDNN's reduction (mean / max); float64 in our own loop with a double accumulator.
// Element types: float32 on oneDNN; MaxPool int8 / uint8 on oneDNN's integer pooling; float16
// converted to float32 and back (exact for the max pools); AveragePool float64 converted to
// float32 and back (float32 precision).
// Cancellation: oneDNN executions of at most ~kPoolChunkWork window taps each (a chunk of
// planes), each reported to a CancelPoll (kernel_util.h) when done; own loops use CancelPoll. One plane is never split
// (a single plane over the budget runs as one execution).
// Memory (estimate_bytes; element sizes as the registry's shape-only convention, kernel_util.h
// Fp32Bytes): MaxPool / AveragePool a float32 copy of X (converted types) plus Y, and Indices at 8
// bytes per element when requested; global pools the N·C outputs (a float16 X adds its float32
// copy, which the shape-only estimate does not see).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "common/float16.h"
#include "device/backends/conv_geometry.h"
#include "runtime/host_kernels/kernel_util.h"
#include "runtime/host_kernels/onednn_exec.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;
using device::DataType;
using dnnl::memory;
using dt = dnnl::memory::data_type;

constexpr int64_t kPoolChunkWork = int64_t{1} << 22;

int64_t Prod(const Shape& s) {
  int64_t p = 1;
  for (int64_t d : s) p *= d;
  return p;
}

struct PoolGeom {
  size_t r = 0;
  int64_t planes = 0;  // N·C
  Shape in, k, s, d, pb, pe, out;
  Shape pr;  // oneDNN padding_r: pe plus ceil_mode's overhang
  bool ceil = false;
};

Result<Shape> Attr(const fe::Node& n, const char* name, size_t len, int64_t fill) {
  auto v = n.GetInts(name, std::vector<int64_t>(len, fill));
  if (!v.ok()) return v.status();
  if (v->empty()) return Shape(len, fill);
  if (v->size() != len) return Err(n, std::string(name) + " must have " + std::to_string(len) + " values");
  return *v;
}

Result<PoolGeom> ResolvePool(const fe::Node& n, const Shape& x) {
  if (x.size() < 3 || x.size() > 5) {
    return Err(n, "X must have rank 3, 4 or 5 (1-D, 2-D or 3-D pooling), got " + device::ShapeToString(x));
  }
  PoolGeom g;
  g.r = x.size() - 2;
  g.planes = x[0] * x[1];
  g.in.assign(x.begin() + 2, x.end());
  auto ks = n.GetInts("kernel_shape");
  if (!ks.ok()) return ks.status();
  if (ks->size() != g.r) return Err(n, "kernel_shape must have " + std::to_string(g.r) + " values");
  g.k = *ks;
  auto st = Attr(n, "strides", g.r, 1);
  if (!st.ok()) return st.status();
  auto dl = Attr(n, "dilations", g.r, 1);
  if (!dl.ok()) return dl.status();
  auto pd = Attr(n, "pads", 2 * g.r, 0);
  if (!pd.ok()) return pd.status();
  auto ceil = n.GetInt("ceil_mode", 0);
  if (!ceil.ok()) return ceil.status();
  auto ap = n.GetString("auto_pad", "NOTSET");
  if (!ap.ok()) return ap.status();
  auto mode = device::ParseAutoPad(*ap);
  if (!mode.ok()) return Err(n, mode.status().message());
  g.s = *st;
  g.d = *dl;
  g.ceil = *ceil != 0;
  g.pb.assign(pd->begin(), pd->begin() + static_cast<std::ptrdiff_t>(g.r));
  g.pe.assign(pd->begin() + static_cast<std::ptrdiff_t>(g.r), pd->end());
  g.out.resize(g.r);
  g.pr.resize(g.r);
  for (size_t i = 0; i < g.r; ++i) {
    if (*mode == device::AutoPad::kValid) {
      g.pb[i] = g.pe[i] = 0;
    } else if (*mode != device::AutoPad::kNotSet) {
      auto p = device::ConvAutoPad(*mode, g.in[i], g.k[i], g.s[i], g.d[i]);
      if (!p.ok()) return Err(n, p.status().message());
      g.pb[i] = p->first;
      g.pe[i] = p->second;
    }
    const int64_t dk = device::DilatedKernel(g.k[i], g.d[i]);
    if (g.pb[i] >= dk || g.pe[i] >= dk) {
      return Err(n, "pads " + std::to_string(g.pb[i]) + "/" + std::to_string(g.pe[i]) +
                        " must be smaller than the dilated kernel " + std::to_string(dk));
    }
    auto o = device::PoolOutputSize(g.in[i], g.k[i], g.s[i], g.d[i], g.pb[i], g.pe[i], g.ceil);
    if (!o.ok()) return Err(n, o.status().message());
    g.out[i] = *o;
    // oneDNN needs out = floor((in + pl + pr - dk) / s) + 1 exactly.
    g.pr[i] = std::max(g.pe[i], (*o - 1) * g.s[i] + dk - g.in[i] - g.pb[i]);
  }
  return g;
}

Shape PlaneShape(int64_t planes, const Shape& sp) {
  Shape s = {1, planes};
  s.insert(s.end(), sp.begin(), sp.end());
  return s;
}

// Runs oneDNN pooling over every plane, in chunks of planes.
Status DnnlPool(const fe::Node& n, const PoolGeom& g, dnnl::algorithm alg, dt type, size_t elem, const void* x,
                void* y, const HostKernelContext& ctx) {
  const int64_t IS = Prod(g.in), OS = Prod(g.out);
  const int64_t per_plane = std::max<int64_t>(1, OS * Prod(g.k));
  const int64_t chunk = std::max<int64_t>(1, kPoolChunkWork / per_plane);
  return onednn::Guard(n, [&]() -> Status {
    dnnl::engine& eng = onednn::Engine();
    dnnl::stream s(eng);
    struct Prim {
      dnnl::pooling_v2_forward::primitive_desc pd;
      dnnl::pooling_v2_forward prim;
    };
    std::map<int64_t, Prim> prims;  // by chunk size: the full chunks and the last one
    memory::dims dil;
    for (int64_t d : g.d) dil.push_back(d - 1);  // oneDNN counts dilation from 0
    CancelPoll poll(ctx.cancel);
    for (int64_t p0 = 0; p0 < g.planes; p0 += chunk) {
      const int64_t pc = std::min(chunk, g.planes - p0);
      const memory::desc src = onednn::Plain(PlaneShape(pc, g.in), type);
      const memory::desc dst = onednn::Plain(PlaneShape(pc, g.out), type);
      auto it = prims.find(pc);
      if (it == prims.end()) {
        dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, alg, src, dst, onednn::Dims(g.s),
                                         onednn::Dims(g.k), dil, onednn::Dims(g.pb), onednn::Dims(g.pr));
        dnnl::pooling_v2_forward::primitive_desc pd(d, eng);
        it = prims.emplace(pc, Prim{pd, dnnl::pooling_v2_forward(pd)}).first;
      }
      const auto& pd = it->second.pd;
      memory sm(src, eng, const_cast<char*>(static_cast<const char*>(x)) + p0 * IS * static_cast<int64_t>(elem));
      memory dm(dst, eng, static_cast<char*>(y) + p0 * OS * static_cast<int64_t>(elem));
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, sm}, {DNNL_ARG_DST, dm}};
      if (pd.workspace_desc().get_size() != 0) args.emplace(DNNL_ARG_WORKSPACE, memory(pd.workspace_desc(), eng));
      it->second.prim.execute(s, args);
      s.wait();
      KILN_RETURN_IF_ERROR(poll.Tick(pc * per_plane));
    }
    return Status::Ok();
  });
}

// oneDNN's pooling_avg_include_padding divides every window by the kernel volume, also where the
// window overhangs past the end pad (ceil_mode); ONNX / PyTorch count only taps inside
// [-pad_begin, in + pad_end). The count is separable per axis.
void CorrectIncludePadDivisor(const PoolGeom& g, float* y) {
  std::vector<std::vector<int64_t>> counts(g.r);
  bool any = false;
  for (size_t i = 0; i < g.r; ++i) {
    for (int64_t o = 0; o < g.out[i]; ++o) {
      int64_t c = 0;
      for (int64_t t = 0; t < g.k[i]; ++t) {
        const int64_t pos = o * g.s[i] - g.pb[i] + t * g.d[i];
        if (pos < g.in[i] + g.pe[i]) ++c;
      }
      counts[i].push_back(c);
      any = any || c != g.k[i];
    }
  }
  if (!any) return;
  const int64_t OS = Prod(g.out), full = Prod(g.k);
  std::vector<float> scale(static_cast<size_t>(OS));
  std::vector<int64_t> idx(g.r, 0);
  for (int64_t o = 0; o < OS; ++o) {
    int64_t cnt = 1;
    for (size_t i = 0; i < g.r; ++i) cnt *= counts[i][static_cast<size_t>(idx[i])];
    scale[static_cast<size_t>(o)] = cnt == 0 ? 1.f : static_cast<float>(full) / static_cast<float>(cnt);
    NextIndex(idx, g.out);
  }
  for (int64_t p = 0; p < g.planes; ++p) {
    for (int64_t o = 0; o < OS; ++o) y[p * OS + o] *= scale[static_cast<size_t>(o)];
  }
}

// Own max pooling (float / double) with optional Indices (see the header comment).
template <typename T>
Status MaxPoolLoop(const PoolGeom& g, const T* x, T* y, int64_t* ind, bool col_major, const HostKernelContext& ctx) {
  // Padded to 3 spatial axes.
  int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, pb[3] = {0, 0, 0},
          out[3] = {1, 1, 1}, istr[3] = {0, 0, 0};
  const size_t off = 3 - g.r;
  for (size_t i = 0; i < g.r; ++i) {
    in[off + i] = g.in[i];
    k[off + i] = g.k[i];
    s[off + i] = g.s[i];
    d[off + i] = g.d[i];
    pb[off + i] = g.pb[i];
    out[off + i] = g.out[i];
  }
  // Index strides of the Indices output per spatial axis (row- or column-major over the real axes).
  int64_t acc = 1;
  for (size_t j = 0; j < g.r; ++j) {
    const size_t i = col_major ? off + j : 2 - j;
    istr[i] = acc;
    acc *= in[i];
  }
  const int64_t IS = in[0] * in[1] * in[2];
  const int64_t OS = out[0] * out[1] * out[2];
  CancelPoll poll(ctx.cancel);
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * IS;
    int64_t o = p * OS;
    for (int64_t o0 = 0; o0 < out[0]; ++o0)
      for (int64_t o1 = 0; o1 < out[1]; ++o1)
        for (int64_t o2 = 0; o2 < out[2]; ++o2, ++o) {
          KILN_RETURN_IF_ERROR(poll.Tick(k[0] * k[1] * k[2]));
          T best = std::numeric_limits<T>::lowest();
          int64_t bi = -1;
          bool found = false;
          for (int64_t t0 = 0; t0 < k[0]; ++t0) {
            const int64_t i0 = o0 * s[0] - pb[0] + t0 * d[0];
            if (i0 < 0 || i0 >= in[0]) continue;
            for (int64_t t1 = 0; t1 < k[1]; ++t1) {
              const int64_t i1 = o1 * s[1] - pb[1] + t1 * d[1];
              if (i1 < 0 || i1 >= in[1]) continue;
              for (int64_t t2 = 0; t2 < k[2]; ++t2) {
                const int64_t i2 = o2 * s[2] - pb[2] + t2 * d[2];
                if (i2 < 0 || i2 >= in[2]) continue;
                const T v = xp[(i0 * in[1] + i1) * in[2] + i2];
                if (!found || v > best || (std::isnan(v) && !std::isnan(best))) {
                  best = v;
                  bi = i0 * istr[0] + i1 * istr[1] + i2 * istr[2];
                  found = true;
                }
              }
            }
          }
          y[o] = best;
          if (ind != nullptr) ind[o] = p * IS + bi;
        }
  }
  return Status::Ok();
}

Shape OutShape(const Tensor& x, const PoolGeom& g) {
  Shape s = {x.dim(0), x.dim(1)};
  s.insert(s.end(), g.out.begin(), g.out.end());
  return s;
}

Out MaxPool(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto xp = Required(n, in, 0, "X");
  if (!xp.ok()) return xp.status();
  const Tensor& x = **xp;
  auto g = ResolvePool(n, x.shape());
  if (!g.ok()) return g.status();
  auto so = n.GetInt("storage_order", 0);
  if (!so.ok()) return so.status();
  if (*so != 0 && *so != 1) return Err(n, "storage_order must be 0 or 1");
  const bool want_indices = n.outputs.size() > 1 && !n.outputs[1].empty();
  const DataType type = x.dtype();
  auto y = Make(OutShape(x, *g), type);
  if (!y.ok()) return y.status();
  std::vector<Tensor> out;
  if (!want_indices && (type == DataType::kFloat32 || type == DataType::kUInt8 || type == DataType::kInt8)) {
    const dt t = type == DataType::kFloat32 ? dt::f32 : type == DataType::kUInt8 ? dt::u8 : dt::s8;
    KILN_RETURN_IF_ERROR(DnnlPool(n, *g, dnnl::algorithm::pooling_max, t, device::DataTypeSize(type),
                                  x.raw().data(), y->raw().data(), ctx));
    return Outputs(std::move(*y), n.outputs.size());
  }
  Tensor ind;
  if (want_indices) {
    auto i = Make(OutShape(x, *g), DataType::kInt64);
    if (!i.ok()) return i.status();
    ind = std::move(*i);
  }
  int64_t* ip = want_indices ? ind.data<int64_t>() : nullptr;
  if (type == DataType::kFloat64) {
    KILN_RETURN_IF_ERROR(MaxPoolLoop<double>(*g, x.data<double>(), y->data<double>(), ip, *so == 1, ctx));
  } else {
    // float16 / int8 / uint8 → float32 is exact, and the maxima are input values: exact back.
    Tensor xo;
    auto xf = onednn::AsFloat32(x, xo);
    if (!xf.ok()) return xf.status();
    auto yf = Make(OutShape(x, *g));
    if (!yf.ok()) return yf.status();
    if (want_indices) {
      KILN_RETURN_IF_ERROR(MaxPoolLoop<float>(*g, (*xf)->data<float>(), yf->data<float>(), ip, *so == 1, ctx));
    } else {
      KILN_RETURN_IF_ERROR(DnnlPool(n, *g, dnnl::algorithm::pooling_max, dt::f32, 4, (*xf)->data<float>(),
                                    yf->data<float>(), ctx));
    }
    auto c = yf->CastTo(type);
    if (!c.ok()) return c.status();
    *y = std::move(*c);
  }
  out.push_back(std::move(*y));
  if (n.outputs.size() > 1) out.push_back(std::move(ind));
  return out;
}

Out AveragePool(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto xp = Required(n, in, 0, "X");
  if (!xp.ok()) return xp.status();
  auto g = ResolvePool(n, (*xp)->shape());
  if (!g.ok()) return g.status();
  auto cip = n.GetInt("count_include_pad", 0);
  if (!cip.ok()) return cip.status();
  Tensor xo;
  auto xf = onednn::AsFloat32(**xp, xo);
  if (!xf.ok()) return xf.status();
  auto y = Make(OutShape(**xp, *g));
  if (!y.ok()) return y.status();
  const auto alg = *cip != 0 ? dnnl::algorithm::pooling_avg_include_padding : dnnl::algorithm::pooling_avg_exclude_padding;
  KILN_RETURN_IF_ERROR(DnnlPool(n, *g, alg, dt::f32, 4, (*xf)->data<float>(), y->data<float>(), ctx));
  if (*cip != 0) CorrectIncludePadDivisor(*g, y->data<float>());
  if ((*xp)->dtype() != DataType::kFloat32) {
    auto c = y->CastTo((*xp)->dtype());
    if (!c.ok()) return c.status();
    *y = std::move(*c);
  }
  return Outputs(std::move(*y), n.outputs.size());
}

Out GlobalPool(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto xp = Required(n, in, 0, "X");
  if (!xp.ok()) return xp.status();
  const Tensor& x = **xp;
  if (x.rank() < 3) return Err(n, "X must have rank >= 3, got " + device::ShapeToString(x.shape()));
  const bool is_max = n.op_type == "GlobalMaxPool";
  Shape ys = {x.dim(0), x.dim(1)};
  int64_t S = 1;
  for (int i = 2; i < x.rank(); ++i) {
    ys.push_back(1);
    S *= x.dim(i);
  }
  const int64_t planes = x.dim(0) * x.dim(1);
  if (S == 0 && planes > 0) return Err(n, "X has an empty spatial extent");
  auto y = Make(ys, x.dtype());
  if (!y.ok()) return y.status();
  if (planes == 0) return Outputs(std::move(*y), 1);
  if (S == 1) {  // a 1x1 map is its own mean and max (oneDNN refuses a reduction of nothing)
    auto same = x.Reshaped(ys);
    if (!same.ok()) return same.status();
    return Outputs(std::move(*same), 1);
  }
  if (x.dtype() == DataType::kFloat64) {
    const double* a = x.data<double>();
    double* o = y->data<double>();
    CancelPoll poll(ctx.cancel);
    for (int64_t p = 0; p < planes; ++p) {
      double acc = is_max ? a[p * S] : 0.0;
      for (int64_t k = 0; k < S; ++k) acc = is_max ? std::max(acc, a[p * S + k]) : acc + a[p * S + k];
      o[p] = is_max ? acc : acc / static_cast<double>(S);
      KILN_RETURN_IF_ERROR(poll.Tick(S));
    }
    return Outputs(std::move(*y), 1);
  }
  Tensor xo;
  auto xf = onednn::AsFloat32(x, xo);
  if (!xf.ok()) return xf.status();
  auto yf = Make(ys);
  if (!yf.ok()) return yf.status();
  const int64_t chunk = std::max<int64_t>(1, kPoolChunkWork / S);
  KILN_RETURN_IF_ERROR(onednn::Guard(n, [&]() -> Status {
    dnnl::engine& eng = onednn::Engine();
    dnnl::stream s(eng);
    const auto alg = is_max ? dnnl::algorithm::reduction_max : dnnl::algorithm::reduction_mean;
    CancelPoll poll(ctx.cancel);
    for (int64_t p0 = 0; p0 < planes; p0 += chunk) {
      const int64_t pc = std::min(chunk, planes - p0);
      const memory::desc src = onednn::Plain({pc, S}, dt::f32), dst = onednn::Plain({pc, 1}, dt::f32);
      dnnl::reduction::primitive_desc pd(dnnl::reduction::desc(alg, src, dst, 0.f, 0.f), eng);
      memory sm(src, eng, const_cast<float*>((*xf)->data<float>()) + p0 * S);
      memory dm(dst, eng, yf->data<float>() + p0);
      dnnl::reduction(pd).execute(s, {{DNNL_ARG_SRC, sm}, {DNNL_ARG_DST, dm}});
      s.wait();
      KILN_RETURN_IF_ERROR(poll.Tick(pc * S));
    }
    return Status::Ok();
  }));
  if (x.dtype() != DataType::kFloat32) {
    auto c = yf->CastTo(x.dtype());
    if (!c.ok()) return c.status();
    *yf = std::move(*c);
  }
  return Outputs(std::move(*yf), 1);
}

int64_t PoolBytes(const fe::Node& n, const std::vector<Shape>& s) {
  if (s.empty()) return 0;
  auto g = ResolvePool(n, s[0]);
  if (!g.ok()) return 0;
  Shape y = {s[0][0], s[0][1]};
  y.insert(y.end(), g->out.begin(), g->out.end());
  int64_t bytes = AddBytes(Fp32Bytes(s[0]), Fp32Bytes(y));
  if (n.op_type == "MaxPool" && n.outputs.size() > 1 && !n.outputs[1].empty()) bytes = AddBytes(bytes, TensorBytes(y, 8));
  return bytes;
}

int64_t GlobalPoolBytes(const fe::Node&, const std::vector<Shape>& s) {
  if (s.empty() || s[0].size() < 3) return 0;
  return Fp32Bytes({s[0][0], s[0][1]});
}

}  // namespace

void RegisterHostKernels_pooling(HostKernelRegistry& r) {
  std::vector<DTypePath> max_types = DTypes({DataType::kFloat32, DataType::kFloat16, DataType::kInt8, DataType::kUInt8},
                                            KernelPath::kOneDnn);
  max_types.push_back({DataType::kFloat64, KernelPath::kTyped});
  r.Add({{"MaxPool"}, PoolBytes, MaxPool, max_types});
  r.Add({{"AveragePool"}, PoolBytes, AveragePool,
         DTypes({DataType::kFloat32, DataType::kFloat16, DataType::kFloat64}, KernelPath::kOneDnn)});
  std::vector<DTypePath> global_types = DTypes({DataType::kFloat32, DataType::kFloat16}, KernelPath::kOneDnn);
  global_types.push_back({DataType::kFloat64, KernelPath::kTyped});
  r.Add({{"GlobalAveragePool", "GlobalMaxPool"}, GlobalPoolBytes, GlobalPool, global_types});
}

}  // namespace kiln::runtime::host_kernels
