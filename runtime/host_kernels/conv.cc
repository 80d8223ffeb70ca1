// Conv / ConvTranspose host kernels (ONNX Conv-11, ConvTranspose-11) through oneDNN 2.6
// convolution_forward / deconvolution_forward: 1-D, 2-D and 3-D (X rank 3..5), group, strides,
// dilations, pads, auto_pad (NOTSET / VALID / SAME_UPPER / SAME_LOWER, resolved per axis with
// device/backends/conv_geometry.h from the run-time shapes), optional bias B, weights W given at
// run time. ConvTranspose: output_padding and output_shape; where output_shape asks for more than
// the full output (total padding < 0) the pads are 0 and the extra positions hold only the bias,
// as ONNX Runtime computes it (onnxruntime/core/providers/common conv_transpose_attributes.h,
// ComputeTransposePadAndOutputShape clamps the total padding at 0); output_padding beyond the end
// pad likewise adds positions that hold only the bias.
//
// The planner (compiler/convplan/plan.cc, LowerConv) routes here the convs a device cannot take:
// weights or bias that are not constants, and 3-D convs.
//
// Element types: float32 on oneDNN; float16 and float64 are converted to float32, computed by
// oneDNN and the result converted back (float64 therefore has float32 precision).
//
// Cancellation: oneDNN primitives are not interruptible, so one node runs as several primitive
// executions of at most ~kChunkMacs multiply-adds each: batches of
// images when an image is small enough, else per image by groups, else by output channels (in
// multiples of 16, the blocking of oneDNN's AVX2/AVX-512 kernels); after each execution its
// multiply-adds are reported to a CancelPoll (kernel_util.h), so the token is checked after every
// chunk of a big conv and never for a small one. Every chunk is a plain (strided) view of X / W / Y, reordered into the formats the
// primitive picked (format_tag::any).
//
// Memory (estimate_bytes): the output, plus scratch in oneDNN's formats bounded by one copy each of
// X, W and the output (fp32 sizes; float16 / float64 inputs add their fp32 copies on top, which
// the shape-only estimate does not see).
#include <algorithm>
#include <map>
#include <tuple>

#include "device/backends/conv_geometry.h"
#include "runtime/host_kernels/kernel_util.h"
#include "runtime/host_kernels/onednn_exec.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;
using dnnl::memory;
using dt = dnnl::memory::data_type;

// 134M multiply-adds: measured ~3–9 ms on one core of this project's AVX2 build machine (oneDNN
// jit), so well inside the ~50 ms of the contract even at a few GMAC/s; smaller chunks cost
// OpenMP wake-ups per primitive call on a loaded machine.
constexpr int64_t kChunkMacs = int64_t{1} << 27;
constexpr int64_t kChannelBlock = 16;

int64_t Prod(const Shape& s) {
  int64_t p = 1;
  for (int64_t d : s) p *= d;
  return p;
}

// The resolved geometry of one Conv / ConvTranspose node for given X and W shapes.
struct Geometry {
  bool transpose = false;
  int64_t N = 0, C = 0, M = 0, group = 1, Cg = 0, Mg = 0;
  size_t r = 0;                    // spatial rank 1..3
  Shape in, k, strides, dil;       // spatial, per axis
  Shape pl, pr;                    // oneDNN padding_l / padding_r (>= 0)
  Shape core;                      // spatial size oneDNN computes
  Shape out;                       // spatial size of Y (>= core: ConvTranspose extra positions)
};

Result<Shape> SpatialAttr(const fe::Node& n, const char* name, size_t len, int64_t fill) {
  auto v = n.GetInts(name, std::vector<int64_t>(len, fill));
  if (!v.ok()) return v.status();
  if (v->empty()) return Shape(len, fill);
  if (v->size() != len) return Err(n, std::string(name) + " must have " + std::to_string(len) + " values");
  return *v;
}

