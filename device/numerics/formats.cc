#include "device/numerics/formats.h"

#include <cmath>

namespace kiln::numerics {

BfpGroup HostEncodeBfpGroup(std::span<const uint32_t, 16> in, BfpFormat fmt, HostBfpRounding mode) {
  const int mag_bits = BfpCodeBits(fmt) - 1;  // 7 or 3
  const int k = 24 - mag_bits;                // low bits to drop
  const uint32_t half = 1u << (k - 1);
  const uint32_t low_mask = (1u << k) - 1;
  const uint32_t qmax = (1u << mag_bits) - 1;
  BfpGroup g;
  uint32_t e_max = 0;
  for (uint32_t u : in) e_max = std::max(e_max, (u >> 23) & 0xFFu);
  g.exp = static_cast<uint8_t>(e_max);
  for (int i = 0; i < 16; ++i) {
    uint32_t u = in[i];
    uint32_t e = (u >> 23) & 0xFFu;
    uint32_t f = u & 0x7FFFFFu;
    uint32_t s = u >> 31;
    bool zero = (mode == HostBfpRounding::kCurrent) ? (e == 0) : ((u & 0x7FFFFFFFu) == 0);
    if (zero) {
      g.codes[i] = 0;
      continue;
    }
    uint32_t m = 0x800000u | f;
    uint32_t shift = e_max - e;
    m = shift >= 32 ? 0 : (m >> shift);
    uint32_t q;
    if (mode == HostBfpRounding::kHalfUp) {
      q = (m + half) >> k;
    } else {
      uint32_t r = m & low_mask;
      q = m >> k;
      if (r > half || (r == half && (q & 1u))) ++q;
    }
    if (q > qmax) q = qmax;
    g.codes[i] = static_cast<uint8_t>(q | ((q != 0 && s) ? (1u << mag_bits) : 0u));
  }
  return g;
}

float DecodeBfpValue(uint8_t exp, uint8_t code, BfpFormat fmt) {
  const int w = BfpCodeBits(fmt);
  const uint32_t m = code & ((1u << (w - 1)) - 1);
  const bool neg = (code >> (w - 1)) & 1u;
  double v = std::ldexp(static_cast<double>(m), static_cast<int>(exp) - 127 - (w - 2));
  float f = static_cast<float>(v);
  return neg ? -f : f;
}





BfpGroup PackBfpStageB(std::span<const uint16_t, 16> v, BfpFormat fmt) {
  BfpGroup g;
  uint32_t e_max = 0;
  for (uint16_t t : v) e_max = std::max<uint32_t>(e_max, (t >> 7) & 0xFFu);
  g.exp = static_cast<uint8_t>(e_max);
  const int sign_bit = BfpCodeBits(fmt) - 1;
  for (int i = 0; i < 16; ++i) {
    uint32_t t = v[i];
    uint32_t e = (t >> 7) & 0xFFu;
    uint32_t S = (e != 0 ? 128u : 0u) | (t & 0x7Fu);
    uint32_t d = e_max - e;
    uint32_t m = d >= 8 ? 0 : ((S + (1u << d)) >> (d + 1));
    if (m == 128) m = 127;
    if (fmt == BfpFormat::kBfp4) m >>= 4;
    uint32_t s = (t >> 15) & 1u;
    g.codes[i] = static_cast<uint8_t>(m | ((m != 0 && s) ? (1u << sign_bit) : 0u));
  }
  return g;
}

BfpGroup PackBfpFromFp32Dst(std::span<const uint32_t, 16> dst, BfpFormat fmt) {
  std::array<uint16_t, 16> a;
  for (int i = 0; i < 16; ++i) a[i] = PackE8M6FromFp32Dst(dst[i]);
  return PackBfpStageB(a, fmt);
}

BfpGroup PackBfpFromBf16Dst(std::span<const uint16_t, 16> dst, BfpFormat fmt) {
  std::array<uint16_t, 16> a;
  for (int i = 0; i < 16; ++i) a[i] = PackE8M6FromBf16Dst(dst[i]);
  return PackBfpStageB(a, fmt);
}



}  // namespace kiln::numerics
