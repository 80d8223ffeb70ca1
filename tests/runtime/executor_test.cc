// The ConvPlan executor: tt-emu in chained and per_layer modes with the per-layer report
// (thresholds follow tt-metal's run_conv rules, runtime/accuracy.h; pass = PCC >= threshold),
// inputs (generated / given / wrong), cancellation and progress.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "device/backends/builtin.h"
#include "device/backends/tt_emu/tt_emu_backend.h"
#include "device/numerics/formats.h"
#include "runtime/accuracy.h"
#include "runtime/memory_estimate.h"
#include "tests/convplan/test_util.h"

namespace kiln::runtime {
namespace {

using namespace convplan::testutil;  // NOLINT
using convplan::BuildConvPlan;
using convplan::ConvPlan;
using kiln::testing::SetInt;
using kiln::testing::SetInts;

// conv1 (8->16, 3x3) + Relu -> conv2 (16->16, 3x3) + Sigmoid -> MaxPool 2x2 -> ConvTranspose s2 (16->8)
std::shared_ptr<const onnx_fe::Model> SmallNet() {
  OnnxModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, {"batch", 8, 16, 16});
  AddConv(b, "x", "c1", "conv1", 8, 16, 3, 31);
  b.Node("Relu", {"c1"}, {"r1"}, "relu1");
  AddConv(b, "r1", "c2", "conv2", 16, 16, 3, 32);
  b.Node("Sigmoid", {"c2"}, {"s2"}, "sig2");
  auto& mp = b.Node("MaxPool", {"s2"}, {"p"}, "pool");
  SetInts(mp, "kernel_shape", {2, 2});
  SetInts(mp, "strides", {2, 2});
  b.FloatInitializer("wt", {16, 8, 2, 2}, kiln::testing::RandomFloats(16 * 8 * 4, 33));
  auto& ct = b.Node("ConvTranspose", {"p", "wt"}, {"y"}, "up");
  SetInts(ct, "strides", {2, 2});
  b.Output("y");
  return Load(b);
}

ConvPlan SmallPlan() {
  auto p = BuildConvPlan(SmallNet(), HostKernels());
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(*p);
}

std::unique_ptr<device::Backend> TtEmu() {
  device::BackendOptions o;
  o.settings["level"] = "exact";
  auto b = device::MakeTtEmuBackend(o);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return std::move(*b);
}

TEST(Executor, PlanShape) {
  ConvPlan p = SmallPlan();
  ASSERT_EQ(p.ops.size(), 4u) << p.ToString();
  EXPECT_EQ(p.ops[0].name, "conv1");
  EXPECT_EQ(p.ops[0].device().activation(), device::Activation::kRelu);
  EXPECT_EQ(p.ops[1].device().activation(), device::Activation::kSigmoid);
  EXPECT_EQ(p.ops[2].op, "MaxPool");
  EXPECT_EQ(p.ops[3].op, "conv_transpose2d");
}

// Expected threshold from docs/specs/tt-numerics.md §9.1, written out here independently of the executor.
double RuleConv(bool fp32, bool lofi_bfp8, bool sigmoid, int64_t cin_khkw) {
  if (!fp32) return cin_khkw > 10000 ? 0.97 : 0.985;
  if (lofi_bfp8) return 0.996;
  if (sigmoid) return 0.995;
  return 0.997;
}
double RuleConvT(bool fp32, bool lofi_bfp8) {
  if (!fp32) return 0.99;
  return lofi_bfp8 ? 0.9969 : 0.998;
}

void CheckReport(const RunResult& r, bool fp32, bool lofi_bfp8) {
  const bool per_layer = r.mode == RunMode::kPerLayer;
  ASSERT_EQ(r.layers.size(), 4u);
  EXPECT_DOUBLE_EQ(r.layers[0].threshold, RuleConv(fp32, lofi_bfp8, false, 8 * 9));
  EXPECT_DOUBLE_EQ(r.layers[1].threshold, RuleConv(fp32, lofi_bfp8, true, 16 * 9));
  EXPECT_EQ(r.layers[2].threshold, 0.0);  // host op
  EXPECT_DOUBLE_EQ(r.layers[3].threshold, RuleConvT(fp32, lofi_bfp8));
  bool all = true;
  for (const LayerReport& l : r.layers) {
    // per_layer runs host ops on the reference chain only: nothing to compare.
    EXPECT_EQ(l.compared, l.on_device || !per_layer) << l.name;
    if (l.on_device) {
      EXPECT_EQ(l.pass, l.pcc >= l.threshold) << l.name;
      EXPECT_GT(l.pcc, 0.9) << l.name;
      EXPECT_GT(l.max_abs_error, 0.0) << l.name << ": tt-emu should differ from fp32";
      EXPECT_GT(l.seconds, 0.0);
      EXPECT_GT(l.macs, 0);
      all = all && l.pass;
    }
  }
  EXPECT_EQ(r.all_pass, all);
  EXPECT_EQ(r.layers[0].input_shapes[0], (std::vector<int64_t>{1, 8, 16, 16}));
  EXPECT_EQ(r.layers[3].output_shapes[0], (std::vector<int64_t>{1, 8, 16, 16}));
}

TEST(Executor, TtEmuChainedDefaultsReport) {
  ConvPlan p = SmallPlan();
  auto dev = TtEmu();
  RunOptions o;  // TT-NN defaults: HiFi4, bf16, fp32_dest_acc_en resolved to false
  auto r = RunConvPlan(p, {}, *dev, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->backend, "tt-emu");
  EXPECT_TRUE(r->backend_honours_precision);
  ASSERT_TRUE(r->precision.fp32_dest_acc_en.has_value());
  EXPECT_FALSE(*r->precision.fp32_dest_acc_en);
  CheckReport(*r, false, false);
  EXPECT_TRUE(r->all_pass) << FormatReportTable(*r);
  std::printf("%s", FormatReportTable(*r).c_str());
}

TEST(Executor, TtEmuPerLayerFp32AccAndLoFiBfp8Rules) {
  ConvPlan p = SmallPlan();
  auto dev = TtEmu();
  RunOptions o;
  o.mode = RunMode::kPerLayer;
  o.precision.fp32_dest_acc_en = true;
  auto r = RunConvPlan(p, {}, *dev, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  CheckReport(*r, true, false);

  o.precision.math_fidelity = device::MathFidelity::kLoFi;
  o.precision.output_dtype = device::DeviceDType::kBFloat8B;
  auto r2 = RunConvPlan(p, {}, *dev, o);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  CheckReport(*r2, true, true);
  std::printf("%s", FormatReportTable(*r2).c_str());
}

// tt-metal's conv tests cast the torch reference to the output dtype before comp_pcc: a bf16 device
// output equal to the RNE-rounded reference then has PCC exactly 1, which the fp32 comparison misses.
TEST(Accuracy, ReferenceCastToTheOutputDtypeFirst) {
  std::vector<float> ref(64), dev(64);
  for (int i = 0; i < 64; ++i) {
    ref[i] = 1.0f + 0.0137f * static_cast<float>(i * i % 17) - 0.3f * static_cast<float>(i % 5);
    dev[i] = numerics::Bf16ToFloat(numerics::HostFp32ToBf16(numerics::FloatBits(ref[i])));
  }
  auto rt = device::Tensor::FromFloats({64}, ref), dt = device::Tensor::FromFloats({64}, dev);
  ASSERT_TRUE(rt.ok() && dt.ok());
  auto cast = CompareOutputs({*dt}, {*rt}, 0.999, "c", device::DeviceDType::kBFloat16);
  auto plain = CompareOutputs({*dt}, {*rt}, 0.999, "c", device::DeviceDType::kFloat32);
  ASSERT_TRUE(cast.ok() && plain.ok());
  EXPECT_EQ(cast->pcc, 1.0);
  EXPECT_EQ(cast->max_abs_error, 0.0);
  EXPECT_LT(plain->pcc, 1.0);
  EXPECT_GT(plain->max_abs_error, 0.0);
}

TEST(Executor, PerLayerFeedsReferenceInputs) {
  ConvPlan p = SmallPlan();
  auto dev = TtEmu();
  RunOptions chained;
  RunOptions per_layer;
  per_layer.mode = RunMode::kPerLayer;
  auto a = RunConvPlan(p, {}, *dev, chained);
  auto b = RunConvPlan(p, {}, *dev, per_layer);
  ASSERT_TRUE(a.ok() && b.ok());
  // Layer 1 sees the same input in both modes; later layers do not.
  EXPECT_DOUBLE_EQ(a->layers[0].pcc, b->layers[0].pcc);
  EXPECT_DOUBLE_EQ(a->layers[0].max_abs_error, b->layers[0].max_abs_error);
  // (Its largest error can sit where both inputs round to the same bf16 values, so compare the PCC.)
  EXPECT_NE(a->layers[1].pcc, b->layers[1].pcc);
  // Per-layer: the host MaxPool runs on the reference chain only, so it is not compared.
  EXPECT_FALSE(b->layers[2].compared);
  EXPECT_TRUE(a->layers[2].compared);
  // The chained graph output differs from the per-layer one (errors accumulate).
  EXPECT_GT(MaxDiff(*a, *b), 0.0);
}

// Pads within the geometry limit but with an output far beyond any tensor limit: the run fails
// with RESOURCE_EXHAUSTED naming the layer, not a bare size message.
TEST(Executor, HugeOutputIsResourceExhaustedNamingTheLayer) {
  OnnxModelBuilder b;
  b.Input("x", onnx::TensorProto::FLOAT, {1, 4, 8, 8});
  auto& n = AddConv(b, "x", "y", "padded_conv", 4, 4, 3, 5);
  for (auto& a : *n.mutable_attribute()) {
    if (a.name() != "pads") continue;
    a.clear_ints();
    for (int i = 0; i < 4; ++i) a.add_ints(60000);
  }
  b.Output("y");
  auto m = Load(b);
  ASSERT_NE(m, nullptr);
  auto p = BuildConvPlan(m, HostKernels());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto tt = device::MakeTtEmuBackend({});
  ASSERT_TRUE(tt.ok()) << tt.status().ToString();
  for (device::Backend* dev : {&Reference(), tt->get()}) {
    for (bool per_layer : {false, true}) {
      RunOptions o;
      o.mode = per_layer ? RunMode::kPerLayer : RunMode::kChained;
      auto r = RunConvPlan(*p, {}, *dev, o);
      ASSERT_FALSE(r.ok()) << dev->name();
      EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << dev->name() << ": " << r.status().ToString();
      EXPECT_NE(r.status().message().find("padded_conv"), std::string::npos) << r.status().ToString();
    }
  }
}

// The run's memory estimate counts a host op at no less than its outputs' inferred bytes, and
// Resize from them (its scales are values the input shapes do not show). A Resize of 1x8x14x14 by
// 1000 on H and W is 6.3 GB (fp32) plus its float64 passes; before, the estimate counted it from
// its input (about 31 KB), kilnd admitted it and the kernel's per-axis passes exhausted the host.
TEST(Executor, MemoryEstimateCountsAResizeByItsOutput) {
  OnnxModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, {1, 8, 14, 14});
  b.FloatInitializer("scales", {4}, {1.0f, 1.0f, 1000.0f, 1000.0f});
  b.Node("Resize", {"x", "", "scales"}, {"y"}, "resize");
  b.Output("y");
  auto plan = BuildConvPlan(Load(b), HostKernels());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const MemoryEstimate e = EstimateRunMemory(*plan, {}, {});
  const int64_t out = int64_t{8} * 14000 * 14000 * 4;
  EXPECT_GE(e.peak_op_bytes, out + 2 * 2 * out) << e.peak_op;  // the output, two float64 tensors of its size
  EXPECT_NE(e.peak_op.find("resize"), std::string::npos) << e.peak_op;
  // A bilinear 2x upsample (half_pixel) runs on oneDNN's fp32 path: its output and an fp32 copy of
  // the input, no float64 passes (about 5x less than the form above would charge).
  OnnxModelBuilder u(13);
  u.Input("x", onnx::TensorProto::FLOAT, {1, 64, 512, 512});
  u.FloatInitializer("scales", {4}, {1.0f, 1.0f, 2.0f, 2.0f});
  kiln::testing::SetString(u.Node("Resize", {"x", "", "scales"}, {"y"}, "up"), "mode", "linear");
  u.Output("y");
  auto up = BuildConvPlan(Load(u), HostKernels());
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  const MemoryEstimate eu = EstimateRunMemory(*up, {}, {});
  const int64_t out_u = int64_t{64} * 1024 * 1024 * 4, in_u = out_u / 4;
  EXPECT_EQ(eu.peak_op_bytes, out_u + in_u) << eu.peak_op;
}

TEST(Executor, ReferenceOnReferenceIsExact) {
  ConvPlan p = SmallPlan();
  RunOptions o;
  auto r = RunConvPlan(p, {}, Reference(), o);
  ASSERT_TRUE(r.ok());
  for (const LayerReport& l : r->layers) {
    EXPECT_EQ(l.pcc, 1.0) << l.name;
    EXPECT_EQ(l.max_abs_error, 0.0) << l.name;
    EXPECT_TRUE(l.pass);
  }
  EXPECT_FALSE(r->backend_honours_precision);
}

// x -> conv (1x1, identity weights, no bias) -> Add(r) -> Relu -> y: the conv returns bf16(x)
// exactly; the Add is a device add (compiler/convplan/passes/device_add.cc). With x = ±2^k and
// r = x·2^-8 every sum lies halfway between two bf16 values: the card's ttnn.add rounds it away
// from zero (ELWADD into a bf16 Dst, device/backends/tt_emu/tt_eltwise.h), to x·(1 + 2^-7); the
// fp32 host add (precision.host_add, and the reference) keeps x·(1 + 2^-8). Relu zeroes the
// negative ones either way.
TEST(Executor, TtEmuResidualAddIsTheCardsAddUnlessHostAdd) {
  OnnxModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, {1, 4, 2, 2});
  b.Input("r", onnx::TensorProto::FLOAT, {1, 4, 2, 2});
  std::vector<float> eye(16, 0.0f);
  for (int i = 0; i < 4; ++i) eye[i * 4 + i] = 1.0f;
  b.FloatInitializer("w", {4, 4, 1, 1}, eye);
  b.Node("Conv", {"x", "w"}, {"c"}, "conv");
  b.Node("Add", {"c", "r"}, {"s"}, "add");
  b.Node("Relu", {"s"}, {"y"}, "relu");
  b.Output("y");
  auto plan = BuildConvPlan(Load(b), HostKernels());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->ops.size(), 2u) << plan->ToString();
  std::vector<float> xs(16), rs(16);
  for (int i = 0; i < 16; ++i) {
    xs[i] = std::ldexp(i % 3 == 0 ? -1.0f : 1.0f, i - 8);
    rs[i] = std::ldexp(xs[i], -8);
  }
  auto x = device::Tensor::FromFloats({1, 4, 2, 2}, xs);
  auto r = device::Tensor::FromFloats({1, 4, 2, 2}, rs);
  ASSERT_TRUE(x.ok() && r.ok());
  auto dev = TtEmu();
  for (bool host_add : {false, true}) {
    for (RunMode mode : {RunMode::kChained, RunMode::kPerLayer}) {
      RunOptions o;
      o.mode = mode;
      o.precision.host_add = host_add;
      auto res = RunConvPlan(*plan, {{"x", *x}, {"r", *r}}, *dev, o);
      ASSERT_TRUE(res.ok()) << res.status().ToString();
      ASSERT_EQ(res->layers.size(), 2u);
      const LayerReport& add = res->layers[1];
      EXPECT_EQ(add.op, "add");
      EXPECT_TRUE(add.on_device);
      EXPECT_EQ(add.activation, "relu");
      EXPECT_TRUE(add.compared);
      EXPECT_EQ(add.threshold, 0.0);
      EXPECT_EQ(add.implementation, host_add ? "host fp32 add (host_add)" : "ttnn.add fpu (ELWADD)");
      const float* y = res->outputs[0].second.data<float>();
      for (int i = 0; i < 16; ++i) {
        const float want = xs[i] < 0 ? 0.0f : xs[i] * (host_add ? 1.00390625f : 1.0078125f);
        EXPECT_EQ(y[i], want) << i << " host_add=" << host_add;
      }
      if (host_add) {
        EXPECT_EQ(add.max_abs_error, 0.0);
      } else {
        EXPECT_GT(add.max_abs_error, 0.0);
      }
    }
  }
}

