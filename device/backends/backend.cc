#include "device/backends/backend.h"

#include <algorithm>
#include <cmath>

#include "device/backends/conv_geometry.h"

namespace kiln::device {
namespace {

std::string Shape(const std::vector<int64_t>& s) { return ShapeToString(s); }

Status CheckFloatTensor(const Tensor& t, const char* what, bool allow_nhwc) {
  if (t.empty()) return InvalidArgument(std::string(what) + " tensor is empty");
  if (t.dtype() != DataType::kFloat32) {
    return InvalidArgument(std::string(what) + " must be float32, got " + DataTypeName(t.dtype()));
  }
  if (!allow_nhwc && t.layout() != Layout::kNCHW) {
    return InvalidArgument(std::string(what) + " must be row-major (NCHW layout tag)");
  }
  return Status::Ok();
}

Status CheckParams2(const std::array<int64_t, 2>& strides, const std::array<int64_t, 4>& pads,
                    const std::array<int64_t, 2>& dilations) {
  for (int i = 0; i < 2; ++i) {
    if (strides[i] < 1) return InvalidArgument("strides must be >= 1, got " + std::to_string(strides[i]));
    if (dilations[i] < 1) {
      return InvalidArgument("dilations must be >= 1, got " + std::to_string(dilations[i]));
    }
  }
  for (int64_t p : pads) {
    if (p < 0) return InvalidArgument("pads must be >= 0, got " + std::to_string(p));
  }
  return Status::Ok();
}

Status CheckBias(const std::vector<int64_t>* bias_shape, int64_t out_channels) {
  if (bias_shape == nullptr) return Status::Ok();
  if (bias_shape->size() != 1 || (*bias_shape)[0] != out_channels) {
    return InvalidArgument("bias must have shape [" + std::to_string(out_channels) + "], got " +
                           Shape(*bias_shape));
  }
  return Status::Ok();
}

// A PreparedConv that just calls the backend's Conv2d with stored weights.
class GenericPreparedConv final : public PreparedConv {
 public:
  GenericPreparedConv(Backend* backend, std::vector<int64_t> input_shape, Layout layout, Tensor w,
                      std::optional<Tensor> b, Conv2dParams params, PrecisionConfig precision,
                      std::vector<int64_t> out_shape)
      : backend_(backend),
        input_shape_(std::move(input_shape)),
        layout_(layout),
        weights_(std::move(w)),
        bias_(std::move(b)),
        params_(params),
        precision_(precision),
        out_shape_(std::move(out_shape)) {}

  Result<Tensor> Run(const Tensor& input, const ExecContext& ctx) override {
    if (input.shape() != input_shape_ || input.layout() != layout_) {
      return InvalidArgument("prepared conv expects input " + Shape(input_shape_) + " " +
                             LayoutName(layout_) + ", got " + input.DebugString());
    }
    ExecContext c = ctx;
    c.precision = precision_;
    return backend_->Conv2d(input, weights_, bias_ ? &*bias_ : nullptr, params_, c);
  }
  const std::vector<int64_t>& output_shape() const override { return out_shape_; }

 private:
  Backend* backend_;
  std::vector<int64_t> input_shape_;
  Layout layout_;
  Tensor weights_;
  std::optional<Tensor> bias_;
  Conv2dParams params_;
  PrecisionConfig precision_;
  std::vector<int64_t> out_shape_;
};

}  // namespace

float ApplyActivation(Activation a, float x) {
  switch (a) {
    case Activation::kNone: return x;
    case Activation::kRelu: return x > 0.f ? x : 0.f;
    case Activation::kRelu6: return std::min(std::max(x, 0.f), 6.f);
    case Activation::kSilu: return x / (1.f + std::exp(-x));
    case Activation::kGelu: return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f));
    case Activation::kSigmoid: return 1.f / (1.f + std::exp(-x));
    case Activation::kTanh: return std::tanh(x);
    case Activation::kHardswish: return x * std::min(std::max(x + 3.f, 0.f), 6.f) / 6.f;
  }
  return x;
}

