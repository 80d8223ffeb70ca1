// The runner's own rules (tests/conformance/conformance.h): onnx's comparison, the tensor
// conversion, the parameter table and the params-mode edit, the expected-failures table.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "tests/conformance/conformance.h"

namespace kiln::conformance {
namespace {

onnx::TensorProto Floats(std::vector<int64_t> dims, std::vector<float> v) {
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  for (float f : v) t.add_float_data(f);
  return t;
}

device::Tensor Device(std::vector<int64_t> dims, std::vector<float> v) {
  return device::Tensor::FromFloats(std::move(dims), v).value();
}

TEST(ConformanceCompareTensor, NumpyAllcloseRule) {
  const auto e = Floats({2}, {1.0f, 0.0f});
  EXPECT_EQ(CompareTensor(e, Device({2}, {1.0f, 0.0f})), "");
  // |a - e| <= atol + rtol·|e|: 1e-3 relative to the expected value passes, 2e-3 does not.
  EXPECT_EQ(CompareTensor(e, Device({2}, {1.0009f, 0.0f})), "");
  EXPECT_NE(CompareTensor(e, Device({2}, {1.002f, 0.0f})), "");
  // Near zero only atol (1e-7) counts.
  EXPECT_EQ(CompareTensor(e, Device({2}, {1.0f, 5e-8f})), "");
  const std::string far = CompareTensor(e, Device({2}, {1.0f, 1e-6f}));
  EXPECT_NE(far.find("values: 1 of 2 differ, first at [1]"), std::string::npos) << far;
}

TEST(ConformanceCompareTensor, NanAndInfinity) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const auto e = Floats({3}, {nan, inf, -inf});
  EXPECT_EQ(CompareTensor(e, Device({3}, {nan, inf, -inf})), "");
  EXPECT_NE(CompareTensor(e, Device({3}, {0.0f, inf, -inf})), "");
  EXPECT_NE(CompareTensor(e, Device({3}, {nan, -inf, -inf})), "");
  EXPECT_NE(CompareTensor(e, Device({3}, {nan, 3e38f, -inf})), "");
}

TEST(ConformanceCompareTensor, ShapeAndDtype) {
  const auto e = Floats({1, 2}, {1.0f, 2.0f});
  EXPECT_EQ(CompareTensor(e, Device({2}, {1.0f, 2.0f})).rfind("shape: expected [1, 2], got [2]", 0), 0u);
  onnx::TensorProto i = e;
  i.clear_float_data();
  i.set_data_type(onnx::TensorProto::INT64);
  i.add_int64_data(1);
  i.add_int64_data(2);
  EXPECT_EQ(CompareTensor(i, Device({1, 2}, {1.0f, 2.0f})), "dtype: expected INT64, got float32 (values match)");
  EXPECT_EQ(CompareTensor(i, Device({1, 2}, {1.0f, 3.0f})), "dtype: expected INT64, got float32 (values differ too)");
}

TEST(ConformanceToDeviceTensor, KeepsTheElementTypeAndExactValues) {
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::INT64);
  t.add_dims(2);
  const int64_t big = (int64_t{1} << 60) + 1;  // not representable in fp32 or fp64
  t.add_int64_data(big);
  t.add_int64_data(-7);
  auto d = ToDeviceTensor(t);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->dtype(), device::DataType::kInt64);
  EXPECT_EQ(d->data<int64_t>()[0], big);
  EXPECT_EQ(d->data<int64_t>()[1], -7);
  EXPECT_EQ(CompareTensor(t, *d), "");

  onnx::TensorProto h;
  h.set_data_type(onnx::TensorProto::FLOAT16);
  h.add_dims(3);
  for (int bits : {0x3c00, 0x0001, 0xfc00}) h.add_int32_data(bits);  // 1, smallest subnormal, -inf
  auto dh = ToDeviceTensor(h);
  ASSERT_TRUE(dh.ok()) << dh.status().ToString();
  ASSERT_EQ(dh->dtype(), device::DataType::kFloat16);
  EXPECT_EQ(dh->data<uint16_t>()[0], 0x3c00);
  EXPECT_EQ(dh->data<uint16_t>()[1], 0x0001);
  EXPECT_EQ(dh->data<uint16_t>()[2], 0xfc00);

  onnx::TensorProto s;
  s.set_data_type(onnx::TensorProto::STRING);
  s.add_dims(1);
  s.add_string_data("a");
  EXPECT_FALSE(ToDeviceTensor(s).ok());
}

