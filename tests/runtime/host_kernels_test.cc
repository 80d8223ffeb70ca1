// fp32 host kernels of the runtime (runtime/host_kernels/registry.h), against hand-computed values
// from the ONNX operator definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/host_kernels/registry.h"
#include "tests/runtime/node_builder.h"
#include "tests/convplan/test_util.h"

namespace kiln::runtime {
namespace {

using device::Tensor;
using onnx_fe::Attribute;
using onnx_fe::AttributeType;
using onnx_fe::Node;
using testutil::SetI;
using testutil::SetIs;
using testutil::SetF;
using testutil::SetS;

// Runs `node` through the registry (as the executor does), without a cancel token.
Result<std::vector<Tensor>> RunHostOp(const Node& node, const HostKernelInputs& inputs, device::Backend& fp32) {
  return HostKernels().Run(node, inputs, HostKernelContext{fp32, nullptr});
}

Node MakeNode(const std::string& op, size_t n_in, int64_t opset = 13) {
  Node n;
  n.name = op + "_0";
  n.op_type = op;
  n.opset_version = opset;
  for (size_t i = 0; i < n_in; ++i) n.inputs.push_back("in" + std::to_string(i));
  n.outputs = {"out"};
  return n;
}

Tensor T(std::vector<int64_t> shape, std::vector<float> v) {
  auto t = Tensor::FromFloats(std::move(shape), v);
  EXPECT_TRUE(t.ok());
  return std::move(*t);
}

std::vector<float> Vals(const Tensor& t) { return {t.span<float>().begin(), t.span<float>().end()}; }

Tensor Run1(const Node& n, std::vector<const Tensor*> in) {
  auto r = RunHostOp(n, in, convplan::testutil::Reference());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return Tensor();
  return std::move((*r)[0]);
}

TEST(HostOps, BroadcastArithmetic) {
  Tensor a = T({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = T({3}, {10, 20, 30});
  Tensor c = T({2, 1}, {2, 4});
  EXPECT_EQ(Vals(Run1(MakeNode("Add", 2), {&a, &b})), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(Vals(Run1(MakeNode("Sub", 2), {&a, &c})), (std::vector<float>{-1, 0, 1, 0, 1, 2}));
  EXPECT_EQ(Vals(Run1(MakeNode("Mul", 2), {&c, &b})), (std::vector<float>{20, 40, 60, 40, 80, 120}));
  Tensor d = Run1(MakeNode("Div", 2), {&a, &c});
  EXPECT_EQ(d.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_FLOAT_EQ(d.data<float>()[5], 1.5f);
  Tensor bad = T({4}, {1, 2, 3, 4});
  auto r = RunHostOp(MakeNode("Add", 2), {&a, &bad}, convplan::testutil::Reference());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(HostOps, ClipBothOpsetForms) {
  Tensor x = T({4}, {-2, 0.5, 3, 9});
  Tensor lo = T({}, {0});
  Tensor hi = T({}, {6});
  EXPECT_EQ(Vals(Run1(MakeNode("Clip", 3), {&x, &lo, &hi})), (std::vector<float>{0, 0.5, 3, 6}));
  EXPECT_EQ(Vals(Run1(MakeNode("Clip", 3), {&x, nullptr, &hi})), (std::vector<float>{-2, 0.5, 3, 6}));
  Node old = MakeNode("Clip", 1, 6);
  SetF(old, "min", 1.f);
  SetF(old, "max", 2.f);
  EXPECT_EQ(Vals(Run1(old, {&x})), (std::vector<float>{1, 1, 2, 2}));
}

TEST(HostOps, ReshapeFlattenTransposeSqueeze) {
  Tensor x = T({2, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  Tensor shape = T({2}, {0, -1});
  EXPECT_EQ(Run1(MakeNode("Reshape", 2), {&x, &shape}).shape(), (std::vector<int64_t>{2, 6}));
  Node fl = MakeNode("Flatten", 1);
  SetI(fl, "axis", 2);
  EXPECT_EQ(Run1(fl, {&x}).shape(), (std::vector<int64_t>{6, 2}));
  Node tr = MakeNode("Transpose", 1);
  SetIs(tr, "perm", {2, 0, 1});
  Tensor t = Run1(tr, {&x});
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 2, 3}));
  // t[1][0][2] = x[0][2][1] = 5
  EXPECT_EQ(t.data<float>()[1 * 6 + 0 * 3 + 2], 5.f);
  Tensor y = T({1, 3, 1}, {1, 2, 3});
  Tensor axes = T({1}, {-1});
  EXPECT_EQ(Run1(MakeNode("Squeeze", 2), {&y, &axes}).shape(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(Run1(MakeNode("Squeeze", 1), {&y}).shape(), (std::vector<int64_t>{3}));
  Tensor ax2 = T({2}, {0, 3});
  EXPECT_EQ(Run1(MakeNode("Unsqueeze", 2), {&y, &ax2}).shape(), (std::vector<int64_t>{1, 1, 3, 1, 1}));
  Node un11 = MakeNode("Unsqueeze", 1, 11);
  SetIs(un11, "axes", {1});
  EXPECT_EQ(Run1(un11, {&y}).shape(), (std::vector<int64_t>{1, 1, 3, 1}));
}

TEST(HostOps, PadModes) {
  Tensor x = T({1, 3}, {1, 2, 3});
  Tensor pads = *T({4}, {0, 2, 0, 1}).CastTo(device::DataType::kInt64);  // Pad-11+: int64 pads
  Tensor v = T({}, {9});
  EXPECT_EQ(Vals(Run1(MakeNode("Pad", 3), {&x, &pads, &v})), (std::vector<float>{9, 9, 1, 2, 3, 9}));
  Node refl = MakeNode("Pad", 2);
  SetS(refl, "mode", "reflect");
  EXPECT_EQ(Vals(Run1(refl, {&x, &pads})), (std::vector<float>{3, 2, 1, 2, 3, 2}));
  Node edge = MakeNode("Pad", 2);
  SetS(edge, "mode", "edge");
  EXPECT_EQ(Vals(Run1(edge, {&x, &pads})), (std::vector<float>{1, 1, 1, 2, 3, 3}));
}

TEST(HostOps, SoftmaxAxisRules) {
  Tensor x = T({2, 2}, {0, std::log(3.f), 1, 1});
  Tensor y = Run1(MakeNode("Softmax", 1), {&x});
  EXPECT_NEAR(y.data<float>()[0], 0.25, 1e-6);
  EXPECT_NEAR(y.data<float>()[1], 0.75, 1e-6);
  EXPECT_NEAR(y.data<float>()[2], 0.5, 1e-6);
  // opset 11, axis 0: the whole tensor is one row.
  Node s11 = MakeNode("Softmax", 1, 11);
  SetI(s11, "axis", 0);
  Tensor z = Run1(s11, {&x});
  double sum = 0;
  for (float f : z.span<float>()) sum += f;
  EXPECT_NEAR(sum, 1.0, 1e-6);
}

TEST(HostOps, GemmAndMatMul) {
  Tensor a = T({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = T({2, 3}, {1, 0, 1, 0, 1, 0});  // used transposed
  Tensor c = T({2}, {10, 20});
  Node g = MakeNode("Gemm", 3);
  SetI(g, "transB", 1);
  SetF(g, "alpha", 2.f);
  SetF(g, "beta", 0.5f);
  // A·Bᵀ = [[4, 2], [10, 5]]; 2· + 0.5·C
  EXPECT_EQ(Vals(Run1(g, {&a, &b, &c})), (std::vector<float>{13, 14, 25, 20}));
  Tensor m = T({3, 1}, {1, 1, 1});
  Tensor mm = Run1(MakeNode("MatMul", 2), {&a, &m});
  EXPECT_EQ(Vals(mm), (std::vector<float>{6, 15}));
  Tensor batch = T({2, 1, 3}, {1, 2, 3, 4, 5, 6});
  Tensor v = T({3}, {1, 0, -1});
  Tensor bm = Run1(MakeNode("MatMul", 2), {&batch, &v});
  EXPECT_EQ(bm.shape(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(Vals(bm), (std::vector<float>{-2, -2}));
}

TEST(HostOps, PoolingAndBatchNormAndCast) {
  Tensor x = T({1, 1, 1, 4}, {1, 5, 2, 8});
  Node mp = MakeNode("MaxPool", 1);
  SetIs(mp, "kernel_shape", {1, 2});
  SetIs(mp, "strides", {1, 2});
  EXPECT_EQ(Vals(Run1(mp, {&x})), (std::vector<float>{5, 8}));
  Tensor x3 = T({1, 1, 4}, {1, 5, 2, 8});  // 1-D pooling
  Node ap = MakeNode("AveragePool", 1);
  SetIs(ap, "kernel_shape", {3});
  SetIs(ap, "pads", {1, 1});
  SetI(ap, "count_include_pad", 0);
  Tensor a = Run1(ap, {&x3});
  ASSERT_EQ(a.shape(), (std::vector<int64_t>{1, 1, 4}));
  EXPECT_FLOAT_EQ(a.data<float>()[0], 3.f);
  EXPECT_FLOAT_EQ(a.data<float>()[3], 5.f);
  Tensor g = Run1(MakeNode("GlobalAveragePool", 1), {&x});
  EXPECT_EQ(g.shape(), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_FLOAT_EQ(g.data<float>()[0], 4.f);
  Tensor s = T({1}, {2}), bb = T({1}, {1}), mean = T({1}, {1}), var = T({1}, {4});
  Node bn = MakeNode("BatchNormalization", 5);
  SetF(bn, "epsilon", 0.f);
  EXPECT_EQ(Vals(Run1(bn, {&x, &s, &bb, &mean, &var})), (std::vector<float>{1, 5, 2, 8}));
  Node cast = MakeNode("Cast", 1);
  SetI(cast, "to", 7);  // INT64
  Tensor f = T({3}, {-1.7f, 0.2f, 2.9f});
  Tensor c = Run1(cast, {&f});  // ONNX Cast: the output has the target type, truncated toward zero
  ASSERT_EQ(c.dtype(), device::DataType::kInt64);
  EXPECT_EQ(std::vector<int64_t>(c.data<int64_t>(), c.data<int64_t>() + 3), (std::vector<int64_t>{-1, 0, 2}));
  Node mpi = MakeNode("MaxPool", 1);
  mpi.outputs.push_back("indices");
  SetIs(mpi, "kernel_shape", {1, 2});
  auto r = RunHostOp(mpi, {&x}, convplan::testutil::Reference());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ(Vals((*r)[0]), (std::vector<float>{5, 5, 8}));
  ASSERT_EQ((*r)[1].dtype(), device::DataType::kInt64);  // flat indices into x
  EXPECT_EQ(std::vector<int64_t>((*r)[1].data<int64_t>(), (*r)[1].data<int64_t>() + 3), (std::vector<int64_t>{1, 1, 3}));
}

TEST(HostOps, ConcatAndUnaryMath) {
  Tensor a = T({1, 2, 1}, {1, 2});
  Tensor b = T({1, 1, 1}, {3});
  Node cat = MakeNode("Concat", 2);
  SetI(cat, "axis", -2);
  EXPECT_EQ(Vals(Run1(cat, {&a, &b})), (std::vector<float>{1, 2, 3}));
  Tensor x = T({3}, {-1, 0, 4});
  EXPECT_EQ(Vals(Run1(MakeNode("Abs", 1), {&x})), (std::vector<float>{1, 0, 4}));
  EXPECT_EQ(Vals(Run1(MakeNode("Neg", 1), {&x})), (std::vector<float>{1, -0.f, -4}));
  EXPECT_EQ(Run1(MakeNode("Sqrt", 1), {&x}).data<float>()[2], 2.f);
  EXPECT_NEAR(Run1(MakeNode("Erf", 1), {&x}).data<float>()[0], std::erf(-1.0), 1e-7);
  EXPECT_NEAR(Run1(MakeNode("Tanh", 1), {&x}).data<float>()[2], std::tanh(4.0), 1e-7);
  EXPECT_NEAR(Run1(MakeNode("Sigmoid", 1), {&x}).data<float>()[1], 0.5, 1e-7);
  auto r = RunHostOp(MakeNode("NonMaxSuppression", 1), {&x}, convplan::testutil::Reference());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
}


// The registry is the one list of host ops: what BuildConvPlan accepts is what the executor runs.
TEST(HostOpRegistry, OneListForPlannerAndExecutor) {
  const HostKernelRegistry& r = HostKernels();
  ASSERT_TRUE(r.status().ok()) << r.status().ToString();
  const std::vector<std::string> types = r.HostOpTypes();
  EXPECT_TRUE(std::is_sorted(types.begin(), types.end()));
  EXPECT_EQ(types.size(), 80u);
  for (const char* t : {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Conv", "ConvTranspose",
                        "Concat", "Gemm", "MatMul",
                        "BatchNormalization", "Add", "Sub", "Mul", "Div", "Relu", "Clip", "Sigmoid", "Tanh",
                        "Erf", "Sqrt", "Abs", "Neg", "Cast", "Reshape", "Flatten", "Transpose", "Squeeze",
                        "Unsqueeze", "Pad", "Softmax", "Identity", "Dropout", "Constant", "Slice", "Split",
                        "Gather", "ArgMax", "ArgMin", "Expand", "Tile", "Where", "Shape", "ConstantOfShape",
                        "Range", "DepthToSpace", "SpaceToDepth", "TopK"}) {
    EXPECT_TRUE(r.SupportsHostOp(t)) << t;
    ASSERT_NE(r.Find(t), nullptr) << t;
  }
  EXPECT_FALSE(r.SupportsHostOp("NonMaxSuppression"));
  const convplan::HostOpSupport& support = r;  // what compiler/convplan sees
  EXPECT_EQ(support.HostOpTypes(), types);
}

TEST(HostOpRegistry, RejectsDuplicatesAndIncompleteKernels) {
  auto run = [](const Node&, const HostKernelInputs&, const HostKernelContext&) -> Result<std::vector<Tensor>> {
    return std::vector<Tensor>{};
  };
  auto bytes = [](const Node&, const std::vector<std::vector<int64_t>>&) -> int64_t { return 0; };
  HostKernelRegistry r;
  r.Add({{"Foo", "Bar"}, bytes, run});
  EXPECT_TRUE(r.status().ok());
  r.Add({{"Baz", "Foo"}, bytes, run});
  EXPECT_EQ(r.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(r.HostOpTypes(), (std::vector<std::string>{"Bar", "Foo"}));  // nothing of the rejected kernel
  HostKernelRegistry empty;
  empty.Add({{}, bytes, run});
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  HostKernelRegistry null_fn;
  null_fn.Add({{"Foo"}, bytes, nullptr});
  EXPECT_EQ(null_fn.status().code(), StatusCode::kInvalidArgument);
}

TEST(HostOpRegistry, MemoryEstimatesFromInputShapes) {
  const HostKernelRegistry& r = HostKernels();
  auto est = [&](const Node& n, std::vector<std::vector<int64_t>> shapes) {
    auto b = r.EstimateBytes(n, shapes);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? *b : -1;
  };
  EXPECT_EQ(est(MakeNode("Relu", 1), {{2, 3, 4}}), 2 * 3 * 4 * 4);
  EXPECT_EQ(est(MakeNode("Add", 2), {{2, 1, 4}, {3, 1}}), 2 * 3 * 4 * 4);
  // Data movement of any element type: 8-byte elements (the type is not known from shapes).
  EXPECT_EQ(est(MakeNode("Concat", 2), {{1, 2, 5}, {1, 3, 5}}), 5 * 5 * 8);
  Node gemm = MakeNode("Gemm", 2);
  SetI(gemm, "transB", 1);
  EXPECT_EQ(est(gemm, {{7, 16}, {9, 16}}), 7 * 9 * 4);
  EXPECT_EQ(est(MakeNode("MatMul", 2), {{4, 1, 2, 8}, {3, 8, 5}}), 4 * 3 * 2 * 5 * 4);
  EXPECT_EQ(est(MakeNode("GlobalAveragePool", 1), {{2, 8, 7, 7}}), 2 * 8 * 4);
  Node pad = MakeNode("Pad", 1, 2);
  SetIs(pad, "pads", {0, 1, 0, 2});
  EXPECT_EQ(est(pad, {{2, 3}}), 2 * 6 * 8 + (2 + 6) * 8);  // output + its per-dim index tables
  // MaxPool: a copy of the input plus an output at least as large as the real one.
  Node mp = MakeNode("MaxPool", 1);
  SetIs(mp, "kernel_shape", {2, 2});
  SetIs(mp, "strides", {2, 2});
  EXPECT_GE(est(mp, {{1, 4, 8, 8}}), (4 * 8 * 8 + 4 * 4 * 4) * 4);
  EXPECT_LE(est(mp, {{1, 4, 8, 8}}), (4 * 8 * 8 + 4 * 5 * 5) * 4);
  // Saturates instead of overflowing.
  EXPECT_EQ(est(MakeNode("Relu", 1), {{int64_t{1} << 40, int64_t{1} << 40}}), std::numeric_limits<int64_t>::max());
  auto unknown = r.EstimateBytes(MakeNode("NonMaxSuppression", 1), {{1}});
  EXPECT_EQ(unknown.status().code(), StatusCode::kUnimplemented);
}

TEST(HostOpRegistry, LongKernelsHonourTheCancelToken) {
  // 2^22 elements: several kCancelPollWork steps, so the kernels check the token mid-way.
  auto x = Tensor::Zeros({1, 4, 1024, 1024});
  ASSERT_TRUE(x.ok());
  device::CancelToken cancelled;
  cancelled.Cancel();
  const HostKernelContext ctx{convplan::testutil::Reference(), &cancelled};
  for (const char* op : {"Relu", "Sigmoid", "Softmax", "Transpose", "BatchNormalization", "GlobalAveragePool"}) {
    Node n = MakeNode(op, 1);
    Tensor c = T({4}, {1, 1, 1, 1});
    HostKernelInputs in = {&*x};
    if (std::string(op) == "BatchNormalization") {
      n = MakeNode(op, 5);
      in = {&*x, &c, &c, &c, &c};
    }
    auto r = HostKernels().Run(n, in, ctx);
    ASSERT_FALSE(r.ok()) << op;
    EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << op;
  }
  Tensor a = T({2, 2}, {1, 2, 3, 4});
  auto add = HostKernels().Run(MakeNode("Add", 2), {&*x, &*x}, ctx);
  EXPECT_EQ(add.status().code(), StatusCode::kCancelled);
  device::CancelToken expired(device::CancelToken::Clock::now());
  const HostKernelContext late{convplan::testutil::Reference(), &expired};
  auto r = HostKernels().Run(MakeNode("Relu", 1), {&*x}, late);
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  // Small work finishes before the first check.
  auto small = HostKernels().Run(MakeNode("MatMul", 2), {&a, &a}, ctx);
  EXPECT_TRUE(small.ok()) << small.status().ToString();
}

}  // namespace
}  // namespace kiln::runtime
