// compiler/convplan passes: one test per fusion, with the negative cases (x·Sigmoid(y)
// is not SiLU; Clip with one bound is not relu6; a conv output read by two consumers is not fused),
// each pass run alone (LowerModel + RunPasses with that pass), the unsupported-op listing, and the
// numeric check that every rewrite leaves the fp32 result unchanged (fused vs unfused plan on the
// reference backend).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "compiler/convplan/passes/pass_manager.h"
#include "compiler/convplan/passes/rules.h"
#include "tests/convplan/test_util.h"

namespace kiln::convplan {
namespace {

using namespace testutil;  // NOLINT
using kiln::testing::SetFloat;
using kiln::testing::SetInt;
using kiln::testing::SetInts;
using onnx::TensorProto;

constexpr int kF = TensorProto::FLOAT;

// Plan with a single pass applied (the pass alone).
ConvPlan PlanWith(const std::shared_ptr<const onnx_fe::Model>& m, std::unique_ptr<RewritePass> pass) {
  auto lowered = LowerModel(m, runtime::HostKernels());
  EXPECT_TRUE(lowered.ok()) << lowered.status().ToString();
  std::vector<std::unique_ptr<RewritePass>> v;
  v.push_back(std::move(pass));
  auto p = RunPasses(std::move(*lowered), v);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(*p);
}

OnnxModelBuilder Base(int64_t opset = 13) {
  OnnxModelBuilder b(opset);
  b.Input("x", kF, {1, 4, 6, 6});
  return b;
}

// ---------------------------------------------------------------------------------------------
// Unsupported ops

TEST(ConvPlanCheck, ListsEveryUnsupportedNode) {
  auto b = Base();
  AddConv(b, "x", "c", "conv", 4, 4, 3, 1);
  // Two op types outside the CNN op set that no host kernel implements.
  b.Node("Celu", {"c"}, {"l"}, "celu1");
  b.Node("Hardmax", {"l"}, {"e"}, "hardmax1");
  b.Node("Relu", {"e"}, {"y"}, "relu1");
  b.Output("y");
  auto m = Load(b);
  ASSERT_TRUE(m);
  auto p = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("2 unsupported"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("Celu 'celu1'"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("Hardmax 'hardmax1'"), std::string::npos) << p.status().message();
  EXPECT_EQ(p.status().message().find("Relu 'relu1'"), std::string::npos) << p.status().message();
}

TEST(ConvPlanCheck, AbsurdConvGeometryIsInvalidArgumentNamingTheNode) {
  auto b = Base();
  AddConv(b, "x", "y", "huge_stride", 4, 4, 3, 1, /*bias=*/true, /*stride=*/int64_t{1} << 40);
  b.Output("y");
  auto m = Load(b);
  if (!m) GTEST_SKIP() << "the loader already rejects this model";
  auto p = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("huge_stride"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("strides"), std::string::npos) << p.status().message();
}

TEST(ConvPlanCheck, SupportedModelPasses) {
  auto b = Base();
  AddConv(b, "x", "c", "conv", 4, 4, 3, 1);
  b.Node("Tanh", {"c"}, {"y"}, "t");
  b.Output("y");
  auto m = Load(b);
  ASSERT_TRUE(m);
  EXPECT_TRUE(CheckSupported(m->graph(), runtime::HostKernels()).ok());
}

// ---------------------------------------------------------------------------------------------
// BatchNormalization folding

OnnxModelBuilder ConvBn(bool bias, float eps, bool constants_as_nodes, bool extra_reader) {
  auto b = Base();
  AddConv(b, "x", "c", "conv", 4, 5, 3, 11, bias);
  std::vector<std::string> names = {"bn.s", "bn.b", "bn.m", "bn.v"};
  std::vector<std::vector<float>> vals = {{0.5f, 1.5f, -1.f, 2.f, 0.25f},
                                          {0.1f, -0.2f, 0.3f, 0.f, 1.f},
                                          {0.05f, -0.1f, 0.2f, 0.3f, -0.4f},
                                          {0.9f, 1.1f, 0.01f, 2.f, 0.5f}};
  for (size_t i = 0; i < 4; ++i) {
    if (constants_as_nodes) {
      auto& cn = b.Node("Constant", {}, {names[i]}, "const_" + std::to_string(i));
      kiln::testing::SetTensor(cn, "value", kiln::testing::FloatTensorRaw(names[i], {5}, vals[i]));
    } else {
      b.FloatInitializer(names[i], {5}, vals[i]);
    }
  }
  auto& bn = b.Node("BatchNormalization", {"c", "bn.s", "bn.b", "bn.m", "bn.v"}, {"y"}, "bn");
  SetFloat(bn, "epsilon", eps);
  b.Output("y");
  if (extra_reader) {
    b.Node("Relu", {"c"}, {"y2"}, "other");
    b.Output("y2");
  }
  return b;
}

TEST(FoldBatchNorm, FoldsWithEpsilonFromInitializers) {
  auto m = Load(ConvBn(true, 1e-3f, false, false));
  ASSERT_TRUE(m);
  ConvPlan p = PlanWith(m, MakeFoldBatchNorm());
  ASSERT_EQ(p.ops.size(), 1u);
  ASSERT_TRUE(p.ops[0].on_device());
  EXPECT_TRUE(HasFusion(p.ops[0], "FoldBatchNorm(bn)"));
  EXPECT_EQ(p.ops[0].device().outputs[0].tensor, "y");
  // Folded weights: W'[o] = W[o] * s / sqrt(v + eps) — check channel 2 (var 0.01 where eps matters).
  const auto& w = p.ops[0].device().weights[0];
  auto orig = kiln::testing::RandomFloats(5 * 4 * 9, 11);
  const double f = -1.0 / std::sqrt(0.01 + 1e-3);
  EXPECT_NEAR(w.data<float>()[2 * 36 + 7], orig[2 * 36 + 7] * f, 1e-5);
  EXPECT_LT(FusedVsUnfused(m), 1e-4);
}

TEST(FoldBatchNorm, FoldsConstantNodesAndConvWithoutBias) {
  auto m = Load(ConvBn(false, 1e-5f, true, false));
  ASSERT_TRUE(m);
  ConvPlan p = PlanWith(m, MakeFoldBatchNorm());
  ASSERT_EQ(p.ops.size(), 1u);
  EXPECT_TRUE(p.ops[0].device().bias.has_value());
  EXPECT_LT(FusedVsUnfused(m), 1e-4);
}

TEST(FoldBatchNorm, NotFoldedWhenConvOutputHasAnotherReader) {
  auto m = Load(ConvBn(true, 1e-5f, false, true));
  ASSERT_TRUE(m);
  ConvPlan p = PlanWith(m, MakeFoldBatchNorm());
  EXPECT_EQ(CountHost(p, "BatchNormalization"), 1u);
  EXPECT_FALSE(HasFusion(p.ops[0], "FoldBatchNorm"));
  EXPECT_LT(FusedVsUnfused(m), 1e-5);
}

TEST(FoldBatchNorm, ConvTransposeGroupedFolds) {
  auto b = Base();
  b.FloatInitializer("w", {4, 3, 3, 3}, kiln::testing::RandomFloats(4 * 3 * 9, 5));  // IOHW, group 2: O = 6
  auto& ct = b.Node("ConvTranspose", {"x", "w"}, {"c"}, "ct");
  SetInt(ct, "group", 2);
  SetInts(ct, "strides", {2, 2});
  b.FloatInitializer("s", {6}, {1.f, 2.f, 3.f, -1.f, 0.5f, 0.1f});
  b.FloatInitializer("bb", {6}, {0.f, 1.f, 0.f, -1.f, 0.f, 2.f});
  b.FloatInitializer("mm", {6}, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f});
  b.FloatInitializer("vv", {6}, {1.f, 0.5f, 2.f, 0.1f, 1.f, 3.f});
  b.Node("BatchNormalization", {"c", "s", "bb", "mm", "vv"}, {"y"}, "bn");
  b.Output("y");
  auto m = Load(b);
  ASSERT_TRUE(m);
  auto p = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->ops.size(), 1u);
  EXPECT_EQ(p->ops[0].op, "conv_transpose2d");
  EXPECT_LT(FusedVsUnfused(m), 1e-5);
}

// ---------------------------------------------------------------------------------------------
// Activations

TEST(FuseRelu, FusesSingleReader) {
  auto b = Base();
  AddConv(b, "x", "c", "conv", 4, 4, 3, 1);
  b.Node("Relu", {"c"}, {"y"}, "r");
  b.Output("y");
  auto m = Load(b);
  ConvPlan p = PlanWith(m, MakeFuseRelu());
  ASSERT_EQ(p.ops.size(), 1u);
  EXPECT_EQ(p.ops[0].device().activation(), device::Activation::kRelu);
  EXPECT_EQ(p.ops[0].device().outputs[0].tensor, "y");
  EXPECT_LT(FusedVsUnfused(m), 1e-6);
}

TEST(FuseRelu, ConvOutputReadByTwoConsumersIsNotFused) {
  auto b = Base();
  AddConv(b, "x", "c", "conv", 4, 4, 3, 1);
  b.Node("Relu", {"c"}, {"y"}, "r");
  b.Node("Sigmoid", {"c"}, {"z"}, "s");
  b.Output("y");
  b.Output("z");
  auto m = Load(b);
  auto p = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->ops.size(), 3u);
  EXPECT_EQ(FindOp(*p, "conv")->device().activation(), device::Activation::kNone);
  EXPECT_LT(FusedVsUnfused(m), 1e-6);
}

