// Resize (opset 10, 11, 13) and Upsample (opset 7: scales attribute; 9: scales input), ONNX
// semantics as onnx 1.12's reference implementation defines them
// (onnx/backend/test/case/node/resize.py: interpolate_1d_with_x, nearest / linear / cubic_coeffs).
// * Output size: floor(input · scale) per axis from `scales` (float32), else `sizes` (int64) with
//   scale = size / input. Resize-11/13 inputs: X, roi, scales, sizes (omitted or empty = absent).
// * Coordinates (Resize-11/13, attribute coordinate_transformation_mode, default half_pixel):
//   half_pixel, pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nn and
//   tf_crop_and_resize (roi [starts…, ends…] in normalised coordinates; a sample outside the input
//   is extrapolation_value). Resize-10 and Upsample: asymmetric, and nearest takes the floor
//   (Upsample's definition: onnx/backend/test/case/node/upsample.py).
// * Modes: nearest (nearest_mode round_prefer_floor, round_prefer_ceil, floor, ceil), linear,
//   cubic (cubic_coeff_a, default −0.75); exclude_outside drops taps outside the input and
//   renormalises the rest; taps outside the input otherwise read the edge value (numpy 'edge' pad).
// Paths: linear with half_pixel (or pytorch_half_pixel where no resized axis has output size 1)
// over the spatial axes of a rank 3–5 float tensor, whose output sizes equal input · scale
// exactly, runs oneDNN 2.6 resampling_linear (which maps (o + 0.5)·in/out − 0.5 and clamps, the
// same as ONNX there). Every other form is our own: one separable pass per resized axis in
// double precision with the reference's taps and weights (oneDNN's nearest rounds half away from
// zero in its own coordinate map, and it has no cubic, roi or align_corners). Integer types are
// computed in double and cast back with ONNX Cast rules (truncation), like the reference's astype.
// Memory: output sizes depend on input VALUES (scales / sizes), so the estimate assumes the output
// is no larger than the input: two float64 copies of the input plus a float32-sized output
// (Upsample-7: from its scales attribute).
#include <algorithm>
#include <cmath>
#include <string>

#include "device/dtype_dispatch.h"
#include "runtime/host_kernels/kernel_util.h"
#include "runtime/host_kernels/onednn_util.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;
using device::DataType;

struct Params {
  std::string mode = "nearest";
  std::string ctm = "half_pixel";
  std::string nearest_mode = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0;
  bool legacy = false;  // Resize-10 / Upsample: asymmetric, nearest = floor
  std::vector<double> scales;
  Shape out;
  std::vector<double> roi;  // 2·rank, or empty
};

