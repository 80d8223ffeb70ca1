// The pass manager of compiler/convplan (compiler/convplan/passes/pass_manager.h): the pipeline
// declared once, passes disabled by name, dispatch only on target op types, Apply reusing the
// condition's match, and the INTERNAL error of a pipeline that does not converge.
#include <gtest/gtest.h>

#include <set>

#include "compiler/convplan/passes/pass_manager.h"
#include "compiler/convplan/passes/rules.h"
#include "tests/convplan/test_util.h"

namespace kiln::convplan {
namespace {

using namespace testutil;  // NOLINT

constexpr int kF = onnx::TensorProto::FLOAT;

// x -> conv1 -> Relu -> conv2 -> Relu -> y
std::shared_ptr<const onnx_fe::Model> ConvReluChain() {
  OnnxModelBuilder b(13);
  b.Input("x", kF, {1, 4, 6, 6});
  AddConv(b, "x", "c1", "conv1", 4, 4, 3, 1);
  b.Node("Relu", {"c1"}, {"r1"}, "relu1");
  AddConv(b, "r1", "c2", "conv2", 4, 4, 3, 2);
  b.Node("Relu", {"c2"}, {"y"}, "relu2");
  b.Output("y");
  return Load(b);
}

// x -> conv -> Add(x) -> Relu -> y: DeviceAdd in round 1, FuseRelu (the add's activation) in round
// 2, nothing in round 3 (with DeviceAdd disabled: FuseResidualAdd, then FuseRelu as the residual
// activation).
std::shared_ptr<const onnx_fe::Model> ResidualRelu() {
  OnnxModelBuilder b(13);
  b.Input("x", kF, {1, 4, 6, 6});
  AddConv(b, "x", "c", "conv", 4, 4, 3, 1);
  b.Node("Add", {"c", "x"}, {"a"}, "add");
  b.Node("Relu", {"a"}, {"y"}, "relu");
  b.Output("y");
  return Load(b);
}

ConvPlan Lowered(const std::shared_ptr<const onnx_fe::Model>& m) {
  auto p = LowerModel(m, runtime::HostKernels());
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? std::move(*p) : ConvPlan{};
}

TEST(PassesPipeline, PipelineNamesAreThePassesNames) {
  std::vector<std::string> names;
  for (const PipelinePass& p : Pipeline()) {
    EXPECT_STREQ(p.make()->name(), p.name);
    names.push_back(p.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"FoldBatchNorm", "FuseSilu", "FuseGelu", "FuseRelu", "FuseRelu6",
                                             "FuseSigmoid", "DeviceAdd", "FuseResidualAdd", "KSplitConcat", "MergeSiblingConvs",
                                             "RemoveDeadHostOps"}));
  auto all = PipelinePasses();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), Pipeline().size());
}

TEST(PassesPipeline, PassesDisabledByName) {
  auto m = ConvReluChain();
  ASSERT_TRUE(m);
  auto fused = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  EXPECT_EQ(CountHost(*fused, "Relu"), 0u);
  PlanOptions o;
  o.disabled_passes = {"FuseRelu"};
  auto plain = BuildConvPlan(m, runtime::HostKernels(), o);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(CountHost(*plain, "Relu"), 2u);
  EXPECT_TRUE(plain->rewrites.empty());

  o.disabled_passes = {"FuseRelu", "NoSuchPass"};
  auto bad = BuildConvPlan(m, runtime::HostKernels(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'NoSuchPass'"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("MergeSiblingConvs"), std::string::npos) << bad.status().message();
}

TEST(PassesPipeline, RoundLimitReachedIsInternalNamingThePassesStillFiring) {
  auto m = ResidualRelu();
  ASSERT_TRUE(m);
  PlanOptions o;
  o.max_rounds = 1;
  auto one = BuildConvPlan(m, runtime::HostKernels(), o);
  ASSERT_FALSE(one.ok());
  EXPECT_EQ(one.status().code(), StatusCode::kInternal);
  EXPECT_NE(one.status().message().find("did not converge after 1 rounds"), std::string::npos)
      << one.status().message();
  EXPECT_NE(one.status().message().find("still firing: DeviceAdd"), std::string::npos) << one.status().message();
  o.max_rounds = 2;
  auto two = BuildConvPlan(m, runtime::HostKernels(), o);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("still firing: FuseRelu"), std::string::npos) << two.status().message();
  o.max_rounds = 3;  // round 3 rewrites nothing: converged
  auto three = BuildConvPlan(m, runtime::HostKernels(), o);
  ASSERT_TRUE(three.ok()) << three.status().ToString();
  ASSERT_EQ(three->ops.size(), 2u);
  EXPECT_EQ(three->ops[1].device().kind, DeviceOpKind::kAdd);
  EXPECT_EQ(three->ops[1].device().activation(), device::Activation::kRelu);
  // The same rounds with the Add fused into the conv (DeviceAdd disabled).
  o.disabled_passes = {"DeviceAdd"};
  o.max_rounds = 1;
  one = BuildConvPlan(m, runtime::HostKernels(), o);
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("still firing: FuseResidualAdd"), std::string::npos)
      << one.status().message();
  o.max_rounds = 2;
  two = BuildConvPlan(m, runtime::HostKernels(), o);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("still firing: FuseRelu"), std::string::npos) << two.status().message();
  o.max_rounds = 3;
  three = BuildConvPlan(m, runtime::HostKernels(), o);
  ASSERT_TRUE(three.ok()) << three.status().ToString();
  ASSERT_EQ(three->ops.size(), 1u);
  EXPECT_EQ(three->ops[0].device().residual_activation, device::Activation::kRelu);
  o.disabled_passes.clear();
  o.max_rounds = 0;
  EXPECT_EQ(BuildConvPlan(m, runtime::HostKernels(), o).status().code(), StatusCode::kInvalidArgument);
}