Status CancelToken::Check() const {
  if (cancelled()) return Cancelled("cancelled by client");
  if (has_deadline_ && Clock::now() >= deadline_) return Status(StatusCode::kDeadlineExceeded, "deadline exceeded");
  return Status::Ok();
}

Result<Tensor> Backend::Pool2d(const Tensor&, const Pool2dParams&, const ExecContext&) {
  return Unimplemented("backend '" + name() + "' does not implement pool2d");
}

Result<Tensor> Backend::Add(const Tensor&, const Tensor&, Activation, const ExecContext&) {
  return Unimplemented("backend '" + name() + "' does not implement add");
}

Status ValidateAdd(const Tensor& a, const Tensor& b) {
  KILN_RETURN_IF_ERROR(CheckFloatTensor(a, "add input a", true));
  KILN_RETURN_IF_ERROR(CheckFloatTensor(b, "add input b", true));
  if (a.shape() != b.shape()) {
    return InvalidArgument("add inputs differ in shape: " + Shape(a.shape()) + " and " + Shape(b.shape()) +
                           " (no broadcasting)");
  }
  if (a.rank() < 2) return InvalidArgument("add inputs must have rank >= 2 (N, C, ...), got " + Shape(a.shape()));
  if (a.layout() != b.layout()) return InvalidArgument("add inputs differ in layout (NCHW and NHWC)");
  return Status::Ok();
}

Result<Tensor> AddFp32(const Tensor& a, const Tensor& b, Activation act) {
  KILN_RETURN_IF_ERROR(ValidateAdd(a, b));
  auto y = Tensor::Zeros(a.shape(), DataType::kFloat32, a.layout());
  if (!y.ok()) return y.status();
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* py = y->data<float>();
  for (int64_t e = 0; e < y->num_elements(); ++e) py[e] = ApplyActivation(act, pa[e] + pb[e]);
  return y;
}

Result<std::unique_ptr<PreparedConv>> Backend::PrepareConv2d(std::vector<int64_t> input_shape,
                                                             Layout input_layout, const Tensor& weights,
                                                             const Tensor* bias, const Conv2dParams& params,
                                                             const PrecisionConfig& precision) {
  KILN_RETURN_IF_ERROR(CheckFloatTensor(weights, "weights", false));
  if (bias) KILN_RETURN_IF_ERROR(CheckFloatTensor(*bias, "bias", false));
  if (input_layout == Layout::kNHWC && !capabilities().accepts_nhwc) {
    return InvalidArgument("backend '" + name() + "' accepts only NCHW inputs");
  }
  auto out = ValidateConv2dShapes(input_shape, weights.shape(), bias ? &bias->shape() : nullptr, params);
  if (!out.ok()) return out.status();
  std::optional<Tensor> b;
  if (bias) b = *bias;
  return std::unique_ptr<PreparedConv>(new GenericPreparedConv(this, std::move(input_shape), input_layout,
                                                               weights, std::move(b), params, precision,
                                                               std::move(*out)));
}

Result<std::vector<int64_t>> ValidateConv2dShapes(const std::vector<int64_t>& x,
                                                  const std::vector<int64_t>& w,
                                                  const std::vector<int64_t>* bias_shape,
                                                  const Conv2dParams& p) {
  if (x.size() != 4) return InvalidArgument("conv2d input must be rank 4 (N, C, H, W), got " + Shape(x));
  if (w.size() != 4) return InvalidArgument("conv2d weights must be rank 4 OIHW, got " + Shape(w));
  KILN_RETURN_IF_ERROR(CheckParams2(p.strides, p.pads, p.dilations));
  if (p.group < 1) return InvalidArgument("group must be >= 1, got " + std::to_string(p.group));
  for (int64_t d : x) {
    if (d < 1) return InvalidArgument("conv2d input dims must be >= 1, got " + Shape(x));
  }
  for (int64_t d : w) {
    if (d < 1) return InvalidArgument("conv2d weight dims must be >= 1, got " + Shape(w));
  }
  if (x[1] % p.group != 0 || w[0] % p.group != 0) {
    return InvalidArgument("group " + std::to_string(p.group) + " must divide input channels " +
                           std::to_string(x[1]) + " and output channels " + std::to_string(w[0]));
  }
  if (w[1] != x[1] / p.group) {
    return InvalidArgument("conv2d weights " + Shape(w) + " (OIHW) need I = C/group = " +
                           std::to_string(x[1] / p.group) + " for input " + Shape(x) + ", group " +
                           std::to_string(p.group));
  }
  KILN_RETURN_IF_ERROR(CheckBias(bias_shape, w[0]));
  std::vector<int64_t> out{x[0], w[0], 0, 0};
  for (int i = 0; i < 2; ++i) {
    auto o = ConvOutputSize(x[2 + i], w[2 + i], p.strides[i], p.dilations[i], p.pads[i], p.pads[2 + i]);
    if (!o.ok()) return o.status().WithContext(std::string("conv2d ") + (i ? "W" : "H") + " axis");
    out[2 + i] = *o;
  }
  return out;
}

