#include "runtime/device_op_runner.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

#include "runtime/prepared_convs.h"

namespace kiln::runtime {

using convplan::DeviceOp;
using convplan::DeviceOpKind;
using convplan::OutputSlice;
using device::Activation;
using device::Tensor;

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// dst[j * rows + i] = src[i * cols + j] for one (rows x cols) float matrix, in cache-sized tiles.
void Transpose(const float* src, float* dst, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 16;
  for (int64_t i0 = 0; i0 < rows; i0 += kTile) {
    const int64_t i1 = std::min(rows, i0 + kTile);
    for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
      const int64_t j1 = std::min(cols, j0 + kTile);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j) dst[j * rows + i] = src[i * cols + j];
    }
  }
}

}  // namespace

namespace {

// kAdd: y = act(a + b) on the backend's Add where it offers the add and the activation, else on
// the host in fp32 (the same fp32 result the reference computes).
Result<DeviceOpRun> RunDeviceAdd(const DeviceOp& d, device::Backend& be, const device::BackendCapabilities& caps,
                                 const std::vector<const Tensor*>& ins, const device::PrecisionConfig& precision,
                                 const device::CancelToken* cancel, bool keep_backend_layout) {
  DeviceOpRun r;
  if (ins.size() != 2 || ins[0] == nullptr || ins[1] == nullptr) {
    return InvalidArgument("add needs two inputs, got " + std::to_string(ins.size()));
  }
  if (ins[0]->shape() != ins[1]->shape()) {
    return InvalidArgument("add inputs '" + d.inputs[0] + "' " + device::ShapeToString(ins[0]->shape()) + " and '" +
                           d.inputs[1] + "' " + device::ShapeToString(ins[1]->shape()) + " differ in shape");
  }
  const device::Layout io = keep_backend_layout && ins[0]->rank() == 4 && caps.accepts_nhwc ? caps.preferred_layout
                                                                                            : device::Layout::kNCHW;
  std::array<Tensor, 2> owned;
  std::array<const Tensor*, 2> x{ins[0], ins[1]};
  const auto tc = Clock::now();
  for (int k = 0; k < 2; ++k) {
    if (x[k]->layout() == io) continue;
    auto t = ConvertLayout(*x[k], io);
    if (!t.ok()) return t.status();
    owned[k] = std::move(*t);
    x[k] = &owned[k];
  }
  r.host_seconds += Since(tc);
  const Activation act = d.activation();
  const bool on_device =
      caps.add && std::find(caps.add_activations.begin(), caps.add_activations.end(), act) != caps.add_activations.end();
  if (on_device) {
    device::OpReport rep;
    device::ExecContext ctx;
    ctx.precision = precision;
    ctx.cancel = cancel;
    ctx.report = &rep;
    auto y = be.Add(*x[0], *x[1], act, ctx);
    if (!y.ok()) return y.status();
    r.y = std::move(*y);
    r.device_seconds = rep.seconds;
    r.implementation = rep.implementation;
    return r;
  }
  if (cancel != nullptr) KILN_RETURN_IF_ERROR(cancel->Check());
  const auto th = Clock::now();
  auto y = Tensor::Zeros(x[0]->shape(), device::DataType::kFloat32, io);
  if (!y.ok()) return y.status();
  const float* a = x[0]->data<float>();
  const float* b = x[1]->data<float>();
  float* o = y->data<float>();
  for (int64_t e = 0; e < y->num_elements(); ++e) o[e] = device::ApplyActivation(act, a[e] + b[e]);
  r.y = std::move(*y);
  r.implementation = "host fp32 add";
  r.activation_on_host = act != Activation::kNone;
  r.host_seconds += Since(th);
  return r;
}

}  // namespace

Result<Tensor> ConvertLayout(const Tensor& t, device::Layout layout) {
  if (t.layout() == layout) return Tensor(t);
  if (t.dtype() != device::DataType::kFloat32 || (t.rank() != 3 && t.rank() != 4)) return t.ToLayout(layout);
  auto out = Tensor::Zeros(t.shape(), t.dtype(), layout);
  if (!out.ok()) return out.status();
  const int64_t N = t.dim(0), C = t.dim(1);
  const int64_t inner = t.num_elements() / std::max<int64_t>(1, N * C);
  const float* src = t.data<float>();
  float* dst = out->data<float>();
  // Per image: NCHW is a (C x spatial) matrix, NHWC its transpose.
  for (int64_t n = 0; n < N; ++n) {
    if (layout == device::Layout::kNHWC) {
      Transpose(src + n * C * inner, dst + n * C * inner, C, inner);
    } else {
      Transpose(src + n * C * inner, dst + n * C * inner, inner, C);
    }
  }
  return out;
}

