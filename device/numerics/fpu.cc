#include "device/numerics/fpu.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdlib>

namespace kiln::numerics {

FpuTerm GroupTerm(const FpuSlice* a8, const FpuSlice* b8, int adj) {
  int ep[8];
  int64_t P[8];
  int sg[8];
  int G = 0;  // zero lanes count as exponent 0
  for (int k = 0; k < 8; ++k) {
    if (a8[k].exp == 0 || b8[k].exp == 0) {
      ep[k] = 0;
      P[k] = 0;
      sg[k] = 0;
    } else {
      ep[k] = a8[k].exp + b8[k].exp + adj;
      P[k] = static_cast<int64_t>(a8[k].slice) * b8[k].slice;
      sg[k] = a8[k].sign ^ b8[k].sign;
    }
    G = std::max(G, ep[k]);
  }
  FpuTerm t;
  if (G <= 0) return t;
  int64_t S = 0;
  for (int k = 0; k < 8; ++k) {
    int d = std::min(G - ep[k], 30);
    int64_t R = (2 * P[k] + (int64_t{1} << d)) >> (d + 1);
    S += sg[k] ? -R : R;
  }
  t.sign = S < 0 ? 1 : 0;
  t.exp = G;
  t.mag = static_cast<uint64_t>(S < 0 ? -S : S) << 13;
  return t;
}


uint32_t MvmulPhase(std::span<const uint32_t, 16> a, std::span<const uint32_t, 16> b, uint32_t dst, int phase,
                    const FpuConfig& cfg) {
  FpuSlice sa[16], sb[16];
  for (int k = 0; k < 16; ++k) {
    sa[k] = SliceA(MaskSrcOperand(a[k], cfg.a_fmt), phase);
    sb[k] = SliceB(MaskSrcOperand(b[k], cfg.b_fmt), phase);
  }
  int adj = PhaseAdjust(phase);
  FpuTerm g0 = GroupTerm(sa, sb, adj);
  FpuTerm g1 = GroupTerm(sa + 8, sb + 8, adj);
  return CombineWithDst(g0, g1, dst, cfg.fp32_dst, cfg.arch);
}

uint32_t MvmulFidelity(std::span<const uint32_t, 16> a, std::span<const uint32_t, 16> b, uint32_t dst,
                       MathFidelity fid, const FpuConfig& cfg) {
  for (int p = 0; p < NumPhases(fid); ++p) dst = MvmulPhase(a, b, dst, p, cfg);
  return dst;
}


uint32_t Elwmul(uint32_t a, uint32_t b, uint32_t dst, MathFidelity fid, const FpuConfig& cfg) {
  a = MaskSrcOperand(a, cfg.a_fmt);
  b = MaskSrcOperand(b, cfg.b_fmt);
  for (int p = 0; p < NumPhases(fid); ++p) {
    const FpuSlice sa = SliceA(a, p), sb = SliceB(b, p);
    FpuTerm t;
    const int ep = sa.exp + sb.exp + PhaseAdjust(p);
    if (sa.exp != 0 && sb.exp != 0 && ep > 0) {
      // One lane: the group maximum is the lane itself (d = 0, R = P).
      t.sign = sa.sign ^ sb.sign;
      t.exp = ep;
      t.mag = static_cast<uint64_t>(sa.slice * sb.slice) << 13;
      if (t.mag == 0) t.sign = 0;
    }
    dst = CombineWithDst(t, FpuTerm{}, dst, cfg.fp32_dst, cfg.arch);
  }
  return dst;
}

uint32_t PackL1AccFp32(uint32_t old_value, uint32_t new_value) {
  auto ftz = [](uint32_t u) { return ((u >> 23) & 0xFFu) == 0 ? (u & 0x80000000u) : u; };
  volatile float x = BitsFloat(ftz(old_value));
  volatile float y = BitsFloat(ftz(new_value));
  float r = x + y;
  uint32_t u = FloatBits(r);
  if (std::isnan(r)) return 0x7FC00000u;
  return ftz(u);
}

uint16_t PackL1AccBf16(uint16_t old_value, uint16_t new_value) {
  if ((old_value == 0x7F80 && new_value == 0xFF80) || (old_value == 0xFF80 && new_value == 0x7F80)) return 0x7FC0;
  auto ftz = [](uint16_t t) -> uint16_t { return ((t >> 7) & 0xFFu) == 0 ? static_cast<uint16_t>(t & 0x8000u) : t; };
  old_value = ftz(old_value);
  new_value = ftz(new_value);
  auto is_nan = [](uint16_t t) { return (t & 0x7FFFu) > 0x7F80u; };
  double x, y;
  if (is_nan(old_value)) x = (old_value & 0x8000u) ? -DBL_MAX : DBL_MAX;
  else x = Bf16ToFloat(old_value);
  if (is_nan(new_value)) {
    double m = std::ldexp(1.0 + static_cast<double>(new_value & 0x7Fu) / 128.0, 128);
    y = (new_value & 0x8000u) ? -m : m;
  } else {
    y = Bf16ToFloat(new_value);
  }
  double s = x + y;
  uint16_t sign = std::signbit(s) ? 0x8000 : 0;
  if (std::isinf(s)) return sign | 0x7F80u;
  if (s == 0.0) return sign;
  int ex;
  double fr = std::frexp(std::fabs(s), &ex);  // |s| = fr·2^ex, fr in [0.5, 1)
  double scaled = std::ldexp(fr, 8);             // [128, 256)
  double q = std::nearbyint(scaled);             // RNE (default rounding mode)
  if (q >= 256.0) {
    q = 128.0;
    ex += 1;
  }
  int biased = ex - 1 + 127;
  if (biased <= 0) return sign;
  if (biased >= 255) return sign | 0x7F80u;
  return static_cast<uint16_t>(sign | (biased << 7) | (static_cast<uint32_t>(q) & 0x7Fu));
}

}  // namespace kiln::numerics
