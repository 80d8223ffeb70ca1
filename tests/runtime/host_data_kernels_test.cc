// The data-movement and index host kernels (runtime/host_kernels/{slice,gather,expand,generate,
// depth,pad,shape}.cc) on every kind of element type, against values worked out by hand from the
// ONNX operator definitions (onnx/docs/Operators.md) and numpy (np.pad for reflect). int64 values
// above 2^24 show that nothing passes through fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "common/float16.h"
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
using testutil::SetS;

constexpr int64_t kBig = (int64_t{1} << 40) + 1;  // not representable in fp32

// A tensor of storage type S (element type `dtype`) holding `v`.
template <typename S>
Tensor Of(DataType dtype, std::vector<int64_t> shape, const std::vector<S>& v) {
  auto t = Tensor::Zeros(std::move(shape), dtype);
  EXPECT_TRUE(t.ok());
  EXPECT_EQ(static_cast<size_t>(t->num_elements()), v.size());
  if (!v.empty()) std::memcpy(t->raw().data(), v.data(), v.size() * sizeof(S));
  return std::move(*t);
}
Tensor I64(std::vector<int64_t> shape, const std::vector<int64_t>& v) { return Of(DataType::kInt64, std::move(shape), v); }
Tensor I32(std::vector<int64_t> shape, const std::vector<int32_t>& v) { return Of(DataType::kInt32, std::move(shape), v); }
Tensor F32(std::vector<int64_t> shape, const std::vector<float>& v) { return Of(DataType::kFloat32, std::move(shape), v); }
Tensor Bool(std::vector<int64_t> shape, const std::vector<uint8_t>& v) { return Of(DataType::kBool, std::move(shape), v); }

template <typename S>
std::vector<S> Vals(const Tensor& t) {
  std::vector<S> v(static_cast<size_t>(t.num_elements()));
  if (!v.empty()) std::memcpy(v.data(), t.raw().data(), v.size() * sizeof(S));
  return v;
}

Result<std::vector<Tensor>> RunOp(const Node& n, const HostKernelInputs& in, const device::CancelToken* cancel = nullptr) {
  return HostKernels().Run(n, in, HostKernelContext{convplan::testutil::Reference(), cancel});
}

Tensor Run1(const Node& n, const HostKernelInputs& in) {
  auto r = RunOp(n, in);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return Tensor();
  return std::move((*r)[0]);
}

// The error of running `n`, which must fail with INVALID_ARGUMENT naming the node.
std::string BadInput(const Node& n, const HostKernelInputs& in) {
  auto r = RunOp(n, in);
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find(n.name), std::string::npos) << r.status().message();
  return r.status().message();
}

TEST(HostDataKernels, SliceClampsAndStepsBackwardsOnInt64) {
  Tensor x = I64({2, 5}, {kBig, kBig + 1, kBig + 2, kBig + 3, kBig + 4, 5, 6, 7, 8, 9});
  Node n = MakeNode("Slice", 5);
  // axis -1 from its last element backwards by 2, end far below the start (clamped to -1).
  Tensor starts = I64({1}, {-1}), ends = I64({1}, {std::numeric_limits<int64_t>::min()}), axes = I64({1}, {-1}),
         steps = I64({1}, {-2});
  Tensor y = Run1(n, {&x, &starts, &ends, &axes, &steps});
  EXPECT_EQ(y.dtype(), DataType::kInt64);
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Vals<int64_t>(y), (std::vector<int64_t>{kBig + 4, kBig + 2, kBig, 9, 7, 5}));
  // int32 control inputs, default axes and steps, an end past the dim (clamped to the dim).
  Tensor s32 = I32({2}, {1, 3}), e32 = I32({2}, {2, std::numeric_limits<int32_t>::max()});
  Tensor z = Run1(MakeNode("Slice", 3), {&x, &s32, &e32});
  EXPECT_EQ(z.shape(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(Vals<int64_t>(z), (std::vector<int64_t>{8, 9}));
  // A start past the end: an empty dim.
  Tensor s_far = I64({1}, {7}), e_far = I64({1}, {9}), a1 = I64({1}, {1});
  Tensor empty = Run1(MakeNode("Slice", 4), {&x, &s_far, &e_far, &a1});
  EXPECT_EQ(empty.shape(), (std::vector<int64_t>{2, 0}));
}

TEST(HostDataKernels, SliceOpset1AttributesAndErrors) {
  Tensor x = F32({3, 2}, {0, 1, 2, 3, 4, 5});
  Node n = MakeNode("Slice", 1, 1);
  SetIs(n, "starts", {1});
  SetIs(n, "ends", {1000});
  SetIs(n, "axes", {0});
  Tensor y = Run1(n, {&x});
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{2, 3, 4, 5}));

  Tensor s = I64({2}, {0, 0}), e = I64({2}, {1, 1}), same_axes = I64({2}, {1, -1}), zero = I64({2}, {1, 0});
  Tensor axes01 = I64({2}, {0, 1});
  EXPECT_NE(BadInput(MakeNode("Slice", 4), {&x, &s, &e, &same_axes}).find("repeated"), std::string::npos);
  EXPECT_NE(BadInput(MakeNode("Slice", 5), {&x, &s, &e, &axes01, &zero}).find("step 0"), std::string::npos);
  Tensor far_axis = I64({2}, {0, 2});
  EXPECT_NE(BadInput(MakeNode("Slice", 4), {&x, &s, &e, &far_axis}).find("out of range"), std::string::npos);
}