Result<DeviceOpRun> RunDeviceOp(const DeviceOp& d, device::Backend& be, const device::BackendCapabilities& caps,
                                const std::vector<const Tensor*>& ins, const Tensor* residual,
                                const device::PrecisionConfig& precision, const device::CancelToken* cancel,
                                PreparedConvs* prepared, size_t op_index, bool keep_backend_layout) {
  if (d.kind == DeviceOpKind::kAdd) return RunDeviceAdd(d, be, caps, ins, precision, cancel, keep_backend_layout);
  DeviceOpRun r;
  // The layout of the backend calls and of r.y: the backend's own when the caller keeps it (2-D
  // only; 1-D ops reshape row-major tensors), else NCHW.
  const device::Layout io = keep_backend_layout && d.spatial_rank == 2 && caps.accepts_nhwc
                                ? caps.preferred_layout
                                : device::Layout::kNCHW;
  const bool ksplit = d.inputs.size() > 1;
  // The activation runs on the host (fp32) for K-splits (it applies to the sum) and when the
  // backend does not offer it as a fused activation.
  const bool host_act = ksplit || std::find(caps.activations.begin(), caps.activations.end(), d.activation()) ==
                                      caps.activations.end();
  r.activation_on_host = host_act && d.activation() != Activation::kNone;
  // The residual add runs inside the backend's prepared conv where it can fuse it (one part,
  // activation on the device; same fp32 result, backend.h PrepareConv2dResidual), else on the host.
  Tensor residual_io;
  bool fuse_residual = residual != nullptr && prepared != nullptr && caps.fused_residual && !host_act &&
                       d.kind == DeviceOpKind::kConv2d && d.spatial_rank == 2;
  if (fuse_residual) {
    if (residual->rank() != 4 || residual->shape()[0] != ins[0]->dim(0) || residual->shape()[1] != d.out_channels()) {
      fuse_residual = false;  // the host path below reports the mismatch
    } else if (residual->layout() != io) {
      auto t = ConvertLayout(*residual, io);
      if (!t.ok()) return t.status();
      residual_io = std::move(*t);
      residual = &residual_io;
    }
  }
  for (size_t k = 0; k < d.inputs.size(); ++k) {
    const Tensor& x = *ins[k];
    if (x.rank() != d.spatial_rank + 2) {
      return InvalidArgument("input '" + d.inputs[k] + "' has shape " + device::ShapeToString(x.shape()) +
                             ", expected rank " + std::to_string(d.spatial_rank + 2));
    }
    Tensor x4;
    const Tensor* xp = &x;
    if (x.layout() != io) {
      const auto tc = Clock::now();
      auto t = ConvertLayout(x, io);
      if (!t.ok()) return t.status();
      x4 = std::move(*t);
      xp = &x4;
      r.host_seconds += Since(tc);
    }
    if (d.spatial_rank == 1) {
      auto t = x.Reshaped({x.dim(0), x.dim(1), 1, x.dim(2)});
      if (!t.ok()) return t.status();
      x4 = std::move(*t);
      xp = &x4;
    }
    device::OpReport rep;
    device::ExecContext ctx;
    ctx.precision = precision;
    ctx.cancel = cancel;
    ctx.report = &rep;
    const Tensor* bias = !ksplit && d.bias ? &*d.bias : nullptr;
    Result<Tensor> y = Status(StatusCode::kUnknown, "unset");
    if (d.kind == DeviceOpKind::kConv2d) {
      device::Conv2dParams p = d.conv;
      if (host_act) p.activation = Activation::kNone;
      // A prepared conv when the caller keeps them (weights already in the backend's format);
      // the same computation as Conv2d (backend.h), without per-call preparation.
      PreparedConvs::Lease lease;
      if (fuse_residual) {
        auto l = prepared->Acquire(op_index, k, xp->shape(), xp->layout(), p, precision, d.residual_activation);
        if (!l.ok()) return l.status();
        lease = std::move(*l);
        fuse_residual = static_cast<bool>(lease);
      }
      if (!lease && prepared != nullptr) {
        auto l = prepared->Acquire(op_index, k, xp->shape(), xp->layout(), p, precision);
        if (!l.ok()) return l.status();
        lease = std::move(*l);
      }
      y = !lease          ? be.Conv2d(*xp, d.weights[k], bias, p, ctx)
          : fuse_residual ? lease.get()->RunResidual(*xp, *residual, ctx)
                          : lease.get()->Run(*xp, ctx);
    } else {
      device::ConvTranspose2dParams p = d.conv_transpose;
      if (host_act) p.activation = Activation::kNone;
      y = be.ConvTranspose2d(*xp, d.weights[k], bias, p, ctx);
    }
    if (!y.ok()) return y.status();
    Result<Tensor> yn = y->layout() == io ? std::move(*y) : ConvertLayout(*y, io);
    if (!yn.ok()) return yn.status();
    r.device_seconds += rep.seconds;
    r.macs += rep.macs;
    if (r.implementation.empty()) r.implementation = rep.implementation;
    if (r.blocking.empty()) r.blocking = rep.blocking;
    if (!r.program) r.program = rep.program;
    if (k == 0) {
      r.y = std::move(*yn);
    } else {
      const auto th = Clock::now();
      if (yn->shape() != r.y.shape()) return Internal("K-split parts produced different shapes");
      float* acc = r.y.data<float>();
      const float* p = yn->data<float>();
      for (int64_t e = 0; e < r.y.num_elements(); ++e) acc[e] += p[e];
      r.host_seconds += Since(th);
    }
  }
  const auto th = Clock::now();
  if (ksplit || host_act) {
    const Tensor* hb = ksplit && d.bias ? &*d.bias : nullptr;  // single part: bias added on the device
    const int64_t O = r.y.dim(1);
    const int64_t inner = r.y.num_elements() / std::max<int64_t>(1, r.y.dim(0) * O);
    float* y = r.y.data<float>();
    if (r.y.layout() == device::Layout::kNCHW) {
      for (int64_t n = 0; n < r.y.dim(0); ++n) {
        for (int64_t o = 0; o < O; ++o) {
          const float b = hb != nullptr ? hb->data<float>()[o] : 0.0f;
          float* row = y + (n * O + o) * inner;
          for (int64_t e = 0; e < inner; ++e) row[e] = device::ApplyActivation(d.activation(), row[e] + b);
        }
      }
    } else {  // channels last: the channel is the fastest index
      for (int64_t e = 0; e < r.y.num_elements(); ++e) {
        const float b = hb != nullptr ? hb->data<float>()[e % O] : 0.0f;
        y[e] = device::ApplyActivation(d.activation(), y[e] + b);
      }
    }
  }
  if (d.spatial_rank == 1) {
    auto t = r.y.Reshaped({r.y.dim(0), r.y.dim(1), r.y.dim(3)});
    if (!t.ok()) return t.status();
    r.y = std::move(*t);
  }
  if (residual != nullptr && !fuse_residual) {
    if (residual->shape() != r.y.shape()) {
      return InvalidArgument("residual '" + d.residual + "' has shape " + device::ShapeToString(residual->shape()) +
                             ", the conv output " + device::ShapeToString(r.y.shape()));
    }
    Tensor rc;
    if (residual->layout() != r.y.layout()) {
      auto t = ConvertLayout(*residual, r.y.layout());
      if (!t.ok()) return t.status();
      rc = std::move(*t);
      residual = &rc;
    }
    float* y = r.y.data<float>();
    const float* q = residual->data<float>();
    for (int64_t e = 0; e < r.y.num_elements(); ++e) y[e] = device::ApplyActivation(d.residual_activation, y[e] + q[e]);
  }
  r.host_seconds += Since(th);
  return r;
}

