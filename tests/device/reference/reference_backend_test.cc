// The reference backend against naive ONNX-definition loops on random shapes: groups, dilations,
// asymmetric pads, strides, output_padding, ceil_mode, count_include_pad, fused activations, NHWC.
#include "device/backends/reference/reference_backend.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <random>
#include <sstream>

#include "device/backends/builtin.h"
#include "tests/device/reference/naive.h"

namespace kiln::device {
namespace {

using testing::NaiveConv2d;
using testing::NaiveConvTranspose2d;
using testing::NaivePool2d;

Tensor Random(std::vector<int64_t> shape, std::mt19937& rng) {
  auto t = Tensor::Zeros(std::move(shape));
  EXPECT_TRUE(t.ok());
  std::normal_distribution<float> dist(0.f, 1.f);
  for (float& v : t->span<float>()) v = dist(rng);
  return std::move(*t);
}

// Max |a - b| relative to atol + rtol*|b| must be <= 1; returns a description of the worst element.
::testing::AssertionResult AllClose(const Tensor& got, const Tensor& want, float rtol = 1e-4f, float atol = 1e-5f) {
  if (got.shape() != want.shape()) {
    return ::testing::AssertionFailure() << "shape " << ShapeToString(got.shape()) << " vs "
                                         << ShapeToString(want.shape());
  }
  auto g = got.ToLayout(Layout::kNCHW);
  const auto gs = g->span<float>();
  const auto ws = want.span<float>();
  for (std::size_t i = 0; i < gs.size(); ++i) {
    const float tol = atol + rtol * std::fabs(ws[i]);
    if (!(std::fabs(gs[i] - ws[i]) <= tol)) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << gs[i] << ", want " << ws[i];
    }
  }
  return ::testing::AssertionSuccess();
}

class ReferenceBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto b = MakeReferenceBackend();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    backend_ = std::move(*b);
  }
  std::unique_ptr<Backend> backend_;
  std::mt19937 rng_{12345};
};

Activation RandomActivation(std::mt19937& rng) {
  static const Activation kAll[] = {Activation::kNone, Activation::kRelu,    Activation::kRelu6, Activation::kSilu,
                                    Activation::kGelu, Activation::kSigmoid, Activation::kTanh};
  return kAll[std::uniform_int_distribution<int>(0, 6)(rng)];
}

TEST_F(ReferenceBackendTest, Conv2dMatchesNaiveOnRandomShapes) {
  std::uniform_int_distribution<int> u(0, 1 << 30);
  auto r = [&](int lo, int hi) { return lo + u(rng_) % (hi - lo + 1); };
  int run = 0;
  for (int iter = 0; run < 150 && iter < 1000; ++iter) {
    Conv2dParams p;
    p.group = r(1, 3);
    const int64_t cg = r(1, 4), og = r(1, 4), n = r(1, 2);
    const int64_t kh = r(1, 4), kw = r(1, 4), h = r(1, 12), w = r(1, 12);
    p.strides = {r(1, 3), r(1, 3)};
    p.dilations = {r(1, 3), r(1, 3)};
    p.pads = {r(0, 3), r(0, 3), r(0, 3), r(0, 3)};
    p.activation = RandomActivation(rng_);
    if (h + p.pads[0] + p.pads[2] < (kh - 1) * p.dilations[0] + 1) continue;
    if (w + p.pads[1] + p.pads[3] < (kw - 1) * p.dilations[1] + 1) continue;
    Tensor x = Random({n, cg * p.group, h, w}, rng_);
    Tensor wt = Random({og * p.group, cg, kh, kw}, rng_);
    Tensor b = Random({og * p.group}, rng_);
    const bool with_bias = r(0, 1) == 1;
    OpReport report;
    ExecContext ctx;
    ctx.report = &report;
    auto y = backend_->Conv2d(x, wt, with_bias ? &b : nullptr, p, ctx);
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    std::ostringstream what;
    what << "x" << ShapeToString(x.shape()) << " w" << ShapeToString(wt.shape()) << " g" << p.group << " s"
         << p.strides[0] << "," << p.strides[1] << " d" << p.dilations[0] << "," << p.dilations[1] << " pads "
         << p.pads[0] << "," << p.pads[1] << "," << p.pads[2] << "," << p.pads[3] << " act "
         << ActivationName(p.activation);
    EXPECT_TRUE(AllClose(*y, NaiveConv2d(x, wt, with_bias ? &b : nullptr, p))) << what.str();
    EXPECT_EQ(report.op, "conv2d");
    EXPECT_EQ(report.output_shape, y->shape());
    EXPECT_EQ(report.macs, y->num_elements() * cg * kh * kw);
    ++run;
  }
  EXPECT_EQ(run, 150);
}

