// SFPU activation models; the sources of every table and step are listed in sfpu.h.
#include "device/numerics/sfpu.h"

#include <bit>
#include <cmath>
#include <limits>

namespace kiln::numerics {
namespace {

constexpr uint32_t kSign = 0x80000000u;
constexpr uint32_t kInfBits = 0x7F800000u;

bool IsDenormalOrZero(float f) { return (std::bit_cast<uint32_t>(f) & kInfBits) == 0; }

// SFPMAD reads denormal inputs as (signed) zero.
float FlushIn(float f) {
  return IsDenormalOrZero(f) ? std::bit_cast<float>(std::bit_cast<uint32_t>(f) & kSign) : f;
}

}  // namespace

const char* SfpuOpName(SfpuOp op) {
  switch (op) {
    case SfpuOp::kRelu: return "relu";
    case SfpuOp::kRelu6: return "relu6";
    case SfpuOp::kSilu: return "silu";
    case SfpuOp::kGelu: return "gelu";
    case SfpuOp::kSigmoid: return "sigmoid";
    case SfpuOp::kTanh: return "tanh";
    case SfpuOp::kHardswish: return "hardswish";
    case SfpuOp::kHardsigmoid: return "hardsigmoid";
    case SfpuOp::kSqrt: return "sqrt";
  }
  return "?";
}

std::optional<SfpuOp> SfpuOpForActivation(Activation a) {
  switch (a) {
    case Activation::kNone: return std::nullopt;
    case Activation::kRelu: return SfpuOp::kRelu;
    case Activation::kRelu6: return SfpuOp::kRelu6;
    case Activation::kSilu: return SfpuOp::kSilu;
    case Activation::kGelu: return SfpuOp::kGelu;
    case Activation::kSigmoid: return SfpuOp::kSigmoid;
    case Activation::kTanh: return SfpuOp::kTanh;
    case Activation::kHardswish: return SfpuOp::kHardswish;
  }
  return std::nullopt;
}

bool SfpuConvEpilogueApprox(SfpuOp op) { return op == SfpuOp::kGelu || op == SfpuOp::kTanh; }

const char* SfpuConvEpilogueCall(SfpuOp op) {
  switch (op) {
    case SfpuOp::kRelu: return "pack_relu";
    case SfpuOp::kRelu6: return "relu_max_tile(0x40c00000)";
    case SfpuOp::kSilu: return "silu_tile<APPROX=false>";
    case SfpuOp::kGelu: return "gelu_tile<true>";
    case SfpuOp::kSigmoid: return "sigmoid_tile<RC,false>";
    case SfpuOp::kTanh: return "tanh_tile<false> (LUT)";
    case SfpuOp::kHardswish: return "hardswish (x*hardsigmoid)";
    case SfpuOp::kHardsigmoid: return "hardsigmoid_tile<APPROX=false>";
    case SfpuOp::kSqrt: return "sqrt_tile<APPROX=false>";
  }
  return "?";
}

float SfpuMad(float a, float b, float c) {
  const float d = std::fma(FlushIn(a), FlushIn(b), FlushIn(c));
  return IsDenormalOrZero(d) ? 0.f : d;  // denormal and -0 results are written as +0
}

float Lut8ToFp32(uint8_t x) {
  if (x == 0xFF) return 0.f;
  const uint32_t sign = x >> 7, exp = (x >> 4) & 7u, man = x & 0xFu;
  return std::bit_cast<float>((sign << 31) | ((127u - exp) << 23) | (man << 19));
}

float Lut16ToFp32(uint16_t x) {
  const uint32_t sign = x >> 15, exp = (x >> 10) & 0x1Fu, man = x & 0x3FFu;
  return std::bit_cast<float>((sign << 31) | ((exp == 0x1F ? 0u : 112u + exp) << 23) | (man << 13));
}

float SfpLut(const SfpLut3& t, float x, bool sign_retain) {
  const float b = std::fabs(x);
  const uint16_t coeffs = b < 1.f ? t.l[0] : b < 2.f ? t.l[1] : t.l[2];
  float d = SfpuMad(Lut8ToFp32(static_cast<uint8_t>(coeffs >> 8)), b,
                    Lut8ToFp32(static_cast<uint8_t>(coeffs & 0xFF)));
  if (sign_retain) d = std::copysign(d, x);
  return d;
}

float SfpLut6Slope(const SfpLut6& t, int piece) {
  return Lut16ToFp32(static_cast<uint16_t>(t.slope[piece / 2] >> (16 * (piece & 1))));
}

float SfpLut6Intercept(const SfpLut6& t, int piece) {
  return Lut16ToFp32(static_cast<uint16_t>(t.intercept[piece / 2] >> (16 * (piece & 1))));
}

float SfpLut6Eval(const SfpLut6& t, float x, bool sign_retain) {
  const float b = std::fabs(x);
  const float cut = t.table2 ? 4.f : 3.f;
  // NaN fails every comparison and lands in the last piece, as in SFPLUTFP32.md's model.
  const int piece = b < 0.5f ? 0 : b < 1.f ? 1 : b < 1.5f ? 2 : b < 2.f ? 3 : b < cut ? 4 : 5;
  float d = SfpuMad(SfpLut6Slope(t, piece), b, SfpLut6Intercept(t, piece));
  if (sign_retain) d = std::copysign(d, x);
  return d;
}

float SfpuRelu(float x) { return (std::bit_cast<uint32_t>(x) & kSign) ? 0.f : x; }

float SfpuReluMax(float x, float threshold) {
  float r = x;
  if (r > threshold) r = threshold;
  if (r < 0.f) r = 0.f;
  return r;
}

float SfpuGeluApprox(float x) {
  // half_in = x * 0.5 (exact), result = half_in + lut2_sign(x): one MAD once fused.
  return SfpuMad(x, 0.5f, SfpLut6Eval(kGeluLut, x, /*sign_retain=*/false));
}

float SfpuGeluAccurate(float x) { return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f)); }