TEST(Executor, CustomThresholdOverridesRule) {
  ConvPlan p = SmallPlan();
  auto dev = TtEmu();
  RunOptions o;
  o.pcc_threshold = 0.99999999;
  auto r = RunConvPlan(p, {}, *dev, o);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->layers[0].threshold, 0.99999999);
  EXPECT_FALSE(r->layers[0].pass);  // bf16 device vs fp32 cannot reach that
  EXPECT_FALSE(r->all_pass);
}

TEST(Executor, InputsGivenGeneratedAndRejected) {
  ConvPlan p = SmallPlan();
  auto r1 = RunRef(p);
  auto r2 = RunRef(p);
  EXPECT_EQ(MaxDiff(r1, r2), 0.0);  // same seed, same data
  RunOptions o;
  o.compare_to_reference = false;
  o.input_seed = 8;
  auto r3 = RunConvPlan(p, {}, Reference(), o);
  ASSERT_TRUE(r3.ok());
  EXPECT_GT(MaxDiff(r1, *r3), 0.0);

  auto x = device::Tensor::Zeros({2, 8, 16, 16});  // batch 2 for the symbolic dim
  ASSERT_TRUE(x.ok());
  auto r4 = RunConvPlan(p, {{"x", *x}}, Reference(), o);
  ASSERT_TRUE(r4.ok()) << r4.status().ToString();
  EXPECT_TRUE(r4->generated_inputs.empty());
  EXPECT_EQ(r4->outputs[0].second.shape(), (std::vector<int64_t>{2, 8, 16, 16}));

  auto bad = device::Tensor::Zeros({1, 3, 16, 16});
  auto r5 = RunConvPlan(p, {{"x", *bad}}, Reference(), o);
  ASSERT_FALSE(r5.ok());
  EXPECT_EQ(r5.status().code(), StatusCode::kInvalidArgument);
  auto r6 = RunConvPlan(p, {{"nope", *x}}, Reference(), o);
  ASSERT_FALSE(r6.ok());
  EXPECT_EQ(r6.status().code(), StatusCode::kInvalidArgument);
}

