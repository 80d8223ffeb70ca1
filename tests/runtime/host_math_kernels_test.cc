// Host math kernels of runtime/host_kernels/ (unary.cc, binary.cc, reduce.cc, normalization.cc,
// resize.cc): a few exact values per op, most from onnx's test-case scripts
// (onnx/backend/test/case/node/<op>.py); tests/conformance runs the full ONNX node tests.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/host_kernels/registry.h"
#include "tests/runtime/node_builder.h"
#include "tests/convplan/test_util.h"

namespace kiln::runtime {
namespace {

using device::DataType;
using device::Tensor;
using onnx_fe::Attribute;
using onnx_fe::AttributeType;
using onnx_fe::Node;
using testutil::MakeNode;
using testutil::SetI;
using testutil::SetIs;
using testutil::SetF;
using testutil::SetFs;
using testutil::SetS;

Tensor F(std::vector<int64_t> shape, std::vector<float> v) {
  auto t = Tensor::FromFloats(std::move(shape), v);
  EXPECT_TRUE(t.ok());
  return std::move(*t);
}

template <typename T>
Tensor Typed(std::vector<int64_t> shape, DataType dt, std::vector<T> v) {
  auto t = Tensor::Zeros(std::move(shape), dt);
  EXPECT_TRUE(t.ok());
  EXPECT_EQ(t->num_elements(), static_cast<int64_t>(v.size()));
  std::copy(v.begin(), v.end(), t->template data<T>());
  return std::move(*t);
}

template <typename T = float>
std::vector<T> Vals(const Tensor& t) {
  return {t.span<T>().begin(), t.span<T>().end()};
}

Result<std::vector<Tensor>> RunOp(const Node& n, std::vector<const Tensor*> in) {
  return HostKernels().Run(n, in, HostKernelContext{convplan::testutil::Reference(), nullptr});
}

Tensor Run1(const Node& n, std::vector<const Tensor*> in) {
  auto r = RunOp(n, in);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return Tensor();
  return std::move((*r)[0]);
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

TEST(HostMath, UnaryActivations) {
  Tensor x = F({3}, {-1, 0, 1});
  Node selu = MakeNode("Selu", 1);
  SetF(selu, "alpha", 2);
  SetF(selu, "gamma", 3);
  ExpectNear(Vals(Run1(selu, {&x})), {-3.79272318f, 0, 3});  // onnx selu.py example
  Node elu = MakeNode("Elu", 1);
  SetF(elu, "alpha", 2);
  ExpectNear(Vals(Run1(elu, {&x})), {-1.26424112f, 0, 1});
  ExpectNear(Vals(Run1(MakeNode("Softplus", 1), {&x})), {0.31326166f, 0.69314718f, 1.31326163f});
  Tensor h = F({3}, {-3, 0, 1});
  ExpectNear(Vals(Run1(MakeNode("HardSigmoid", 1), {&h})), {0, 0.5f, 0.7f});  // alpha 0.2, beta 0.5
  Tensor s = F({5}, {-4, -1, 0, 1, 4});
  ExpectNear(Vals(Run1(MakeNode("HardSwish", 1), {&s})), {0, -1.f / 3, 0, 2.f / 3, 4});
  Node lr = MakeNode("LeakyRelu", 1);
  SetF(lr, "alpha", 0.1f);
  ExpectNear(Vals(Run1(lr, {&s})), {-0.4f, -0.1f, 0, 1, 4});
  Tensor r = F({2}, {-4, 2});
  ExpectNear(Vals(Run1(MakeNode("Reciprocal", 1), {&r})), {-0.25f, 0.5f});
  ExpectNear(Vals(Run1(MakeNode("Neg", 1), {&r})), {4, -2});
}

TEST(HostMath, RoundingHalfToEvenAndFloorCeilSign) {
  Tensor x = F({7}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.3f, -2.7f});
  EXPECT_EQ(Vals(Run1(MakeNode("Round", 1), {&x})), (std::vector<float>{0, 2, 2, -0.f, -2, 2, -3}));
  EXPECT_EQ(Vals(Run1(MakeNode("Floor", 1), {&x})), (std::vector<float>{0, 1, 2, -1, -2, 2, -3}));
  EXPECT_EQ(Vals(Run1(MakeNode("Ceil", 1), {&x})), (std::vector<float>{1, 2, 3, -0.f, -1, 3, -2}));
  Tensor i = Typed<int64_t>({3}, DataType::kInt64, {-(int64_t{1} << 60), 0, 7});
  Tensor si = Run1(MakeNode("Sign", 1), {&i});
  EXPECT_EQ(si.dtype(), DataType::kInt64);
  EXPECT_EQ(Vals<int64_t>(si), (std::vector<int64_t>{-1, 0, 1}));
  EXPECT_EQ(Vals<int64_t>(Run1(MakeNode("Abs", 1), {&i})), (std::vector<int64_t>{int64_t{1} << 60, 0, 7}));
}

TEST(HostMath, UnaryTypesFloat64Float16Int8) {
  Tensor d = Typed<double>({2}, DataType::kFloat64, {0.0, 1.0});
  Tensor e = Run1(MakeNode("Exp", 1), {&d});
  ASSERT_EQ(e.dtype(), DataType::kFloat64);
  EXPECT_DOUBLE_EQ(e.data<double>()[1], std::exp(1.0));
  auto h = F({3}, {-2, 0.5f, 3}).CastTo(DataType::kFloat16);
  ASSERT_TRUE(h.ok());
  Tensor rh = Run1(MakeNode("Relu", 1), {&*h});
  ASSERT_EQ(rh.dtype(), DataType::kFloat16);
  EXPECT_EQ(Vals(*rh.ToFloat32()), (std::vector<float>{0, 0.5f, 3}));
  // Clip on int8 (opset 13 bounds as inputs), exact in the element type.
  Tensor c = Typed<int8_t>({4}, DataType::kInt8, {-128, -5, 5, 127});
  Tensor lo = Typed<int8_t>({}, DataType::kInt8, {-6});
  Tensor hi = Typed<int8_t>({}, DataType::kInt8, {4});
  Tensor y = Run1(MakeNode("Clip", 3), {&c, &lo, &hi});
  EXPECT_EQ(Vals<int8_t>(y), (std::vector<int8_t>{-6, -5, 4, 4}));
  // Types the schema does not allow are refused by the registry, naming the op.
  Tensor u = Typed<uint8_t>({1}, DataType::kUInt8, {1});
  auto bad = RunOp(MakeNode("Exp", 1), {&u});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(HostMath, IntegerArithmeticIsExact) {
  const int64_t big = (int64_t{1} << 40) + 1;
  Tensor a = Typed<int64_t>({2}, DataType::kInt64, {big, -7});
  Tensor b = Typed<int64_t>({2}, DataType::kInt64, {3, 2});
  EXPECT_EQ(Vals<int64_t>(Run1(MakeNode("Mul", 2), {&a, &b})), (std::vector<int64_t>{3 * big, -14}));
  EXPECT_EQ(Vals<int64_t>(Run1(MakeNode("Div", 2), {&a, &b})), (std::vector<int64_t>{big / 3, -3}));  // truncation
  Tensor p = Typed<int64_t>({1}, DataType::kInt64, {3});
  Tensor e = Typed<int64_t>({1}, DataType::kInt64, {39});
  EXPECT_EQ(Vals<int64_t>(Run1(MakeNode("Pow", 2), {&p, &e})), (std::vector<int64_t>{4052555153018976267}));
  Tensor u1 = Typed<uint8_t>({2}, DataType::kUInt8, {250, 7});
  Tensor u2 = Typed<uint8_t>({2}, DataType::kUInt8, {10, 2});
  EXPECT_EQ(Vals<uint8_t>(Run1(MakeNode("Add", 2), {&u1, &u2})), (std::vector<uint8_t>{4, 9}));  // wraps
  EXPECT_EQ(Vals<uint8_t>(Run1(MakeNode("Div", 2), {&u1, &u2})), (std::vector<uint8_t>{25, 3}));
}

TEST(HostMath, BroadcastingBothSidesAndComparisons) {
  Tensor a = F({3, 1}, {1, 2, 3});
  Tensor b = F({1, 4}, {10, 20, 30, 40});
  Tensor s = Run1(MakeNode("Sub", 2), {&a, &b});  // input 0 expanded for oneDNN
  EXPECT_EQ(s.shape(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(Vals(s)[0], -9);
  EXPECT_EQ(Vals(s)[11], -37);
  Tensor x = F({3}, {1, 5, 3});
  Tensor y = F({2, 3}, {2, 2, 2, 3, 3, 3});
  Tensor g = Run1(MakeNode("Greater", 2), {&x, &y});  // swapped to Less for oneDNN
  ASSERT_EQ(g.dtype(), DataType::kBool);
  EXPECT_EQ(Vals<uint8_t>(g), (std::vector<uint8_t>{0, 1, 1, 0, 1, 0}));
  Tensor l = Run1(MakeNode("Less", 2), {&x, &y});
  EXPECT_EQ(Vals<uint8_t>(l), (std::vector<uint8_t>{1, 0, 0, 1, 0, 0}));
  Tensor i = Typed<int64_t>({2}, DataType::kInt64, {(int64_t{1} << 53) + 1, 4});
  Tensor j = Typed<int64_t>({2}, DataType::kInt64, {int64_t{1} << 53, 4});
  EXPECT_EQ(Vals<uint8_t>(Run1(MakeNode("Equal", 2), {&i, &j})), (std::vector<uint8_t>{0, 1}));
}

TEST(HostMath, PowAndVariadic) {
  Tensor x = F({3}, {1, 2, 3});
  Tensor two = F({}, {2});
  ExpectNear(Vals(Run1(MakeNode("Pow", 2), {&x, &two})), {1, 4, 9});  // oneDNN eltwise pow
  Tensor e = F({3}, {4, 5, 6});
  ExpectNear(Vals(Run1(MakeNode("Pow", 2), {&x, &e})), {1, 32, 729});  // onnx pow.py example
  Tensor a = F({3}, {3, 2, 1}), b = F({3}, {1, 4, 4}), c = F({3}, {2, 5, 3});
  EXPECT_EQ(Vals(Run1(MakeNode("Max", 3), {&a, &b, &c})), (std::vector<float>{3, 5, 4}));
  EXPECT_EQ(Vals(Run1(MakeNode("Min", 3), {&a, &b, &c})), (std::vector<float>{1, 2, 1}));
  EXPECT_EQ(Vals(Run1(MakeNode("Sum", 3), {&a, &b, &c})), (std::vector<float>{6, 11, 8}));
  ExpectNear(Vals(Run1(MakeNode("Mean", 3), {&a, &b, &c})), {2, 11.f / 3, 8.f / 3});
  EXPECT_EQ(Vals(Run1(MakeNode("Max", 1), {&a})), (std::vector<float>{3, 2, 1}));
}

TEST(HostMath, PReluSlopeBroadcasts) {
  Tensor x = F({1, 2, 2}, {-1, 2, -3, 4});
  Tensor slope = F({2, 1}, {0.5f, 0.25f});
  EXPECT_EQ(Vals(Run1(MakeNode("PRelu", 2, 16), {&x, &slope})), (std::vector<float>{-0.5f, 2, -0.75f, 4}));
  // PRelu-6: a [C] slope is per channel.
  Tensor x4 = F({1, 2, 1, 2}, {-1, 2, -3, 4});
  Tensor sc = F({2}, {0.5f, 0.25f});
  EXPECT_EQ(Vals(Run1(MakeNode("PRelu", 2, 6), {&x4, &sc})), (std::vector<float>{-0.5f, 2, -0.75f, 4}));
}

TEST(HostMath, ReductionsEveryAxesForm) {
  Tensor x = F({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor ax = Typed<int64_t>({1}, DataType::kInt64, {-1});
  Node sum = MakeNode("ReduceSum", 2, 13);
  SetI(sum, "keepdims", 0);
  Tensor s = Run1(sum, {&x, &ax});
  EXPECT_EQ(s.shape(), (std::vector<int64_t>{2}));
  EXPECT_EQ(Vals(s), (std::vector<float>{6, 15}));
  Node noop = MakeNode("ReduceSum", 2, 13);
  SetI(noop, "noop_with_empty_axes", 1);
  Tensor none = Typed<int64_t>({0}, DataType::kInt64, {});
  EXPECT_EQ(Vals(Run1(noop, {&x, &none})), Vals(x));
  Tensor all = Run1(MakeNode("ReduceSum", 2, 13), {&x, &none});  // empty axes: every axis
  EXPECT_EQ(all.shape(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(Vals(all), (std::vector<float>{21}));
  Node mean = MakeNode("ReduceMean", 1, 11);  // axes attribute
  SetIs(mean, "axes", {0});
  EXPECT_EQ(Vals(Run1(mean, {&x})), (std::vector<float>{2.5f, 3.5f, 4.5f}));
  ExpectNear(Vals(Run1(MakeNode("ReduceL2", 1, 13), {&x})), {std::sqrt(91.f)});
  Node mx = MakeNode("ReduceMax", 1, 13);
  SetIs(mx, "axes", {1});
  EXPECT_EQ(Vals(Run1(mx, {&x})), (std::vector<float>{3, 6}));
  Tensor i = Typed<int64_t>({2}, DataType::kInt64, {(int64_t{1} << 53) + 1, 5});
  Tensor m = Run1(MakeNode("ReduceMax", 1, 13), {&i});
  ASSERT_EQ(m.dtype(), DataType::kInt64);
  EXPECT_EQ(Vals<int64_t>(m), (std::vector<int64_t>{(int64_t{1} << 53) + 1}));
  EXPECT_EQ(Vals<int64_t>(Run1(MakeNode("ReduceMin", 1, 13), {&i})), (std::vector<int64_t>{5}));
}

TEST(HostMath, SoftmaxFamilyAndNormalisations) {
  Tensor x = F({1, 3}, {1, 2, 3});
  ExpectNear(Vals(Run1(MakeNode("LogSoftmax", 1), {&x})), {-2.40760596f, -1.40760596f, -0.40760596f});
  // LayerNormalization with its Mean / InvStdDev outputs.
  Tensor l = F({2, 2}, {1, 3, 2, 6});
  Tensor scale = F({2}, {1, 2}), bias = F({2}, {0, 1});
  Node ln = MakeNode("LayerNormalization", 3, 17, 3);
  auto r = RunOp(ln, {&l, &scale, &bias});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectNear(Vals((*r)[0]), {-1, 3, -1, 3}, 1e-4f);
  EXPECT_EQ((*r)[1].shape(), (std::vector<int64_t>{2, 1}));
  ExpectNear(Vals((*r)[1]), {2, 4});
  ExpectNear(Vals((*r)[2]), {1 / std::sqrt(1 + 1e-5f), 1 / std::sqrt(4 + 1e-5f)});
  // InstanceNormalization: onnx instancenorm.py example.
  Tensor xi = F({1, 2, 1, 3}, {-1, 0, 1, 2, 3, 4});
  Tensor s = F({2}, {1, 1.5f}), b = F({2}, {0, 1});
  ExpectNear(Vals(Run1(MakeNode("InstanceNormalization", 3), {&xi, &s, &b})),
             {-1.22473562f, 0, 1.22473562f, -0.83710337f, 1, 2.83710337f}, 1e-4f);
  // LRN: odd size through oneDNN, even size with ONNX's asymmetric window (typed).
  Tensor xl = F({1, 2, 1, 1}, {1, 2});
  Node lrn = MakeNode("LRN", 1);
  SetF(lrn, "alpha", 1);
  SetF(lrn, "beta", 1);
  SetF(lrn, "bias", 1);
  SetI(lrn, "size", 3);
  ExpectNear(Vals(Run1(lrn, {&xl})), {0.375f, 0.75f});
  SetI(lrn, "size", 2);
  ExpectNear(Vals(Run1(lrn, {&xl})), {1 / 3.5f, 2 / 3.f});
}

TEST(HostMath, BatchNormTrainingModeIsRefused) {
  Tensor x = F({1, 2, 1, 1}, {1, 2});
  Tensor c = F({2}, {1, 1});
  Node bn = MakeNode("BatchNormalization", 5, 15);
  auto ok = RunOp(bn, {&x, &c, &c, &c, &c});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ExpectNear(Vals((*ok)[0]), {1, 1 / std::sqrt(1 + 1e-5f) + 1});
  SetI(bn, "training_mode", 1);
  auto r = RunOp(bn, {&x, &c, &c, &c, &c});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("BatchNormalization_0"), std::string::npos) << r.status().message();
}

TEST(HostMath, ResizeModesFromOnnxExamples) {
  Tensor x = F({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor sc = F({4}, {1, 1, 2, 2});
  Node lin = MakeNode("Resize", 3, 13);
  SetS(lin, "mode", "linear");  // half_pixel: oneDNN resampling
  Tensor y = Run1(lin, {&x, nullptr, &sc});
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{1, 1, 4, 4}));
  ExpectNear({Vals(y)[0], Vals(y)[1], Vals(y)[2], Vals(y)[3], Vals(y)[4], Vals(y)[5]}, {1, 1.25f, 1.75f, 2, 1.5f, 1.75f});
  // resize_downsample_scales_nearest / _linear_align_corners.
  Tensor d = F({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Tensor down = F({4}, {1, 1, 0.6f, 0.6f});
  EXPECT_EQ(Vals(Run1(MakeNode("Resize", 3, 13), {&d, nullptr, &down})), (std::vector<float>{1, 3}));
  Node ac = MakeNode("Resize", 3, 13);
  SetS(ac, "mode", "linear");
  SetS(ac, "coordinate_transformation_mode", "align_corners");
  ExpectNear(Vals(Run1(ac, {&d, nullptr, &down})), {1, 3.142857f});
  // Upsample-7 (scales attribute; nearest = floor of the asymmetric coordinate), on int32.
  Tensor xi = Typed<int32_t>({1, 1, 2, 2}, DataType::kInt32, {1, 2, 3, 4});
  Node up = MakeNode("Upsample", 1, 7);
  SetFs(up, "scales", {1, 1, 2, 3});
  Tensor u = Run1(up, {&xi});
  ASSERT_EQ(u.dtype(), DataType::kInt32);
  EXPECT_EQ(Vals<int32_t>(u), (std::vector<int32_t>{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2,
                                                      3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}));
}

TEST(HostMath, RegistryStatesThePaths) {
  const HostKernelRegistry& r = HostKernels();
  EXPECT_EQ(r.FindPath("Relu", DataType::kFloat32)->path, KernelPath::kOneDnn);
  EXPECT_EQ(r.FindPath("Relu", DataType::kInt64)->path, KernelPath::kTyped);
  EXPECT_EQ(r.FindPath("Add", DataType::kInt32)->path, KernelPath::kTyped);
  EXPECT_EQ(r.FindPath("ReduceMean", DataType::kFloat16)->path, KernelPath::kOneDnn);
  EXPECT_EQ(r.FindPath("Floor", DataType::kFloat32)->path, KernelPath::kTyped);
  EXPECT_EQ(r.FindPath("Exp", DataType::kInt64), nullptr);
}

TEST(HostMath, LongKernelsHonourTheCancelToken) {
  auto x = Tensor::Zeros({1, 4, 1024, 1024});
  ASSERT_TRUE(x.ok());
  device::CancelToken cancelled;
  cancelled.Cancel();
  const HostKernelContext ctx{convplan::testutil::Reference(), &cancelled};
  Tensor axes = Typed<int64_t>({1}, DataType::kInt64, {3});
  Tensor sc = F({4}, {1, 1, 1, 2});
  Tensor ones = F({1024}, std::vector<float>(1024, 1.f));
  struct Case {
    const char* op;
    HostKernelInputs in;
  };
  for (const Case& c : std::vector<Case>{{"Exp", {&*x}},
                                         {"Mul", {&*x, &*x}},
                                         {"Max", {&*x, &*x}},
                                         {"ReduceSum", {&*x, &axes}},
                                         {"LogSoftmax", {&*x}},
                                         {"LayerNormalization", {&*x, &ones, &ones}},
                                         {"Resize", {&*x, nullptr, &sc}}}) {
    Node n = MakeNode(c.op, c.in.size(), c.op == std::string("LayerNormalization") ? 17 : 13);
    auto r = HostKernels().Run(n, c.in, ctx);
    ASSERT_FALSE(r.ok()) << c.op;
    EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << c.op;
  }
}

}  // namespace
}  // namespace kiln::runtime