Result<Params> Parse(const fe::Node& n, const Tensor& x, const HostKernelInputs& in) {
  Params p;
  const size_t rank = x.shape().size();
  auto mode = n.GetString("mode", "nearest");
  if (!mode.ok()) return mode.status();
  p.mode = *mode;
  if (p.mode == "bilinear" || p.mode == "trilinear") p.mode = "linear";  // Upsample-7's spellings
  if (p.mode != "nearest" && p.mode != "linear" && p.mode != "cubic") return Err(n, "unknown mode '" + p.mode + "'");
  const bool upsample = n.op_type == "Upsample";
  p.legacy = upsample || n.opset_version < 11;
  const Tensor* scales = nullptr;
  const Tensor* sizes = nullptr;
  if (upsample && n.opset_version < 9) {
    auto s = n.GetFloats("scales");
    if (!s.ok()) return s.status();
    p.scales.assign(s->begin(), s->end());
  } else if (p.legacy) {
    scales = In(in, 1);
    if (scales == nullptr) return Err(n, "scales missing");
  } else {
    auto ctm = n.GetString("coordinate_transformation_mode", "half_pixel");
    auto nm = n.GetString("nearest_mode", "round_prefer_floor");
    auto a = n.GetFloat("cubic_coeff_a", -0.75f);
    auto ex = n.GetInt("exclude_outside", 0);
    auto ev = n.GetFloat("extrapolation_value", 0.f);
    if (!ctm.ok() || !nm.ok() || !a.ok() || !ex.ok() || !ev.ok()) return Err(n, "bad attributes");
    p.ctm = *ctm;
    p.nearest_mode = *nm;
    p.cubic_a = *a;
    p.exclude_outside = *ex != 0;
    p.extrapolation = *ev;
    const std::vector<std::string> ctms = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                           "tf_half_pixel_for_nn", "tf_crop_and_resize"};
    if (std::find(ctms.begin(), ctms.end(), p.ctm) == ctms.end()) {
      return Err(n, "unknown coordinate_transformation_mode '" + p.ctm + "'");
    }
    if (p.nearest_mode != "round_prefer_floor" && p.nearest_mode != "round_prefer_ceil" && p.nearest_mode != "floor" &&
        p.nearest_mode != "ceil") {
      return Err(n, "unknown nearest_mode '" + p.nearest_mode + "'");
    }
    scales = In(in, 2);
    sizes = In(in, 3);
    const Tensor* roi = In(in, 1);
    if (p.ctm == "tf_crop_and_resize") {
      if (roi == nullptr || roi->num_elements() != static_cast<int64_t>(2 * rank)) {
        return Err(n, "tf_crop_and_resize needs roi with 2 x rank values");
      }
      auto r = roi->CastTo(DataType::kFloat64);
      if (!r.ok()) return r.status();
      p.roi.assign(r->span<double>().begin(), r->span<double>().end());
    }
  }
  if (p.legacy) p.ctm = "asymmetric";
  if (scales != nullptr && scales->num_elements() > 0) {
    // float32 values, as the reference multiplies them (float64 product of the float32 value).
    auto s = scales->CastTo(DataType::kFloat32);
    if (!s.ok()) return s.status();
    p.scales.assign(s->span<float>().begin(), s->span<float>().end());
  }
  if (!p.scales.empty()) {
    if (p.scales.size() != rank) return Err(n, "scales must have one value per input axis");
    for (size_t d = 0; d < rank; ++d) {
      if (!(p.scales[d] > 0)) return Err(n, "scales must be positive");
      p.out.push_back(static_cast<int64_t>(std::floor(p.scales[d] * static_cast<double>(x.shape()[d]))));
    }
  } else if (sizes != nullptr && sizes->num_elements() > 0) {
    std::vector<int64_t> sz = IntsOf(*sizes);
    if (sz.size() != rank) return Err(n, "sizes must have one value per input axis");
    for (size_t d = 0; d < rank; ++d) {
      if (sz[d] < 0) return Err(n, "sizes must be non-negative");
      p.out.push_back(sz[d]);
      p.scales.push_back(x.shape()[d] == 0 ? 1.0 : static_cast<double>(sz[d]) / static_cast<double>(x.shape()[d]));
    }
  } else {
    return Err(n, "needs scales or sizes");
  }
  return p;
}

// The taps of one output index along one axis: input indices (clamped) and weights.
struct Taps {
  int64_t idx[4];
  double w[4];
  int n = 0;
  bool extrapolate = false;
};