// X → Conv(X, W, B) → If(cond){ Relu(X) } ; R feeds Reshape as shape and Add as data.
onnx::ModelProto ParamModel(int64_t ir_version) {
  onnx::ModelProto m;
  m.set_ir_version(ir_version);
  onnx::GraphProto* g = m.mutable_graph();
  for (const char* in : {"X", "W", "B", "R", "cond"}) g->add_input()->set_name(in);
  auto* conv = g->add_node();
  conv->set_op_type("Conv");
  for (const char* in : {"X", "W", "B"}) conv->add_input(in);
  conv->add_output("y");
  auto* reshape = g->add_node();
  reshape->set_op_type("Reshape");
  reshape->add_input("y");
  reshape->add_input("R");
  reshape->add_output("z");
  auto* add = g->add_node();
  add->set_op_type("Add");
  add->add_input("z");
  add->add_input("R");
  add->add_output("w");
  auto* iff = g->add_node();
  iff->set_op_type("If");
  iff->add_input("cond");
  iff->add_output("o");
  auto* then = iff->add_attribute();
  then->set_name("then_branch");
  auto* relu = then->mutable_g()->add_node();
  relu->set_op_type("Relu");
  relu->add_input("B");  // B is also read as data inside the subgraph
  relu->add_output("o");
  return m;
}

TEST(ConformanceParameterInputs, OnlyInputsReadAsParametersEverywhere) {
  const onnx::ModelProto m = ParamModel(8);
  // W: Conv weights. B: Conv bias but also Relu data in a subgraph. R: Reshape shape but also Add data.
  EXPECT_EQ(ParameterInputs(m.graph()), std::vector<size_t>{1});
  EXPECT_EQ(FirstNodeOutsideOpSet(m.graph()), "If");
  EXPECT_TRUE(IsParameterInput("ReduceMax", 1));
  EXPECT_FALSE(IsParameterInput("Conv", 0));
  EXPECT_FALSE(IsParameterInput("Relu", 1));
}

TEST(ConformanceWithParametersAsInitializers, MovesTheDataSetValues) {
  DataSet ds;
  for (float v : {1.0f, 2.0f, 3.0f, 4.0f, 5.0f}) ds.inputs.push_back(Floats({1}, {v}));
  for (int64_t ir : {3, 8}) {
    const onnx::ModelProto m = WithParametersAsInitializers(ParamModel(ir), ds, {1});
    ASSERT_EQ(m.graph().initializer_size(), 1);
    EXPECT_EQ(m.graph().initializer(0).name(), "W");
    EXPECT_EQ(m.graph().initializer(0).float_data(0), 2.0f);
    // IR < 4 lists initializers among the graph inputs too.
    EXPECT_EQ(m.graph().input_size(), ir >= 4 ? 4 : 5) << "IR " << ir;
    EXPECT_EQ(RuntimeInputs(m.graph()), (std::vector<std::string>{"X", "B", "R", "cond"}));
  }
}

TEST(ConformanceExpectedTable, ParsesFormatsAndRejects) {
  const std::string text =
      "# header\n"
      "node/test_b params not yet supported: plan: x\n"
      "node/test_a shipped opset < 6\n"
      "node/test_c shipped onnx-1.12 test-data bug: onnx/onnx#4226\n";
  auto t = ParseExpected(text);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->size(), 3u);
  EXPECT_EQ((*t)[0].mode, Mode::kParams);
  EXPECT_TRUE(IsPermanentReason((*t)[1].reason));
  EXPECT_FALSE(IsPermanentReason((*t)[0].reason));
  EXPECT_EQ(FormatExpected(ExpectedHeader(text), *t),
            "# header\n"
            "node/test_a shipped opset < 6\n"
            "node/test_b params not yet supported: plan: x\n"
            "node/test_c shipped onnx-1.12 test-data bug: onnx/onnx#4226\n");
  EXPECT_FALSE(ParseExpected("node/test_a shipped it is hard\n").ok());
  EXPECT_FALSE(ParseExpected("node/test_a both opset < 6\n").ok());
  EXPECT_FALSE(ParseExpected("test_a shipped opset < 6\n").ok());
  EXPECT_FALSE(ParseExpected("node/test_a shipped onnx-1.12 test-data bug: \n").ok());
  EXPECT_FALSE(ParseExpected("node/a shipped opset < 6\nnode/a shipped string tensors\n").ok());
}

TEST(ConformanceErrorCategory, GroupsByOpTypesAndElidesNames) {
  EXPECT_EQ(ErrorCategory("plan: INVALID_ARGUMENT: model has 3 unsupported node(s): ReduceMax 'a', Exp 'b', "
                          "ReduceMax 'c' (device ops: Conv, ConvTranspose; host ops: Add)"),
            "plan: unsupported op(s): Exp ReduceMax");
  EXPECT_EQ(ErrorCategory("test_data_set_1: run: MaxPool 'p': input must be rank 3 or 4, got [1, 3, 2, 2, 2]"),
            "run: MaxPool '*': input must be rank N or N, got [*]");
  EXPECT_EQ(ErrorCategory("output 'y' dtype: expected INT64, got float32 (values match)"),
            "output '*' dtype: expected INT64, got float32 (values match)");
}

}  // namespace
}  // namespace kiln::conformance