TEST(HostDataKernels, SplitForms) {
  Tensor x = I64({2, 4}, {kBig, 1, 2, 3, 4, 5, 6, kBig + 7});
  // Split-13: the split input, negative axis.
  Node n13 = MakeNode("Split", 2, 13, 2);
  SetI(n13, "axis", -1);
  Tensor split = I64({2}, {1, 3});
  auto r = RunOp(n13, {&x, &split});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(Vals<int64_t>((*r)[0]), (std::vector<int64_t>{kBig, 4}));
  EXPECT_EQ(Vals<int64_t>((*r)[1]), (std::vector<int64_t>{1, 2, 3, 5, 6, kBig + 7}));
  // Split-11: the split attribute; Split-13 without it: equal parts.
  Node n11 = MakeNode("Split", 1, 11, 2);
  SetI(n11, "axis", 1);
  SetIs(n11, "split", {3, 1});
  auto r11 = RunOp(n11, {&x});
  ASSERT_TRUE(r11.ok()) << r11.status().ToString();
  EXPECT_EQ(Vals<int64_t>((*r11)[1]), (std::vector<int64_t>{3, kBig + 7}));
  Node eq = MakeNode("Split", 1, 13, 2);
  auto req = RunOp(eq, {&x});
  ASSERT_TRUE(req.ok()) << req.status().ToString();
  EXPECT_EQ(Vals<int64_t>((*req)[1]), (std::vector<int64_t>{4, 5, 6, kBig + 7}));
  // Errors: parts that do not divide, a split that does not sum to the dim.
  Node three = MakeNode("Split", 1, 13, 3);
  SetI(three, "axis", 1);
  EXPECT_NE(BadInput(three, {&x}).find("equal parts"), std::string::npos);
  Tensor bad = I64({2}, {1, 2});
  EXPECT_NE(BadInput(n13, {&x, &bad}).find("sums to 3"), std::string::npos);
}

TEST(HostDataKernels, GatherNegativeIndicesAndErrors) {
  Tensor x = I64({3, 2}, {kBig, 1, 2, 3, 4, kBig + 5});
  Tensor idx = I64({2, 2}, {-1, 0, 2, -3});
  Tensor y = Run1(MakeNode("Gather", 2), {&x, &idx});
  EXPECT_EQ(y.dtype(), DataType::kInt64);
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(Vals<int64_t>(y), (std::vector<int64_t>{4, kBig + 5, kBig, 1, 4, kBig + 5, kBig, 1}));
  // axis 1 with a scalar int32 index drops the axis.
  Node a1 = MakeNode("Gather", 2);
  SetI(a1, "axis", 1);
  Tensor scalar = I32({}, {-1});
  Tensor col = Run1(a1, {&x, &scalar});
  EXPECT_EQ(col.shape(), (std::vector<int64_t>{3}));
  EXPECT_EQ(Vals<int64_t>(col), (std::vector<int64_t>{1, 3, kBig + 5}));
  // bool data stays bool.
  Tensor b = Bool({3}, {1, 0, 1});
  Tensor i1 = I64({2}, {1, 2});
  Tensor bg = Run1(MakeNode("Gather", 2), {&b, &i1});
  EXPECT_EQ(bg.dtype(), DataType::kBool);
  EXPECT_EQ(Vals<uint8_t>(bg), (std::vector<uint8_t>{0, 1}));
  Tensor out_of_range = I64({1}, {3});
  EXPECT_NE(BadInput(MakeNode("Gather", 2), {&x, &out_of_range}).find("index 3 out of range [-3, 2]"),
            std::string::npos);
  Tensor below = I64({1}, {-4});
  EXPECT_NE(BadInput(MakeNode("Gather", 2), {&x, &below}).find("index -4"), std::string::npos);
  Tensor float_idx = F32({1}, {0});
  EXPECT_NE(BadInput(MakeNode("Gather", 2), {&x, &float_idx}).find("int32 or int64"), std::string::npos);
}