Taps AxisTaps(const Params& p, size_t axis, int64_t o, int64_t in_len, size_t rank) {
  Taps t;
  const double scale = p.scales[axis];
  const double x = static_cast<double>(o);
  const double out_w = scale * static_cast<double>(in_len);
  double xo = 0;
  const std::string& c = p.ctm;
  if (c == "align_corners") {
    xo = out_w == 1 ? 0.0 : x * static_cast<double>(in_len - 1) / (out_w - 1);
  } else if (c == "asymmetric") {
    xo = x / scale;
  } else if (c == "tf_crop_and_resize") {
    const double r0 = p.roi[axis], r1 = p.roi[axis + rank];
    xo = out_w == 1 ? (r1 - r0) * static_cast<double>(in_len - 1) / 2
                    : x * (r1 - r0) * static_cast<double>(in_len - 1) / (out_w - 1);
    xo += r0 * static_cast<double>(in_len - 1);
    if (xo < 0 || xo > static_cast<double>(in_len - 1)) {
      t.extrapolate = true;
      return t;
    }
  } else if (c == "pytorch_half_pixel") {
    xo = out_w == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
  } else if (c == "tf_half_pixel_for_nn") {
    xo = (x + 0.5) / scale;
  } else {  // half_pixel
    xo = (x + 0.5) / scale - 0.5;
  }
  // The reference takes the n nearest indices preferring the left one, so the ratio lies in (0, 1].
  const bool integral = xo == std::floor(xo);
  const int64_t fl = static_cast<int64_t>(std::floor(xo));
  const int64_t base = integral ? fl - 1 : fl;
  const double r = integral ? 1.0 : xo - static_cast<double>(fl);
  int64_t first = base;
  if (p.mode == "nearest") {
    t.n = 2;
    bool right;
    if (integral) {
      right = true;
    } else if (p.legacy) {
      right = false;  // floor
    } else if (p.nearest_mode == "round_prefer_floor") {
      right = r > 0.5;
    } else if (p.nearest_mode == "round_prefer_ceil") {
      right = r >= 0.5;
    } else {
      right = p.nearest_mode == "ceil";
    }
    t.w[0] = right ? 0 : 1;
    t.w[1] = right ? 1 : 0;
  } else if (p.mode == "linear") {
    t.n = 2;
    t.w[0] = 1 - r;
    t.w[1] = r;
  } else {
    t.n = 4;
    first = base - 1;
    const double A = p.cubic_a, s = 1 - r;
    t.w[0] = ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
    t.w[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
    t.w[2] = ((A + 2) * s - (A + 3)) * s * s + 1;
    t.w[3] = ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A;
  }
  double sum = 0;
  for (int k = 0; k < t.n; ++k) {
    const int64_t i = first + k;
    if (p.exclude_outside && (i < 0 || i >= in_len)) t.w[k] = 0;
    sum += t.w[k];
    t.idx[k] = std::clamp<int64_t>(i, 0, in_len - 1);
  }
  if (p.exclude_outside && sum != 0) {
    for (int k = 0; k < t.n; ++k) t.w[k] /= sum;
  }
  return t;
}

// One separable pass along `axis`: [outer, in, inner] → [outer, out, inner] (float64).
Result<Tensor> Pass(const Params& p, const Tensor& x, size_t axis, const device::CancelToken* cancel) {
  const Shape& s = x.shape();
  const int64_t in_len = s[axis], out_len = p.out[axis];
  Shape os = s;
  os[axis] = out_len;
  auto y = Make(os, DataType::kFloat64);
  if (!y.ok()) return y.status();
  if (y->num_elements() == 0) return y;
  if (in_len == 0) return Internal("Resize pass over an empty axis");
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  std::vector<Taps> taps;
  for (int64_t o = 0; o < out_len; ++o) taps.push_back(AxisTaps(p, axis, o, in_len, s.size()));
  const double* px = x.data<double>();
  double* py = y->data<double>();
  CancelPoll poll(cancel);
  for (int64_t a = 0; a < outer; ++a) {
    for (int64_t o = 0; o < out_len; ++o) {
      const Taps& t = taps[static_cast<size_t>(o)];
      double* dst = py + (a * out_len + o) * inner;
      if (t.extrapolate) {
        std::fill(dst, dst + inner, p.extrapolation);
        continue;
      }
      std::fill(dst, dst + inner, 0.0);
      for (int k = 0; k < t.n; ++k) {
        if (t.w[k] == 0) continue;
        const double* src = px + (a * in_len + t.idx[k]) * inner;
        for (int64_t i = 0; i < inner; ++i) dst[i] += t.w[k] * src[i];
      }
      KILN_RETURN_IF_ERROR(poll.Tick(inner * t.n));
    }
  }
  return y;
}

// The oneDNN resampling_linear form (see the header comment).
// The element type aside (IsDnnFloat), whether oneDNN's resampling_linear computes this resize as
// ONNX does: input shape `s` to `out` by `scales` with (mode, ctm, exclude_outside) as Parse gives
// them. Shared by the kernel (DnnLinearForm) and its estimate (ResizeBytesWithOutputs).
bool DnnLinearShapes(const std::string& mode, const std::string& ctm, bool exclude_outside, const Shape& s,
                     const Shape& out, const std::vector<double>& scales) {
  if (mode != "linear" || exclude_outside || s.size() < 3 || s.size() > 5) return false;
  if (ctm != "half_pixel" && ctm != "pytorch_half_pixel") return false;
  if (out.size() != s.size() || scales.size() != s.size() || out[0] != s[0] || out[1] != s[1]) return false;
  for (size_t d = 0; d < s.size(); ++d) {
    if (s[d] == 0 || out[d] == 0) return false;
    if (scales[d] * static_cast<double>(s[d]) != static_cast<double>(out[d])) return false;
    if (ctm == "pytorch_half_pixel" && out[d] == 1 && s[d] != 1) return false;
  }
  return true;
}

bool DnnLinearForm(const Params& p, const Tensor& x) {
  return IsDnnFloat(x.dtype()) && DnnLinearShapes(p.mode, p.ctm, p.exclude_outside, x.shape(), p.out, p.scales);
}

Out Resize(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto xr = Required(n, in, 0, "first input");
  if (!xr.ok()) return xr.status();
  const Tensor& x = **xr;
  auto pr = Parse(n, x, in);
  if (!pr.ok()) return pr.status();
  const Params& p = *pr;
  if (DnnLinearForm(p, x)) {
    Tensor h;
    auto xf = AsFloat32(x, h);
    if (!xf.ok()) return xf.status();
    auto y = Make(p.out);
    if (!y.ok()) return y.status();
    const int64_t in_row = x.num_elements() / x.dim(0), out_row = y->num_elements() / p.out[0];
    const float* px = (*xf)->data<float>();
    float* py = y->data<float>();
    KILN_RETURN_IF_ERROR(DnnGuard(n, [&] {
      return ForRowChunks(x.dim(0), std::max(in_row, out_row), ctx.cancel, [&](int64_t r0, int64_t cnt) {
        Shape si = x.shape(), so = p.out;
        si[0] = so[0] = cnt;
        const auto mi = DnnDesc(si), mo = DnnDesc(so);
        dnnl::resampling_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::resampling_linear, mi, mo);
        dnnl::resampling_forward prim(dnnl::resampling_forward::primitive_desc(d, DnnEngine()));
        DnnExecute(prim, {{DNNL_ARG_SRC, DnnMem(mi, px + r0 * in_row)}, {DNNL_ARG_DST, DnnMem(mo, py + r0 * out_row)}});
        return Status::Ok();
      });
    }));
    auto out = FromFloat32(std::move(*y), x.dtype());
    if (!out.ok()) return out.status();
    return Outputs(std::move(*out));
  }
  // The passes shrink first, then grow (each group from the last axis to the first), so that no
  // intermediate holds more elements than the larger of input and output (ResizeBytesWithOutputs
  // counts two of those in float64): growing one axis before shrinking another could allocate a
  // tensor far larger than both. Where every resized axis grows (or every one shrinks) the order is
  // the last axis to the first, as before.
  std::vector<size_t> order;
  for (int grow = 0; grow < 2; ++grow) {
    for (size_t d = x.shape().size(); d-- > 0;) {
      const bool identity = p.out[d] == x.shape()[d] && p.scales[d] == 1.0 && p.ctm != "tf_crop_and_resize";
      if (identity || (p.out[d] > x.shape()[d]) != (grow == 1)) continue;
      if (x.shape()[d] == 0) return Err(n, "cannot resize an empty axis");
      order.push_back(d);
    }
  }
  auto cur = x.CastTo(DataType::kFloat64);
  if (!cur.ok()) return cur.status();
  Tensor t = std::move(*cur);
  for (size_t d : order) {
    auto next = Pass(p, t, d, ctx.cancel);
    if (!next.ok()) return next.status();
    t = std::move(*next);
  }
  auto out = t.CastTo(x.dtype());
  if (!out.ok()) return out.status();
  return Outputs(std::move(*out));
}

