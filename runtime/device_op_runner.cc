#include "runtime/device_op_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace kiln::runtime {

using convplan::DeviceOp;
using convplan::DeviceOpKind;
using convplan::OutputSlice;
using device::Activation;
using device::Tensor;

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

Result<DeviceOpRun> RunDeviceOp(const DeviceOp& d, device::Backend& be, const device::BackendCapabilities& caps,
                                const std::vector<const Tensor*>& ins, const Tensor* residual,
                                const device::PrecisionConfig& precision, const device::CancelToken* cancel) {
  DeviceOpRun r;
  const bool ksplit = d.inputs.size() > 1;
  // The activation runs on the host (fp32) for K-splits (it applies to the sum) and when the
  // backend does not offer it as a fused activation.
  const bool host_act = ksplit || std::find(caps.activations.begin(), caps.activations.end(), d.activation()) ==
                                      caps.activations.end();
  r.activation_on_host = host_act && d.activation() != Activation::kNone;
  for (size_t k = 0; k < d.inputs.size(); ++k) {
    const Tensor& x = *ins[k];
    if (x.rank() != d.spatial_rank + 2) {
      return InvalidArgument("input '" + d.inputs[k] + "' has shape " + device::ShapeToString(x.shape()) +
                             ", expected rank " + std::to_string(d.spatial_rank + 2));
    }
    Tensor x4;
    const Tensor* xp = &x;
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
      y = be.Conv2d(*xp, d.weights[k], bias, p, ctx);
    } else {
      device::ConvTranspose2dParams p = d.conv_transpose;
      if (host_act) p.activation = Activation::kNone;
      y = be.ConvTranspose2d(*xp, d.weights[k], bias, p, ctx);
    }
    if (!y.ok()) return y.status();
    auto yn = y->ToLayout(device::Layout::kNCHW);
    if (!yn.ok()) return yn.status();
    r.device_seconds += rep.seconds;
    r.macs += rep.macs;
    if (r.implementation.empty()) r.implementation = rep.implementation;
    if (r.blocking.empty()) r.blocking = rep.blocking;
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
    for (int64_t n = 0; n < r.y.dim(0); ++n) {
      for (int64_t o = 0; o < O; ++o) {
        const float b = hb != nullptr ? hb->data<float>()[o] : 0.0f;
        float* row = y + (n * O + o) * inner;
        for (int64_t e = 0; e < inner; ++e) row[e] = device::ApplyActivation(d.activation(), row[e] + b);
      }
    }
  }
  if (d.spatial_rank == 1) {
    auto t = r.y.Reshaped({r.y.dim(0), r.y.dim(1), r.y.dim(3)});
    if (!t.ok()) return t.status();
    r.y = std::move(*t);
  }
  if (residual != nullptr) {
    if (residual->shape() != r.y.shape()) {
      return InvalidArgument("residual '" + d.residual + "' has shape " + device::ShapeToString(residual->shape()) +
                             ", the conv output " + device::ShapeToString(r.y.shape()));
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