Result<Geometry> Resolve(const fe::Node& n, const Shape& x, const Shape& w) {
  Geometry g;
  g.transpose = n.op_type == "ConvTranspose";
  if (x.size() < 3 || x.size() > 5) {
    return Err(n, "X must have rank 3, 4 or 5 (1-D, 2-D or 3-D), got " + device::ShapeToString(x));
  }
  if (w.size() != x.size()) {
    return Err(n, "W " + device::ShapeToString(w) + " must have the rank of X " + device::ShapeToString(x));
  }
  g.r = x.size() - 2;
  const size_t r = g.r;
  auto grp = n.GetInt("group", 1);
  if (!grp.ok()) return grp.status();
  g.group = *grp;
  if (g.group < 1) return Err(n, "group must be >= 1");
  g.N = x[0];
  g.C = x[1];
  if (g.transpose) {
    if (w[0] != g.C || g.C % g.group != 0) {
      return Err(n, "W " + device::ShapeToString(w) + " does not match X " + device::ShapeToString(x) + " with group " +
                        std::to_string(g.group) + " (W is [C, M/group, k...])");
    }
    g.Mg = w[1];
    g.M = w[1] * g.group;
  } else {
    if (w[1] * g.group != g.C || w[0] % g.group != 0) {
      return Err(n, "W " + device::ShapeToString(w) + " does not match X " + device::ShapeToString(x) + " with group " +
                        std::to_string(g.group) + " (W is [M, C/group, k...])");
    }
    g.M = w[0];
    g.Mg = w[0] / g.group;
  }
  g.Cg = g.C / g.group;
  g.in.assign(x.begin() + 2, x.end());
  g.k.assign(w.begin() + 2, w.end());
  auto ks = n.GetInts("kernel_shape", {});
  if (!ks.ok()) return ks.status();
  if (!ks->empty() && *ks != g.k) return Err(n, "kernel_shape does not match the shape of W " + device::ShapeToString(w));
  auto st = SpatialAttr(n, "strides", r, 1);
  if (!st.ok()) return st.status();
  auto dl = SpatialAttr(n, "dilations", r, 1);
  if (!dl.ok()) return dl.status();
  auto pads = SpatialAttr(n, "pads", 2 * r, 0);
  if (!pads.ok()) return pads.status();
  auto ap = n.GetString("auto_pad", "NOTSET");
  if (!ap.ok()) return ap.status();
  auto mode = device::ParseAutoPad(*ap);
  if (!mode.ok()) return Err(n, mode.status().message());
  g.strides = *st;
  g.dil = *dl;
  Shape pb(pads->begin(), pads->begin() + static_cast<std::ptrdiff_t>(r));
  Shape pe(pads->begin() + static_cast<std::ptrdiff_t>(r), pads->end());
  if (*mode == device::AutoPad::kValid) {
    std::fill(pb.begin(), pb.end(), 0);
    std::fill(pe.begin(), pe.end(), 0);
  }
  g.pl.resize(r);
  g.pr.resize(r);
  g.core.resize(r);
  g.out.resize(r);
  const bool same = *mode == device::AutoPad::kSameUpper || *mode == device::AutoPad::kSameLower;
  if (!g.transpose) {
    for (size_t i = 0; i < r; ++i) {
      if (same) {
        auto p = device::ConvAutoPad(*mode, g.in[i], g.k[i], g.strides[i], g.dil[i]);
        if (!p.ok()) return Err(n, p.status().message());
        pb[i] = p->first;
        pe[i] = p->second;
      }
      auto o = device::ConvOutputSize(g.in[i], g.k[i], g.strides[i], g.dil[i], pb[i], pe[i]);
      if (!o.ok()) return Err(n, o.status().message());
      g.pl[i] = pb[i];
      g.pr[i] = pe[i];
      g.core[i] = g.out[i] = *o;
    }
    return g;
  }
  auto opad = SpatialAttr(n, "output_padding", r, 0);
  if (!opad.ok()) return opad.status();
  auto oshape = n.GetInts("output_shape", {});
  if (!oshape.ok()) return oshape.status();
  Shape os = *oshape;
  if (os.size() == r + 2) os.erase(os.begin(), os.begin() + 2);  // the full [N, M, ...] form
  if (!os.empty() && os.size() != r) return Err(n, "output_shape must have one value per spatial axis");
  for (size_t i = 0; i < r; ++i) {
    const int64_t op = (*opad)[i];
    // Validates k / stride / dilation / pads / output_padding and gives the full size.
    auto full = device::ConvTransposeOutputSize(g.in[i], g.k[i], g.strides[i], g.dil[i], 0, 0, op);
    if (!full.ok()) return Err(n, full.status().message());
    if (!os.empty() || same) {
      const int64_t target = os.empty() ? g.in[i] * g.strides[i] : os[i];
      if (target < 1) return Err(n, "output_shape values must be >= 1");
      if (*full >= target) {
        auto p = device::ConvTransposePadsForOutput(*mode, g.in[i], g.k[i], g.strides[i], g.dil[i], op, target);
        if (!p.ok()) return Err(n, p.status().message());
        pb[i] = p->first;
        pe[i] = p->second;
      } else {
        pb[i] = pe[i] = 0;  // clamped total padding (see the header comment)
      }
      g.out[i] = target;
    } else {
      auto o = device::ConvTransposeOutputSize(g.in[i], g.k[i], g.strides[i], g.dil[i], pb[i], pe[i], op);
      if (!o.ok()) return Err(n, o.status().message());
      g.out[i] = *o;
    }
    // oneDNN's deconvolution has no output_padding: it computes s·(in-1) + dk - pl - pr positions;
    // output_padding reduces the end pad, and what lies beyond the computed part is bias only.
    g.pl[i] = pb[i];
    g.pr[i] = std::max<int64_t>(0, pe[i] - op);
    g.core[i] = *full - op - g.pl[i] - g.pr[i];
    if (g.core[i] < 1 || g.core[i] > g.out[i]) {
      return Err(n, "pads " + std::to_string(pb[i]) + "/" + std::to_string(pe[i]) + " leave no output on axis " +
                        std::to_string(i));
    }
  }
  return g;
}