TEST_F(ReferenceBackendTest, ConvTranspose2dMatchesNaiveOnRandomShapes) {
  std::uniform_int_distribution<int> u(0, 1 << 30);
  auto r = [&](int lo, int hi) { return lo + u(rng_) % (hi - lo + 1); };
  int run = 0, with_outpad_beyond_pad = 0;
  for (int iter = 0; run < 150 && iter < 2000; ++iter) {
    ConvTranspose2dParams p;
    p.group = r(1, 3);
    const int64_t cg = r(1, 4), og = r(1, 4), n = r(1, 2);
    const int64_t kh = r(1, 4), kw = r(1, 4), h = r(1, 9), w = r(1, 9);
    p.strides = {r(1, 3), r(1, 3)};
    p.dilations = {r(1, 3), r(1, 3)};
    p.pads = {r(0, 3), r(0, 3), r(0, 3), r(0, 3)};
    p.output_padding = {r(0, static_cast<int>(std::max(p.strides[0], p.dilations[0]) - 1)),
                        r(0, static_cast<int>(std::max(p.strides[1], p.dilations[1]) - 1))};
    p.activation = RandomActivation(rng_);
    const int64_t oh = p.strides[0] * (h - 1) + p.output_padding[0] + (kh - 1) * p.dilations[0] + 1 - p.pads[0] - p.pads[2];
    const int64_t ow = p.strides[1] * (w - 1) + p.output_padding[1] + (kw - 1) * p.dilations[1] + 1 - p.pads[1] - p.pads[3];
    if (oh < 1 || ow < 1) continue;
    if (p.output_padding[0] > p.pads[2] || p.output_padding[1] > p.pads[3]) ++with_outpad_beyond_pad;
    Tensor x = Random({n, cg * p.group, h, w}, rng_);
    Tensor wt = Random({cg * p.group, og, kh, kw}, rng_);
    Tensor b = Random({og * p.group}, rng_);
    const bool with_bias = r(0, 1) == 1;
    auto y = backend_->ConvTranspose2d(x, wt, with_bias ? &b : nullptr, p, {});
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    std::ostringstream what;
    what << "x" << ShapeToString(x.shape()) << " w" << ShapeToString(wt.shape()) << " g" << p.group << " s"
         << p.strides[0] << "," << p.strides[1] << " d" << p.dilations[0] << "," << p.dilations[1] << " pads "
         << p.pads[0] << "," << p.pads[1] << "," << p.pads[2] << "," << p.pads[3] << " outpad "
         << p.output_padding[0] << "," << p.output_padding[1] << " act " << ActivationName(p.activation);
    EXPECT_TRUE(AllClose(*y, NaiveConvTranspose2d(x, wt, with_bias ? &b : nullptr, p))) << what.str();
    ++run;
  }
  EXPECT_EQ(run, 150);
  EXPECT_GT(with_outpad_beyond_pad, 5);  // the EmbedWithBias path is exercised
}