TEST(FuseRelu, ConvOutputThatIsAGraphOutputIsNotFused) {
  auto b = Base();
  AddConv(b, "x", "c", "conv", 4, 4, 3, 1);
  b.Node("Relu", {"c"}, {"y"}, "r");
  b.Output("y");
  b.Output("c");
  auto m = Load(b);
  auto p = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(CountHost(*p, "Relu"), 1u);
  EXPECT_LT(FusedVsUnfused(m), 1e-6);
}

TEST(FuseSigmoid, Fuses) {
  auto b = Base();
  AddConv(b, "x", "c", "conv", 4, 4, 3, 1);
  b.Node("Sigmoid", {"c"}, {"y"}, "s");
  b.Output("y");
  auto m = Load(b);
  ConvPlan p = PlanWith(m, MakeFuseSigmoid());
  ASSERT_EQ(p.ops.size(), 1u);
  EXPECT_EQ(p.ops[0].device().activation(), device::Activation::kSigmoid);
  EXPECT_LT(FusedVsUnfused(m), 1e-6);
}

// Clip variants: opset 11+ bounds from inputs.
std::shared_ptr<const onnx_fe::Model> ClipModel(const std::string& min_name, const std::string& max_name,
                                                 bool as_constant_nodes = false) {
  OnnxModelBuilder b(13);
  b.Input("x", kF, {1, 4, 6, 6});
  AddConv(b, "x", "c", "conv", 4, 4, 3, 2);
  if (as_constant_nodes) {
    auto& c0 = b.Node("Constant", {}, {"lo"}, "k0");
    kiln::testing::SetTensor(c0, "value", kiln::testing::FloatTensorRaw("lo", {}, {0.f}));
    auto& c1 = b.Node("Constant", {}, {"hi"}, "k1");
    kiln::testing::SetTensor(c1, "value", kiln::testing::FloatTensorRaw("hi", {}, {6.f}));
  } else {
    b.FloatInitializer("lo", {1}, {0.f});
    b.FloatInitializer("hi", {1}, {6.f});
  }
  b.Node("Clip", {"c", min_name, max_name}, {"y"}, "clip");
  b.Output("y");
  return Load(b);
}