// One primitive execution: images [n0, n0+nb); either groups [g0, g0+gb) whole (grouped), or
// output channels [o0, o0+ob) of group g0 only (a group-1 conv on that group's input channels).
struct Chunk {
  int64_t n0 = 0, nb = 0, g0 = 0, gb = 1, o0 = 0, ob = 0;
  bool grouped = false;
};

std::vector<Chunk> Chunks(const Geometry& g) {
  const int64_t per_oc = g.Cg * Prod(g.k) * Prod(g.transpose ? g.in : g.core);  // MACs per image and channel
  const int64_t per_image = g.M * per_oc;
  std::vector<Chunk> v;
  if (per_image <= kChunkMacs) {
    const int64_t nb = std::max<int64_t>(1, kChunkMacs / std::max<int64_t>(per_image, 1));
    for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
      v.push_back({n0, std::min(nb, g.N - n0), 0, g.group, 0, g.Mg, g.group > 1});
    }
    return v;
  }
  const int64_t per_group = g.Mg * per_oc;
  for (int64_t n0 = 0; n0 < g.N; ++n0) {
    if (g.group > 1 && per_group <= kChunkMacs) {
      const int64_t gb = std::max<int64_t>(1, kChunkMacs / per_group);
      for (int64_t g0 = 0; g0 < g.group; g0 += gb) v.push_back({n0, 1, g0, std::min(gb, g.group - g0), 0, g.Mg, true});
      continue;
    }
    int64_t ob = std::max<int64_t>(1, kChunkMacs / std::max<int64_t>(per_oc, 1));
    ob = std::min(g.Mg, (ob + kChannelBlock - 1) / kChannelBlock * kChannelBlock);
    for (int64_t g0 = 0; g0 < g.group; ++g0) {
      for (int64_t o0 = 0; o0 < g.Mg; o0 += ob) v.push_back({n0, 1, g0, 1, o0, std::min(ob, g.Mg - o0), false});
    }
  }
  return v;
}

// Row-major strides of the spatial part.
Shape SpatialStrides(const Shape& s) { return RowMajorStrides(s); }

struct Prim {
  dnnl::primitive prim;
  memory::desc src, wei, dst, bias;
};