Result<std::vector<int64_t>> ValidateConv2d(const Tensor& input, const Tensor& weights, const Tensor* bias,
                                            const Conv2dParams& params) {
  KILN_RETURN_IF_ERROR(CheckFloatTensor(input, "conv2d input", true));
  KILN_RETURN_IF_ERROR(CheckFloatTensor(weights, "conv2d weights", false));
  if (bias) KILN_RETURN_IF_ERROR(CheckFloatTensor(*bias, "conv2d bias", false));
  return ValidateConv2dShapes(input.shape(), weights.shape(), bias ? &bias->shape() : nullptr, params);
}

Result<std::vector<int64_t>> ValidateConvTranspose2d(const Tensor& input, const Tensor& weights,
                                                     const Tensor* bias, const ConvTranspose2dParams& p) {
  KILN_RETURN_IF_ERROR(CheckFloatTensor(input, "conv_transpose2d input", true));
  KILN_RETURN_IF_ERROR(CheckFloatTensor(weights, "conv_transpose2d weights", false));
  if (bias) KILN_RETURN_IF_ERROR(CheckFloatTensor(*bias, "conv_transpose2d bias", false));
  const auto& x = input.shape();
  const auto& w = weights.shape();
  if (x.size() != 4) {
    return InvalidArgument("conv_transpose2d input must be rank 4 (N, C, H, W), got " + Shape(x));
  }
  if (w.size() != 4) return InvalidArgument("conv_transpose2d weights must be rank 4 IOHW, got " + Shape(w));
  KILN_RETURN_IF_ERROR(CheckParams2(p.strides, p.pads, p.dilations));
  if (p.group < 1) return InvalidArgument("group must be >= 1, got " + std::to_string(p.group));
  for (int64_t d : x) {
    if (d < 1) return InvalidArgument("conv_transpose2d input dims must be >= 1, got " + Shape(x));
  }
  for (int64_t d : w) {
    if (d < 1) return InvalidArgument("conv_transpose2d weight dims must be >= 1, got " + Shape(w));
  }
  if (w[0] != x[1]) {
    return InvalidArgument("conv_transpose2d weights " + Shape(w) + " (IOHW) need I = C = " +
                           std::to_string(x[1]) + " for input " + Shape(x));
  }
  if (x[1] % p.group != 0) {
    return InvalidArgument("group " + std::to_string(p.group) + " must divide input channels " +
                           std::to_string(x[1]));
  }
  const int64_t out_channels = w[1] * p.group;
  std::vector<int64_t> bshape;
  if (bias) bshape = bias->shape();
  KILN_RETURN_IF_ERROR(CheckBias(bias ? &bshape : nullptr, out_channels));
  std::vector<int64_t> out{x[0], out_channels, 0, 0};
  for (int i = 0; i < 2; ++i) {
    auto o = ConvTransposeOutputSize(x[2 + i], w[2 + i], p.strides[i], p.dilations[i], p.pads[i],
                                     p.pads[2 + i], p.output_padding[i]);
    if (!o.ok()) return o.status().WithContext(std::string("conv_transpose2d ") + (i ? "W" : "H") + " axis");
    out[2 + i] = *o;
  }
  return out;
}

