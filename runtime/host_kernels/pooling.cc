// Pooling host kernels: MaxPool / AveragePool (rank 3 or 4 inputs; kernel_shape, strides, pads,
// dilations, auto_pad, ceil_mode, count_include_pad — ONNX MaxPool-12 / AveragePool-19) through
// the fp32 backend's Pool2d (HostKernelContext::fp32; 1-D pools run as height 1); MaxPool's
// Indices output is INVALID_ARGUMENT. GlobalAveragePool (rank >= 3) in plain C++ with a double
// accumulator. Memory: MaxPool / AveragePool a copy of the input plus the output (sized by the
// pooling arithmetic, conservatively with ceil_mode); GlobalAveragePool N·C values.
#include <algorithm>

#include "device/backends/conv_geometry.h"
#include "runtime/host_kernels/kernel_util.h"

namespace kiln::runtime::host_kernels {

namespace {

namespace fe = onnx_fe;

Out Pool(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto xp = Required(n, in, 0, "first input");
  if (!xp.ok()) return xp.status();
  const Tensor& x = **xp;
  const bool is_max = n.op_type == "MaxPool";
  if (is_max && n.outputs.size() > 1 && !n.outputs[1].empty()) return Err(n, "the Indices output is not supported");
  if (x.rank() != 3 && x.rank() != 4) return Err(n, "input must be rank 3 or 4, got " + device::ShapeToString(x.shape()));
  const size_t r = static_cast<size_t>(x.rank() - 2);
  auto ks = n.GetInts("kernel_shape");
  if (!ks.ok()) return ks.status();
  if (ks->size() != r) return Err(n, "kernel_shape must have " + std::to_string(r) + " values");
  auto get = [&](const char* name, size_t len, int64_t fill) -> Result<std::vector<int64_t>> {
    auto v = n.GetInts(name, std::vector<int64_t>(len, fill));
    if (!v.ok()) return v.status();
    if (v->empty()) return std::vector<int64_t>(len, fill);
    if (v->size() != len) return Err(n, std::string(name) + " must have " + std::to_string(len) + " values");
    return *v;
  };
  auto st = get("strides", r, 1);
  if (!st.ok()) return st.status();
  auto dl = get("dilations", r, 1);
  if (!dl.ok()) return dl.status();
  auto pd = get("pads", 2 * r, 0);
  if (!pd.ok()) return pd.status();
  auto ceil = n.GetInt("ceil_mode", 0);
  if (!ceil.ok()) return ceil.status();
  auto cip = n.GetInt("count_include_pad", 0);
  if (!cip.ok()) return cip.status();
  auto ap = n.GetString("auto_pad", "NOTSET");
  if (!ap.ok()) return ap.status();
  auto mode = device::ParseAutoPad(*ap);
  if (!mode.ok()) return Err(n, mode.status().message());
  std::vector<int64_t> pads = *pd;
  if (*mode != device::AutoPad::kNotSet) {
    for (size_t i = 0; i < r; ++i) {
      auto p = device::ConvAutoPad(*mode, x.dim(static_cast<int>(2 + i)), (*ks)[i], (*st)[i], (*dl)[i]);
      if (!p.ok()) return Err(n, p.status().message());
      pads[i] = p->first;
      pads[i + r] = p->second;
    }
  }
  device::Pool2dParams p;
  p.kind = is_max ? device::PoolKind::kMax : device::PoolKind::kAverage;
  if (r == 1) {
    p.kernel = {1, (*ks)[0]};
    p.strides = {1, (*st)[0]};
    p.dilations = {1, (*dl)[0]};
    p.pads = {0, pads[0], 0, pads[1]};
  } else {
    p.kernel = {(*ks)[0], (*ks)[1]};
    p.strides = {(*st)[0], (*st)[1]};
    p.dilations = {(*dl)[0], (*dl)[1]};
    p.pads = {pads[0], pads[1], pads[2], pads[3]};
  }
  p.ceil_mode = *ceil != 0;
  p.count_include_pad = !is_max && *cip != 0;
  Tensor x4 = x;
  if (r == 1) {
    auto t = x.Reshaped({x.dim(0), x.dim(1), 1, x.dim(2)});
    if (!t.ok()) return t.status();
    x4 = std::move(*t);
  }
  device::ExecContext ec;
  ec.cancel = ctx.cancel;
  auto y = ctx.fp32.Pool2d(x4, p, ec);
  if (!y.ok()) return y.status().WithContext(n.Describe());
  if (r == 1) {
    auto t = y->Reshaped({y->dim(0), y->dim(1), y->dim(3)});
    if (!t.ok()) return t.status();
    *y = std::move(*t);
  }
  std::vector<Tensor> out;
  out.push_back(std::move(*y));
  if (n.outputs.size() > 1) out.emplace_back();
  return out;
}

Out GlobalAveragePool(const fe::Node& n, const HostKernelInputs& in, const HostKernelContext& ctx) {
  auto xp = Required(n, in, 0, "first input");
  if (!xp.ok()) return xp.status();
  const Tensor& x = **xp;
  if (x.rank() < 3) return Err(n, "input must have rank >= 3");
  Shape s = {x.dim(0), x.dim(1)};
  int64_t inner = 1;
  for (int i = 2; i < x.rank(); ++i) {
    s.push_back(1);
    inner *= x.dim(i);
  }
  auto y = Make(s);
  if (!y.ok()) return y.status();
  const float* a = x.data<float>();
  CancelPoll poll(ctx.cancel);
  for (int64_t nc = 0; nc < x.dim(0) * x.dim(1); ++nc) {
    double sum = 0;
    for (int64_t k = 0; k < inner; ++k) sum += a[nc * inner + k];
    y->data<float>()[nc] = static_cast<float>(sum / static_cast<double>(inner));
    KILN_RETURN_IF_ERROR(poll.Tick(inner));
  }
  std::vector<Tensor> out;
  out.push_back(std::move(*y));
  return out;
}

int64_t PoolBytes(const fe::Node& n, const std::vector<Shape>& s) {
  if (s.empty() || s[0].size() < 3) return 0;
  const Shape& x = s[0];
  const size_t r = x.size() - 2;
  auto attr = [&](const char* name, size_t i, int64_t fill) {
    auto v = n.GetInts(name, {});
    return v.ok() && i < v->size() ? (*v)[i] : fill;
  };
  Shape out = {x[0], x[1]};
  for (size_t i = 0; i < r; ++i) {
    const int64_t k = std::max<int64_t>(attr("kernel_shape", i, 1), 1);
    const int64_t stride = std::max<int64_t>(attr("strides", i, 1), 1);
    const int64_t dil = std::max<int64_t>(attr("dilations", i, 1), 1);
    const int64_t pads = std::max<int64_t>(attr("pads", i, 0), 0) + std::max<int64_t>(attr("pads", i + r, 0), 0);
    // Explicit pads: floor((in + pads - dil·(k-1) - 1) / s) + 1, one more for ceil_mode;
    // auto_pad SAME: ceil(in / s).
    const int64_t explicit_out = std::max<int64_t>(0, x[2 + i] + pads - dil * (k - 1) - 1) / stride + 2;
    out.push_back(std::max(explicit_out, (x[2 + i] + stride - 1) / stride));
  }
  return AddBytes(Fp32Bytes(x), Fp32Bytes(out));
}

int64_t GlobalPoolBytes(const fe::Node&, const std::vector<Shape>& s) {
  if (s.empty() || s[0].size() < 2) return 0;
  return Fp32Bytes({s[0][0], s[0][1]});
}

}  // namespace

void RegisterHostKernels_pooling(HostKernelRegistry& r) {
  r.Add({{"MaxPool", "AveragePool"}, PoolBytes, Pool});
  r.Add({{"GlobalAveragePool"}, GlobalPoolBytes, GlobalAveragePool});
}

}  // namespace kiln::runtime::host_kernels
