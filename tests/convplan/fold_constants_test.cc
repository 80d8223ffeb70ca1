// Plan-time constant folding (compiler/convplan/fold_constants.h) and the bounded
// unsupported-op message (compiler/convplan/plan.h, CheckSupported).
#include <gtest/gtest.h>

#include "compiler/convplan/fold_constants.h"
#include "tests/convplan/test_util.h"

namespace kiln::convplan {
namespace {

using kiln::testing::OnnxModelBuilder;
using kiln::testing::RandomFloats;
using testutil::Load;
using testutil::RunRef;

// Conv weights computed from initializers (w_raw * scale, as QAT exports do) fold into a constant,
// so the conv is a device op; the run equals the same conv with the product stored directly.
TEST(FoldConstants, ComputedConvWeightsBecomeConstantAndRunOnTheDevice) {
  const std::vector<float> w = RandomFloats(4 * 3 * 3 * 3, 7);
  std::vector<float> ws(w.size());
  for (size_t i = 0; i < w.size(); ++i) ws[i] = w[i] * 0.25f;

  OnnxModelBuilder a(13);
  a.Input("x", onnx::TensorProto::FLOAT, {1, 3, 8, 8});
  a.FloatInitializer("w_raw", {4, 3, 3, 3}, w);
  a.FloatInitializer("scale", {1}, {0.25f});
  a.Node("Mul", {"w_raw", "scale"}, {"w"}, "scale_w");
  kiln::testing::SetInts(a.Node("Conv", {"x", "w"}, {"y"}, "conv"), "pads", {1, 1, 1, 1});
  a.Output("y");

  OnnxModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, {1, 3, 8, 8});
  b.FloatInitializer("w", {4, 3, 3, 3}, ws);
  kiln::testing::SetInts(b.Node("Conv", {"x", "w"}, {"y"}, "conv"), "pads", {1, 1, 1, 1});
  b.Output("y");

  auto pa = BuildConvPlan(Load(a), runtime::HostKernels());
  auto pb = BuildConvPlan(Load(b), runtime::HostKernels());
  ASSERT_TRUE(pa.ok()) << pa.status().ToString();
  ASSERT_TRUE(pb.ok()) << pb.status().ToString();
  EXPECT_EQ(pa->folded_nodes, 1);
  EXPECT_EQ(pb->folded_nodes, 0);
  ASSERT_EQ(pa->ops.size(), 1u);
  EXPECT_TRUE(pa->ops[0].on_device());
  auto x = device::Tensor::FromFloats({1, 3, 8, 8}, RandomFloats(192, 3));
  ASSERT_TRUE(x.ok());
  const auto ra = RunRef(*pa, {{"x", *x}});
  const auto rb = RunRef(*pb, {{"x", *x}});
  EXPECT_EQ(ra.folded_nodes, 1);
  ASSERT_EQ(ra.outputs.size(), 1u);
  EXPECT_EQ(testutil::MaxDiff(ra, rb), 0.0);
}

// Shape of a statically shaped tensor is folded to int64, and the Reshape it feeds reads it.
TEST(FoldConstants, ShapeOfStaticTensorFoldsToInt64) {
  OnnxModelBuilder b(15);
  b.Input("x", onnx::TensorProto::FLOAT, {1, 3, 4, 4});
  testutil::AddConv(b, "x", "y", "conv", 3, 2, 3, 11);
  auto& shape = b.Node("Shape", {"y"}, {"s"}, "shape");
  kiln::testing::SetInt(shape, "start", 1);  // Shape-15: dims [1, 4) = [2, 4, 4]
  b.Node("Reshape", {"y", "s"}, {"z"}, "reshape");
  b.Output("z");
  auto model = Load(b);
  ASSERT_NE(model, nullptr);
  auto folded = FoldConstants(model, runtime::HostKernels());
  ASSERT_TRUE(folded.ok());
  EXPECT_EQ(folded->folded_nodes, 1);
  const onnx_fe::Tensor* s = folded->model->graph().FindTensor("s");
  ASSERT_NE(s, nullptr);
  ASSERT_NE(s->constant, nullptr);
  EXPECT_EQ(s->dtype, onnx_fe::DataType::kInt64);
  EXPECT_EQ(s->constant->ints(), (std::vector<int64_t>{2, 4, 4}));

  auto plan = BuildConvPlan(model, runtime::HostKernels());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->folded_nodes, 1);
  const auto r = RunRef(*plan);
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].second.shape(), (std::vector<int64_t>{2, 4, 4}));
}

// int64 values above 2^24 survive folding exactly (they used to be carried as fp32).
TEST(FoldConstants, Int64ValuesStayExact) {
  OnnxModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, {1, 2});
  const int64_t big = (int64_t{1} << 40) + 3;
  b.Initializer(kiln::testing::Int64Tensor("c", {2}, {big, -big}));
  b.Initializer(kiln::testing::Int64Tensor("d", {1}, {5}));
  kiln::testing::SetInt(b.Node("Concat", {"c", "d"}, {"c2"}, "cat"), "axis", 0);
  b.Node("Relu", {"x"}, {"y"}, "relu");
  b.Output("y");
  b.Output("c2", onnx::TensorProto::INT64);
  auto plan = BuildConvPlan(Load(b), runtime::HostKernels());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->folded_nodes, 1);
  const auto r = RunRef(*plan);
  ASSERT_EQ(r.outputs.size(), 2u);
  const device::Tensor& c = r.outputs[1].second;
  ASSERT_EQ(c.dtype(), device::DataType::kInt64);
  EXPECT_EQ(c.data<int64_t>()[0], big);
  EXPECT_EQ(c.data<int64_t>()[1], -big);
  EXPECT_EQ(c.data<int64_t>()[2], 5);
}