TEST(FuseRelu6, Opset13InitializerBoundsShape1) {
  auto m = ClipModel("lo", "hi");
  ConvPlan p = PlanWith(m, MakeFuseRelu6());
  ASSERT_EQ(p.ops.size(), 1u);
  EXPECT_EQ(p.ops[0].device().activation(), device::Activation::kRelu6);
  EXPECT_LT(FusedVsUnfused(m), 1e-6);
}

TEST(FuseRelu6, ConstantNodeScalarBounds) {
  auto m = ClipModel("lo", "hi", true);
  ConvPlan p = PlanWith(m, MakeFuseRelu6());
  ASSERT_EQ(p.ops.size(), 1u);
  EXPECT_EQ(p.ops[0].device().activation(), device::Activation::kRelu6);
}

TEST(FuseRelu6, ClipWithOnlyMaxIsNotRelu6) {
  auto m = ClipModel("", "hi");  // Clip(x, "", 6)
  auto p = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(CountHost(*p, "Clip"), 1u);
  EXPECT_EQ(FindOp(*p, "conv")->device().activation(), device::Activation::kNone);
  EXPECT_LT(FusedVsUnfused(m), 1e-6);
}

TEST(FuseRelu6, ClipWithOnlyMinIsNotRelu6) {
  auto m = ClipModel("lo", "");
  auto p = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(CountHost(*p, "Clip"), 1u);
}

TEST(FuseRelu6, ClipOtherBoundsIsNotRelu6) {
  OnnxModelBuilder b(13);
  b.Input("x", kF, {1, 4, 6, 6});
  AddConv(b, "x", "c", "conv", 4, 4, 3, 2);
  b.FloatInitializer("lo", {1}, {0.f});
  b.FloatInitializer("hi", {1}, {5.f});
  b.Node("Clip", {"c", "lo", "hi"}, {"y"}, "clip");
  b.Output("y");
  auto p = BuildConvPlan(Load(b), runtime::HostKernels());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(CountHost(*p, "Clip"), 1u);
}

TEST(FuseRelu6, Opset6AttributesOnlyBothBounds) {
  for (int variant = 0; variant < 2; ++variant) {
    OnnxModelBuilder b(6);
    b.Input("x", kF, {1, 4, 6, 6});
    AddConv(b, "x", "c", "conv", 4, 4, 3, 2);
    auto& clip = b.Node("Clip", {"c"}, {"y"}, "clip");
    SetFloat(clip, "min", 0.f);
    if (variant == 0) SetFloat(clip, "max", 6.f);  // variant 1: max from the schema default
    b.Output("y");
    auto m = Load(b);
    ASSERT_TRUE(m);
    auto p = BuildConvPlan(m, runtime::HostKernels());
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(CountHost(*p, "Clip"), variant == 0 ? 0u : 1u) << variant;
    EXPECT_LT(FusedVsUnfused(m), 1e-6);
  }
}

// SiLU
std::shared_ptr<const onnx_fe::Model> SiluModel(int variant) {
  // 0: Mul(c, Sigmoid(c)); 1: Mul(Sigmoid(c), c); 2: Mul(d, Sigmoid(c)) with d another tensor;
  // 3: sigmoid read twice.
  auto b = Base();
  AddConv(b, "x", "c", "conv", 4, 4, 3, 3);
  b.Node("Sigmoid", {"c"}, {"s"}, "sig");
  if (variant == 0) b.Node("Mul", {"c", "s"}, {"y"}, "mul");
  if (variant == 1) b.Node("Mul", {"s", "c"}, {"y"}, "mul");
  if (variant == 2) {
    AddConv(b, "x", "d", "conv2", 4, 4, 3, 4);
    b.Node("Mul", {"d", "s"}, {"y"}, "mul");
  }
  if (variant == 3) {
    b.Node("Mul", {"c", "s"}, {"y"}, "mul");
    b.Node("Neg", {"s"}, {"z"}, "neg");
    b.Output("z");
  }
  b.Output("y");
  return Load(b);
}

