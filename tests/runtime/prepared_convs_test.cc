// The fast path of repeated reference runs (runtime/prepared_convs.h, runtime/device_op_runner.h):
// convs prepared once per plan + input shape + backend, feature maps kept in the backend's layout
// between device ops, the residual add fused into the conv. Its outputs must be bit-identical to
// the plain path (NCHW, every conv prepared per call, residual add on the host), and the cache
// must stay within its bound.
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/prepared_convs.h"
#include "tests/convplan/test_util.h"

namespace kiln::runtime {
namespace {

using namespace convplan::testutil;  // NOLINT
using convplan::BuildConvPlan;
using convplan::ConvPlan;
using kiln::testing::SetInt;
using kiln::testing::SetInts;

// conv a (+Relu) -> conv b + Add(a) + Relu (fused residual) -> MaxPool (host) ; Concat(pool, pool)
// -> conv c (a K-split of 2 parts, 1x1) -> y; the residual sum r2 is a graph output too.
std::shared_ptr<const onnx_fe::Model> ResidualNet() {
  OnnxModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, {"batch", 8, 12, 12});
  AddConv(b, "x", "ca", "conv_a", 8, 16, 3, 41);
  b.Node("Relu", {"ca"}, {"r1"}, "relu_a");
  AddConv(b, "r1", "cb", "conv_b", 16, 16, 3, 42);
  b.Node("Add", {"cb", "r1"}, {"s"}, "add");
  b.Node("Relu", {"s"}, {"r2"}, "relu_b");
  auto& mp = b.Node("MaxPool", {"r2"}, {"p"}, "pool");
  SetInts(mp, "kernel_shape", {2, 2});
  SetInts(mp, "strides", {2, 2});
  auto& cat = b.Node("Concat", {"p", "p"}, {"pp"}, "cat");
  SetInt(cat, "axis", 1);
  AddConv(b, "pp", "y", "conv_c", 32, 8, 1, 43);
  b.Output("y");
  b.Output("r2");
  return Load(b);
}

// The residual add fused into conv_b needs DeviceAdd off (compiler/convplan/passes/device_add.cc
// otherwise makes the Add a device add of its own); `device_add` builds that default plan instead.
std::shared_ptr<const ConvPlan> Plan(bool device_add = false) {
  convplan::PlanOptions o;
  if (!device_add) o.disabled_passes = {"DeviceAdd"};
  auto p = BuildConvPlan(ResidualNet(), HostKernels(), o);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::make_shared<const ConvPlan>(std::move(*p));
}

RunInputs Batch(const ConvPlan& plan, int64_t n) {
  convplan::PlanInput in = plan.inputs[0];
  const std::vector<int64_t> dims{n, 8, 12, 12};
  in.shape = onnx_fe::Shape::FromValues(dims);
  auto x = GenerateInput(in, 5 + static_cast<uint64_t>(n));
  EXPECT_TRUE(x.ok()) << x.status().ToString();
  return {{in.name, std::move(*x)}};
}

void ExpectBitIdentical(const RunResult& a, const RunResult& b) {
  ASSERT_EQ(a.outputs.size(), b.outputs.size());
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    const auto& x = a.outputs[i].second;
    const auto& y = b.outputs[i].second;
    ASSERT_EQ(x.shape(), y.shape()) << a.outputs[i].first;
    EXPECT_EQ(x.layout(), device::Layout::kNCHW);
    EXPECT_EQ(y.layout(), device::Layout::kNCHW);
    EXPECT_EQ(std::memcmp(x.data<float>(), y.data<float>(), x.size_bytes()), 0) << a.outputs[i].first;
  }
}

TEST(PreparedConvs, PlanHasTheFusedShapes) {
  auto p = Plan();
  const auto* b = FindOp(*p, "conv_b");
  ASSERT_NE(b, nullptr) << p->ToString();
  EXPECT_EQ(b->device().residual, "r1") << p->ToString();
  EXPECT_EQ(b->device().residual_activation, device::Activation::kRelu);
  const auto* c = FindOp(*p, "conv_c");
  ASSERT_NE(c, nullptr) << p->ToString();
  EXPECT_EQ(c->device().inputs.size(), 2u) << p->ToString();
  EXPECT_TRUE(Reference().capabilities().fused_residual);
}

