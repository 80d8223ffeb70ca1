// FuseSilu: s = Sigmoid(y), z = Mul(y, s) or Mul(s, y), y a device op's only output: y's
// consumers are exactly that Sigmoid and that Mul, y is not a graph output, s's only consumer is
// the Mul (x·Sigmoid(w) with w ≠ x is not SiLU) → activation kSilu in the device op's next slot.
#include "compiler/convplan/passes/fusion_util.h"
#include "compiler/convplan/passes/rules.h"

namespace kiln::convplan {

namespace fe = onnx_fe;
using namespace passes_util;  // NOLINT

namespace {

struct SiluMatch {
  size_t sigmoid;
  size_t mul;
};

class FuseSiluPass : public RewriteRule<SiluMatch> {
 public:
  const char* name() const override { return "FuseSilu"; }
  std::vector<std::string_view> TargetOpTypes() const override { return {kConv2dOp, kConvTranspose2dOp}; }

 protected:
  std::optional<SiluMatch> SatisfyCondition(const PlanGraph& g, size_t i) const override {
    const std::string* y = DeviceTail(g, i);
    if (y == nullptr || !ActivationSlotFree(g.op(i).device()) || g.IsGraphOutput(*y)) return std::nullopt;
    std::vector<size_t> c = g.Consumers(*y);
    if (c.size() != 2) return std::nullopt;
    for (int k = 0; k < 2; ++k) {
      size_t s = c[k], m = c[1 - k];
      const fe::Node* sig = HostNode(g, s, "Sigmoid");
      const fe::Node* mul = HostNode(g, m, "Mul");
      if (sig == nullptr || mul == nullptr || sig->inputs.empty() || sig->inputs[0] != *y) continue;
      if (mul->inputs.size() != 2) continue;
      const std::string& so = sig->outputs[0];
      const bool pair = (mul->inputs[0] == *y && mul->inputs[1] == so) || (mul->inputs[0] == so && mul->inputs[1] == *y);
      if (!pair || !g.OnlyReadBy(so, m)) continue;
      return SiluMatch{s, m};
    }
    return std::nullopt;
  }

  Status Apply(PlanGraph& g, size_t i, const SiluMatch& m) const override {
    SetNextActivation(g.op(i).device(), device::Activation::kSilu);
    const fe::Node& mul = g.op(m.mul).host().node;
    Absorb(g, i, {m.sigmoid, m.mul}, mul.outputs[0], "FuseSilu(" + g.op(m.sigmoid).name + ", " + mul.name + ")");
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<RewritePass> MakeFuseSilu() { return std::make_unique<FuseSiluPass>(); }

}  // namespace kiln::convplan