int64_t ResizeBytes(const fe::Node& n, const std::vector<Shape>& s) {
  if (s.empty()) return 0;
  Shape out = s[0];
  if (n.op_type == "Upsample" && n.opset_version < 9) {
    auto sc = n.GetFloats("scales");
    if (sc.ok() && sc->size() == out.size()) {
      for (size_t d = 0; d < out.size(); ++d) out[d] = static_cast<int64_t>(std::floor((*sc)[d] * out[d]));
    }
  }
  const Shape& big = TensorBytes(out, 1) > TensorBytes(s[0], 1) ? out : s[0];
  return AddBytes(AddBytes(TensorBytes(big, 8), TensorBytes(big, 8)), Fp32Bytes(out));
}

// With the output shape known (shape inference from constant scales or sizes): the two float64
// tensors of a pass, each at most the larger of input and output (Resize orders its passes so),
// and the output converted back.
int64_t ResizeBytesWithOutputs(const fe::Node& n, const std::vector<Shape>& s, const std::vector<Shape>& out) {
  if (s.empty() || out.empty()) return ResizeBytes(n, s);
  // The oneDNN linear path (DnnLinearForm) writes the fp32 output straight from an fp32 copy of the
  // input, with no float64 passes: judged from the attributes and shapes with the scales out / in
  // (the element type is not known here; a float model is assumed, as Resize's linear modes are
  // float in practice). Resize-10 and Upsample are Parse's legacy form (asymmetric: typed path).
  auto mode = n.GetString("mode", "nearest");
  auto ctm = n.GetString("coordinate_transformation_mode", "half_pixel");
  auto excl = n.GetInt("exclude_outside", 0);
  const Shape& x = s[0];
  const Shape& y = out[0];
  std::vector<double> scales;
  for (size_t d = 0; d < x.size() && d < y.size(); ++d) {
    scales.push_back(x[d] == 0 ? 1.0 : static_cast<double>(y[d]) / static_cast<double>(x[d]));
  }
  const bool legacy = n.op_type != "Resize" || n.opset_version < 11;
  if (!legacy && mode.ok() && ctm.ok() && excl.ok() && DnnLinearShapes(*mode, *ctm, *excl != 0, x, y, scales)) {
    return AddBytes(Fp32Bytes(y), Fp32Bytes(x));
  }
  const Shape& big = TensorBytes(out[0], 1) > TensorBytes(s[0], 1) ? out[0] : s[0];
  return AddBytes(AddBytes(TensorBytes(big, 8), TensorBytes(big, 8)), Fp32Bytes(out[0]));
}

std::vector<DTypePath> Paths() {
  std::vector<DTypePath> v = DTypes({DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}, KernelPath::kOneDnn);
  for (DataType t : {DataType::kFloat64, DataType::kInt8, DataType::kInt16, DataType::kInt32, DataType::kInt64,
                     DataType::kUInt8, DataType::kUInt16, DataType::kUInt32, DataType::kUInt64}) {
    v.push_back({t, KernelPath::kTyped});
  }
  return v;
}

}  // namespace

void RegisterHostKernels_resize(HostKernelRegistry& r) {
  r.Add({{"Resize", "Upsample"}, ResizeBytes, Resize, Paths(), 0, ResizeBytesWithOutputs});
}

}  // namespace kiln::runtime::host_kernels