Result<std::vector<Tensor>> SplitOutputs(const DeviceOp& d, Tensor y) {
  std::vector<Tensor> out;
  if (d.outputs.size() == 1 && d.outputs[0].channel_begin == 0 && d.outputs[0].channel_end == y.dim(1)) {
    out.push_back(std::move(y));
    return out;
  }
  if (y.layout() != device::Layout::kNCHW) {
    auto t = ConvertLayout(y, device::Layout::kNCHW);
    if (!t.ok()) return t.status();
    y = std::move(*t);
  }
  const int64_t N = y.dim(0), C = y.dim(1);
  const int64_t inner = y.num_elements() / std::max<int64_t>(1, N * C);
  for (const OutputSlice& s : d.outputs) {
    std::vector<int64_t> shape = y.shape();
    shape[1] = s.channel_end - s.channel_begin;
    auto t = Tensor::Zeros(shape);
    if (!t.ok()) return t.status();
    for (int64_t n = 0; n < N; ++n) {
      std::memcpy(t->data<float>() + n * shape[1] * inner, y.data<float>() + (n * C + s.channel_begin) * inner,
                  sizeof(float) * shape[1] * inner);
    }
    out.push_back(std::move(*t));
  }
  return out;
}

}  // namespace kiln::runtime

namespace kiln::runtime {
namespace {

int64_t SatMul(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  return a > INT64_MAX / b ? INT64_MAX : a * b;
}
int64_t SatAdd(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }
int64_t Up32(int64_t v) { return v <= 0 ? 0 : (v > INT64_MAX - 31 ? INT64_MAX : (v + 31) / 32 * 32); }
int64_t Prod(std::initializer_list<int64_t> v) {
  int64_t p = 1;
  for (int64_t x : v) p = SatMul(p, x);
  return p;
}

}  // namespace

int64_t DeviceOpBytes(const convplan::DeviceOp& op, const std::vector<std::vector<int64_t>>& input_shapes) {
  // Logical (N, C, H, W); a 1-D op runs as (N, C, 1, W).
  auto nchw = [](const std::vector<int64_t>& s) -> std::array<int64_t, 4> {
    if (s.size() == 4) return {s[0], s[1], s[2], s[3]};
    if (s.size() == 3) return {s[0], s[1], 1, s[2]};
    int64_t n = 1;
    for (int64_t d : s) n = SatMul(n, std::max<int64_t>(d, 0));
    return {1, n, 1, 1};
  };
  if (input_shapes.empty()) return 0;
  if (op.kind == convplan::DeviceOpKind::kAdd) {
    const auto s = nchw(input_shapes.front());
    return SatMul(3, Prod({s[0], s[1], s[2], s[3], 4}));
  }
  int64_t total = 0;
  const bool transpose = op.kind == convplan::DeviceOpKind::kConvTranspose2d;
  const int64_t O = op.out_channels();
  const auto [kh, kw] = op.kernel();
  int64_t out_elems = 0;
  for (size_t k = 0; k < input_shapes.size(); ++k) {
    const auto s = nchw(input_shapes[k]);
    const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
    auto pos = [](int64_t v) { return std::max<int64_t>(v, 0); };
    auto one = [](int64_t v) { return std::max<int64_t>(v, 1); };
    int64_t Hp, Wp, OH, OW;
    if (!transpose) {
      const auto& p = op.conv;
      Hp = SatAdd(H, SatAdd(pos(p.pads[0]), pos(p.pads[2])));
      Wp = SatAdd(W, SatAdd(pos(p.pads[1]), pos(p.pads[3])));
      const int64_t eh = SatAdd(SatMul(pos(kh - 1), one(p.dilations[0])), 1);
      const int64_t ew = SatAdd(SatMul(pos(kw - 1), one(p.dilations[1])), 1);
      OH = Hp >= eh ? (Hp - eh) / one(p.strides[0]) + 1 : 0;
      OW = Wp >= ew ? (Wp - ew) / one(p.strides[1]) + 1 : 0;
    } else {
      const auto& p = op.conv_transpose;
      // The unpadded transposed output bounds the result: sH·(H-1) + output_padding + dilated kernel.
      OH = SatAdd(SatMul(pos(H - 1), one(p.strides[0])),
                  SatAdd(SatAdd(SatMul(pos(kh - 1), one(p.dilations[0])), 1), pos(p.output_padding[0])));
      OW = SatAdd(SatMul(pos(W - 1), one(p.strides[1])),
                  SatAdd(SatAdd(SatMul(pos(kw - 1), one(p.dilations[1])), 1), pos(p.output_padding[1])));
      Hp = SatAdd(OH, SatMul(2, kh));
      Wp = SatAdd(OW, SatMul(2, kw));
    }
    const int64_t activations = Prod({N, Hp, Wp, Up32(C), 4});
    const int64_t partials = Prod({N, OH, OW, Up32(O), 4});
    const int64_t cg = std::max<int64_t>(C / std::max<int64_t>(op.group(), 1), 1);
    const int64_t weights = SatMul(2, Prod({Up32(O), Up32(Prod({cg, kh, kw})), 4}));
    // Parts run one at a time: the largest part's working set counts.
    total = std::max(total, SatAdd(SatAdd(activations, partials), weights));
    out_elems = std::max(out_elems, Prod({N, O, OH, OW}));
  }
  return SatAdd(total, SatMul(2, SatMul(out_elems, 4)));
}

}  // namespace kiln::runtime