TEST(HostDataKernels, ArgMaxArgMin) {
  Tensor x = F32({2, 3}, {1, 5, 5, 7, -2, 7});
  Node n = MakeNode("ArgMax", 1);
  SetI(n, "axis", 1);
  SetI(n, "keepdims", 0);
  Tensor y = Run1(n, {&x});
  EXPECT_EQ(y.dtype(), DataType::kInt64);
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{2}));
  EXPECT_EQ(Vals<int64_t>(y), (std::vector<int64_t>{1, 0}));
  SetI(n, "select_last_index", 1);
  EXPECT_EQ(Vals<int64_t>(Run1(n, {&x})), (std::vector<int64_t>{2, 2}));
  Node mn = MakeNode("ArgMin", 1);  // axis 0, keepdims 1
  Tensor m = Run1(mn, {&x});
  EXPECT_EQ(m.shape(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(Vals<int64_t>(m), (std::vector<int64_t>{0, 1, 0}));
  // int64 above 2^24: kBig and kBig + 1 are one fp32 value, but not here.
  Tensor big = I64({3}, {kBig, kBig + 1, kBig - 1});
  EXPECT_EQ(Vals<int64_t>(Run1(MakeNode("ArgMax", 1), {&big})), (std::vector<int64_t>{1}));
  EXPECT_EQ(Vals<int64_t>(Run1(MakeNode("ArgMin", 1), {&big})), (std::vector<int64_t>{2}));
  // NaN wins as numpy's argmax treats it.
  Tensor nan = F32({3}, {1, std::nanf(""), 9});
  EXPECT_EQ(Vals<int64_t>(Run1(MakeNode("ArgMax", 1), {&nan})), (std::vector<int64_t>{1}));
  Tensor b = Bool({2}, {0, 1});
  auto rb = RunOp(MakeNode("ArgMax", 1), {&b});
  EXPECT_EQ(rb.status().code(), StatusCode::kInvalidArgument);  // ONNX's ArgMax has no bool
}

TEST(HostDataKernels, TopKOrderTiesAndForms) {
  Tensor x = I64({2, 4}, {3, kBig, 3, kBig + 1, 0, -1, 5, 5});
  Tensor k2 = I64({1}, {2});
  auto r = RunOp(MakeNode("TopK", 2, 11, 2), {&x, &k2});  // axis -1, largest
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].dtype(), DataType::kInt64);
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(Vals<int64_t>((*r)[0]), (std::vector<int64_t>{kBig + 1, kBig, 5, 5}));
  EXPECT_EQ((*r)[1].dtype(), DataType::kInt64);
  EXPECT_EQ(Vals<int64_t>((*r)[1]), (std::vector<int64_t>{3, 1, 2, 3}));  // equal 5s: lower index first
  // Smallest along axis 0 of float data with a NaN (NaN sorts last); TopK-1's k attribute.
  Tensor f = F32({3, 2}, {std::nanf(""), 2, 1, 2, 0, -3});
  Node small = MakeNode("TopK", 1, 1, 2);
  SetI(small, "k", 3);
  SetI(small, "axis", 0);
  SetI(small, "largest", 0);
  auto s = RunOp(small, {&f});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::vector<float> sv = Vals<float>((*s)[0]);
  EXPECT_EQ(sv[0], 0.0f);
  EXPECT_EQ(sv[1], -3.0f);
  EXPECT_EQ(sv[2], 1.0f);
  EXPECT_EQ(sv[3], 2.0f);
  EXPECT_TRUE(std::isnan(sv[4]));
  EXPECT_EQ(sv[5], 2.0f);
  EXPECT_EQ(Vals<int64_t>((*s)[1]), (std::vector<int64_t>{2, 2, 1, 0, 0, 1}));
  Tensor k5 = I64({1}, {5});
  EXPECT_NE(BadInput(MakeNode("TopK", 2, 11, 2), {&x, &k5}).find("K 5 out of range [0, 4]"), std::string::npos);
}

