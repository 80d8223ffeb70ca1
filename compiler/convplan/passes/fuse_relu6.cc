// FuseRelu6: Clip with min == 0 and max == 6 exactly, reading a device op's only output (the
// other conditions: passes/fuse_unary_activation.h). The bounds: opset < 11 from the min / max
// attributes; opset >= 11 from inputs 1 and 2, both present and constant with one element (scalar
// or shape [1]) — ONNX Clip-6 / Clip-11. Clip(x, "", 6) or Clip(x, 0) is not relu6.
#include "compiler/convplan/passes/fuse_unary_activation.h"
#include "compiler/convplan/passes/rules.h"

namespace kiln::convplan {

namespace fe = onnx_fe;

namespace {

class FuseRelu6Pass : public FuseUnaryActivation {
 public:
  FuseRelu6Pass() : FuseUnaryActivation("FuseRelu6", "Clip", device::Activation::kRelu6) {}

 protected:
  bool Accept(const PlanGraph& g, const fe::Node& n) const override {
    return g.plan().model && IsRelu6Clip(n, g.plan().model->graph());
  }
};

}  // namespace

bool IsRelu6Clip(const fe::Node& node, const fe::Graph& graph) {
  if (node.op_type != "Clip") return false;
  if (node.opset_version < 11) {
    const fe::Attribute* mn = node.FindAttribute("min");
    const fe::Attribute* mx = node.FindAttribute("max");
    return mn != nullptr && mx != nullptr && mn->type == fe::AttributeType::kFloat &&
           mx->type == fe::AttributeType::kFloat && mn->f == 0.0f && mx->f == 6.0f;
  }
  if (!node.has_input(1) || !node.has_input(2)) return false;
  const fe::ConstantData* mn = graph.ConstantInput(node, 1);
  const fe::ConstantData* mx = graph.ConstantInput(node, 2);
  return mn != nullptr && mx != nullptr && mn->size() == 1 && mx->size() == 1 && mn->floats()[0] == 0.0f &&
         mx->floats()[0] == 6.0f;
}

std::unique_ptr<RewritePass> MakeFuseRelu6() { return std::make_unique<FuseRelu6Pass>(); }

}  // namespace kiln::convplan
