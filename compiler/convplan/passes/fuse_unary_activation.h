// The single-node activation fusion shared by FuseRelu, FuseRelu6 and FuseSigmoid
// (compiler/convplan/passes/fuse_relu.cc, fuse_relu6.cc, fuse_sigmoid.cc): a host op of one op
// type reading a device op's only output (a device add takes relu and relu6 only), that output read by nothing else and not a graph output,
// the device op's next activation slot free (passes/rewrite_pass.h) → the activation fills that
// slot and the host op disappears.
#pragma once

#include <string>

#include "compiler/convplan/passes/fusion_util.h"
#include "compiler/convplan/passes/rewrite_pass.h"

namespace kiln::convplan {

class FuseUnaryActivation : public RewriteRule<size_t> {
 public:
  FuseUnaryActivation(const char* pass_name, const char* op_type, device::Activation act)
      : name_(pass_name), op_type_(op_type), act_(act) {}
  const char* name() const override { return name_; }
  std::vector<std::string_view> TargetOpTypes() const override { return {kConv2dOp, kConvTranspose2dOp, kAddOp}; }

 protected:
  /// Extra condition on the activation node (FuseRelu6: the Clip bounds).
  virtual bool Accept(const PlanGraph&, const onnx_fe::Node&) const { return true; }

  // Match: the activation op.
  std::optional<size_t> SatisfyCondition(const PlanGraph& g, size_t i) const override {
    const std::string* t = passes_util::DeviceTail(g, i);
    if (t == nullptr || !passes_util::ActivationSlotFree(g.op(i).device())) return std::nullopt;
    // A device add fuses what ttnn.add offers as a fused post-activation here: relu, relu6.
    if (g.op(i).device().kind == DeviceOpKind::kAdd && act_ != device::Activation::kRelu &&
        act_ != device::Activation::kRelu6) {
      return std::nullopt;
    }
    auto j = passes_util::SoleConsumer(g, *t);
    if (!j) return std::nullopt;
    const onnx_fe::Node* n = passes_util::HostNode(g, *j, op_type_);
    if (n == nullptr || n->inputs.empty() || n->inputs[0] != *t || n->outputs.empty()) return std::nullopt;
    if (!Accept(g, *n)) return std::nullopt;
    return j;
  }

  Status Apply(PlanGraph& g, size_t i, const size_t& j) const override {
    passes_util::SetNextActivation(g.op(i).device(), act_);
    const onnx_fe::Node& n = g.op(j).host().node;
    passes_util::Absorb(g, i, {j}, n.outputs[0], std::string(name_) + "(" + n.name + ")");
    return Status::Ok();
  }

 private:
  const char* name_;
  const char* op_type_;
  device::Activation act_;
};

}  // namespace kiln::convplan