TEST(FuseSilu, BothOperandOrders) {
  for (int v : {0, 1}) {
    auto m = SiluModel(v);
    ConvPlan p = PlanWith(m, MakeFuseSilu());
    ASSERT_EQ(p.ops.size(), 1u) << v;
    EXPECT_EQ(p.ops[0].device().activation(), device::Activation::kSilu);
    EXPECT_EQ(p.ops[0].device().outputs[0].tensor, "y");
    EXPECT_LT(FusedVsUnfused(m), 1e-6);
  }
}

TEST(FuseSilu, XTimesSigmoidOfYIsNotSilu) {
  auto m = SiluModel(2);
  auto p = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_TRUE(p.ok());
  // The Mul stays on the host; the Sigmoid alone may fuse into its conv (conv -> Sigmoid only).
  EXPECT_EQ(CountHost(*p, "Mul"), 1u) << p->ToString();
  for (const auto& op : p->ops) {
    if (op.on_device()) {
      EXPECT_NE(op.device().activation(), device::Activation::kSilu);
    }
  }
  EXPECT_EQ(FindOp(*p, "conv")->device().activation(), device::Activation::kSigmoid);
  EXPECT_EQ(FindOp(*p, "conv2")->device().activation(), device::Activation::kNone);
  ConvPlan alone = PlanWith(m, MakeFuseSilu());
  EXPECT_EQ(CountHost(alone, "Sigmoid"), 1u);
  EXPECT_EQ(CountHost(alone, "Mul"), 1u);
  EXPECT_LT(FusedVsUnfused(m), 1e-6);
}

TEST(FuseSilu, SigmoidWithAnotherReaderIsNotSilu) {
  auto m = SiluModel(3);
  auto p = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(CountHost(*p, "Mul"), 1u);
  EXPECT_EQ(FindOp(*p, "conv")->device().activation(), device::Activation::kNone);
}

// Gelu (erf form)
std::shared_ptr<const onnx_fe::Model> GeluModel(int variant, float divisor = 1.4142135f) {
  // 0: m = c * a; y = m * 0.5   1: h = c * 0.5; y = h * a   (a = 1 + erf(c / sqrt2))
  // 2: variant 0 with Mul by 1/sqrt2 instead of Div
  auto b = Base();
  AddConv(b, "x", "c", "conv", 4, 4, 3, 5);
  b.FloatInitializer("sqrt2", {}, {divisor});
  b.FloatInitializer("rsqrt2", {}, {1.f / divisor});
  b.FloatInitializer("one", {}, {1.f});
  b.FloatInitializer("half", {}, {0.5f});
  if (variant == 2) {
    b.Node("Mul", {"c", "rsqrt2"}, {"d"}, "div");
  } else {
    b.Node("Div", {"c", "sqrt2"}, {"d"}, "div");
  }
  b.Node("Erf", {"d"}, {"e"}, "erf");
  b.Node("Add", {"e", "one"}, {"a"}, "add");
  if (variant == 1) {
    b.Node("Mul", {"c", "half"}, {"h"}, "mul_half");
    b.Node("Mul", {"h", "a"}, {"y"}, "mul");
  } else {
    b.Node("Mul", {"c", "a"}, {"m"}, "mul");
    b.Node("Mul", {"m", "half"}, {"y"}, "mul_half");
  }
  b.Output("y");
  return Load(b);
}

TEST(FuseGelu, ErfPatternForms) {
  for (int v : {0, 1, 2}) {
    auto m = GeluModel(v);
    ConvPlan p = PlanWith(m, MakeFuseGelu());
    ASSERT_EQ(p.ops.size(), 1u) << v;
    EXPECT_EQ(p.ops[0].device().activation(), device::Activation::kGelu);
    EXPECT_EQ(p.ops[0].source_nodes.size(), 6u);
    EXPECT_LT(FusedVsUnfused(m), 1e-5) << v;
  }
}

TEST(FuseGelu, WrongConstantIsNotGelu) {
  auto m = GeluModel(0, 2.0f);
  auto p = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(CountHost(*p, "Erf"), 1u);
  EXPECT_EQ(FindOp(*p, "conv")->device().activation(), device::Activation::kNone);
}

// ---------------------------------------------------------------------------------------------
// Residual add