Result<std::vector<int64_t>> ValidatePool2d(const Tensor& input, const Pool2dParams& p) {
  KILN_RETURN_IF_ERROR(CheckFloatTensor(input, "pool2d input", true));
  const auto& x = input.shape();
  if (x.size() != 4) return InvalidArgument("pool2d input must be rank 4 (N, C, H, W), got " + Shape(x));
  KILN_RETURN_IF_ERROR(CheckParams2(p.strides, p.pads, p.dilations));
  for (int64_t d : x) {
    if (d < 1) return InvalidArgument("pool2d input dims must be >= 1, got " + Shape(x));
  }
  std::vector<int64_t> out{x[0], x[1], 0, 0};
  for (int i = 0; i < 2; ++i) {
    if (p.kernel[i] < 1) return InvalidArgument("pool2d kernel must be >= 1, got " + std::to_string(p.kernel[i]));
    const int64_t dk = DilatedKernel(p.kernel[i], p.dilations[i]);
    if (p.pads[i] >= dk || p.pads[2 + i] >= dk) {
      return InvalidArgument("pool2d pads (" + std::to_string(p.pads[i]) + ", " + std::to_string(p.pads[2 + i]) +
                             ") must be smaller than the dilated kernel " + std::to_string(dk));
    }
    auto o = PoolOutputSize(x[2 + i], p.kernel[i], p.strides[i], p.dilations[i], p.pads[i], p.pads[2 + i],
                            p.ceil_mode);
    if (!o.ok()) return o.status().WithContext(std::string("pool2d ") + (i ? "W" : "H") + " axis");
    out[2 + i] = *o;
  }
  return out;
}

Status UnknownBackendSetting(std::string_view who, std::string_view key,
                             const std::vector<BackendSetting>& declared) {
  std::string known;
  for (const BackendSetting& s : declared) known += (known.empty() ? "" : ", ") + s.key;
  return InvalidArgument(std::string(who) + ": unknown setting '" + std::string(key) + "' (known: " +
                         (known.empty() ? "none" : known) + ")");
}

Status BackendRegistry::Register(const std::string& name, BackendFactory factory,
                                 std::vector<BackendSetting> settings) {
  if (name.empty()) return InvalidArgument("backend name must not be empty");
  if (!factory) return InvalidArgument("backend '" + name + "': empty factory");
  std::lock_guard<std::mutex> lock(mu_);
  if (!factories_.emplace(name, Entry{std::move(factory), std::move(settings)}).second) {
    return Status(StatusCode::kAlreadyExists, "backend '" + name + "' is already registered");
  }
  return Status::Ok();
}

Status BackendRegistry::UnknownBackend(const std::string& name) const {
  std::string known;
  for (const auto& n : Names()) known += (known.empty() ? "" : ", ") + n;
  return NotFound("unknown backend '" + name + "' (available: " + (known.empty() ? "none" : known) + ")");
}

Result<std::unique_ptr<Backend>> BackendRegistry::Create(const std::string& name,
                                                         const BackendOptions& options) const {
  BackendFactory f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = factories_.find(name);
    if (it != factories_.end()) f = it->second.factory;
  }
  if (!f) return UnknownBackend(name);
  try {
    return f(options);
  } catch (const std::exception& e) {
    return Internal("backend '" + name + "' factory threw: " + e.what());
  }
}

Result<std::vector<BackendSetting>> BackendRegistry::Settings(const std::string& name) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = factories_.find(name);
    if (it != factories_.end()) return it->second.settings;
  }
  return UnknownBackend(name);
}

bool BackendRegistry::Contains(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return factories_.count(name) != 0;
}

std::vector<std::string> BackendRegistry::Names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const auto& [n, e] : factories_) names.push_back(n);
  return names;
}

Result<std::unique_ptr<PreparedConv>> Backend::PrepareConv2dResidual(std::vector<int64_t>, Layout, const Tensor&,
                                                                     const Tensor*, const Conv2dParams&, Activation,
                                                                     const PrecisionConfig&) {
  return Unimplemented(name() + ": no fused residual add");
}

Result<Tensor> PreparedConv::RunResidual(const Tensor&, const Tensor&, const ExecContext&) {
  return Unimplemented("this prepared conv has no fused residual add");
}

}  // namespace kiln::device
