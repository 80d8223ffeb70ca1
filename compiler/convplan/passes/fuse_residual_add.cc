// FuseResidualAdd: Add(t, r) (either order) where t is a device op's only output (one
// OutputSlice, no residual yet), r is any other non-constant tensor with the same static shape (no
// broadcasting; t, r and the Add's output have equal, fully known shapes), and t has no other
// consumer and is not a graph output → DeviceOp::residual = r. An activation after the Add is then
// fused by the activation rules as the residual activation (passes/rewrite_pass.h).
#include "compiler/convplan/passes/fusion_util.h"
#include "compiler/convplan/passes/rules.h"

namespace kiln::convplan {

namespace fe = onnx_fe;
using namespace passes_util;  // NOLINT

namespace {

struct ResidualMatch {
  size_t add;
  std::string residual;
};

class FuseResidualAddPass : public RewriteRule<ResidualMatch> {
 public:
  const char* name() const override { return "FuseResidualAdd"; }
  std::vector<std::string_view> TargetOpTypes() const override { return {kConv2dOp, kConvTranspose2dOp}; }

 protected:
  std::optional<ResidualMatch> SatisfyCondition(const PlanGraph& g, size_t i) const override {
    const std::string* t = DeviceTail(g, i);
    if (t == nullptr || !g.op(i).device().residual.empty()) return std::nullopt;
    auto j = SoleConsumer(g, *t);
    if (!j) return std::nullopt;
    const fe::Node* add = HostNode(g, *j, "Add");
    if (add == nullptr || add->inputs.size() != 2) return std::nullopt;
    std::string r;
    if (add->inputs[0] == *t) {
      r = add->inputs[1];
    } else if (add->inputs[1] == *t) {
      r = add->inputs[0];
    } else {
      return std::nullopt;
    }
    if (r == *t || g.Constant(r) != nullptr) return std::nullopt;
    const fe::Tensor* tt = g.FindTensor(*t);
    const fe::Tensor* rt = g.FindTensor(r);
    const fe::Tensor* ot = g.FindTensor(add->outputs[0]);
    if (tt == nullptr || rt == nullptr || ot == nullptr) return std::nullopt;
    if (!tt->shape.has_rank() || !(tt->shape == rt->shape) || !(tt->shape == ot->shape)) return std::nullopt;
    for (const fe::Dim& d : tt->shape.dims()) {
      if (d.is_unknown()) return std::nullopt;
    }
    return ResidualMatch{*j, std::move(r)};
  }

  Status Apply(PlanGraph& g, size_t i, const ResidualMatch& m) const override {
    const fe::Node add = g.op(m.add).host().node;
    g.BeginEdit(i);
    g.op(i).device().residual = m.residual;
    Absorb(g, i, {m.add}, add.outputs[0], "FuseResidualAdd(" + add.name + ")");
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<RewritePass> MakeFuseResidualAdd() { return std::make_unique<FuseResidualAddPass>(); }

}  // namespace kiln::convplan