// FuseResidualAdd fuses the Add into the conv when DeviceAdd (which otherwise takes the Add first)
// is disabled.
TEST(FuseResidualAdd, AddThenReluFused) {
  auto b = Base();
  AddConv(b, "x", "c1", "conv1", 4, 4, 3, 6);
  b.Node("Relu", {"c1"}, {"r1"}, "relu1");
  AddConv(b, "r1", "c2", "conv2", 4, 4, 3, 7);
  b.Node("Add", {"c2", "x"}, {"s"}, "add");
  b.Node("Relu", {"s"}, {"y"}, "relu2");
  b.Output("y");
  auto m = Load(b);
  PlanOptions o;
  o.disabled_passes = {"DeviceAdd"};
  auto p = BuildConvPlan(m, runtime::HostKernels(), o);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->ops.size(), 2u) << p->ToString();
  const DeviceOp& d = p->ops[1].device();
  EXPECT_EQ(d.residual, "x");
  EXPECT_EQ(d.activation(), device::Activation::kNone);
  EXPECT_EQ(d.residual_activation, device::Activation::kRelu);
  EXPECT_EQ(d.outputs[0].tensor, "y");
  EXPECT_LT(FusedVsUnfused(m), 1e-5);
}

TEST(FuseResidualAdd, BroadcastAddIsNotResidual) {
  auto b = Base();
  AddConv(b, "x", "c", "conv", 4, 4, 3, 6);
  b.Input("bias", kF, {1, 4, 1, 1});
  b.Node("Add", {"c", "bias"}, {"y"}, "add");
  b.Output("y");
  auto m = Load(b);
  ConvPlan p = PlanWith(m, MakeFuseResidualAdd());
  EXPECT_EQ(CountHost(p, "Add"), 1u);
}

// ---------------------------------------------------------------------------------------------
// Device add

// ResNet's basic block tail: conv -> BatchNormalization -> Add(identity) -> Relu gives the conv
// (BN folded) and one device add with the relu fused; the fp32 result is the unfused one.
TEST(DeviceAdd, ConvBnAddReluIsOneDeviceAddWithRelu) {
  OnnxModelBuilder b = Base();
  AddConv(b, "x", "c", "conv", 4, 4, 3, 21);
  const std::vector<std::string> names = {"bn.s", "bn.b", "bn.m", "bn.v"};
  const std::vector<std::vector<float>> vals = {
      {0.5f, 1.5f, -1.f, 2.f}, {0.1f, -0.2f, 0.3f, 0.f}, {0.05f, -0.1f, 0.2f, 0.3f}, {0.9f, 1.1f, 0.01f, 2.f}};
  for (size_t i = 0; i < 4; ++i) b.FloatInitializer(names[i], {4}, vals[i]);
  b.Node("BatchNormalization", {"c", "bn.s", "bn.b", "bn.m", "bn.v"}, {"n"}, "bn");
  b.Node("Add", {"n", "x"}, {"s"}, "add");
  b.Node("Relu", {"s"}, {"y"}, "relu");
  b.Output("y");
  auto m = Load(b);
  auto p = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->ops.size(), 2u) << p->ToString();
  EXPECT_EQ(p->num_device_ops(), 2u);
  const PlanOp& conv = p->ops[0];
  EXPECT_TRUE(HasFusion(conv, "FoldBatchNorm(bn)"));
  EXPECT_TRUE(conv.device().residual.empty());
  const PlanOp& add = p->ops[1];
  ASSERT_TRUE(add.on_device());
  EXPECT_EQ(add.op, "add");
  EXPECT_EQ(add.device().kind, DeviceOpKind::kAdd);
  EXPECT_EQ(add.device().inputs, (std::vector<std::string>{"n", "x"}));
  EXPECT_EQ(add.device().activation(), device::Activation::kRelu);
  EXPECT_EQ(add.device().spatial_rank, 2);
  ASSERT_EQ(add.device().outputs.size(), 1u);
  EXPECT_EQ(add.device().outputs[0].tensor, "y");
  EXPECT_EQ(add.device().out_channels(), 4);
  EXPECT_EQ(add.source_nodes, (std::vector<std::string>{"add", "relu"}));
  EXPECT_TRUE(HasFusion(add, "DeviceAdd(add)"));
  EXPECT_TRUE(HasFusion(add, "FuseRelu(relu)"));
  EXPECT_NE(p->ToString().find("add add [n, x] -> [y] act=relu"), std::string::npos) << p->ToString();
  EXPECT_LT(FusedVsUnfused(m), 1e-5);
}

// relu6 (Clip 0..6) fuses into a device add; sigmoid does not (ttnn.add's fused relu family only).
TEST(DeviceAdd, Relu6FusesSigmoidStaysOnTheHost) {
  for (bool relu6 : {true, false}) {
    OnnxModelBuilder b = Base(13);
    AddConv(b, "x", "c", "conv", 4, 4, 3, 22);
    b.Node("Add", {"x", "c"}, {"s"}, "add");
    if (relu6) {
      b.FloatInitializer("lo", {}, {0.0f});
      b.FloatInitializer("hi", {}, {6.0f});
      b.Node("Clip", {"s", "lo", "hi"}, {"y"}, "clip");
    } else {
      b.Node("Sigmoid", {"s"}, {"y"}, "sig");
    }
    b.Output("y");
    auto p = BuildConvPlan(Load(b), runtime::HostKernels());
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    const PlanOp* add = FindOp(*p, "add");
    ASSERT_NE(add, nullptr) << p->ToString();
    ASSERT_TRUE(add->on_device());
    EXPECT_EQ(add->device().activation(), relu6 ? device::Activation::kRelu6 : device::Activation::kNone);
    EXPECT_EQ(CountHost(*p, "Sigmoid"), relu6 ? 0u : 1u);
  }
}