// The real host kernels, counting what folding evaluates.
class CountingHostOps final : public HostOpSupport {
 public:
  explicit CountingHostOps(const HostOpSupport& real) : real_(real) {}
  bool SupportsHostOp(std::string_view op_type) const override { return real_.SupportsHostOp(op_type); }
  std::string CheckHostNode(const onnx_fe::Node& node, const onnx_fe::Graph& graph) const override {
    return real_.CheckHostNode(node, graph);
  }
  std::vector<std::string> HostOpTypes() const override { return real_.HostOpTypes(); }
  Result<std::vector<device::Tensor>> EvaluateHostOp(const onnx_fe::Node& node,
                                                     const std::vector<const device::Tensor*>& inputs) const override {
    evaluated.push_back(node.name);
    return real_.EvaluateHostOp(node, inputs);
  }
  mutable std::vector<std::string> evaluated;

 private:
  const HostOpSupport& real_;
};

// Folding is bounded before it evaluates anything (plan building has no memory budget and cannot be
// cancelled): a ConstantOfShape of 1.2 GB (over kMaxFoldedBytes), a MatMul of 2^33 multiply-adds
// and one of [2048, 2048] by a batch of 64 [2048, 16] (2^32; counted from A alone it looked like
// 2^26) are never evaluated and stay run-time values; the 16 MB ConstantOfShape they read folds,
// and so does a ConstantOfShape of a folded Shape (its output size left open by shape inference,
// bounded from the value). Before, the large ones were evaluated (1.2 GB allocated, minutes on one
// core) and then dropped.
TEST(FoldConstants, LargeOrCostlyNodesAreNotEvaluated) {
  OnnxModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, {1, 2});
  b.Initializer(kiln::testing::Int64Tensor("s_small", {2}, {2048, 2048}));
  b.Initializer(kiln::testing::Int64Tensor("s_big", {3}, {1024, 1024, 300}));
  b.Node("ConstantOfShape", {"s_small"}, {"a"}, "cos_small");
  b.Node("MatMul", {"a", "a"}, {"mm"}, "matmul");
  b.Node("ConstantOfShape", {"s_big"}, {"big"}, "cos_big");
  b.Initializer(kiln::testing::Int64Tensor("s_batch", {3}, {64, 2048, 16}));
  b.Node("ConstantOfShape", {"s_batch"}, {"bb"}, "cos_batch");
  b.Node("MatMul", {"a", "bb"}, {"mm2"}, "matmul_batch");
  b.Node("Shape", {"bb"}, {"bb_shape"}, "shape_bb");
  b.Node("ConstantOfShape", {"bb_shape"}, {"c2"}, "cos_from_shape");
  b.Node("Relu", {"x"}, {"y"}, "relu");
  b.Output("y");
  b.Output("mm");
  b.Output("big");
  b.Output("mm2");
  b.Output("c2");
  auto model = Load(b);
  ASSERT_NE(model, nullptr);
  CountingHostOps ops(runtime::HostKernels());
  auto folded = FoldConstants(model, ops);
  ASSERT_TRUE(folded.ok()) << folded.status().ToString();
  EXPECT_EQ(ops.evaluated, (std::vector<std::string>{"cos_small", "cos_batch", "cos_from_shape"}));
  EXPECT_EQ(folded->folded_nodes, 4);  // the three, and Shape
  EXPECT_EQ(folded->model->graph().FindTensor("mm2")->constant, nullptr);
  EXPECT_NE(folded->model->graph().FindTensor("c2")->constant, nullptr);
  EXPECT_NE(folded->model->graph().FindTensor("a")->constant, nullptr);
  EXPECT_EQ(folded->model->graph().FindTensor("mm")->constant, nullptr);
  EXPECT_EQ(folded->model->graph().FindTensor("big")->constant, nullptr);
}

// The unsupported-op error counts nodes by op type and stays short however many there are.
TEST(CheckSupported, MessageIsGroupedAndBounded) {
  OnnxModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, {1, 4});
  std::string prev = "x";
  for (int i = 0; i < 300; ++i) {
    const std::string out = "h" + std::to_string(i);
    b.Node("Hardmax", {prev}, {out}, "hardmax_with_a_rather_long_node_name_" + std::to_string(i));
    prev = out;
  }
  b.Output(prev);
  auto plan = BuildConvPlan(Load(b), runtime::HostKernels());
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = plan.status().message();
  EXPECT_LE(m.size(), kUnsupportedMessageBytes) << m;
  EXPECT_NE(m.find("model has 300 unsupported node(s)"), std::string::npos) << m;
  EXPECT_NE(m.find("Hardmax x300"), std::string::npos) << m;
  EXPECT_NE(m.find("hardmax_with_a_rather_long_node_name_2'"), std::string::npos) << m;
  EXPECT_EQ(m.find("hardmax_with_a_rather_long_node_name_3'"), std::string::npos) << m;  // first 3 only
}

}  // namespace
}  // namespace kiln::convplan