Result<Tensor> RunConv(const fe::Node& n, const Geometry& g, const Tensor& x, const Tensor& w, const Tensor* b,
                       const HostKernelContext& ctx) {
  Shape yshape = {g.N, g.M};
  yshape.insert(yshape.end(), g.out.begin(), g.out.end());
  auto y = Make(yshape);
  if (!y.ok()) return y.status();
  if (y->num_elements() == 0 || x.num_elements() == 0) return std::move(*y);
  const int64_t IS = Prod(g.in), OS = Prod(g.out), K = Prod(g.k);
  const Shape in_st = SpatialStrides(g.in), out_st = SpatialStrides(g.out), k_st = SpatialStrides(g.k);
  if (b != nullptr && g.core != g.out) {  // positions oneDNN does not compute hold the bias
    float* yd = y->data<float>();
    for (int64_t i = 0; i < g.N * g.M; ++i) std::fill(yd + i * OS, yd + (i + 1) * OS, b->data<float>()[i % g.M]);
  }
  auto cat = [](Shape a, const Shape& tail) {
    a.insert(a.end(), tail.begin(), tail.end());
    return a;
  };
  return onednn::Guard(n, [&]() -> Result<Tensor> {
    dnnl::engine& eng = onednn::Engine();
    dnnl::stream s(eng);
    std::map<std::tuple<int64_t, int64_t, int64_t, bool>, Prim> prims;
    auto make = [&](const Chunk& c) -> Prim& {
      auto key = std::make_tuple(c.nb, c.gb, c.ob, c.grouped);
      auto it = prims.find(key);
      if (it != prims.end()) return it->second;
      const int64_t cin = c.grouped ? c.gb * g.Cg : (g.group == 1 ? g.C : g.Cg);
      const int64_t cout = c.grouped ? c.gb * g.Mg : c.ob;
      memory::desc xd(onednn::Dims(cat({c.nb, cin}, g.in)), dt::f32, memory::format_tag::any);
      memory::desc yd(onednn::Dims(cat({c.nb, cout}, g.core)), dt::f32, memory::format_tag::any);
      memory::dims wdims = c.grouped ? onednn::Dims(cat({c.gb, g.Mg, g.Cg}, g.k)) : onednn::Dims(cat({c.ob, cin}, g.k));
      memory::desc wd(wdims, dt::f32, memory::format_tag::any);
      memory::desc bd({cout}, dt::f32, memory::format_tag::a);
      memory::dims st = onednn::Dims(g.strides), pl = onednn::Dims(g.pl), pr = onednn::Dims(g.pr), dl;
      for (int64_t d : g.dil) dl.push_back(d - 1);  // oneDNN counts dilation from 0
      Prim p;
      if (!g.transpose) {
        auto d = b != nullptr ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                                dnnl::algorithm::convolution_direct, xd, wd, bd, yd,
                                                                st, dl, pl, pr)
                              : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                                dnnl::algorithm::convolution_direct, xd, wd, yd, st,
                                                                dl, pl, pr);
        dnnl::convolution_forward::primitive_desc pd(d, eng);
        p = {dnnl::convolution_forward(pd), pd.src_desc(), pd.weights_desc(), pd.dst_desc(), pd.bias_desc()};
      } else {
        auto d = b != nullptr ? dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                                  dnnl::algorithm::deconvolution_direct, xd, wd, bd,
                                                                  yd, st, dl, pl, pr)
                              : dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                                  dnnl::algorithm::deconvolution_direct, xd, wd, yd,
                                                                  st, dl, pl, pr);
        dnnl::deconvolution_forward::primitive_desc pd(d, eng);
        p = {dnnl::deconvolution_forward(pd), pd.src_desc(), pd.weights_desc(), pd.dst_desc(), pd.bias_desc()};
      }
      return prims.emplace(key, std::move(p)).first->second;
    };
    float* xd = const_cast<float*>(x.data<float>());
    float* wd = const_cast<float*>(w.data<float>());
    float* yd = y->data<float>();
    float* bd = b != nullptr ? const_cast<float*>(b->data<float>()) : nullptr;
    // The reordered source of the previous chunk, reused while the chunk reads the same channels.
    std::tuple<int64_t, int64_t, int64_t> src_key{-1, -1, -1};
    memory src_mem;
    CancelPoll poll(ctx.cancel);
    const int64_t per_oc = g.Cg * K * Prod(g.transpose ? g.in : g.core);
    for (const Chunk& c : Chunks(g)) {
      Prim& p = make(c);
      const int64_t cin = c.grouped ? c.gb * g.Cg : (g.group == 1 ? g.C : g.Cg);
      const int64_t c_begin = c.grouped ? c.g0 * g.Cg : (g.group == 1 ? 0 : c.g0 * g.Cg);
      const int64_t o_begin = c.g0 * g.Mg + c.o0;
      const int64_t cout = c.grouped ? c.gb * g.Mg : c.ob;
      // Plain strided views of this chunk of X, W, Y, B.
      if (std::make_tuple(c.n0, c.nb, c_begin) != src_key) {
        memory xu(onednn::Plain(cat({c.nb, cin}, g.in), dt::f32, cat({g.C * IS, IS}, in_st)), eng,
                  xd + c.n0 * g.C * IS + c_begin * IS);
        src_mem = onednn::Reordered(xu, p.src, s);
        src_key = {c.n0, c.nb, c_begin};
      }
      memory::desc wu_desc;
      float* wptr = nullptr;
      if (!g.transpose) {  // W [M, Cg, k] = [group][Mg][Cg][k]
        wu_desc = c.grouped ? onednn::Plain(cat({c.gb, g.Mg, g.Cg}, g.k), dt::f32, cat({g.Mg * g.Cg * K, g.Cg * K, K}, k_st))
                            : onednn::Plain(cat({c.ob, g.Cg}, g.k), dt::f32, cat({g.Cg * K, K}, k_st));
        wptr = wd + o_begin * g.Cg * K;
      } else {  // W [C, Mg, k] = [group][Cg][Mg][k]; oneDNN's dims are (g,) O, I, k
        wu_desc = c.grouped ? onednn::Plain(cat({c.gb, g.Mg, g.Cg}, g.k), dt::f32, cat({g.Cg * g.Mg * K, K, g.Mg * K}, k_st))
                            : onednn::Plain(cat({c.ob, g.Cg}, g.k), dt::f32, cat({K, g.Mg * K}, k_st));
        wptr = wd + c.g0 * g.Cg * g.Mg * K + c.o0 * K;
      }
      memory wu(wu_desc, eng, wptr);
      memory wei_mem = onednn::Reordered(wu, p.wei, s);
      memory yu(onednn::Plain(cat({c.nb, cout}, g.core), dt::f32, cat({g.M * OS, OS}, out_st)), eng,
                yd + c.n0 * g.M * OS + o_begin * OS);
      memory dst_mem = yu.get_desc() == p.dst ? yu : memory(p.dst, eng);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_WEIGHTS, wei_mem}, {DNNL_ARG_DST, dst_mem}};
      if (bd != nullptr) args.emplace(DNNL_ARG_BIAS, memory(p.bias, eng, bd + o_begin));
      p.prim.execute(s, args);
      if (dst_mem != yu) dnnl::reorder(dst_mem, yu).execute(s, dst_mem, yu);
      s.wait();
      KILN_RETURN_IF_ERROR(poll.Tick(c.nb * cout * per_oc));
    }
    return std::move(*y);
  });
}