// Not device adds: a broadcast Add, an Add of a constant, an Add of two host values.
TEST(DeviceAdd, BroadcastConstantAndHostOnlyAddsStayOnTheHost) {
  {
    auto b = Base();
    AddConv(b, "x", "c", "conv", 4, 4, 3, 23);
    b.Input("bias", kF, {1, 4, 1, 1});
    b.Node("Add", {"c", "bias"}, {"y"}, "add");
    b.Output("y");
    ConvPlan p = PlanWith(Load(b), MakeDeviceAdd());
    EXPECT_EQ(CountHost(p, "Add"), 1u);
  }
  {
    auto b = Base();
    AddConv(b, "x", "c", "conv", 4, 4, 3, 24);
    b.FloatInitializer("k", {1, 4, 6, 6}, std::vector<float>(144, 0.5f));
    b.Node("Add", {"c", "k"}, {"y"}, "add");
    b.Output("y");
    ConvPlan p = PlanWith(Load(b), MakeDeviceAdd());
    EXPECT_EQ(CountHost(p, "Add"), 1u);
  }
  {
    auto b = Base();
    b.Node("Relu", {"x"}, {"r"}, "relu");
    b.Node("Add", {"r", "x"}, {"y"}, "add");
    b.Output("y");
    ConvPlan p = PlanWith(Load(b), MakeDeviceAdd());
    EXPECT_EQ(CountHost(p, "Add"), 1u);
  }
}

// ---------------------------------------------------------------------------------------------
// Concat -> K-split

std::shared_ptr<const onnx_fe::Model> ConcatModel(bool concat_is_output) {
  auto b = Base();
  AddConv(b, "x", "a", "ca", 4, 3, 1, 8);
  AddConv(b, "x", "bb", "cb", 4, 5, 3, 9);
  auto& cat = b.Node("Concat", {"a", "bb"}, {"cat"}, "cat");
  SetInt(cat, "axis", 1);
  AddConv(b, "cat", "c", "conv", 8, 6, 3, 10);
  b.Node("Relu", {"c"}, {"y"}, "relu");
  b.Output("y");
  if (concat_is_output) b.Output("cat");
  return Load(b);
}

TEST(KSplitConcat, ConcatFeedingOnlyAConvBecomesKParts) {
  auto m = ConcatModel(false);
  ConvPlan p = PlanWith(m, MakeKSplitConcat());
  EXPECT_EQ(CountHost(p, "Concat"), 0u);
  const PlanOp* op = FindOp(p, "conv");
  ASSERT_NE(op, nullptr);
  ASSERT_EQ(op->device().inputs.size(), 2u);
  EXPECT_EQ(op->device().weights[0].shape(), (std::vector<int64_t>{6, 3, 3, 3}));
  EXPECT_EQ(op->device().weights[1].shape(), (std::vector<int64_t>{6, 5, 3, 3}));
  EXPECT_LT(FusedVsUnfused(m), 1e-5);
  auto full = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(FindOp(*full, "conv")->device().activation(), device::Activation::kRelu);
}

TEST(KSplitConcat, ConvTransposeReadsKParts) {
  auto b = Base();
  AddConv(b, "x", "a", "ca", 4, 3, 1, 8);
  AddConv(b, "x", "bb", "cb", 4, 5, 3, 9);
  auto& cat = b.Node("Concat", {"a", "bb"}, {"cat"}, "cat");
  SetInt(cat, "axis", -3);
  b.FloatInitializer("wt", {8, 2, 3, 3}, kiln::testing::RandomFloats(8 * 2 * 9, 15));  // IOHW
  b.FloatInitializer("bt", {2}, {0.5f, -0.5f});
  auto& ct = b.Node("ConvTranspose", {"cat", "wt", "bt"}, {"y"}, "ct");
  SetInts(ct, "strides", {2, 2});
  SetInts(ct, "output_padding", {1, 1});
  b.Output("y");
  auto m = Load(b);
  ConvPlan p = PlanWith(m, MakeKSplitConcat());
  EXPECT_EQ(CountHost(p, "Concat"), 0u);
  const PlanOp* op = FindOp(p, "ct");
  ASSERT_NE(op, nullptr);
  ASSERT_EQ(op->device().inputs.size(), 2u);
  EXPECT_EQ(op->device().weights[0].shape(), (std::vector<int64_t>{3, 2, 3, 3}));
  EXPECT_EQ(op->device().weights[1].shape(), (std::vector<int64_t>{5, 2, 3, 3}));
  EXPECT_LT(FusedVsUnfused(m), 1e-5);
}

TEST(KSplitConcat, ConcatThatIsAGraphOutputStays) {
  auto m = ConcatModel(true);
  ConvPlan p = PlanWith(m, MakeKSplitConcat());
  EXPECT_EQ(CountHost(p, "Concat"), 1u);
  EXPECT_LT(FusedVsUnfused(m), 1e-5);
}

// ---------------------------------------------------------------------------------------------
// Sibling convs

