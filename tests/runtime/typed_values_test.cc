// Host values keep their ONNX element type through a run (runtime/executor.h): a float16 model's
// conv runs in fp32 on the device and its output comes back as float16, on the reference backend
// and on tt-emu, in both run modes.
#include <gtest/gtest.h>

#include "common/float16.h"
#include "device/backends/builtin.h"
#include "tests/convplan/test_util.h"

namespace kiln::runtime {
namespace {

using kiln::testing::OnnxModelBuilder;

TEST(TypedValues, Float16ModelConvRunsInFp32AndReturnsFloat16) {
  OnnxModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT16, {1, 2, 4, 4});
  const std::vector<float> w = kiln::testing::RandomFloats(3 * 2 * 3 * 3, 21);
  b.Initializer(kiln::testing::Float16TensorRaw("w", {3, 2, 3, 3}, w));
  kiln::testing::SetInts(b.Node("Conv", {"x", "w"}, {"c"}, "conv"), "pads", {1, 1, 1, 1});
  b.Node("Relu", {"c"}, {"y"}, "relu");
  b.Output("y", onnx::TensorProto::FLOAT16);
  auto model = convplan::testutil::Load(b);
  ASSERT_NE(model, nullptr);
  auto plan = convplan::BuildConvPlan(model, HostKernels());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->num_device_ops(), 1u);

  const std::vector<float> xv = kiln::testing::RandomFloats(32, 22);
  auto x32 = device::Tensor::FromFloats({1, 2, 4, 4}, xv);
  ASSERT_TRUE(x32.ok());
  auto x16 = x32->CastTo(device::DataType::kFloat16);
  ASSERT_TRUE(x16.ok());
  // The fp32 conv of the float16-rounded data, as the expectation.
  auto xr = x16->ToFloat32();
  ASSERT_TRUE(xr.ok());
  std::vector<float> want(3 * 16, 0.0f);
  for (int o = 0; o < 3; ++o)
    for (int h = 0; h < 4; ++h)
      for (int ww = 0; ww < 4; ++ww) {
        double acc = 0;
        for (int c = 0; c < 2; ++c)
          for (int kh = 0; kh < 3; ++kh)
            for (int kw = 0; kw < 3; ++kw) {
              const int ih = h + kh - 1, iw = ww + kw - 1;
              if (ih < 0 || ih >= 4 || iw < 0 || iw >= 4) continue;
              const float wv = HalfToFloat(FloatToHalf(w[((o * 2 + c) * 3 + kh) * 3 + kw]));
              acc += double(xr->data<float>()[(c * 4 + ih) * 4 + iw]) * wv;
            }
        want[(o * 4 + h) * 4 + ww] = static_cast<float>(std::max(acc, 0.0));
      }

  for (const char* backend : {"reference", "tt-emu"}) {
    for (RunMode mode : {RunMode::kChained, RunMode::kPerLayer}) {
      auto dev = device::DefaultBackendRegistry().Create(backend);
      ASSERT_TRUE(dev.ok());
      RunOptions opt;
      opt.mode = mode;
      auto r = RunConvPlan(*plan, {{"x", *x16}}, **dev, opt);
      ASSERT_TRUE(r.ok()) << backend << ": " << r.status().ToString();
      ASSERT_EQ(r->outputs.size(), 1u);
      const device::Tensor& y = r->outputs[0].second;
      ASSERT_EQ(y.dtype(), device::DataType::kFloat16) << backend;
      auto yf = y.ToFloat32();
      ASSERT_TRUE(yf.ok());
      const double tol = std::string(backend) == "reference" ? 2e-3 : 5e-2;  // fp16 output rounding; bf16 on tt-emu
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(yf->data<float>()[i], want[i], tol * (1 + std::fabs(want[i]))) << backend << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::runtime