// Changes the fused activation of every conv from `from` to `to`: two such rules in opposite
// directions undo each other forever.
class Toggle : public RewriteRule<bool> {
 public:
  Toggle(const char* name, device::Activation from, device::Activation to) : name_(name), from_(from), to_(to) {}
  const char* name() const override { return name_; }
  std::vector<std::string_view> TargetOpTypes() const override { return {kConv2dOp}; }

 protected:
  std::optional<bool> SatisfyCondition(const PlanGraph& g, size_t i) const override {
    if (g.op(i).device().activation() != from_) return std::nullopt;
    return true;
  }
  Status Apply(PlanGraph& g, size_t i, const bool&) const override {
    g.op(i).device().set_activation(to_);
    return Status::Ok();
  }

 private:
  const char* name_;
  device::Activation from_, to_;
};

TEST(PassesPipeline, PassesUndoingEachOtherDoNotConverge) {
  std::vector<std::unique_ptr<RewritePass>> v;
  v.push_back(std::make_unique<Toggle>("SetRelu6", device::Activation::kNone, device::Activation::kRelu6));
  v.push_back(std::make_unique<Toggle>("ClearRelu6", device::Activation::kRelu6, device::Activation::kNone));
  auto p = RunPasses(Lowered(ConvReluChain()), v);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInternal);
  EXPECT_NE(p.status().message().find("after 64 rounds"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("still firing: SetRelu6, ClearRelu6"), std::string::npos)
      << p.status().message();
}

// Flips the activation of every conv each time: never settles on its own.
class Flip : public RewriteRule<bool> {
 public:
  const char* name() const override { return "Flip"; }
  std::vector<std::string_view> TargetOpTypes() const override { return {kConv2dOp}; }

 protected:
  std::optional<bool> SatisfyCondition(const PlanGraph&, size_t) const override { return true; }
  Status Apply(PlanGraph& g, size_t i, const bool&) const override {
    DeviceOp& d = g.op(i).device();
    d.set_activation(d.activation() == device::Activation::kNone ? device::Activation::kRelu6
                                                                 : device::Activation::kNone);
    return Status::Ok();
  }
};

TEST(PassesPipeline, PassThatNeverSettlesIsInternal) {
  ConvPlan lowered = Lowered(ConvReluChain());
  PlanGraph g(std::move(lowered));
  Flip flip;
  auto n = RunPass(g, flip);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kInternal);
  EXPECT_NE(n.status().message().find("Flip"), std::string::npos) << n.status().message();
}

// Records every op its condition is evaluated at; matches each Relu once.
class CountingRule : public RewriteRule<std::string> {
 public:
  const char* name() const override { return "Counting"; }
  std::vector<std::string_view> TargetOpTypes() const override { return {"Relu"}; }
  mutable std::vector<std::string> evaluated;
  mutable std::set<std::string> applied;

 protected:
  std::optional<std::string> SatisfyCondition(const PlanGraph& g, size_t i) const override {
    evaluated.push_back(g.op(i).op);
    if (applied.count(g.op(i).name) != 0) return std::nullopt;
    return g.op(i).name;
  }
  Status Apply(PlanGraph&, size_t, const std::string& name) const override {
    applied.insert(name);
    return Status::Ok();
  }
};

TEST(PassesPipeline, DispatchesOnTargetTypesAndApplyReusesTheMatch) {
  PlanGraph g(Lowered(ConvReluChain()));
  CountingRule rule;
  auto n = RunPass(g, rule);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 2);
  EXPECT_EQ(rule.applied, (std::set<std::string>{"relu1", "relu2"}));
  // Two sweeps over the two Relu ops (the second applies nothing); never a conv; once per
  // evaluation (Apply does not re-run the condition).
  EXPECT_EQ(rule.evaluated, (std::vector<std::string>{"Relu", "Relu", "Relu", "Relu"}));
}

TEST(PassesPipeline, IsTargetMatchesDeviceKindsHostTypesAndAnyHostOp) {
  ConvPlan p = Lowered(ConvReluChain());
  ASSERT_EQ(p.ops.size(), 4u);
  const PlanOp& conv = p.ops[0];
  const PlanOp& relu = p.ops[1];
  EXPECT_TRUE(IsTarget({kConv2dOp}, conv));
  EXPECT_FALSE(IsTarget({kConvTranspose2dOp}, conv));
  EXPECT_FALSE(IsTarget({kConv2dOp}, relu));
  EXPECT_TRUE(IsTarget({"Relu"}, relu));
  EXPECT_TRUE(IsTarget({kAnyHostOp}, relu));
  EXPECT_FALSE(IsTarget({kAnyHostOp}, conv));
  for (const PipelinePass& pp : Pipeline()) EXPECT_FALSE(pp.make()->TargetOpTypes().empty()) << pp.name;
}

}  // namespace
}  // namespace kiln::convplan