TEST(MergeSiblingConvs, SameGeometryMerged) {
  auto b = Base();
  AddConv(b, "x", "a", "ca", 4, 3, 3, 12);
  AddConv(b, "x", "c", "cb", 4, 5, 3, 13, /*bias=*/false);
  b.Node("Relu", {"a"}, {"ra"}, "relu_a");
  b.Node("Relu", {"c"}, {"rc"}, "relu_c");
  b.Output("ra");
  b.Output("rc");
  auto m = Load(b);
  auto p = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->ops.size(), 1u) << p->ToString();
  const DeviceOp& d = p->ops[0].device();
  EXPECT_EQ(p->ops[0].name, "ca+cb");
  ASSERT_EQ(d.outputs.size(), 2u);
  EXPECT_EQ(d.outputs[0].tensor, "ra");
  EXPECT_EQ(d.outputs[1].channel_begin, 3);
  EXPECT_EQ(d.outputs[1].channel_end, 8);
  EXPECT_EQ(d.activation(), device::Activation::kRelu);
  EXPECT_LT(FusedVsUnfused(m), 1e-5);
}

// Many siblings: the merged op's name is shortened in the middle (error messages and reports name
// it; 10,000 joined names once pushed the reason out of a bounded message), and all still merge.
TEST(MergeSiblingConvs, ManySiblingsGetAShortName) {
  auto b = Base();
  for (int i = 0; i < 10; ++i) {
    const std::string k = std::to_string(i);
    AddConv(b, "x", "y" + k, "c" + k, 4, 2, 3, 20 + i);
    b.Output("y" + k);
  }
  auto m = Load(b);
  ConvPlan p = PlanWith(m, MakeMergeSiblingConvs());
  ASSERT_EQ(p.num_device_ops(), 1u) << p.ToString();
  EXPECT_EQ(p.ops[0].name, "c0+c1+c2+…+c9 (10 convs)");
  EXPECT_EQ(p.ops[0].device().outputs.size(), 10u);
  EXPECT_LT(FusedVsUnfused(m), 1e-5);
}

TEST(MergeSiblingConvs, DifferentStridesOrActivationsNotMerged) {
  auto b = Base();
  AddConv(b, "x", "a", "ca", 4, 3, 3, 12);
  AddConv(b, "x", "c", "cb", 4, 5, 3, 13, true, /*stride=*/2);
  AddConv(b, "x", "e", "cc", 4, 2, 3, 14);
  b.Node("Relu", {"e"}, {"re"}, "relu_e");
  b.Output("a");
  b.Output("c");
  b.Output("re");
  auto m = Load(b);
  // Alone (the Relu not fused yet) ca and cc have equal geometry and merge; cb (stride 2) never.
  ConvPlan p = PlanWith(m, MakeMergeSiblingConvs());
  EXPECT_EQ(p.num_device_ops(), 2u);
  EXPECT_NE(FindOp(p, "ca+cc"), nullptr) << p.ToString();
  EXPECT_NE(FindOp(p, "cb"), nullptr);
  // Full pipeline: cc carries a fused Relu, ca none -> different activations, not merged.
  auto full = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->num_device_ops(), 3u) << full->ToString();
  EXPECT_LT(FusedVsUnfused(m), 1e-5);
}

// ---------------------------------------------------------------------------------------------
// Lowering: ConvTranspose attributes, 1-D conv

TEST(Lowering, ConvTransposeOutputShapeAndAutoPad) {
  auto b = Base();
  b.FloatInitializer("w", {4, 2, 3, 3}, kiln::testing::RandomFloats(72, 21));
  auto& ct = b.Node("ConvTranspose", {"x", "w"}, {"y"}, "ct");
  SetInts(ct, "strides", {2, 2});
  SetInts(ct, "output_shape", {12, 13});
  b.Output("y");
  auto m = Load(b);
  ASSERT_TRUE(m);
  auto p = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const auto& d = p->ops[0].device();
  // total = 2*(6-1) + 0 + 3 - out: H 13-12 = 1 -> (1, 0) (NOTSET puts the odd one first); W 0.
  EXPECT_EQ(d.conv_transpose.pads, (std::array<int64_t, 4>{1, 0, 0, 0}));
  RunResult r = RunRef(*p);
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].second.shape(), (std::vector<int64_t>{1, 2, 12, 13}));
}

