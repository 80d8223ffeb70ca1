#include "device/backends/tt_emu/tt_emu_backend.h"

#include <chrono>

#include "device/backends/builtin.h"
#include "device/backends/tt_emu/program.h"
#include "device/backends/tt_emu/tt_eltwise.h"

namespace kiln::device {
namespace {

// The "level" setting's default.
constexpr tt_emu::EmuLevel kDefaultLevel = tt_emu::EmuLevel::kExact;

class TtEmuBackend final : public Backend {
 public:
  explicit TtEmuBackend(tt_emu::EmuLevel level) : level_(level) {}

  std::string name() const override { return kTtEmuBackend; }

  BackendCapabilities capabilities() const override {
    BackendCapabilities c;
    c.conv2d = true;
    c.conv_transpose2d = true;
    c.pool2d = false;
    c.accepts_nhwc = true;
    c.honours_precision = true;
    c.deterministic = true;
    c.prepared_ops = false;
    c.add = true;
    c.add_activations = {Activation::kNone, Activation::kRelu, Activation::kRelu6};
    c.activations = {Activation::kNone, Activation::kRelu,    Activation::kRelu6, Activation::kSilu,
                     Activation::kGelu, Activation::kSigmoid, Activation::kTanh, Activation::kHardswish};
    c.sources = tt_emu::TtMetalFollowed();
    c.description = std::string("Tenstorrent Tensix numerics emulator (docs/specs/tt-numerics.md), follows ") +
                    c.sources + ", level " +
                    tt_emu::EmuLevelName(level_);
    return c;
  }

  Result<Tensor> Conv2d(const Tensor& input, const Tensor& weights, const Tensor* bias, const Conv2dParams& params,
                        const ExecContext& ctx) override {
    return tt_emu::Conv2d(input, weights, bias, params, ctx.precision, level_, ctx.cancel, ctx.report);
  }

  Result<Tensor> ConvTranspose2d(const Tensor& input, const Tensor& weights, const Tensor* bias,
                                 const ConvTranspose2dParams& params, const ExecContext& ctx) override {
    return tt_emu::ConvTranspose2d(input, weights, bias, params, ctx.precision, level_, ctx.cancel, ctx.report);
  }

  // The card's ttnn.add in the feature maps' dtype (tt_eltwise.h); precision.host_add: the fp32
  // host add instead, for comparison (more accurate than the card).
  Result<Tensor> Add(const Tensor& a, const Tensor& b, Activation act, const ExecContext& ctx) override {
    KILN_RETURN_IF_ERROR(ctx.precision.Validate());
    if (!ctx.precision.host_add) {
      auto y = tt_emu::Add(a, b, tt_emu::AddConfigFor(ctx.precision, act), ctx.cancel, ctx.report);
      if (y.ok() && ctx.report != nullptr) ctx.report->precision = ctx.precision.Resolved();
      return y;
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (ctx.cancel != nullptr) KILN_RETURN_IF_ERROR(ctx.cancel->Check());
    KILN_RETURN_IF_ERROR(ValidateAdd(a, b));
    if (act != Activation::kNone && act != Activation::kRelu && act != Activation::kRelu6) {
      return Unimplemented(std::string("tt-emu add: fused activation ") + ActivationName(act) + " is not modelled");
    }
    auto y = AddFp32(a, b, act);
    if (!y.ok()) return y.status();
    if (ctx.report != nullptr) {
      *ctx.report = OpReport{};
      ctx.report->op = "add";
      ctx.report->backend = kTtEmuBackend;
      ctx.report->implementation = "host fp32 add (host_add)";
      ctx.report->precision = ctx.precision.Resolved();
      ctx.report->output_shape = a.shape();
      ctx.report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    return std::move(*y);
  }

 private:
  tt_emu::EmuLevel level_;
};

}  // namespace

const std::vector<BackendSetting>& TtEmuBackendSettings() {
  static const std::vector<BackendSetting> settings = {
      {kTtEmuLevelSetting, tt_emu::EmuLevelName(kDefaultLevel),
       "numerics: exact (bit-level model) or fast (oneDNN fp32 per fidelity phase)"}};
  return settings;
}

Result<std::unique_ptr<Backend>> MakeTtEmuBackend(const BackendOptions& options) {
  tt_emu::EmuLevel level = kDefaultLevel;
  for (const auto& [k, v] : options.settings) {
    if (k == kTtEmuLevelSetting) {
      auto l = tt_emu::ParseEmuLevel(v);
      if (!l.ok()) return l.status();
      level = *l;
    } else {
      return UnknownBackendSetting(kTtEmuBackend, k, TtEmuBackendSettings());
    }
  }
  return std::unique_ptr<Backend>(new TtEmuBackend(level));
}

Status RegisterTtEmuBackend(BackendRegistry& registry) {
  return registry.Register(kTtEmuBackend, MakeTtEmuBackend, TtEmuBackendSettings());
}

}  // namespace kiln::device