void CheckRepeatedRunsBitIdentical(bool device_add) {
  SCOPED_TRACE(device_add ? "device add" : "fused residual");
  auto p = Plan(device_add);
  ASSERT_EQ(FindOp(*p, "conv_b")->device().residual.empty(), device_add) << p->ToString();
  const RunInputs in = Batch(*p, 2);
  RunOptions plain;  // compare_to_reference: NCHW throughout, convs prepared per call, host add
  auto base = RunConvPlan(*p, in, Reference(), plain);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  ASSERT_TRUE(base->all_pass);

  RunOptions skip;
  skip.compare_to_reference = false;
  auto unprepared = RunConvPlan(*p, in, Reference(), skip);  // backend layout kept, no cache
  ASSERT_TRUE(unprepared.ok()) << unprepared.status().ToString();
  SCOPED_TRACE("unprepared");
  ExpectBitIdentical(*base, *unprepared);

  PreparedConvs cache(p, Reference());
  skip.prepared = &cache;
  for (int run = 0; run < 3; ++run) {
    auto fast = RunConvPlan(*p, in, Reference(), skip);
    ASSERT_TRUE(fast.ok()) << fast.status().ToString();
    SCOPED_TRACE("prepared run " + std::to_string(run));
    ExpectBitIdentical(*base, *fast);
  }
  // conv_a, conv_b (with or without the fused residual), conv_c's two parts: one entry each.
  EXPECT_EQ(cache.size(), 4u);

  // With the reference chain on, both chains use the cache (device == reference): still exact.
  RunOptions compare;
  compare.prepared = &cache;
  auto compared = RunConvPlan(*p, in, Reference(), compare);
  ASSERT_TRUE(compared.ok()) << compared.status().ToString();
  SCOPED_TRACE("compared");
  ExpectBitIdentical(*base, *compared);
  for (const LayerReport& l : compared->layers) EXPECT_EQ(l.max_abs_error, 0.0) << l.name;
}

TEST(PreparedConvs, RepeatedRunsAreBitIdenticalToThePlainPath) {
  CheckRepeatedRunsBitIdentical(false);
  CheckRepeatedRunsBitIdentical(true);
}

TEST(PreparedConvs, EntriesPerConvAreBoundedByInputShapes) {
  auto p = Plan();
  PreparedConvs cache(p, Reference(), 2);
  RunOptions o;
  o.compare_to_reference = false;
  o.prepared = &cache;
  for (int64_t n : {1, 2, 3, 1}) {
    auto r = RunConvPlan(*p, Batch(*p, n), Reference(), o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    RunOptions plain;
    auto base = RunConvPlan(*p, Batch(*p, n), Reference(), plain);
    ASSERT_TRUE(base.ok()) << base.status().ToString();
    ExpectBitIdentical(*base, *r);
    EXPECT_LE(cache.size(), 2u * 4u) << "batch " << n;
  }
  EXPECT_EQ(cache.size(), 2u * 4u);
}

TEST(PreparedConvs, ACacheOfAnotherPlanOrBackendIsIgnored) {
  auto p = Plan();
  auto other = Plan();
  PreparedConvs cache(other, Reference());
  RunOptions o;
  o.compare_to_reference = false;
  o.prepared = &cache;
  auto r = RunConvPlan(*p, Batch(*p, 1), Reference(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(cache.size(), 0u);

  auto second = device::MakeReferenceBackend();
  ASSERT_TRUE(second.ok());
  PreparedConvs on_second(p, **second);
  o.prepared = &on_second;
  r = RunConvPlan(*p, Batch(*p, 1), Reference(), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(on_second.size(), 0u);
  EXPECT_FALSE(on_second.Acquire(0, 5, {1, 8, 12, 12}, device::Layout::kNCHW, {}, {}).ok());
}

}  // namespace
}  // namespace kiln::runtime
