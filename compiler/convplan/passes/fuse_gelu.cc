// FuseGelu: the erf form exported by PyTorch (onnx <= 1.12 has no Gelu op), 0.5·y·(1 + Erf(y/√2))
// with y a device op's only output:
//   d = Div(y, √2) or Mul(y, 1/√2); e = Erf(d); a = Add(e, 1) (either order);
//   then either m = Mul(y, a), z = Mul(m, 0.5), or h = Mul(y, 0.5), z = Mul(h, a)
// (operands in either order); constants are one-element and match within 1e-4 relative. y's
// consumers are exactly the pattern's two readers, y is not a graph output, every other
// intermediate has the pattern's one reader → activation kGelu in the device op's next slot.
#include <cmath>

#include "compiler/convplan/passes/fusion_util.h"
#include "compiler/convplan/passes/rules.h"

namespace kiln::convplan {

namespace fe = onnx_fe;
using namespace passes_util;  // NOLINT

namespace {

// The other operand of a binary node when one operand is `x`.
std::optional<std::string> Other(const fe::Node& n, const std::string& x) {
  if (n.inputs.size() != 2) return std::nullopt;
  if (n.inputs[0] == x) return n.inputs[1];
  if (n.inputs[1] == x) return n.inputs[0];
  return std::nullopt;
}

// Match: the ops of the pattern, the final Mul last.
class FuseGeluPass : public RewriteRule<std::vector<size_t>> {
 public:
  const char* name() const override { return "FuseGelu"; }
  std::vector<std::string_view> TargetOpTypes() const override { return {kConv2dOp, kConvTranspose2dOp}; }

 protected:
  std::optional<std::vector<size_t>> SatisfyCondition(const PlanGraph& g, size_t i) const override {
    const std::string* yp = DeviceTail(g, i);
    if (yp == nullptr || !ActivationSlotFree(g.op(i).device()) || g.IsGraphOutput(*yp)) return std::nullopt;
    const std::string& y = *yp;
    std::vector<size_t> c = g.Consumers(y);
    if (c.size() != 2) return std::nullopt;
    for (int k = 0; k < 2; ++k) {
      size_t dj = c[k], pj = c[1 - k];
      // d = y / sqrt(2)  or  y * (1/sqrt(2))
      const fe::Node* dn = HostNode(g, dj, "Div");
      bool dok = false;
      if (dn != nullptr && dn->inputs.size() == 2 && dn->inputs[0] == y) {
        dok = Near(ScalarConstant(g, dn->inputs[1]), std::sqrt(2.0));
      } else if ((dn = HostNode(g, dj, "Mul")) != nullptr) {
        auto o = Other(*dn, y);
        dok = o && Near(ScalarConstant(g, *o), 1.0 / std::sqrt(2.0));
      }
      if (!dok) continue;
      auto ej = SoleConsumer(g, dn->outputs[0]);
      if (!ej) continue;
      const fe::Node* en = HostNode(g, *ej, "Erf");
      if (en == nullptr || en->inputs[0] != dn->outputs[0]) continue;
      auto aj = SoleConsumer(g, en->outputs[0]);
      if (!aj) continue;
      const fe::Node* an = HostNode(g, *aj, "Add");
      if (an == nullptr) continue;
      auto one = Other(*an, en->outputs[0]);
      if (!one || !Near(ScalarConstant(g, *one), 1.0)) continue;
      const std::string& a = an->outputs[0];
      const fe::Node* pn = HostNode(g, pj, "Mul");
      if (pn == nullptr) continue;
      auto pother = Other(*pn, y);
      if (!pother) continue;
      if (*pother == a) {
        // m = y * a ; z = m * 0.5
        if (!g.OnlyReadBy(a, pj)) continue;
        auto zj = SoleConsumer(g, pn->outputs[0]);
        if (!zj) continue;
        const fe::Node* zn = HostNode(g, *zj, "Mul");
        if (zn == nullptr) continue;
        auto half = Other(*zn, pn->outputs[0]);
        if (!half || !Near(ScalarConstant(g, *half), 0.5)) continue;
        return std::vector<size_t>{dj, *ej, *aj, pj, *zj};
      }
      if (Near(ScalarConstant(g, *pother), 0.5)) {
        // h = y * 0.5 ; z = h * a
        auto zj = SoleConsumer(g, pn->outputs[0]);
        if (!zj) continue;
        const fe::Node* zn = HostNode(g, *zj, "Mul");
        if (zn == nullptr) continue;
        auto other = Other(*zn, pn->outputs[0]);
        if (!other || *other != a || !g.OnlyReadBy(a, *zj)) continue;
        return std::vector<size_t>{dj, *ej, *aj, pj, *zj};
      }
    }
    return std::nullopt;
  }

  Status Apply(PlanGraph& g, size_t i, const std::vector<size_t>& m) const override {
    SetNextActivation(g.op(i).device(), device::Activation::kGelu);
    std::string out = g.op(m.back()).host().node.outputs[0];
    std::string names;
    for (size_t j : m) names += (names.empty() ? "" : ", ") + g.op(j).name;
    Absorb(g, i, m, out, "FuseGelu(" + names + ")");
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<RewritePass> MakeFuseGelu() { return std::make_unique<FuseGeluPass>(); }

}  // namespace kiln::convplan
