#include "device/backends/tt_emu/tt_emu_backend.h"

namespace kiln::device {
namespace {

class TtEmuBackend final : public Backend {
 public:
  explicit TtEmuBackend(tt_emu::EmuLevel level) : level_(level) {}

  std::string name() const override { return "tt-emu"; }

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
                     Activation::kGelu, Activation::kSigmoid, Activation::kTanh};
    c.description = std::string("Tenstorrent Tensix numerics emulator (tt-numerics.md), level ") +
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

Result<std::unique_ptr<Backend>> MakeTtEmuBackend(const BackendOptions& options) {
  tt_emu::EmuLevel level = tt_emu::EmuLevel::kExact;
  for (const auto& [k, v] : options.settings) {
    if (k == "level") {
      auto l = tt_emu::ParseEmuLevel(v);
      if (!l.ok()) return l.status();
      level = *l;
    } else {
      return InvalidArgument("tt-emu: unknown setting '" + k + "' (known: level)");
    }
  }
  return std::unique_ptr<Backend>(new TtEmuBackend(level));
}

Status RegisterTtEmuBackend(BackendRegistry& registry) { return registry.Register("tt-emu", MakeTtEmuBackend); }

}  // namespace kiln::device