TEST(HostDataKernels, ExpandIsBidirectional) {
  Tensor x = I64({3, 1}, {kBig, 2, 3});
  Tensor shape = I64({3}, {2, 1, 4});  // 1 keeps the input's 3
  Tensor y = Run1(MakeNode("Expand", 2), {&x, &shape});
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{2, 3, 4}));
  std::vector<int64_t> want;
  for (int k = 0; k < 2; ++k) {
    for (int64_t v : {kBig, int64_t{2}, int64_t{3}}) want.insert(want.end(), 4, v);
  }
  EXPECT_EQ(Vals<int64_t>(y), want);
  Tensor small = I64({1}, {1});  // shorter and all ones: a copy of the input
  Tensor same = Run1(MakeNode("Expand", 2), {&x, &small});
  EXPECT_EQ(same.shape(), (std::vector<int64_t>{3, 1}));
  Tensor bad = I64({2}, {2, 2});
  EXPECT_NE(BadInput(MakeNode("Expand", 2), {&x, &bad}).find("do not broadcast"), std::string::npos);
}

TEST(HostDataKernels, TileRepeatsEachAxis) {
  Tensor x = Of<uint16_t>(DataType::kUInt16, {2, 2}, {1, 2, 3, 65535});
  Tensor rep = I64({2}, {2, 3});
  Tensor y = Run1(MakeNode("Tile", 2), {&x, &rep});
  EXPECT_EQ(y.dtype(), DataType::kUInt16);
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{4, 6}));
  const std::vector<uint16_t> r0 = {1, 2, 1, 2, 1, 2}, r1 = {3, 65535, 3, 65535, 3, 65535};
  std::vector<uint16_t> want;
  for (int k = 0; k < 2; ++k) {
    want.insert(want.end(), r0.begin(), r0.end());
    want.insert(want.end(), r1.begin(), r1.end());
  }
  EXPECT_EQ(Vals<uint16_t>(y), want);
  Tensor zero = I64({2}, {0, 1});
  EXPECT_EQ(Run1(MakeNode("Tile", 2), {&x, &zero}).shape(), (std::vector<int64_t>{0, 2}));
  Tensor neg = I64({2}, {1, -1});
  EXPECT_NE(BadInput(MakeNode("Tile", 2), {&x, &neg}).find("negative repeat"), std::string::npos);
  Tensor short_rep = I64({1}, {2});
  BadInput(MakeNode("Tile", 2), {&x, &short_rep});
}

TEST(HostDataKernels, WhereBroadcastsAndKeepsXsType) {
  Tensor c = Bool({2, 1}, {1, 0});
  Tensor a = I64({1, 2}, {kBig, -kBig});
  Tensor b = I64({}, {7});
  Tensor y = Run1(MakeNode("Where", 3), {&c, &a, &b});
  EXPECT_EQ(y.dtype(), DataType::kInt64);
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(Vals<int64_t>(y), (std::vector<int64_t>{kBig, -kBig, 7, 7}));
  // The registry selects on X (input 1): float16 X with a bool condition runs.
  const HostKernel* k = HostKernels().Find("Where");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->type_input, 1);
  Tensor h = Of<uint16_t>(DataType::kFloat16, {2}, {FloatToHalf(1.5f), FloatToHalf(-2.0f)});
  Tensor hc = Bool({2}, {0, 1});
  Tensor hy = Run1(MakeNode("Where", 3), {&hc, &h, &h});
  EXPECT_EQ(hy.dtype(), DataType::kFloat16);
  Tensor not_bool = I64({2}, {1, 0});
  EXPECT_NE(BadInput(MakeNode("Where", 3), {&not_bool, &a, &b}).find("must be bool"), std::string::npos);
  Tensor f = F32({1}, {1});
  EXPECT_NE(BadInput(MakeNode("Where", 3), {&c, &a, &f}).find("different element types"), std::string::npos);
}

TEST(HostDataKernels, ShapeStartEnd) {
  auto x = Tensor::Zeros({2, 3, 5}, DataType::kInt8);
  ASSERT_TRUE(x.ok());
  Tensor all = Run1(MakeNode("Shape", 1, 15), {&*x});
  EXPECT_EQ(all.dtype(), DataType::kInt64);
  EXPECT_EQ(Vals<int64_t>(all), (std::vector<int64_t>{2, 3, 5}));
  Node n = MakeNode("Shape", 1, 15);
  SetI(n, "start", -2);
  SetI(n, "end", 100);
  EXPECT_EQ(Vals<int64_t>(Run1(n, {&*x})), (std::vector<int64_t>{3, 5}));
  SetI(n, "start", 2);
  SetI(n, "end", -2);  // end before start: empty
  EXPECT_EQ(Run1(n, {&*x}).shape(), (std::vector<int64_t>{0}));
}

