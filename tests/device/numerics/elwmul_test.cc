// numerics::Elwmul (device/numerics/fpu.h): the one-product-per-lane MVMUL model of ELWMUL. There
// are no ELWMUL vectors, so this pins the model to its definition (MvmulFidelity with the operands
// in lane 0) and checks the properties docs/specs/tt-numerics.md §5.2 states for a single product.
#include <gtest/gtest.h>

#include <array>
#include <random>

#include "device/numerics/formats.h"
#include "device/numerics/fpu.h"

namespace kiln::numerics {
namespace {

TEST(Elwmul, EqualsOneLaneMvmul) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits;
  int checked = 0;
  for (int i = 0; i < 20000; ++i) {
    // Mostly finite values near 1 (exponents 100..154), some random patterns (denormals, Inf).
    uint32_t a = bits(rng), b = bits(rng), dst = bits(rng);
    if (i % 4 != 0) {
      a = (a & 0x807FFFFFu) | ((100u + a % 55u) << 23);
      b = (b & 0x807FFFFFu) | ((100u + b % 55u) << 23);
    }
    for (bool fp32 : {true, false}) {
      const uint32_t d = fp32 ? dst : dst & 0xFFFF0000u;
      for (SrcFormat f : {SrcFormat::kBf16, SrcFormat::kTf32}) {
        const FpuConfig cfg{fp32, i % 2 ? Arch::kWormholeB0 : Arch::kBlackhole, f, f};
        for (MathFidelity fid : {MathFidelity::kLoFi, MathFidelity::kHiFi2, MathFidelity::kHiFi3, MathFidelity::kHiFi4}) {
          std::array<uint32_t, 16> va{}, vb{};
          va[0] = a;
          vb[0] = b;
          ASSERT_EQ(Elwmul(a, b, d, fid, cfg), MvmulFidelity(va, vb, d, fid, cfg))
              << std::hex << a << " " << b << " " << d << " fp32=" << fp32 << " fid=" << static_cast<int>(fid);
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 20000 * 16);
}

TEST(Elwmul, HiFi4ExactForBf16AndLoFiTruncates) {
  const FpuConfig cfg{true, Arch::kWormholeB0, SrcFormat::kBf16, SrcFormat::kBf16};
  // bf16 operands: the HiFi4 product is exact in an fp32 Dst (§5.2).
  const float a = BitsFloat(0x3FAB0000u), b = BitsFloat(0xC0F30000u);  // 1.3359375, -7.59375
  EXPECT_EQ(BitsFloat(Elwmul(FloatBits(a), FloatBits(b), 0, MathFidelity::kHiFi4, cfg)), a * b);
  // LoFi keeps 1+4 bits of SrcA and 1+6 of SrcB: 1.3359375 → 1.3125, -7.59375 → -7.5625.
  EXPECT_EQ(BitsFloat(Elwmul(FloatBits(a), FloatBits(b), 0, MathFidelity::kLoFi, cfg)), 1.3125f * -7.5625f);
  // A zero operand or an underflowing product gives +0.
  EXPECT_EQ(Elwmul(0u, FloatBits(b), 0, MathFidelity::kHiFi4, cfg), 0u);
  EXPECT_EQ(Elwmul(0x00800000u, 0x00800000u, 0, MathFidelity::kHiFi4, cfg), 0u);
}

}  // namespace
}  // namespace kiln::numerics
