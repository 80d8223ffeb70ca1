#include <gtest/gtest.h>

#include "device/backends/backend.h"
#include "device/backends/conv_geometry.h"
#include "device/backends/precision.h"

namespace kiln::device {
namespace {

TEST(PrecisionConfigTest, DefaultsAreTtnnConvDefaults) {
  PrecisionConfig p;
  EXPECT_EQ(p.math_fidelity, MathFidelity::kHiFi4);
  // weights_dtype unset = the host weight tensor's dtype; output_dtype unset = the input dtype
  // (docs/specs/tt-conv-dataflow.md §1).
  EXPECT_FALSE(p.weights_dtype.has_value());
  EXPECT_EQ(p.EffectiveWeightsDType(), DeviceDType::kFloat32);
  EXPECT_EQ(p.EffectiveWeightsDType(DeviceDType::kBFloat16), DeviceDType::kBFloat16);
  EXPECT_EQ(p.input_dtype, DeviceDType::kBFloat16);
  EXPECT_FALSE(p.output_dtype.has_value());
  EXPECT_EQ(p.EffectiveOutputDType(), DeviceDType::kBFloat16);
  EXPECT_TRUE(p.math_approx_mode);
  EXPECT_FALSE(p.packer_l1_acc);
  EXPECT_FALSE(p.EffectiveFp32DestAcc());  // bf16 input → no fp32 Dst by default
  p.input_dtype = DeviceDType::kFloat32;
  EXPECT_EQ(p.EffectiveOutputDType(), DeviceDType::kFloat32);
  EXPECT_TRUE(p.EffectiveFp32DestAcc());   // float32 input and float32 host weights → fp32 Dst
  p.weights_dtype = DeviceDType::kBFloat16;
  EXPECT_FALSE(p.EffectiveFp32DestAcc());
  p.weights_dtype = DeviceDType::kFloat32;
  EXPECT_TRUE(p.EffectiveFp32DestAcc());  // both float32 → fp32 Dst (docs/specs/tt-numerics.md §8)
  const PrecisionConfig r = p.Resolved();
  EXPECT_EQ(r.output_dtype, DeviceDType::kFloat32);
  EXPECT_EQ(r.fp32_dest_acc_en, true);
  p.fp32_dest_acc_en = false;
  EXPECT_FALSE(p.EffectiveFp32DestAcc());
  EXPECT_EQ(p.arch, Arch::kWormholeB0);
  EXPECT_EQ(p.act_block_w, 0);
  EXPECT_EQ(PrecisionConfig::TtnnConvDefaults(), PrecisionConfig{});
  auto ttaw = PrecisionConfig::TtawConv();
  EXPECT_TRUE(ttaw.EffectiveFp32DestAcc());
  EXPECT_TRUE(ttaw.packer_l1_acc);
}

TEST(PrecisionConfigTest, ValidateAndNames) {
  PrecisionConfig p;
  EXPECT_TRUE(p.Validate().ok());
  p.output_dtype = DeviceDType::kBFloat4B;
  EXPECT_EQ(p.Validate().code(), StatusCode::kInvalidArgument);
  p = {};
  p.act_block_w = -1;
  EXPECT_EQ(p.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseMathFidelity("hifi2"), MathFidelity::kHiFi2);
  EXPECT_EQ(*ParseMathFidelity("LoFi"), MathFidelity::kLoFi);
  EXPECT_EQ(ParseMathFidelity("HiFi5").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseDeviceDType("bfloat8_b"), DeviceDType::kBFloat8B);
  EXPECT_EQ(*ParseDeviceDType("bfp4_b"), DeviceDType::kBFloat4B);
  EXPECT_EQ(*ParseArch("blackhole"), Arch::kBlackhole);
  EXPECT_EQ(std::string(MathFidelityName(MathFidelity::kHiFi3)), "HiFi3");
  p = {};
  p.act_block_w = 2;
  p.act_block_w_div = 2;  // Kiln's in0_block_w override and TT-NN's divisor are exclusive
  EXPECT_EQ(p.Validate().code(), StatusCode::kInvalidArgument);
  p = {};
  p.act_block_h_override = 48;  // not a multiple of the tile height
  EXPECT_EQ(p.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseShardLayout("block_sharded"), ShardLayout::kBlock);
  EXPECT_EQ(ParseShardLayout("diagonal").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseBoard("P150"), Board::kP150);
  EXPECT_EQ(*ParseInputLayout("tile"), InputLayout::kTile);
  EXPECT_EQ(PrecisionConfig{}.ToString(),
            "HiFi4 w=host in=bfloat16 out=bfloat16 fp32_acc=0(default) l1_acc=0 approx=1 wormhole_b0 shard=auto abw=auto "
            "in_layout=row_major");
}

TEST(ActivationTest, NamesAndValues) {
  EXPECT_EQ(*ParseActivation("ReLU6"), Activation::kRelu6);
  EXPECT_EQ(*ParseActivation("identity"), Activation::kNone);
  EXPECT_EQ(*ParseActivation("hardswish"), Activation::kHardswish);
  EXPECT_EQ(ParseActivation("mish").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ApplyActivation(Activation::kHardswish, 1.f), 1.f * 4.f / 6.f);
  EXPECT_EQ(ApplyActivation(Activation::kHardswish, -4.f), -0.f);
  EXPECT_EQ(ApplyActivation(Activation::kRelu6, 7.f), 6.f);
  EXPECT_EQ(ApplyActivation(Activation::kRelu, -1.f), 0.f);
  EXPECT_NEAR(ApplyActivation(Activation::kSigmoid, 0.f), 0.5f, 1e-7);
  EXPECT_NEAR(ApplyActivation(Activation::kSilu, 1.f), 0.7310586f, 1e-6);
  EXPECT_NEAR(ApplyActivation(Activation::kGelu, 1.f), 0.8413447f, 1e-6);
  EXPECT_NEAR(ApplyActivation(Activation::kTanh, 0.5f), 0.46211716f, 1e-6);
}

TEST(ConvGeometryTest, OutputSizes) {
  EXPECT_EQ(*ConvOutputSize(56, 3, 1, 1, 1, 1), 56);
  EXPECT_EQ(*ConvOutputSize(10, 3, 2, 2, 1, 2), 5);
  EXPECT_EQ(ConvOutputSize(2, 5, 1, 1, 0, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*ConvTransposeOutputSize(28, 3, 2, 1, 1, 1, 1), 56);
  EXPECT_EQ(ConvTransposeOutputSize(8, 3, 1, 1, 0, 0, 1).status().code(), StatusCode::kInvalidArgument);
  // ceil_mode: the last window must start inside input + begin pad (onnx PR #5741).
  EXPECT_EQ(*PoolOutputSize(5, 2, 2, 1, 1, 1, true), 3);  // onnx 1.12 formula would say 4
  EXPECT_EQ(*PoolOutputSize(5, 2, 2, 1, 1, 1, false), 3);
  EXPECT_EQ(*PoolOutputSize(12, 1, 2, 1, 0, 0, true), 6);
  EXPECT_EQ(*PoolOutputSize(5, 2, 2, 1, 0, 0, true), 3);
  EXPECT_EQ(*PoolOutputSize(8, 3, 2, 1, 1, 1, true), 5);
}

TEST(ConvGeometryTest, AutoPadAndOutputShapePads) {
  // SAME_UPPER, stride 2 on 6: pads (0, 1) (conv-cases conv_autopad_same_upper_s2).
  EXPECT_EQ(*ConvAutoPad(AutoPad::kSameUpper, 6, 3, 2, 1), (std::pair<int64_t, int64_t>{0, 1}));
  // H 10, k 3, s 2, d 2: total 3 → upper (1, 2), lower (2, 1).
  EXPECT_EQ(*ConvAutoPad(AutoPad::kSameUpper, 10, 3, 2, 2), (std::pair<int64_t, int64_t>{1, 2}));
  EXPECT_EQ(*ConvAutoPad(AutoPad::kSameLower, 10, 3, 2, 2), (std::pair<int64_t, int64_t>{2, 1}));
  EXPECT_EQ(*ConvAutoPad(AutoPad::kValid, 10, 3, 2, 2), (std::pair<int64_t, int64_t>{0, 0}));
  EXPECT_EQ(ConvAutoPad(AutoPad::kNotSet, 10, 3, 2, 2).status().code(), StatusCode::kInvalidArgument);
  // ConvTranspose output_shape with an odd total: spec text puts the odd element at the beginning.
  EXPECT_EQ(*ConvTransposePadsForOutput(AutoPad::kNotSet, 16, 3, 2, 1, 0, 32), (std::pair<int64_t, int64_t>{1, 0}));
  EXPECT_EQ(*ConvTransposePadsForOutput(AutoPad::kSameUpper, 16, 3, 2, 1, 0, 32), (std::pair<int64_t, int64_t>{0, 1}));
  EXPECT_EQ(ConvTransposePadsForOutput(AutoPad::kNotSet, 16, 3, 2, 1, 0, 40).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseAutoPad("SAME_LOWER"), AutoPad::kSameLower);
  EXPECT_EQ(ParseAutoPad("same").status().code(), StatusCode::kInvalidArgument);
}

TEST(CancelTokenTest, CancelAndDeadline) {
  CancelToken t;
  EXPECT_TRUE(t.Check().ok());
  t.Cancel();
  EXPECT_EQ(t.Check().code(), StatusCode::kCancelled);
  CancelToken d(CancelToken::Clock::now() - std::chrono::milliseconds(1));
  EXPECT_EQ(d.Check().code(), StatusCode::kDeadlineExceeded);
  CancelToken later(CancelToken::Clock::now() + std::chrono::hours(1));
  EXPECT_TRUE(later.Check().ok());
}

// A minimal backend: checks the defaults of the base class (Pool2d → UNIMPLEMENTED, generic
// PrepareConv2d forwarding to Conv2d with the prepared precision).
class FakeBackend : public Backend {
 public:
  std::string name() const override { return "fake"; }
  BackendCapabilities capabilities() const override { return {}; }
  Result<Tensor> Conv2d(const Tensor& x, const Tensor& w, const Tensor* b, const Conv2dParams& p,
                        const ExecContext& ctx) override {
    auto out = ValidateConv2d(x, w, b, p);
    if (!out.ok()) return out.status();
    last_precision = ctx.precision;
    ++calls;
    return Tensor::Zeros(*out);
  }
  Result<Tensor> ConvTranspose2d(const Tensor&, const Tensor&, const Tensor*, const ConvTranspose2dParams&,
                                 const ExecContext&) override {
    return Unimplemented("no");
  }
  PrecisionConfig last_precision;
  int calls = 0;
};

TEST(BackendBaseTest, DefaultPoolAndGenericPreparedConv) {
  FakeBackend fake;
  auto x = Tensor::Zeros({1, 2, 5, 5});
  EXPECT_EQ(fake.Pool2d(*x, {}, {}).status().code(), StatusCode::kUnimplemented);
  auto w = Tensor::Zeros({4, 2, 3, 3});
  PrecisionConfig lofi;
  lofi.math_fidelity = MathFidelity::kLoFi;
  auto prepared = fake.PrepareConv2d({1, 2, 5, 5}, Layout::kNCHW, *w, nullptr, {}, lofi);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  EXPECT_EQ((*prepared)->output_shape(), (std::vector<int64_t>{1, 4, 3, 3}));
  auto y = (*prepared)->Run(*x, {});
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(fake.calls, 1);
  EXPECT_EQ(fake.last_precision.math_fidelity, MathFidelity::kLoFi);
  auto other = Tensor::Zeros({1, 2, 6, 6});
  EXPECT_EQ((*prepared)->Run(*other, {}).status().code(), StatusCode::kInvalidArgument);
  // NHWC not accepted by a backend that does not advertise it.
  EXPECT_EQ(fake.PrepareConv2d({1, 2, 5, 5}, Layout::kNHWC, *w, nullptr, {}, {}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(BackendRegistryTest, RegisterCreateNames) {
  BackendRegistry r;
  EXPECT_EQ(r.Register("", [](const BackendOptions&) -> Result<std::unique_ptr<Backend>> {
               return std::unique_ptr<Backend>(new FakeBackend());
             }).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(r.Register("fake", [](const BackendOptions& o) -> Result<std::unique_ptr<Backend>> {
                 if (o.device_index > 3) return InvalidArgument("no such device");
                 return std::unique_ptr<Backend>(new FakeBackend());
               }).ok());
  EXPECT_TRUE(r.Contains("fake"));
  EXPECT_EQ(r.Names(), (std::vector<std::string>{"fake"}));
  EXPECT_TRUE(r.Create("fake").ok());
  BackendOptions o;
  o.device_index = 7;
  EXPECT_EQ(r.Create("fake", o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Create("tt-emu").status().code(), StatusCode::kNotFound);
}

TEST(BackendRegistryTest, DeclaredSettings) {
  BackendRegistry r;
  const std::vector<BackendSetting> declared = {{"level", "exact", "numerics level"}, {"seed", "0", "rng seed"}};
  ASSERT_TRUE(r.Register("fake", [](const BackendOptions&) -> Result<std::unique_ptr<Backend>> {
                 return std::unique_ptr<Backend>(new FakeBackend());
               }, declared).ok());
  ASSERT_TRUE(r.Register("bare", [](const BackendOptions&) -> Result<std::unique_ptr<Backend>> {
                 return std::unique_ptr<Backend>(new FakeBackend());
               }).ok());
  auto s = r.Settings("fake");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, declared);
  ASSERT_TRUE(r.Settings("bare").ok());
  EXPECT_TRUE(r.Settings("bare")->empty());
  auto missing = r.Settings("nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("bare, fake"), std::string::npos);

  const Status unknown = UnknownBackendSetting("fake", "colour", declared);
  EXPECT_EQ(unknown.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.message(), "fake: unknown setting 'colour' (known: level, seed)");
  EXPECT_EQ(UnknownBackendSetting("bare", "x", {}).message(), "bare: unknown setting 'x' (known: none)");
}

TEST(DeviceTypesTest, FidelityValueIsThePhaseCount) {
  EXPECT_EQ(numerics::NumPhases(MathFidelity::kLoFi), 1);
  EXPECT_EQ(numerics::NumPhases(MathFidelity::kHiFi2), 2);
  EXPECT_EQ(numerics::NumPhases(MathFidelity::kHiFi3), 3);
  EXPECT_EQ(numerics::NumPhases(MathFidelity::kHiFi4), 4);
  for (MathFidelity f : {MathFidelity::kLoFi, MathFidelity::kHiFi2, MathFidelity::kHiFi3, MathFidelity::kHiFi4}) {
    EXPECT_EQ(*ParseMathFidelity(MathFidelityName(f)), f);
  }
  for (DeviceDType d : {DeviceDType::kFloat32, DeviceDType::kBFloat16, DeviceDType::kBFloat8B, DeviceDType::kBFloat4B}) {
    EXPECT_EQ(*ParseDeviceDType(DeviceDTypeName(d)), d);
  }
  for (Arch a : {Arch::kWormholeB0, Arch::kBlackhole}) EXPECT_EQ(*ParseArch(ArchName(a)), a);
  for (Activation a : {Activation::kNone, Activation::kRelu, Activation::kRelu6, Activation::kSilu, Activation::kGelu,
                       Activation::kSigmoid, Activation::kTanh}) {
    EXPECT_EQ(*ParseActivation(ActivationName(a)), a);
  }
}

}  // namespace
}  // namespace kiln::device