TEST_F(ReferenceBackendTest, Pool2dMatchesNaiveOnRandomShapes) {
  std::uniform_int_distribution<int> u(0, 1 << 30);
  auto r = [&](int lo, int hi) { return lo + u(rng_) % (hi - lo + 1); };
  int run = 0, overhang_cases = 0;
  for (int iter = 0; run < 300 && iter < 3000; ++iter) {
    Pool2dParams p;
    p.kind = r(0, 1) ? PoolKind::kAverage : PoolKind::kMax;
    p.kernel = {r(1, 4), r(1, 4)};
    p.strides = {r(1, 3), r(1, 3)};
    p.dilations = r(0, 2) == 0 ? std::array<int64_t, 2>{r(1, 2), r(1, 2)} : std::array<int64_t, 2>{1, 1};
    const int64_t dk0 = (p.kernel[0] - 1) * p.dilations[0] + 1, dk1 = (p.kernel[1] - 1) * p.dilations[1] + 1;
    p.pads = {r(0, static_cast<int>(dk0 - 1)), r(0, static_cast<int>(dk1 - 1)), r(0, static_cast<int>(dk0 - 1)),
              r(0, static_cast<int>(dk1 - 1))};
    p.ceil_mode = r(0, 1) == 1;
    p.count_include_pad = r(0, 1) == 1;
    const int64_t h = r(1, 11), w = r(1, 11);
    if (h + p.pads[0] + p.pads[2] < dk0 || w + p.pads[1] + p.pads[3] < dk1) continue;
    // Skip windows that contain no input element at all (ONNX leaves them undefined).
    bool empty_window = false;
    for (int i = 0; i < 2; ++i) {
      const int64_t in = i ? w : h;
      auto os = ValidatePool2d(Random({1, 1, h, w}, rng_), p);
      ASSERT_TRUE(os.ok()) << os.status().ToString();
      for (int64_t o = 0; o < (*os)[2 + i]; ++o) {
        bool any = false;
        for (int64_t k = 0; k < p.kernel[i]; ++k) {
          const int64_t pos = o * p.strides[i] - p.pads[i] + k * p.dilations[i];
          any |= pos >= 0 && pos < in;
        }
        empty_window |= !any;
      }
      if (p.ceil_mode && ((*os)[2 + i] - 1) * p.strides[i] + (i ? dk1 : dk0) > in + p.pads[i] + p.pads[2 + i]) {
        ++overhang_cases;
      }
    }
    if (empty_window) continue;
    Tensor x = Random({r(1, 2), r(1, 5), h, w}, rng_);
    auto y = backend_->Pool2d(x, p, {});
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    std::ostringstream what;
    what << (p.kind == PoolKind::kMax ? "max" : "avg") << " x" << ShapeToString(x.shape()) << " k" << p.kernel[0]
         << "," << p.kernel[1] << " s" << p.strides[0] << "," << p.strides[1] << " d" << p.dilations[0] << ","
         << p.dilations[1] << " pads " << p.pads[0] << "," << p.pads[1] << "," << p.pads[2] << "," << p.pads[3]
         << " ceil " << p.ceil_mode << " cip " << p.count_include_pad;
    EXPECT_TRUE(AllClose(*y, NaivePool2d(x, p), 1e-5f, 1e-6f)) << what.str();
    ++run;
  }
  EXPECT_EQ(run, 300);
  EXPECT_GT(overhang_cases, 20);
}

TEST_F(ReferenceBackendTest, NhwcInputGivesNhwcOutputWithSameValues) {
  Conv2dParams p;
  p.pads = {1, 0, 2, 1};
  p.strides = {2, 1};
  p.group = 2;
  p.activation = Activation::kRelu;
  Tensor x = Random({2, 8, 9, 7}, rng_);
  Tensor w = Random({6, 4, 3, 3}, rng_);
  Tensor b = Random({6}, rng_);
  auto nhwc = x.ToLayout(Layout::kNHWC);
  ASSERT_TRUE(nhwc.ok());
  auto y = backend_->Conv2d(*nhwc, w, &b, p, {});
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->layout(), Layout::kNHWC);
  EXPECT_TRUE(AllClose(*y, NaiveConv2d(x, w, &b, p)));

  Pool2dParams pp;
  pp.kind = PoolKind::kAverage;
  pp.kernel = {3, 3};
  pp.strides = {2, 2};
  pp.pads = {1, 1, 1, 1};
  pp.ceil_mode = true;
  pp.count_include_pad = true;
  auto yp = backend_->Pool2d(*nhwc, pp, {});
  ASSERT_TRUE(yp.ok()) << yp.status().ToString();
  EXPECT_EQ(yp->layout(), Layout::kNHWC);
  EXPECT_TRUE(AllClose(*yp, NaivePool2d(x, pp)));

  ConvTranspose2dParams tp;
  tp.strides = {2, 2};
  tp.output_padding = {1, 1};
  Tensor wt = Random({8, 3, 3, 3}, rng_);
  auto yt = backend_->ConvTranspose2d(*nhwc, wt, nullptr, tp, {});
  ASSERT_TRUE(yt.ok()) << yt.status().ToString();
  EXPECT_EQ(yt->layout(), Layout::kNHWC);
  EXPECT_TRUE(AllClose(*yt, NaiveConvTranspose2d(x, wt, nullptr, tp)));
}

