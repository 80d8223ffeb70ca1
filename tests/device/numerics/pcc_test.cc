// comp_pcc branches and the conv threshold rules (docs/specs/tt-numerics.md §9).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "device/numerics/pcc.h"

namespace kiln::numerics {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(CompPcc, Branches) {
  std::vector<float> nan2{kNan, kNan}, zero2{0, 0}, a{1, 2, 3, 4}, b{1, 2, 3, 5};
  auto r = CompPcc(nan2, nan2, 0.99);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->pass);
  EXPECT_EQ(r->pcc, 1.0);
  r = CompPcc(nan2, std::vector<float>{1, 2}, 0.99);
  EXPECT_FALSE(r->pass);
  EXPECT_EQ(r->pcc, 0.0);
  r = CompPcc(zero2, std::vector<float>{0, 1e-3f}, 0.5);  // exactly one all-zero
  EXPECT_FALSE(r->pass);
  EXPECT_EQ(r->pcc, 0.0);
  r = CompPcc(std::vector<float>{1, kInf, 3}, std::vector<float>{1, kNan, 3}, 0.99);  // inf/nan masked to 0 → equal
  EXPECT_TRUE(r->pass);
  EXPECT_EQ(r->pcc, 1.0);
  r = CompPcc(std::vector<float>{2, 2, 2}, std::vector<float>{3, 3, 3}, 0.99);  // both constant → masked
  EXPECT_TRUE(r->pass);
  EXPECT_EQ(r->pcc, 1.0);
  r = CompPcc(std::vector<float>{2, 2, 2}, std::vector<float>{1, 2, 3}, 0.99);  // one constant → 1.0
  EXPECT_TRUE(r->pass);
  EXPECT_EQ(r->pcc, 1.0);
  r = CompPcc(std::vector<float>{0.1f, 0.1f, 0.1f}, std::vector<float>{1, 2, 3}, 0.99);  // inexact mean
  EXPECT_TRUE(r->pass);
  EXPECT_EQ(r->pcc, 1.0);
  r = CompPcc(a, b, 0.99);
  ASSERT_TRUE(r.ok());
  // numpy.corrcoef([1,2,3,4],[1,2,3,5]) = 0.9827076298239907
  EXPECT_NEAR(r->pcc, 0.9827076298239907, 1e-15);
  EXPECT_FALSE(r->pass);
  r = CompPcc(a, std::vector<float>{4, 3, 2, 1}, -1.0);
  EXPECT_DOUBLE_EQ(r->pcc, -1.0);
  EXPECT_FALSE(CompPcc(a, std::vector<float>{1}, 0.9).ok());
}

TEST(ConvThreshold, RunConvRules) {
  ConvPccRuleInput in;
  in.fp32_accum = false;
  in.cin_kh_kw = 64 * 9;
  EXPECT_EQ(ConvPccThreshold(in), 0.985);
  in.cin_kh_kw = 2048 * 9;
  EXPECT_EQ(ConvPccThreshold(in), 0.97);
  in.fp32_accum = true;
  in.fidelity = MathFidelity::kLoFi;
  in.bfp8_output = true;
  EXPECT_EQ(ConvPccThreshold(in), 0.996);
  in.fidelity = MathFidelity::kHiFi4;
  EXPECT_EQ(ConvPccThreshold(in), 0.997);
  in.activation = Activation::kSigmoid;
  EXPECT_EQ(ConvPccThreshold(in), 0.995);
  in.activation = Activation::kTanh;
  EXPECT_DOUBLE_EQ(ConvPccThreshold(in), 0.997 * 0.99);
  in.custom = 0.9;
  in.activation = Activation::kNone;
  EXPECT_EQ(ConvPccThreshold(in), 0.9);
  EXPECT_EQ(ConvTransposePccThreshold(false, MathFidelity::kHiFi4, false), 0.99);
  EXPECT_EQ(ConvTransposePccThreshold(true, MathFidelity::kLoFi, true), 0.9969);
  EXPECT_EQ(ConvTransposePccThreshold(true, MathFidelity::kHiFi4, true), 0.998);
}

TEST(FastCompare, Bounds) {
  std::vector<float> ref{1, -1, 2, -2}, out{1.1f, -1, 2, -2};
  auto ok = FastCompare(ref, out, 9, true);
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(*ok);  // 0.1/1.5 < 0.3 + 0.005*log2(9)
  std::vector<float> far{2, -1, 2, -2};
  EXPECT_FALSE(*FastCompare(ref, far, 9, true));  // 1/1.5 = 0.667 > 0.316
  EXPECT_TRUE(*FastCompare(ref, far, 9, false) == (1.0 / 1.5 < 0.3 + 0.1 * std::log2(9.0)));
  EXPECT_TRUE(*FastCompare(ref, ref, 9, true));
}

}  // namespace
}  // namespace kiln::numerics
