#include "device/backends/tt_emu/tt_emu_backend.h"

#include "device/backends/builtin.h"

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
    c.activations = {Activation::kNone, Activation::kRelu,    Activation::kRelu6, Activation::kSilu,
                     Activation::kGelu, Activation::kSigmoid, Activation::kTanh, Activation::kHardswish};
    c.description = std::string("Tenstorrent Tensix numerics emulator (docs/specs/tt-numerics.md), level ") +
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