TEST(Executor, ProgressAndCancellationBetweenOps) {
  ConvPlan p = SmallPlan();
  RunOptions o;
  std::vector<device::JobProgress> seen;
  auto r = RunConvPlan(p, {}, Reference(), o, nullptr, [&](const device::JobProgress& j) { seen.push_back(j); });
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].step, 1);
  EXPECT_EQ(seen[3].step, 4);
  EXPECT_EQ(seen[3].total, 4);
  EXPECT_NE(seen[0].message.find("conv1"), std::string::npos);

  device::CancelToken token;
  int calls = 0;
  auto c = RunConvPlan(p, {}, Reference(), o, &token, [&](const device::JobProgress&) {
    ++calls;
    token.Cancel();  // cancelled after the first op
  });
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(calls, 1);

  device::CancelToken expired(device::CancelToken::Clock::now() - std::chrono::seconds(1));
  auto d = RunConvPlan(p, {}, Reference(), o, &expired);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kDeadlineExceeded);
}

// Delegates to the reference backend; offers only the activations in `acts`; can fail or throw.
class WrappedBackend : public device::Backend {
 public:
  enum class Mode { kDelegate, kFail, kThrow };
  WrappedBackend(std::vector<device::Activation> acts, Mode mode) : acts_(std::move(acts)), mode_(mode) {}
  std::string name() const override { return "wrapped"; }
  device::BackendCapabilities capabilities() const override {
    auto c = Reference().capabilities();
    c.activations = acts_;
    return c;
  }
  Result<device::Tensor> Conv2d(const device::Tensor& x, const device::Tensor& w, const device::Tensor* b,
                                const device::Conv2dParams& p, const device::ExecContext& ctx) override {
    if (mode_ == Mode::kFail) return Internal("boom");
    if (mode_ == Mode::kThrow) throw std::runtime_error("thrown");
    if (std::find(acts_.begin(), acts_.end(), p.activation) == acts_.end()) return Unimplemented("activation");
    return Reference().Conv2d(x, w, b, p, ctx);
  }
  Result<device::Tensor> ConvTranspose2d(const device::Tensor& x, const device::Tensor& w, const device::Tensor* b,
                                         const device::ConvTranspose2dParams& p,
                                         const device::ExecContext& ctx) override {
    if (std::find(acts_.begin(), acts_.end(), p.activation) == acts_.end()) return Unimplemented("activation");
    return Reference().ConvTranspose2d(x, w, b, p, ctx);
  }