TEST(HostDataKernels, ConstantOfShapeValueTypes) {
  Tensor shape = I64({2}, {2, 3});
  Tensor zeros = Run1(MakeNode("ConstantOfShape", 1, 9), {&shape});
  EXPECT_EQ(zeros.dtype(), DataType::kFloat32);  // no value: float32 0
  EXPECT_EQ(Vals<float>(zeros), std::vector<float>(6, 0.0f));
  // value: an int64 tensor above 2^24.
  static const float kAsFloat[1] = {static_cast<float>(kBig)};
  auto value = std::make_shared<onnx_fe::Tensor>();
  value->dtype = onnx_fe::DataType::kInt64;
  const int64_t one = 1;
  value->shape = onnx_fe::Shape::FromValues(std::span<const int64_t>(&one, 1));
  value->constant = std::make_shared<onnx_fe::ConstantData>(onnx_fe::DataType::kInt64, nullptr,
                                                            std::span<const float>(kAsFloat, 1),
                                                            std::vector<int64_t>{kBig});
  Node n = MakeNode("ConstantOfShape", 1, 9);
  Attribute a;
  a.name = "value";
  a.type = AttributeType::kTensor;
  a.t = value;
  n.attributes["value"] = a;
  Tensor y = Run1(n, {&shape});
  EXPECT_EQ(y.dtype(), DataType::kInt64);
  EXPECT_EQ(Vals<int64_t>(y), std::vector<int64_t>(6, kBig));
  Tensor scalar_shape = I64({0}, {});
  EXPECT_EQ(Run1(n, {&scalar_shape}).shape(), (std::vector<int64_t>{}));  // an empty shape: a scalar
  Tensor neg = I64({1}, {-1});
  EXPECT_NE(BadInput(n, {&neg}).find("negative dim"), std::string::npos);
  EXPECT_EQ(HostKernels().FindPath("ConstantOfShape", DataType::kFloat32), nullptr);  // T1 is int64
}

TEST(HostDataKernels, RangeOfEachKind) {
  Tensor s = I64({}, {kBig}), l = I64({}, {kBig + 10}), d = I64({}, {3});
  Tensor y = Run1(MakeNode("Range", 3, 11), {&s, &l, &d});
  EXPECT_EQ(y.dtype(), DataType::kInt64);
  EXPECT_EQ(Vals<int64_t>(y), (std::vector<int64_t>{kBig, kBig + 3, kBig + 6, kBig + 9}));
  Tensor fs = F32({}, {1.0f}), fl = F32({}, {-1.0f}), fd = F32({}, {-0.5f});
  EXPECT_EQ(Vals<float>(Run1(MakeNode("Range", 3, 11), {&fs, &fl, &fd})), (std::vector<float>{1.0f, 0.5f, 0.0f, -0.5f}));
  Tensor is = I32({}, {5}), il = I32({}, {1}), id = I32({}, {2});  // wrong direction: empty
  Tensor e = Run1(MakeNode("Range", 3, 11), {&is, &il, &id});
  EXPECT_EQ(e.dtype(), DataType::kInt32);
  EXPECT_EQ(e.shape(), (std::vector<int64_t>{0}));
  Tensor i8s = Of<int8_t>(DataType::kInt8, {}, {-128}), i8l = Of<int8_t>(DataType::kInt8, {}, {127}),
         i8d = Of<int8_t>(DataType::kInt8, {}, {100});  // limit - start exceeds int8: the count is exact
  EXPECT_EQ(Vals<int8_t>(Run1(MakeNode("Range", 3, 11), {&i8s, &i8l, &i8d})), (std::vector<int8_t>{-128, -28, 72}));
  Tensor zero = I64({}, {0});
  EXPECT_NE(BadInput(MakeNode("Range", 3, 11), {&s, &l, &zero}).find("delta is 0"), std::string::npos);
  EXPECT_NE(BadInput(MakeNode("Range", 3, 11), {&s, &fl, &d}).find("start is int64"), std::string::npos);
}

TEST(HostDataKernels, DepthToSpaceModesAndSpaceToDepth) {
  // [1, 8, 1, 2], blocksize 2: 2 output channels of [2, 4]. Element value = c * 2 + w.
  std::vector<int8_t> v(16);
  for (int i = 0; i < 16; ++i) v[i] = static_cast<int8_t>(i);
  Tensor x = Of<int8_t>(DataType::kInt8, {1, 8, 1, 2}, v);
  Node dcr = MakeNode("DepthToSpace", 1, 13);
  SetI(dcr, "blocksize", 2);
  SetS(dcr, "mode", "DCR");
  Tensor y = Run1(dcr, {&x});
  EXPECT_EQ(y.dtype(), DataType::kInt8);
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{1, 2, 2, 4}));
  // DCR: output (c, h*2+i, w*2+j) reads channel (i*2 + j)*2 + c.
  EXPECT_EQ(Vals<int8_t>(y), (std::vector<int8_t>{0, 4, 1, 5, 8, 12, 9, 13, 2, 6, 3, 7, 10, 14, 11, 15}));
  Node crd = dcr;
  SetS(crd, "mode", "CRD");  // reads channel c*4 + i*2 + j
  EXPECT_EQ(Vals<int8_t>(Run1(crd, {&x})),
            (std::vector<int8_t>{0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15}));
  // SpaceToDepth inverts DCR DepthToSpace.
  Node s2d = MakeNode("SpaceToDepth", 1, 13);
  SetI(s2d, "blocksize", 2);
  Tensor back = Run1(s2d, {&y});
  EXPECT_EQ(back.shape(), x.shape());
  EXPECT_EQ(Vals<int8_t>(back), v);
  Node b3 = dcr;
  SetI(b3, "blocksize", 3);
  EXPECT_NE(BadInput(b3, {&x}).find("do not divide"), std::string::npos);
}