float SfpuSigmoidApprox(float x, SigmoidApproxTable table) {
  float odd = 0.f;
  switch (table) {
    case SigmoidApproxTable::kLut6: odd = SfpLut6Eval(kSigmoidLut6, x, true); break;
    case SigmoidApproxTable::kLut6ZeroIntercept: odd = SfpLut6Eval(kSigmoidLut6ZeroB0, x, true); break;
    case SigmoidApproxTable::kLut3Legacy: odd = SfpLut(kSigmoidLut3Legacy, x, true); break;
  }
  return SfpuMad(odd, 1.f, 0.5f);
}

float SfpuSigmoidAccurate(float x) { return 1.f / (1.f + std::exp(-x)); }

float SfpuSilu(float x) {
  const float r = std::fabs(x);
  float s = 1.f;
  if (r <= 1.f) {
    s = SfpuMad(0.229f, r, 0.5f);
  } else if (r < 5.f) {
    // POLYVAL5(0.00144462, -0.01055479, -0.01203685, 0.24300185, 0.50437757, r), Horner by MADs.
    s = SfpuMad(0.00144462f, r, -0.01055479f);
    s = SfpuMad(s, r, -0.01203685f);
    s = SfpuMad(s, r, 0.24300185f);
    s = SfpuMad(s, r, 0.50437757f);
  }
  if (x < 0.f) s = SfpuMad(s, -1.f, 1.f);
  return SfpuMad(x, s, 0.f);
}

float SfpuTanhApprox(float x) { return SfpLut(kTanhLut, x, /*sign_retain=*/true); }

float SfpuTanhAccurate(float x) { return std::tanh(x); }

float SfpuHardsigmoid(float x) { return SfpuReluMax(SfpuMad(x, 0.1666666716337204f, 0.5f), 1.f); }

float SfpuHardswish(float x) { return SfpuMad(x, SfpuHardsigmoid(x), 0.f); }

float SfpuSqrt(float x, bool approx) {
  const uint32_t xb = std::bit_cast<uint32_t>(x);
  const int32_t i = static_cast<int32_t>(xb >> 1);
  float y;
  if (approx) {
    // SQRT_10-bits: y0 = rsqrt seed, c = x·y0, t = 1.89099 - y0·c, sqrt = c·t.
    y = std::bit_cast<float>(static_cast<uint32_t>(0x5F0B3892 - i));
    const float c = SfpuMad(x, y, 0.f);
    const float t = SfpuMad(-y, c, 1.89099014875f);
    y = c;
    if (xb != kInfBits) y = SfpuMad(y, t, 0.f);
  } else {
    // SQRT_23-bits: two refinements of the rsqrt seed, then one Newton step on x·y.
    y = std::bit_cast<float>(static_cast<uint32_t>(0x5F1110A0 - i));
    float xy = SfpuMad(x, y, 0.f);
    const float c = SfpuMad(-y, xy, 0.f);
    const float t = SfpuMad(c, SfpuMad(c, 1.f, 2.2533049f), 2.2825186f);
    y = SfpuMad(y, t, 0.f);
    xy = SfpuMad(x, y, 0.f);
    const float one_minus_xyy = SfpuMad(-y, xy, 1.f);
    const float half_xy = SfpuMad(0.5f, xy, 0.f);
    if (static_cast<int32_t>(xb) < static_cast<int32_t>(kInfBits)) y = SfpuMad(one_minus_xyy, half_xy, xy);
  }
  if (x < 0.f) y = std::numeric_limits<float>::quiet_NaN();
  return y;
}

float SfpuEval(SfpuOp op, float x, bool approx_mode, Arch /*arch: identical tables on both*/) {
  switch (op) {
    case SfpuOp::kRelu: return SfpuRelu(x);
    case SfpuOp::kRelu6: return SfpuReluMax(x, 6.f);
    case SfpuOp::kSilu: return SfpuSilu(x);
    case SfpuOp::kGelu: return approx_mode ? SfpuGeluApprox(x) : SfpuGeluAccurate(x);
    case SfpuOp::kSigmoid: return approx_mode ? SfpuSigmoidApprox(x) : SfpuSigmoidAccurate(x);
    case SfpuOp::kTanh: return approx_mode ? SfpuTanhApprox(x) : SfpuTanhAccurate(x);
    case SfpuOp::kHardswish: return SfpuHardswish(x);
    case SfpuOp::kHardsigmoid: return SfpuHardsigmoid(x);
    case SfpuOp::kSqrt: return SfpuSqrt(x, approx_mode);
  }
  return x;
}

}  // namespace kiln::numerics