TEST(Lowering, Conv1dRunsAsHeightOne) {
  OnnxModelBuilder b(13);
  b.Input("x", kF, {"N", 3, 20});
  b.FloatInitializer("w", {4, 3, 5}, kiln::testing::RandomFloats(60, 22));
  auto& c = b.Node("Conv", {"x", "w"}, {"y"}, "c1d");
  SetInts(c, "strides", {2});
  SetInts(c, "pads", {1, 2});
  b.Output("y");
  auto m = Load(b);
  ASSERT_TRUE(m);
  auto p = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const auto& d = p->ops[0].device();
  EXPECT_EQ(d.spatial_rank, 1);
  EXPECT_EQ(d.weights[0].shape(), (std::vector<int64_t>{4, 3, 1, 5}));
  EXPECT_EQ(d.conv.pads, (std::array<int64_t, 4>{0, 1, 0, 2}));
  RunResult r = RunRef(*p);  // symbolic N bound to 1 for the generated input
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].second.shape(), (std::vector<int64_t>{1, 4, 10}));
  EXPECT_EQ(r.generated_inputs, std::vector<std::string>{"x"});
  // Direct check of one output element: y[0, o, t] = sum_c sum_k w[o,c,k] x[c, 2t - 1 + k].
  auto w = kiln::testing::RandomFloats(60, 22);
  RunOptions o;
  o.input_seed = 7;
  o.compare_to_reference = false;
  auto x = device::Tensor::Zeros({1, 3, 20});
  ASSERT_TRUE(x.ok());
  for (int64_t e = 0; e < 60; ++e) x->data<float>()[e] = static_cast<float>(e % 7) - 3.f;
  auto rr = RunConvPlan(*p, {{"x", *x}}, Reference(), o);
  ASSERT_TRUE(rr.ok());
  for (int oc : {0, 3}) {
    for (int t : {0, 4, 9}) {
      double want = 0;
      for (int c = 0; c < 3; ++c) {
        for (int k = 0; k < 5; ++k) {
          const int pos = 2 * t - 1 + k;
          if (pos >= 0 && pos < 20) want += w[(oc * 3 + c) * 5 + k] * x->data<float>()[c * 20 + pos];
        }
      }
      EXPECT_NEAR(rr->outputs[0].second.data<float>()[oc * 10 + t], want, 1e-4);
    }
  }
}

TEST(ConvPlanScale, LongChainPlansQuickly) {
  // 1500 x (Conv 1x1 -> Relu): every pass consults the consumer index, not a scan of all ops.
  OnnxModelBuilder b(13);
  b.Input("x", kF, {1, 2, 4, 4});
  std::string cur = "x";
  for (int i = 0; i < 1500; ++i) {
    const std::string c = "c" + std::to_string(i), r = "r" + std::to_string(i);
    AddConv(b, cur, c, "conv" + std::to_string(i), 2, 2, 1, 100 + i);
    b.Node("Relu", {c}, {r}, "relu" + std::to_string(i));
    cur = r;
  }
  b.Output(cur);
  auto m = Load(b);
  ASSERT_TRUE(m);
  const auto t0 = std::chrono::steady_clock::now();
  auto p = BuildConvPlan(m, runtime::HostKernels());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->ops.size(), 1500u);
  EXPECT_EQ(p->num_device_ops(), 1500u);
  EXPECT_LT(secs, 2.0);
  std::printf("[scale] 3000-node chain planned in %.3f s\n", secs);
}

TEST(Lowering, ConvTranspose1dMatchesDefinition) {
  OnnxModelBuilder b(13);
  b.Input("x", kF, {1, 2, 5});
  auto w = kiln::testing::RandomFloats(2 * 3 * 3, 23);  // (C=2, O=3, k=3)
  b.FloatInitializer("w", {2, 3, 3}, w);
  auto& ct = b.Node("ConvTranspose", {"x", "w"}, {"y"}, "ct1d");
  SetInts(ct, "strides", {2});
  SetInts(ct, "pads", {1, 0});
  SetInts(ct, "output_padding", {1});
  b.Output("y");
  auto m = Load(b);
  ASSERT_TRUE(m);
  auto p = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto x = device::Tensor::Zeros({1, 2, 5});
  ASSERT_TRUE(x.ok());
  for (int64_t e = 0; e < 10; ++e) x->data<float>()[e] = 0.25f * static_cast<float>(e) - 1.f;
  RunOptions o;
  o.compare_to_reference = false;
  auto r = RunConvPlan(*p, {{"x", *x}}, Reference(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // out = 2*(5-1) + 1 + 3 - 1 - 0 = 11; y[o, t] = sum_c sum_k x[c, i] w[c, o, k] with t = 2i + k - 1.
  const auto& y = r->outputs[0].second;
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{1, 3, 11}));
  std::vector<double> want(33, 0.0);
  for (int c = 0; c < 2; ++c) {
    for (int i = 0; i < 5; ++i) {
      for (int o2 = 0; o2 < 3; ++o2) {
        for (int k = 0; k < 3; ++k) {
          const int t = 2 * i + k - 1;
          if (t >= 0 && t < 11) want[o2 * 11 + t] += x->data<float>()[c * 5 + i] * w[(c * 3 + o2) * 3 + k];
        }
      }
    }
  }
  for (int e = 0; e < 33; ++e) EXPECT_NEAR(y.data<float>()[e], want[e], 1e-5) << e;
}

// Weights known only at run time: a host conv (values: tests/convplan/host_convs_test.cc).
TEST(Lowering, NonConstantWeightsBecomeAHostOp) {
  auto b = Base();
  b.Input("w", kF, {4, 4, 3, 3});
  b.Node("Conv", {"x", "w"}, {"y"}, "c");
  b.Output("y");
  auto p = BuildConvPlan(Load(b), runtime::HostKernels());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->ops.size(), 1u);
  EXPECT_FALSE(p->ops[0].on_device());
  EXPECT_EQ(p->ops[0].op, "Conv");
  EXPECT_EQ(p->ops[0].host().node.inputs, (std::vector<std::string>{"x", "w"}));
}

}  // namespace
}  // namespace kiln::convplan