TEST_F(ReferenceBackendTest, PreparedConvMatchesConv2dAndRejectsOtherShapes) {
  Conv2dParams p;
  p.pads = {1, 1, 1, 1};
  p.activation = Activation::kSilu;
  Tensor x = Random({2, 16, 10, 10}, rng_);
  Tensor w = Random({32, 16, 3, 3}, rng_);
  Tensor b = Random({32}, rng_);
  for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
    auto prepared = backend_->PrepareConv2d(x.shape(), layout, w, &b, p, PrecisionConfig{});
    ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
    EXPECT_EQ((*prepared)->output_shape(), (std::vector<int64_t>{2, 32, 10, 10}));
    auto xin = x.ToLayout(layout);
    for (int rep = 0; rep < 2; ++rep) {
      OpReport report;
      ExecContext ctx;
      ctx.report = &report;
      auto y = (*prepared)->Run(*xin, ctx);
      ASSERT_TRUE(y.ok()) << y.status().ToString();
      EXPECT_EQ(y->layout(), layout);
      EXPECT_TRUE(AllClose(*y, NaiveConv2d(x, w, &b, p)));
      EXPECT_FALSE(report.implementation.empty());
    }
    auto bad = (*prepared)->Run(Random({1, 16, 10, 10}, rng_), {});
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST_F(ReferenceBackendTest, OneDimensionalConvAsHeightOne) {
  Conv2dParams p;
  p.pads = {0, 2, 0, 1};
  p.strides = {1, 2};
  p.dilations = {1, 2};
  Tensor x = Random({1, 3, 1, 50}, rng_);
  Tensor w = Random({4, 3, 1, 3}, rng_);
  auto y = backend_->Conv2d(x, w, nullptr, p, {});
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_TRUE(AllClose(*y, NaiveConv2d(x, w, nullptr, p)));
}

TEST_F(ReferenceBackendTest, ErrorsAreStatusesNotExceptions) {
  Tensor x = Random({1, 4, 8, 8}, rng_);
  Tensor w = Random({6, 3, 3, 3}, rng_);  // I = 3 does not match C = 4
  auto y = backend_->Conv2d(x, w, nullptr, {}, {});
  EXPECT_EQ(y.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(y.status().message().find("OIHW"), std::string::npos) << y.status().message();

  Conv2dParams g3;
  g3.group = 3;
  EXPECT_EQ(backend_->Conv2d(x, Random({6, 1, 3, 3}, rng_), nullptr, g3, {}).status().code(),
            StatusCode::kInvalidArgument);
  Tensor bias = Random({5}, rng_);
  EXPECT_EQ(backend_->Conv2d(x, Random({6, 4, 3, 3}, rng_), &bias, {}, {}).status().code(),
            StatusCode::kInvalidArgument);
  Conv2dParams neg;
  neg.pads = {-1, 0, 0, 0};
  EXPECT_EQ(backend_->Conv2d(x, Random({6, 4, 3, 3}, rng_), nullptr, neg, {}).status().code(),
            StatusCode::kInvalidArgument);
  Conv2dParams big;
  EXPECT_EQ(backend_->Conv2d(x, Random({6, 4, 9, 9}, rng_), nullptr, big, {}).status().code(),
            StatusCode::kInvalidArgument);
  ConvTranspose2dParams tp;
  tp.output_padding = {1, 0};  // must be < max(stride, dilation) = 1
  EXPECT_EQ(backend_->ConvTranspose2d(x, Random({4, 2, 3, 3}, rng_), nullptr, tp, {}).status().code(),
            StatusCode::kInvalidArgument);
  Pool2dParams pp;
  pp.kernel = {2, 2};
  pp.pads = {2, 0, 0, 0};  // pad >= kernel
  EXPECT_EQ(backend_->Pool2d(x, pp, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Pool2d(Random({4, 8, 8}, rng_), Pool2dParams{}, {}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ReferenceBackendTest, CancelledAndExpiredTokensStopBeforeTheOp) {
  Tensor x = Random({1, 4, 8, 8}, rng_);
  Tensor w = Random({4, 4, 3, 3}, rng_);
  CancelToken token;
  ExecContext ctx;
  ctx.cancel = &token;
  EXPECT_TRUE(backend_->Conv2d(x, w, nullptr, {}, ctx).ok());
  token.Cancel();
  EXPECT_EQ(backend_->Conv2d(x, w, nullptr, {}, ctx).status().code(), StatusCode::kCancelled);
  EXPECT_EQ(backend_->Pool2d(x, {}, ctx).status().code(), StatusCode::kCancelled);
  CancelToken expired(CancelToken::Clock::now() - std::chrono::seconds(1));
  ctx.cancel = &expired;
  EXPECT_EQ(backend_->ConvTranspose2d(x, w, nullptr, {}, ctx).status().code(), StatusCode::kDeadlineExceeded);
}

TEST_F(ReferenceBackendTest, OneBackendServesSeveralThreadsAtOnce) {
  Conv2dParams p;
  p.pads = {1, 1, 1, 1};
  p.group = 2;
  Tensor x = Random({2, 8, 16, 16}, rng_);
  Tensor w = Random({8, 4, 3, 3}, rng_);
  const Tensor want = NaiveConv2d(x, w, nullptr, p);
  Pool2dParams pp;
  pp.kernel = {3, 3};
  pp.strides = {2, 2};
  pp.ceil_mode = true;
  const Tensor want_pool = NaivePool2d(x, pp);
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        auto y = backend_->Conv2d(x, w, nullptr, p, {});
        auto yp = backend_->Pool2d(x, pp, {});
        if (y.ok() && yp.ok() && AllClose(*y, want) && AllClose(*yp, want_pool)) ++good;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), 40);
}

TEST_F(ReferenceBackendTest, CapabilitiesAndRegistry) {
  const auto caps = backend_->capabilities();
  EXPECT_EQ(backend_->name(), "reference");
  EXPECT_TRUE(caps.pool2d);
  EXPECT_TRUE(caps.accepts_nhwc);
  EXPECT_FALSE(caps.honours_precision);
  EXPECT_EQ(caps.activations.size(), 8u);  // none relu relu6 silu gelu sigmoid tanh hardswish

  BackendRegistry registry;
  ASSERT_TRUE(RegisterReferenceBackend(registry).ok());
  EXPECT_EQ(RegisterReferenceBackend(registry).code(), StatusCode::kAlreadyExists);
  auto b = registry.Create("reference");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->name(), "reference");
  BackendOptions bad;
  bad.settings["level"] = "exact";
  BackendOptions threads;
  threads.settings["threads"] = "1";
  EXPECT_TRUE(registry.Create("reference", threads).ok());
  threads.settings["threads"] = "x";
  EXPECT_EQ(registry.Create("reference", threads).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Create("reference", bad).status().code(), StatusCode::kInvalidArgument);
  auto missing = registry.Create("no-such");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("reference"), std::string::npos);

  EXPECT_TRUE(DefaultBackendRegistry().Contains("reference"));
}

TEST(BuiltinBackendsTest, NamesSettingsAndDefault) {
  EXPECT_STREQ(kReferenceBackend, "reference");
  EXPECT_STREQ(kTtEmuBackend, "tt-emu");
  EXPECT_STREQ(DefaultBackendName(), "tt-emu");
  EXPECT_TRUE(IsFp32Reference("reference"));
  EXPECT_FALSE(IsFp32Reference("tt-emu"));
  EXPECT_FALSE(IsFp32Reference(""));
  auto s = DefaultBackendRegistry().Settings(kReferenceBackend);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 1u);
  EXPECT_EQ((*s)[0].key, "threads");
  EXPECT_EQ((*s)[0].default_value, "0");
  EXPECT_FALSE((*s)[0].help.empty());
  EXPECT_EQ(*s, ReferenceBackendSettings());
  BackendOptions bad;
  bad.settings["bogus"] = "1";
  EXPECT_EQ(MakeReferenceBackend(bad).status().message(),
            "reference backend: unknown setting 'bogus' (known: threads)");
}

}  // namespace
}  // namespace kiln::device
