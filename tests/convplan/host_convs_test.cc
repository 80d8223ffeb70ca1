// Convs the planner makes host ops (compiler/convplan/plan.cc LowerConv): weights / bias that are
// graph inputs, 3-D convs, ConvTranspose outputs longer than the full output. Each is planned as
// a HostOp, reported as a host layer (on_device false) and computed by the host conv kernel
// (runtime/host_kernels/conv.cc) with the same values on the reference and the tt-emu backends,
// checked against a direct loop of the ONNX Conv definition. More than 3 spatial dims is refused.
#include <gtest/gtest.h>

#include <cmath>

#include "device/backends/tt_emu/tt_emu_backend.h"
#include "tests/convplan/test_util.h"

namespace kiln::convplan {
namespace {

using namespace testutil;  // NOLINT
using kiln::testing::SetInts;
using onnx::TensorProto;

constexpr int kF = TensorProto::FLOAT;

device::Tensor Floats(std::vector<int64_t> shape, uint32_t seed) {
  const int64_t n = [&] {
    int64_t p = 1;
    for (int64_t d : shape) p *= d;
    return p;
  }();
  auto t = device::Tensor::FromFloats(std::move(shape), kiln::testing::RandomFloats(n, seed));
  EXPECT_TRUE(t.ok());
  return std::move(*t);
}

std::unique_ptr<device::Backend> TtEmu() {
  auto b = device::MakeTtEmuBackend({});
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::move(*b) : nullptr;
}

// Direct ONNX Conv (group 1) of x [1, C, spatial] with w [M, C, k] at stride s, begin pads pb:
// y[m, o] = b[m] + Σ_c Σ_t w[m, c, t] · x[c, o·s - pb + t].
std::vector<double> DirectConv(const device::Tensor& x, const device::Tensor& w, const device::Tensor* b,
                               const std::vector<int64_t>& s, const std::vector<int64_t>& pb,
                               const std::vector<int64_t>& out) {
  const size_t r = out.size();
  const int64_t C = x.dim(1), M = w.dim(0);
  std::vector<int64_t> in(x.shape().begin() + 2, x.shape().end()), k(w.shape().begin() + 2, w.shape().end());
  auto vol = [](const std::vector<int64_t>& v) {
    int64_t p = 1;
    for (int64_t d : v) p *= d;
    return p;
  };
  auto unflat = [](int64_t i, const std::vector<int64_t>& sh) {
    std::vector<int64_t> idx(sh.size());
    for (size_t d = sh.size(); d-- > 0;) {
      idx[d] = i % sh[d];
      i /= sh[d];
    }
    return idx;
  };
  std::vector<double> y(static_cast<size_t>(M * vol(out)));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t o = 0; o < vol(out); ++o) {
      const auto oi = unflat(o, out);
      double acc = b != nullptr ? b->data<float>()[m] : 0.0;
      for (int64_t c = 0; c < C; ++c) {
        for (int64_t t = 0; t < vol(k); ++t) {
          const auto kt = unflat(t, k);
          int64_t flat = 0;
          bool inside = true;
          for (size_t d = 0; d < r; ++d) {
            const int64_t pos = oi[d] * s[d] - pb[d] + kt[d];
            inside = inside && pos >= 0 && pos < in[d];
            flat = flat * in[d] + pos;
          }
          if (inside) acc += static_cast<double>(x.data<float>()[c * vol(in) + flat]) * w.data<float>()[(m * C + c) * vol(k) + t];
        }
      }
      y[static_cast<size_t>(m * vol(out) + o)] = acc;
    }
  }
  return y;
}

// Runs `plan` chained on `dev` (fp32 reference for the comparison) and checks the named layer is a
// host layer and output 0 matches `want`.
void RunAndCheck(const ConvPlan& plan, const RunInputs& inputs, device::Backend& dev, const std::string& layer,
                 const std::vector<int64_t>& shape, const std::vector<double>& want) {
  RunOptions o;
  o.reference = &Reference();
  auto r = RunConvPlan(plan, inputs, dev, o);
  ASSERT_TRUE(r.ok()) << dev.name() << ": " << r.status().ToString();
  bool seen = false;
  for (const LayerReport& l : r->layers) {
    if (l.name != layer) continue;
    seen = true;
    EXPECT_FALSE(l.on_device) << dev.name();
  }
  EXPECT_TRUE(seen) << layer;
  const device::Tensor& y = r->outputs[0].second;
  ASSERT_EQ(y.shape(), shape) << dev.name();
  for (size_t e = 0; e < want.size(); ++e) {
    ASSERT_NEAR(y.data<float>()[e], want[e], 1e-4 * (1 + std::fabs(want[e]))) << dev.name() << " element " << e;
  }
}

