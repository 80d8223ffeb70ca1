// RemoveDeadHostOps: a host op none of whose outputs is read by any op or is a graph output is
// removed (e.g. the Cast that turned FLOAT16 / BFLOAT16 weights into FLOAT once the conv holds the
// weights, which lowering reads through).
#include "compiler/convplan/passes/rules.h"

namespace kiln::convplan {

namespace {

struct Dead {};

class RemoveDeadHostOpsPass : public RewriteRule<Dead> {
 public:
  const char* name() const override { return "RemoveDeadHostOps"; }
  std::vector<std::string_view> TargetOpTypes() const override { return {kAnyHostOp}; }

 protected:
  std::optional<Dead> SatisfyCondition(const PlanGraph& g, size_t i) const override {
    if (!g.alive(i) || g.op(i).on_device()) return std::nullopt;
    for (const std::string& o : g.op(i).Outputs()) {
      if (g.IsGraphOutput(o) || !g.Consumers(o).empty()) return std::nullopt;
    }
    return Dead{};
  }

  Status Apply(PlanGraph& g, size_t i, const Dead&) const override {
    g.Log("RemoveDeadHostOps: " + g.op(i).name);
    g.Remove(i);
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<RewritePass> MakeRemoveDeadHostOps() { return std::make_unique<RemoveDeadHostOpsPass>(); }

}  // namespace kiln::convplan