 private:
  std::vector<device::Activation> acts_;
  Mode mode_;
};

TEST(Executor, ActivationTheBackendLacksRunsOnHost) {
  ConvPlan p = SmallPlan();
  WrappedBackend dev({device::Activation::kNone, device::Activation::kRelu}, WrappedBackend::Mode::kDelegate);
  RunOptions o;
  o.input_seed = 7;
  o.reference = &Reference();
  auto r = RunConvPlan(p, {}, dev, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->layers[0].activation_on_host);  // relu offered
  EXPECT_TRUE(r->layers[1].activation_on_host);   // sigmoid not offered
  EXPECT_EQ(r->layers[1].activation, "sigmoid");
  EXPECT_GT(r->layers[1].pcc, 0.999999);
  EXPECT_LT(MaxDiff(*r, RunRef(p)), 1e-6);
}

TEST(Executor, BackendErrorsNameTheOpAndExceptionsDoNotEscape) {
  ConvPlan p = SmallPlan();
  WrappedBackend fail({device::Activation::kNone}, WrappedBackend::Mode::kFail);
  auto r = RunConvPlan(p, {}, fail, RunOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("conv1"), std::string::npos) << r.status().message();
  WrappedBackend thrower({device::Activation::kNone}, WrappedBackend::Mode::kThrow);
  auto t = RunConvPlan(p, {}, thrower, RunOptions{});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace kiln::runtime