TEST(HostDataKernels, PadModesTypesAndNegativePads) {
  Tensor x = I64({1, 3}, {kBig, 2, 3});
  Node reflect = MakeNode("Pad", 2, 13);
  SetS(reflect, "mode", "reflect");
  Tensor pads = I64({4}, {0, 5, 0, 1});
  Tensor y = Run1(reflect, {&x, &pads});
  EXPECT_EQ(y.dtype(), DataType::kInt64);
  // np.pad([a, 2, 3], (5, 1), 'reflect') = [2, a, 2, 3, 2, a, 2, 3, 2]
  EXPECT_EQ(Vals<int64_t>(y), (std::vector<int64_t>{2, kBig, 2, 3, 2, kBig, 2, 3, 2}));
  Node edge = reflect;
  SetS(edge, "mode", "edge");
  EXPECT_EQ(Vals<int64_t>(Run1(edge, {&x, &pads})), (std::vector<int64_t>{kBig, kBig, kBig, kBig, kBig, kBig, 2, 3, 3}));
  // constant with a typed constant_value; negative pads crop first.
  Node constant = MakeNode("Pad", 3, 13);
  Tensor crop = I64({4}, {1, -1, 0, 2});
  Tensor value = I64({}, {kBig + 1});
  Tensor c = Run1(constant, {&x, &crop, &value});
  EXPECT_EQ(c.shape(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(Vals<int64_t>(c), (std::vector<int64_t>{kBig + 1, kBig + 1, kBig + 1, kBig + 1, 2, 3, kBig + 1, kBig + 1}));
  // reflect reads the cropped tensor: [0, 1, 2, 3, 4] cropped by 1 at the start is [1, 2, 3, 4].
  Tensor r = F32({5}, {0, 1, 2, 3, 4});
  Tensor rp = I64({2}, {-1, 2});
  EXPECT_EQ(Vals<float>(Run1(reflect, {&r, &rp})), (std::vector<float>{1, 2, 3, 4, 3, 2}));
  // Pad-2: attributes; the float value converted to the element type (Cast: truncation).
  Node p2 = MakeNode("Pad", 1, 2);
  SetIs(p2, "pads", {1, 0});
  SetF(p2, "value", 2.7f);
  Tensor i32 = I32({2}, {-5, 6});
  Tensor y2 = Run1(p2, {&i32});
  EXPECT_EQ(y2.dtype(), DataType::kInt32);
  EXPECT_EQ(Vals<int32_t>(y2), (std::vector<int32_t>{2, -5, 6}));
  // Errors: pads of the wrong length, cropping more than the dim, edge-padding an empty dim.
  Tensor short_pads = I64({2}, {0, 1});
  EXPECT_NE(BadInput(constant, {&x, &short_pads}).find("rank 2"), std::string::npos);
  Tensor over = I64({4}, {0, -2, 0, -2});
  BadInput(constant, {&x, &over});
  Tensor all_cut = I64({2}, {-3, 0});
  Tensor grow = I64({2}, {-5, 1});
  Tensor r3 = F32({3}, {1, 2, 3});
  EXPECT_EQ(Run1(edge, {&r3, &all_cut}).shape(), (std::vector<int64_t>{0}));
  BadInput(edge, {&r3, &grow});
}

TEST(HostDataKernels, TransposeBlockedPathMatchesTheDefinition) {
  // NCHW -> NHWC and back over sizes that are not multiples of the block, on two element sizes.
  const std::vector<int64_t> shape = {2, 3, 37, 41};
  const int64_t count = 2 * 3 * 37 * 41;
  std::vector<int64_t> v(count);
  std::vector<int8_t> v8(count);
  for (int64_t i = 0; i < count; ++i) {
    v[i] = kBig + i;
    v8[i] = static_cast<int8_t>(i * 7);
  }
  Tensor x = I64(shape, v);
  Tensor x8 = Of<int8_t>(DataType::kInt8, shape, v8);
  Node nhwc = MakeNode("Transpose", 1);
  SetIs(nhwc, "perm", {0, 2, 3, 1});
  Tensor y = Run1(nhwc, {&x});
  Tensor y8 = Run1(nhwc, {&x8});
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{2, 37, 41, 3}));
  const std::vector<int64_t> got = Vals<int64_t>(y);
  const std::vector<int8_t> got8 = Vals<int8_t>(y8);
  int64_t mismatches = 0;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t h = 0; h < 37; ++h)
      for (int64_t w = 0; w < 41; ++w)
        for (int64_t c = 0; c < 3; ++c) {
          const int64_t src = ((n * 3 + c) * 37 + h) * 41 + w, dst = ((n * 37 + h) * 41 + w) * 3 + c;
          mismatches += got[dst] != v[src];
          mismatches += got8[dst] != v8[src];
        }
  EXPECT_EQ(mismatches, 0);
  Node nchw = MakeNode("Transpose", 1);
  SetIs(nchw, "perm", {0, 3, 1, 2});
  EXPECT_EQ(Vals<int64_t>(Run1(nchw, {&y})), v);
}