Out Conv(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto xp = Required(n, in, 0, "X");
  if (!xp.ok()) return xp.status();
  auto wp = Required(n, in, 1, "W");
  if (!wp.ok()) return wp.status();
  const Tensor* bp = In(in, 2);
  const device::DataType type = (*xp)->dtype();
  if ((*wp)->dtype() != type || (bp != nullptr && bp->dtype() != type)) {
    return Err(n, "X, W and B must have one element type");
  }
  auto g = Resolve(n, (*xp)->shape(), (*wp)->shape());
  if (!g.ok()) return g.status();
  if (bp != nullptr && bp->shape() != Shape{g->M}) {
    return Err(n, "B must have shape [" + std::to_string(g->M) + "], got " + device::ShapeToString(bp->shape()));
  }
  Tensor xo, wo, bo;
  auto x = onednn::AsFloat32(**xp, xo);
  if (!x.ok()) return x.status();
  auto w = onednn::AsFloat32(**wp, wo);
  if (!w.ok()) return w.status();
  const Tensor* b = nullptr;
  if (bp != nullptr) {
    auto bf = onednn::AsFloat32(*bp, bo);
    if (!bf.ok()) return bf.status();
    b = *bf;
  }
  auto y = RunConv(n, *g, **x, **w, b, ctx);
  if (!y.ok()) return y.status();
  if (type != device::DataType::kFloat32) {
    auto c = y->CastTo(type);
    if (!c.ok()) return c.status();
    *y = std::move(*c);
  }
  return Outputs(std::move(*y), n.outputs.size());
}

int64_t ConvBytes(const fe::Node& n, const std::vector<Shape>& s) {
  if (s.size() < 2) return 0;
  auto g = Resolve(n, s[0], s[1]);
  if (!g.ok()) return 0;
  Shape y = {g->N, g->M};
  y.insert(y.end(), g->out.begin(), g->out.end());
  return AddBytes(AddBytes(Fp32Bytes(y), Fp32Bytes(y)), AddBytes(Fp32Bytes(s[0]), Fp32Bytes(s[1])));
}

}  // namespace

void RegisterHostKernels_conv(HostKernelRegistry& r) {
  const auto types = DTypes({device::DataType::kFloat32, device::DataType::kFloat16, device::DataType::kFloat64},
                            KernelPath::kOneDnn);
  r.Add({{"Conv"}, ConvBytes, Conv, types});
  r.Add({{"ConvTranspose"}, ConvBytes, Conv, types});
}

}  // namespace kiln::runtime::host_kernels