TEST(HostConvPlan, GraphInputWeightsAndBiasRunOnTheHostOnReferenceAndTtEmu) {
  // x -> Conv(w, b: graph inputs) -> y1 -> Conv(constant weights, a device op) -> y.
  OnnxModelBuilder b(13);
  b.Input("x", kF, {1, 3, 6, 7});
  b.Input("w", kF, {4, 3, 3, 3});
  b.Input("b", kF, {4});
  auto& c = b.Node("Conv", {"x", "w", "b"}, {"y1"}, "input_weights");
  SetInts(c, "strides", {2, 1});
  SetInts(c, "pads", {1, 1, 1, 0});
  b.Output("y1");
  AddConv(b, "y1", "y", "const_conv", 4, 2, 1, 61, false);
  b.Output("y");
  auto m = Load(b);
  ASSERT_TRUE(m);
  auto p = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const PlanOp* host = FindOp(*p, "input_weights");
  ASSERT_NE(host, nullptr) << p->ToString();
  EXPECT_FALSE(host->on_device());
  EXPECT_EQ(host->op, "Conv");
  const PlanOp* dev = FindOp(*p, "const_conv");
  ASSERT_NE(dev, nullptr) << p->ToString();
  EXPECT_TRUE(dev->on_device());
  const device::Tensor x = Floats({1, 3, 6, 7}, 62), w = Floats({4, 3, 3, 3}, 63), bias = Floats({4}, 64);
  // H: floor((6 + 2 - 3) / 2) + 1 = 3; W: 7 + 1 - 3 + 1 = 6.
  const auto want = DirectConv(x, w, &bias, {2, 1}, {1, 1}, {3, 6});
  const RunInputs in = {{"x", x}, {"w", w}, {"b", bias}};
  RunAndCheck(*p, in, Reference(), "input_weights", {1, 4, 3, 6}, want);
  auto tt = TtEmu();
  ASSERT_NE(tt, nullptr);
  RunAndCheck(*p, in, *tt, "input_weights", {1, 4, 3, 6}, want);
}

TEST(HostConvPlan, ThreeDimensionalConvIsAHostOpOnReferenceAndTtEmu) {
  OnnxModelBuilder b(13);
  b.Input("x", kF, {1, 2, 4, 5, 6});
  const device::Tensor w = Floats({3, 2, 3, 2, 3}, 65), bias = Floats({3}, 66);
  b.FloatInitializer("w", {3, 2, 3, 2, 3}, std::vector<float>(w.span<float>().begin(), w.span<float>().end()));
  b.FloatInitializer("b", {3}, std::vector<float>(bias.span<float>().begin(), bias.span<float>().end()));
  auto& c = b.Node("Conv", {"x", "w", "b"}, {"y"}, "conv3d");
  SetInts(c, "strides", {1, 2, 2});
  SetInts(c, "pads", {1, 0, 1, 1, 1, 1});
  b.Output("y");
  auto m = Load(b);
  ASSERT_TRUE(m);
  auto p = BuildConvPlan(m, runtime::HostKernels());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->ops.size(), 1u);
  EXPECT_FALSE(p->ops[0].on_device());
  EXPECT_EQ(p->num_device_ops(), 0u);
  const device::Tensor x = Floats({1, 2, 4, 5, 6}, 67);
  // D: 4 + 2 - 3 + 1 = 4; H: floor((5 + 1 - 2) / 2) + 1 = 3; W: floor((6 + 2 - 3) / 2) + 1 = 3.
  const auto want = DirectConv(x, w, &bias, {1, 2, 2}, {1, 0, 1}, {4, 3, 3});
  RunAndCheck(*p, {{"x", x}}, Reference(), "conv3d", {1, 3, 4, 3, 3}, want);
  auto tt = TtEmu();
  ASSERT_NE(tt, nullptr);
  RunAndCheck(*p, {{"x", x}}, *tt, "conv3d", {1, 3, 4, 3, 3}, want);
}

TEST(HostConvPlan, ConvTransposeLongerThanItsFullOutputIsAHostOp) {
  OnnxModelBuilder b(13);
  b.Input("x", kF, {1, 2, 3, 3});
  b.FloatInitializer("w", {2, 1, 3, 3}, kiln::testing::RandomFloats(18, 68));
  auto& ct = b.Node("ConvTranspose", {"x", "w"}, {"y"}, "ct");
  SetInts(ct, "strides", {3, 2});
  SetInts(ct, "output_shape", {10, 8});  // full output (9, 7): one bias-only row and column
  b.Output("y");
  auto p = BuildConvPlan(Load(b), runtime::HostKernels());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->ops.size(), 1u);
  EXPECT_FALSE(p->ops[0].on_device());
  RunResult r = RunRef(*p);
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].second.shape(), (std::vector<int64_t>{1, 1, 10, 8}));
  EXPECT_EQ(r.outputs[0].second.data<float>()[10 * 8 - 1], 0.f);  // no bias: the extra corner is 0
}

TEST(HostConvPlan, FourSpatialDimsAreRefusedNamingTheNode) {
  OnnxModelBuilder b(13);
  b.Input("x", kF, {1, 1, 3, 3, 3, 3});
  b.FloatInitializer("w", {1, 1, 2, 2, 2, 2}, kiln::testing::RandomFloats(16, 69));
  b.Node("Conv", {"x", "w"}, {"y"}, "conv4d");
  b.Output("y");
  auto p = BuildConvPlan(Load(b), runtime::HostKernels());
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("conv4d"), std::string::npos) << p.status().ToString();
  EXPECT_NE(p.status().message().find("only 1-D, 2-D and 3-D"), std::string::npos) << p.status().ToString();
}

}  // namespace
}  // namespace kiln::convplan