TEST(HostDataKernels, ShapeOpsOnEmptyTensorsAndOtherTypes) {
  auto empty = Tensor::Zeros({0, 3}, DataType::kFloat64);
  ASSERT_TRUE(empty.ok());
  Node flat = MakeNode("Flatten", 1);
  EXPECT_EQ(Run1(flat, {&*empty}).shape(), (std::vector<int64_t>{0, 3}));
  SetI(flat, "axis", -2);
  EXPECT_EQ(Run1(flat, {&*empty}).shape(), (std::vector<int64_t>{1, 0}));
  // Concat of an empty and a non-empty bool tensor along axis 0 (given as -2).
  Tensor e = Bool({0, 2}, {}), b = Bool({1, 2}, {1, 0});
  Node cat = MakeNode("Concat", 2);
  SetI(cat, "axis", -2);
  Tensor y = Run1(cat, {&e, &b});
  EXPECT_EQ(y.dtype(), DataType::kBool);
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(Vals<uint8_t>(y), (std::vector<uint8_t>{1, 0}));
  // Reshape keeps int64 values exact; 0 copies the input dim, -1 is inferred.
  Tensor x = I64({2, 3}, {kBig, 1, 2, 3, 4, kBig + 5});
  Tensor shape = I64({3}, {0, -1, 1});
  Tensor r = Run1(MakeNode("Reshape", 2, 14), {&x, &shape});
  EXPECT_EQ(r.shape(), (std::vector<int64_t>{2, 3, 1}));
  EXPECT_EQ(Vals<int64_t>(r), Vals<int64_t>(x));
}

// A ShuffleNet-style shape chain through the planner and the executor: Shape -> Gather ->
// Unsqueeze -> Concat -> Reshape on a symbolic batch, then Transpose, a two-output Split and a
// backwards Slice; the int64 chain stays int64 and every value lands where ONNX puts it.
TEST(HostDataKernels, ShapeChainThroughThePlan) {
  using namespace kiln::testing;
  OnnxModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, {"N", 4, 2, 3});
  b.Initializer(Int64Tensor("zero", {}, {0}));
  b.Initializer(Int64Tensor("axes0", {1}, {0}));
  b.Initializer(Int64Tensor("rest", {3}, {2, 2, 6}));
  b.Initializer(Int64Tensor("split", {2}, {2, 4}));
  b.Initializer(Int64Tensor("start", {1}, {-1}));
  b.Initializer(Int64Tensor("end", {1}, {std::numeric_limits<int64_t>::min()}));
  b.Initializer(Int64Tensor("axis3", {1}, {3}));
  b.Initializer(Int64Tensor("back", {1}, {-1}));
  b.Node("Shape", {"x"}, {"s"}, "shape");
  b.Node("Gather", {"s", "zero"}, {"n"}, "gather");
  b.Node("Unsqueeze", {"n", "axes0"}, {"n1"}, "unsqueeze");
  SetInt(b.Node("Concat", {"n1", "rest"}, {"shape2"}, "concat"), "axis", 0);
  b.Node("Reshape", {"x", "shape2"}, {"r"}, "reshape");
  SetInts(b.Node("Transpose", {"r"}, {"t"}, "transpose"), "perm", {0, 2, 1, 3});
  SetInt(b.Node("Split", {"t", "split"}, {"p0", "p1"}, "split"), "axis", 3);
  b.Node("Slice", {"p1", "start", "end", "axis3", "back"}, {"y"}, "slice");
  b.Output("p0");
  b.Output("y");
  auto model = convplan::testutil::Load(b);
  ASSERT_NE(model, nullptr);
  auto plan = convplan::BuildConvPlan(model, HostKernels());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  std::vector<float> v(2 * 24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  RunInputs in;
  in["x"] = F32({2, 4, 2, 3}, v);
  convplan::testutil::RunResult r = convplan::testutil::RunRef(*plan, in);
  ASSERT_EQ(r.outputs.size(), 2u);
  const Tensor& p0 = r.outputs[0].second;
  const Tensor& y = r.outputs[1].second;
  ASSERT_EQ(p0.shape(), (std::vector<int64_t>{2, 2, 2, 2}));
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{2, 2, 2, 4}));
  // r[n, a, b, k] = v[n*24 + a*12 + b*6 + k]; t[n, b, a, k] = r[n, a, b, k]; p0 = t[..., 0:2],
  // y = t[..., 5:1:-1].
  std::vector<float> want0, want1;
  for (int n = 0; n < 2; ++n)
    for (int bb = 0; bb < 2; ++bb)
      for (int a = 0; a < 2; ++a) {
        for (int k = 0; k < 2; ++k) want0.push_back(v[n * 24 + a * 12 + bb * 6 + k]);
        for (int k = 5; k > 1; --k) want1.push_back(v[n * 24 + a * 12 + bb * 6 + k]);
      }
  EXPECT_EQ(Vals<float>(p0), want0);
  EXPECT_EQ(Vals<float>(y), want1);
}

