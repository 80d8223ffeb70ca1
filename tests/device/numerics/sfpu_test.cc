// Tests of the SFPU activation models (device/numerics/sfpu.h) against values worked by hand from
// the tt-llk tables (coefficients decoded with SFPLUTFP32.md's Lut16ToFp32 / SFPLUT.md's Lut8ToFp32),
// and the error bounds tt-metal states for them.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "device/numerics/sfpu.h"

namespace kiln::numerics {
namespace {

struct Point {
  float x;
  double expected;
};

// Sweep [lo, hi] in steps of 1/256 (exact in fp32): 4097 points over [-8, 8].
std::vector<float> Sweep(float lo, float hi) {
  std::vector<float> xs;
  for (float x = lo; x <= hi; x += 1.f / 256) xs.push_back(x);
  return xs;
}

double ExactGelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double ExactSigmoid(double x) { return 1 / (1 + std::exp(-x)); }

TEST(Sfpu, CoefficientFormats) {
  // 0x322B = 0|01100|1000101011: 2^(12-15) * (1 + 555/1024) = 0.1927490234375.
  EXPECT_EQ(Lut16ToFp32(0x322B), 0.1927490234375f);
  // Exponent 31 reads as zero (the tables' "0.0 = 0x7C00").
  EXPECT_EQ(Lut16ToFp32(0x7C00), 0.f);
  // Exponent 0 is a normal 2^-15: 0x0000 = 2^-15, and 0x86D8 = -(1 + 728/1024) * 2^-14.
  EXPECT_EQ(Lut16ToFp32(0x0000), std::ldexp(1.f, -15));
  EXPECT_EQ(Lut16ToFp32(0x86D8), -(1.f + 728.f / 1024) * std::ldexp(1.f, -14));
  // Lut8: sign | exponent 127 - e | 4-bit mantissa; 0xFF = 0.
  EXPECT_EQ(Lut8ToFp32(0x1D), 0.90625f);   // 2^-1 * (1 + 13/16)
  EXPECT_EQ(Lut8ToFp32(0x48), 0.09375f);   // 2^-4 * (1 + 8/16)
  EXPECT_EQ(Lut8ToFp32(0x1A), 0.8125f);    // 2^-1 * (1 + 10/16)
  EXPECT_EQ(Lut8ToFp32(0x00), 1.f);
  EXPECT_EQ(Lut8ToFp32(0xD8), -0.046875f); // -(2^-5 * 1.5)
  EXPECT_EQ(Lut8ToFp32(0xFF), 0.f);
}

TEST(Sfpu, MadRoundsOnceAndFlushes) {
  // (1 + 2^-12)^2 - 1 = 2^-11 + 2^-24: kept by one rounding; a separate multiply would round the
  // product's 2^-24 tie to even and return 2^-11.
  const float a = 1.f + std::ldexp(1.f, -12);
  EXPECT_EQ(SfpuMad(a, a, -1.f), std::ldexp(1.f, -11) + std::ldexp(1.f, -24));
  EXPECT_EQ(SfpuMad(1e-39f, 1.f, 0.f), 0.f);                       // denormal input reads as 0
  EXPECT_EQ(SfpuMad(1e-20f, 1e-20f, 0.f), 0.f);                    // denormal result written as 0
  EXPECT_FALSE(std::signbit(SfpuMad(-1.f, 0.f, 0.f)));            // -0 written as +0
  EXPECT_TRUE(std::isnan(SfpuMad(std::numeric_limits<float>::quiet_NaN(), 1.f, 0.f)));
}

TEST(Sfpu, GeluApproxPiecesByHand) {
  // x/2 + A|x| + B with the decoded kGeluLut pieces (|x| < 0.5, 1, 1.5, 2, 3, >= 3):
  //   A = 0.1927490234375 0.493896484375 0.61865234375 0.60986328125 0.5400390625 0.5
  //   B = -0.00010442733764648438 -0.160400390625 -0.279541015625 -0.263427734375 -0.119384765625 0
  const Point points[] = {
      {0.125f, 0.08648920059204102},   // 0.0625 + 0.1927490234375*0.125 - 0.000104427
      {0.25f, 0.17308282852172852},    // 0.125 + 0.048187255859375 - 0.000104427
      {-0.375f, -0.11532354354858398}, // -0.1875 + 0.0722808837890625 - 0.000104427
      {0.5f, 0.3365478515625},         // 0.25 + 0.2469482421875 - 0.160400390625
      {0.75f, 0.58502197265625},       // 0.375 + 0.37042236328125 - 0.160400390625
      {-0.875f, -0.165740966796875},   // -0.4375 + 0.432159423828125 - 0.160400390625
      {1.0f, 0.839111328125},          // 0.5 + 0.61865234375 - 0.279541015625
      {1.25f, 1.1187744140625},        // 0.625 + 0.7733154296875 - 0.279541015625
      {-1.375f, -0.11639404296875},    // -0.6875 + 0.85064697265625 - 0.279541015625
      {1.5f, 1.4013671875},            // 0.75 + 0.914794921875 - 0.263427734375
      {1.75f, 1.6788330078125},        // 0.875 + 1.0672607421875 - 0.263427734375
      {-1.875f, -0.05743408203125},    // -0.9375 + 1.14349365234375 - 0.263427734375
      {2.0f, 1.960693359375},          // 1 + 1.080078125 - 0.119384765625
      {2.5f, 2.480712890625},          // 1.25 + 1.35009765625 - 0.119384765625
      {-2.75f, -0.00927734375},        // -1.375 + 1.485107421875 - 0.119384765625
      {3.0f, 3.0},                     // 1.5 + 1.5 + 0
      {4.0f, 4.0},                     // 2 + 2
      {-5.0f, 0.0},                    // -2.5 + 2.5
  };
  for (const Point& p : points) EXPECT_FLOAT_EQ(SfpuGeluApprox(p.x), p.expected) << "x=" << p.x;
}

TEST(Sfpu, GeluApproxErrorAndJumps) {
  // docs/specs/tt-conv-dataflow.md §5 says ~1e-2 from erf GELU; the table's worst case is 0.0234 near
  // x = -0.25 (first piece: -0.125 + 0.04819 - 0.0001 = -0.0769 against -0.0998).
  double max_err = 0;
  for (float x : Sweep(-8.f, 8.f)) max_err = std::max(max_err, std::abs(SfpuGeluApprox(x) - ExactGelu(x)));
  EXPECT_LT(max_err, 0.0240);
  EXPECT_GT(max_err, 0.0230);
  EXPECT_NEAR(SfpuGeluApprox(-0.25f) - ExactGelu(-0.25), 0.0234, 2e-4);
  // The pieces do not meet: the jump at each cut is (A_hi - A_lo)*c + (B_hi - B_lo).
  const struct {
    float cut;
    double jump;
  } jumps[] = {{0.5f, -0.009722232818603516},  // (0.493896484375-0.1927490234375)*0.5 - 0.160296
               {1.0f, 0.005615234375},          // (0.61865234375-0.493896484375)*1 - 0.119140625
               {1.5f, 0.0029296875},            // (0.60986328125-0.61865234375)*1.5 + 0.01611328125
               {2.0f, 0.00439453125},           // (0.5400390625-0.60986328125)*2 + 0.14404296875
               {3.0f, -0.000732421875}};        // (0.5-0.5400390625)*3 + 0.119384765625
  for (const auto& j : jumps) {
    const float below = std::nextafter(j.cut, 0.f);
    EXPECT_NEAR(SfpuGeluApprox(j.cut) - SfpuGeluApprox(below), j.jump, 1e-6) << "cut=" << j.cut;
  }
  // Within a piece the form is linear: increasing for x > 0 (slopes 0.5 + A > 0); the jumps at
  // 0.5 and 3.0 are the only decreases.
  for (float x : Sweep(0.f, 8.f)) {
    const float next = x + 1.f / 256;
    const bool crosses = (x < 0.5f && next >= 0.5f) || (x < 3.f && next >= 3.f);  // downward jumps
    if (!crosses) {
      EXPECT_LE(SfpuGeluApprox(x), SfpuGeluApprox(next)) << "x=" << x;
    }
  }
}

TEST(Sfpu, GeluApproxAgainstAccurate) {
  EXPECT_NE(SfpuEval(SfpuOp::kGelu, -0.25f, true, Arch::kWormholeB0),
            SfpuEval(SfpuOp::kGelu, -0.25f, false, Arch::kWormholeB0));
  EXPECT_NEAR(SfpuEval(SfpuOp::kGelu, 1.f, false, Arch::kWormholeB0), 0.8413447460685429, 1e-6);
  EXPECT_EQ(SfpuEval(SfpuOp::kGelu, 1.f, true, Arch::kWormholeB0), SfpuGeluApprox(1.f));
  EXPECT_EQ(SfpuEval(SfpuOp::kGelu, 1.f, true, Arch::kBlackhole), SfpuGeluApprox(1.f));
}

TEST(Sfpu, SigmoidLut6PiecesByHand) {
  // 0.5 ± (A|x| + B) with the decoded kSigmoidLut6 pieces (|x| < 0.5, 1, 1.5, 2, 4, >= 4):
  //   A = 0.2452392578125 0.21728515625 0.173095703125 0.126220703125 0.048492431640625 0
  //   B = -0.000499725341796875 0.01519775390625 0.05987548828125 0.1297607421875 0.2998046875
  //       0.499755859375
  const Point points[] = {
      {0.125f, 0.5301551818847656},   // 0.5 + 0.0306549072265625 - 0.000499725
      {0.25f, 0.5608100891113281},    // 0.5 + 0.061309814453125 - 0.000499725
      {-0.375f, 0.4085350036621094},  // 0.5 - (0.0919647216796875 - 0.000499725)
      {0.5f, 0.62384033203125},       // 0.5 + 0.108642578125 + 0.01519775390625
      {0.75f, 0.67816162109375},      // 0.5 + 0.1629638671875 + 0.01519775390625
      {-0.875f, 0.294677734375},      // 0.5 - (0.19012451171875 + 0.01519775390625)
      {1.0f, 0.73297119140625},       // 0.5 + 0.173095703125 + 0.05987548828125
      {1.25f, 0.7762451171875},       // 0.5 + 0.21636962890625 + 0.05987548828125
      {-1.375f, 0.202117919921875},   // 0.5 - (0.238006591796875 + 0.05987548828125)
      {1.5f, 0.819091796875},         // 0.5 + 0.1893310546875 + 0.1297607421875
      {1.75f, 0.85064697265625},      // 0.5 + 0.22088623046875 + 0.1297607421875
      {-1.875f, 0.133575439453125},   // 0.5 - (0.236663818359375 + 0.1297607421875)
      {2.0f, 0.89678955078125},       // 0.5 + 0.09698486328125 + 0.2998046875
      {3.0f, 0.945281982421875},      // 0.5 + 0.145477294921875 + 0.2998046875
      {-3.5f, 0.0304718017578125},    // 0.5 - (0.1697235107421875 + 0.2998046875)
      {4.0f, 0.999755859375},         // 0.5 + 0.499755859375
      {6.0f, 0.999755859375},
      {-8.0f, 0.000244140625},        // 0.5 - 0.499755859375
  };
  for (const Point& p : points) EXPECT_FLOAT_EQ(SfpuSigmoidApprox(p.x), p.expected) << "x=" << p.x;
}

TEST(Sfpu, SigmoidTablesErrorAndOrigin) {
  // ckernel_sfpu_sigmoid_appx.h (tt-metal @0d8858c5) states max |error| 0.0177 for the 6-piece
  // table (set by the |x| >= 4 tail: 1 - sigmoid(4) = 0.01799 less B5's 0.0002 slack) and 0.1192
  // (= 1 - sigmoid(2), the saturation) for the legacy 3-piece one.
  double err6 = 0, err3 = 0;
  for (float x : Sweep(-8.f, 8.f)) {
    err6 = std::max(err6, std::abs(SfpuSigmoidApprox(x) - ExactSigmoid(x)));
    err3 = std::max(err3, std::abs(SfpuSigmoidApprox(x, SigmoidApproxTable::kLut3Legacy) - ExactSigmoid(x)));
  }
  EXPECT_NEAR(err6, 0.0177, 2e-4);
  EXPECT_NEAR(err3, 1 - ExactSigmoid(2), 1e-4);
  // Legacy pieces: 0.2265625|x| | 0.265625|x| - 0.046875 | 0.5 (Lut8 of 0x3DFF, 0x21D8, 0xFF10).
  EXPECT_FLOAT_EQ(SfpuSigmoidApprox(0.5f, SigmoidApproxTable::kLut3Legacy), 0.61328125);  // 0.5+0.11328125
  EXPECT_FLOAT_EQ(SfpuSigmoidApprox(-1.5f, SigmoidApproxTable::kLut3Legacy), 0.1484375);  // 0.5-0.3515625
  EXPECT_EQ(SfpuSigmoidApprox(2.5f, SigmoidApproxTable::kLut3Legacy), 1.f);
  // SGN_RETAIN copies +0's sign onto B0 = -0.0004997: sigmoid(0) = 0.5004997 (tt-metal's remark);
  // the pinned table returns 0.5.
  EXPECT_FLOAT_EQ(SfpuSigmoidApprox(0.f), 0.500499725341796875);
  EXPECT_EQ(SfpuSigmoidApprox(0.f, SigmoidApproxTable::kLut6ZeroIntercept), 0.5f);
  EXPECT_EQ(SfpuSigmoidApprox(1.25f, SigmoidApproxTable::kLut6ZeroIntercept), SfpuSigmoidApprox(1.25f));
  // Odd about 0.5 (within one rounding) and a bounded jump at the cut 2.0:
  // (0.048492431640625*2 + 0.2998046875) - (0.126220703125*2 + 0.1297607421875) = 0.01458740234375.
  for (float x : Sweep(0.01f, 8.f)) EXPECT_NEAR(SfpuSigmoidApprox(-x), 1 - SfpuSigmoidApprox(x), 1.2e-7);
  EXPECT_NEAR(SfpuSigmoidApprox(2.f) - SfpuSigmoidApprox(std::nextafter(2.f, 0.f)), 0.01458740234375, 1e-6);
  // Accurate mode (the conv epilogue's) is 1/(1+exp(-x)).
  EXPECT_NEAR(SfpuEval(SfpuOp::kSigmoid, 2.f, false, Arch::kWormholeB0), ExactSigmoid(2), 1e-7);
  EXPECT_NEAR(SfpuEval(SfpuOp::kSigmoid, 2.f, true, Arch::kWormholeB0) - ExactSigmoid(2), 0.01598, 1e-4);
}

TEST(Sfpu, SiluPiecesByHand) {
  // s = 0.229r + 0.5 (r <= 1), Horner((0.00144462, -0.01055479, -0.01203685, 0.24300185,
  // 0.50437757), r) (r < 5), else 1; s -> 1 - s for x < 0; silu = x * s.
  EXPECT_FLOAT_EQ(SfpuSilu(0.5f), 0.5 * 0.6145);          // s = 0.1145 + 0.5
  EXPECT_FLOAT_EQ(SfpuSilu(-0.5f), -0.5 * 0.3855);        // 1 - 0.6145
  EXPECT_FLOAT_EQ(SfpuSilu(1.f), 0.729);                  // 0.229 + 0.5
  // r = 2: 0.00288924 - 0.01055479 = -0.00766555; *2 - 0.01203685 = -0.02736795;
  // *2 + 0.24300185 = 0.18826595; *2 + 0.50437757 = 0.88090947 -> 1.76181894.
  EXPECT_NEAR(SfpuSilu(2.f), 1.76181894, 1e-6);
  // r = 3: 0.00433386 - 0.01055479 = -0.00622093; *3 - 0.01203685 = -0.03069964;
  // *3 + 0.24300185 = 0.15090293; *3 + 0.50437757 = 0.95708636 -> 2.87125908; x = -3: -3 * 0.04291364.
  EXPECT_NEAR(SfpuSilu(3.f), 2.87125908, 2e-6);
  EXPECT_NEAR(SfpuSilu(-3.f), -0.12874092, 2e-6);
  // r = 4: 0.00577848 - 0.01055479 = -0.00477631; *4 - 0.01203685 = -0.03114209;
  // *4 + 0.24300185 = 0.11843349; *4 + 0.50437757 = 0.97811153 -> 3.91244612.
  EXPECT_NEAR(SfpuSilu(4.f), 3.91244612, 2e-6);
  EXPECT_EQ(SfpuSilu(5.f), 5.f);
  EXPECT_EQ(SfpuSilu(-6.f), 0.f);  // -6 * (1 - 1), -0 written as +0
  // Bound against x·sigmoid(x): worst at |x| -> 5 where the tail switches to s = 1.
  double max_err = 0;
  for (float x : Sweep(-8.f, 8.f)) max_err = std::max(max_err, std::abs(SfpuSilu(x) - x * ExactSigmoid(x)));
  EXPECT_LT(max_err, 0.0440);
  // One form: APPROXIMATION_MODE is unused by _calculate_silu_.
  for (float x : {-4.5f, -0.3f, 0.7f, 2.2f})
    EXPECT_EQ(SfpuEval(SfpuOp::kSilu, x, true, Arch::kWormholeB0),
              SfpuEval(SfpuOp::kSilu, x, false, Arch::kWormholeB0));
}

TEST(Sfpu, TanhLutByHandContinuousMonotone) {
  // 0.90625|x| (|x| < 1) | 0.09375|x| + 0.8125 (< 2) | 1, with x's sign.
  EXPECT_EQ(SfpuTanhApprox(0.5f), 0.453125f);
  EXPECT_EQ(SfpuTanhApprox(-0.5f), -0.453125f);
  EXPECT_EQ(SfpuTanhApprox(0.75f), 0.6796875f);
  EXPECT_EQ(SfpuTanhApprox(1.f), 0.90625f);               // 0.09375 + 0.8125
  EXPECT_EQ(SfpuTanhApprox(1.5f), 0.953125f);             // 0.140625 + 0.8125
  EXPECT_EQ(SfpuTanhApprox(-1.75f), -0.9765625f);         // 0.1640625 + 0.8125
  EXPECT_EQ(SfpuTanhApprox(2.f), 1.f);
  EXPECT_EQ(SfpuTanhApprox(3.f), 1.f);
  EXPECT_EQ(SfpuTanhApprox(-10.f), -1.f);
  // Continuous at both cuts, monotone overall.
  EXPECT_NEAR(SfpuTanhApprox(std::nextafter(1.f, 0.f)), SfpuTanhApprox(1.f), 1e-6);
  EXPECT_NEAR(SfpuTanhApprox(std::nextafter(2.f, 0.f)), SfpuTanhApprox(2.f), 1e-6);
  const std::vector<float> xs = Sweep(-4.f, 4.f);
  for (size_t i = 1; i < xs.size(); ++i) EXPECT_LE(SfpuTanhApprox(xs[i - 1]), SfpuTanhApprox(xs[i]));
  // Worst error at |x| = 1: 0.90625 - tanh(1) = 0.14466.
  double max_err = 0;
  for (float x : xs) max_err = std::max(max_err, std::abs(SfpuTanhApprox(x) - std::tanh(double{x})));
  EXPECT_NEAR(max_err, 0.90625 - std::tanh(1.0), 1e-6);
  EXPECT_NEAR(SfpuEval(SfpuOp::kTanh, 1.f, true, Arch::kWormholeB0) -
                  SfpuEval(SfpuOp::kTanh, 1.f, false, Arch::kWormholeB0),
              0.90625 - std::tanh(1.0), 1e-6);
}

TEST(Sfpu, HardsigmoidHardswishRelu) {
  // relu_max(x * 0.16666667163372040 + 0.5, 1).
  EXPECT_EQ(SfpuHardsigmoid(0.f), 0.5f);
  EXPECT_EQ(SfpuHardsigmoid(3.f), 1.f);    // 1.0000000149 rounds to 1
  EXPECT_EQ(SfpuHardsigmoid(-3.f), 0.f);   // -1.49e-8 clamps to 0
  EXPECT_FLOAT_EQ(SfpuHardsigmoid(1.f), 0.6666666716337204);
  EXPECT_EQ(SfpuHardsigmoid(5.f), 1.f);
  EXPECT_EQ(SfpuHardsigmoid(-4.f), 0.f);
  EXPECT_FLOAT_EQ(SfpuHardswish(1.f), 0.6666666716337204);
  EXPECT_FLOAT_EQ(SfpuHardswish(-1.f), -0.3333333283662796);  // -1 * (0.5 - 0.16666667)
  EXPECT_EQ(SfpuHardswish(4.f), 4.f);
  EXPECT_EQ(SfpuHardswish(-4.f), 0.f);
  // relu6 = relu_max(x, 6); NaN fails both compares and passes through.
  EXPECT_EQ(SfpuEval(SfpuOp::kRelu6, -1.f, false, Arch::kWormholeB0), 0.f);
  EXPECT_EQ(SfpuEval(SfpuOp::kRelu6, 3.f, false, Arch::kWormholeB0), 3.f);
  EXPECT_EQ(SfpuEval(SfpuOp::kRelu6, 7.f, false, Arch::kWormholeB0), 6.f);
  EXPECT_TRUE(std::isnan(SfpuReluMax(std::numeric_limits<float>::quiet_NaN(), 6.f)));
  EXPECT_EQ(SfpuRelu(-0.f), 0.f);
  EXPECT_FALSE(std::signbit(SfpuRelu(-0.f)));
  EXPECT_EQ(SfpuRelu(-1.f), 0.f);
  EXPECT_EQ(SfpuRelu(2.f), 2.f);
}

TEST(Sfpu, SqrtBothModes) {
  // The 23-bit algorithm is within ~1 fp32 ulp; the 10-bit one within ~2^-10 relative.
  double worst23 = 0, worst10 = 0;
  bool modes_differ = false;
  for (float x = 1e-6f; x < 1e6f; x *= 1.0137f) {
    const double ref = std::sqrt(double{x});
    worst23 = std::max(worst23, std::abs(SfpuSqrt(x, false) - ref) / ref);
    worst10 = std::max(worst10, std::abs(SfpuSqrt(x, true) - ref) / ref);
    modes_differ |= SfpuSqrt(x, false) != SfpuSqrt(x, true);
  }
  EXPECT_LT(worst23, 2.5e-7);
  EXPECT_LT(worst10, 1e-3);
  EXPECT_GT(worst10, 1e-5);  // really the coarse form
  EXPECT_TRUE(modes_differ);
  for (bool approx : {false, true}) {
    EXPECT_EQ(SfpuSqrt(0.f, approx), 0.f);
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(SfpuSqrt(inf, approx), inf);
    EXPECT_TRUE(std::isnan(SfpuSqrt(-1.f, approx)));
  }
}

TEST(Sfpu, ConvEpilogueMapping) {
  EXPECT_TRUE(SfpuConvEpilogueApprox(SfpuOp::kGelu));
  EXPECT_TRUE(SfpuConvEpilogueApprox(SfpuOp::kTanh));
  EXPECT_FALSE(SfpuConvEpilogueApprox(SfpuOp::kSigmoid));
  EXPECT_FALSE(SfpuConvEpilogueApprox(SfpuOp::kSilu));
  EXPECT_FALSE(SfpuConvEpilogueApprox(SfpuOp::kRelu6));
  EXPECT_FALSE(SfpuConvEpilogueApprox(SfpuOp::kSqrt));
  EXPECT_FALSE(SfpuOpForActivation(Activation::kNone).has_value());
  EXPECT_EQ(SfpuOpForActivation(Activation::kRelu), SfpuOp::kRelu);
  EXPECT_EQ(SfpuOpForActivation(Activation::kRelu6), SfpuOp::kRelu6);
  EXPECT_EQ(SfpuOpForActivation(Activation::kSilu), SfpuOp::kSilu);
  EXPECT_EQ(SfpuOpForActivation(Activation::kGelu), SfpuOp::kGelu);
  EXPECT_EQ(SfpuOpForActivation(Activation::kSigmoid), SfpuOp::kSigmoid);
  EXPECT_EQ(SfpuOpForActivation(Activation::kTanh), SfpuOp::kTanh);
  EXPECT_STREQ(SfpuOpName(SfpuOp::kHardsigmoid), "hardsigmoid");
  EXPECT_STREQ(SfpuConvEpilogueCall(SfpuOp::kGelu), "gelu_tile<true>");
}

}  // namespace
}  // namespace kiln::numerics