TEST(HostDataKernels, LongCopiesHonourTheCancelToken) {
  auto x = Tensor::Zeros({4, 1024, 1024}, DataType::kUInt8);
  ASSERT_TRUE(x.ok());
  device::CancelToken cancelled;
  cancelled.Cancel();
  Tensor rep = I64({3}, {1, 1, 2});
  Tensor pads = I64({6}, {0, 0, 1, 0, 0, 1});
  Tensor idx = I64({2}, {0, 1});
  Node gather = MakeNode("Gather", 2);
  SetI(gather, "axis", 1);
  Node nhwc = MakeNode("Transpose", 1);
  SetIs(nhwc, "perm", {1, 2, 0});
  const std::vector<std::pair<Node, HostKernelInputs>> cases = {
      {MakeNode("Tile", 2), {&*x, &rep}}, {MakeNode("Pad", 2), {&*x, &pads}}, {nhwc, {&*x}}};
  for (const auto& [n, in] : cases) {
    auto r = RunOp(n, in, &cancelled);
    ASSERT_FALSE(r.ok()) << n.op_type;
    EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << n.op_type;
  }
  // Small copies finish before the first check.
  auto small = RunOp(gather, {&*x, &idx}, &cancelled);
  EXPECT_TRUE(small.ok()) << small.status().ToString();
}

TEST(HostDataKernels, RegistryPathsAndEstimates) {
  const HostKernelRegistry& r = HostKernels();
  for (const char* op : {"Slice", "Split", "Gather", "Expand", "Tile", "Where", "Shape", "Pad", "DepthToSpace",
                         "SpaceToDepth", "Transpose", "Concat"}) {
    for (DataType t : device::kAllDataTypes) {
      const DTypePath* p = r.FindPath(op, t);
      ASSERT_NE(p, nullptr) << op << " " << device::DataTypeName(t);
      EXPECT_EQ(p->path, KernelPath::kTyped) << op;
    }
  }
  auto est = [&](const Node& n, std::vector<std::vector<int64_t>> shapes) {
    auto b = r.EstimateBytes(n, shapes);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? *b : -1;
  };
  Node g = MakeNode("Gather", 2);
  SetI(g, "axis", 1);
  EXPECT_EQ(est(g, {{4, 10, 3}, {2, 5}}), 4 * 2 * 5 * 3 * 8);
  EXPECT_EQ(est(MakeNode("Shape", 1), {{4, 10, 3}}), 3 * 8);
  EXPECT_EQ(est(MakeNode("Where", 3), {{2, 1}, {1, 5}, {}}), 2 * 5 * 8);
  Node am = MakeNode("ArgMax", 1);
  SetI(am, "axis", -1);
  EXPECT_EQ(est(am, {{6, 7}}), 6 * 8);
  EXPECT_EQ(est(MakeNode("Slice", 3), {{6, 7}, {1}, {1}}), 6 * 7 * 8);
}

}  // namespace
}  // namespace kiln::runtime
