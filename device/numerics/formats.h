// Tensix number formats and the conversions between them, as bit-pattern arithmetic.
// Spec: docs/specs/tt-numerics.md (rules are cited by section: §1 formats, §2 host
// conversions done by tt-metal on the CPU, §3 the device packer (Dst → L1), §4 the device unpacker
// (L1 → SrcA/SrcB)). Every function here is total (defined for every input pattern, NaN/Inf
// included) and bit-exact against tests/data/tt-vectors.
//
// Conventions: an fp32 value is passed as its uint32_t pattern, a bf16 (Float16_b) value as the
// uint16_t of its top 16 bits. A bfp (block floating point) group is 16 values sharing one 8-bit
// exponent; its element codes are sign-magnitude with the sign in bit (w-1), w = 8 (bfp8_b) or
// 4 (bfp4_b), and no hidden bit (§1).
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <span>

#include "device/numerics/types.h"

namespace kiln::numerics {

/// Bit pattern of a float, and back.
inline uint32_t FloatBits(float f) { return std::bit_cast<uint32_t>(f); }
inline float BitsFloat(uint32_t u) { return std::bit_cast<float>(u); }
/// The float a bf16 pattern denotes (exact).
inline float Bf16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

/// Block-float element width. kBfp8 = bfloat8_b (7-bit magnitude), kBfp4 = bfloat4_b (3-bit).
enum class BfpFormat { kBfp8, kBfp4 };
/// Bits per element code (8 or 4).
inline int BfpCodeBits(BfpFormat f) { return f == BfpFormat::kBfp8 ? 8 : 4; }
/// The element width of a block-float device dtype (device/numerics/types.h): bfloat8_b → kBfp8,
/// bfloat4_b → kBfp4. Only meaningful for those two; any other dtype gives kBfp4.
inline BfpFormat BfpFormatOf(DeviceDType d) {
  return d == DeviceDType::kBFloat8B ? BfpFormat::kBfp8 : BfpFormat::kBfp4;
}

/// One group of 16 bfp values: shared exponent (bias 127) and 16 codes (low BfpCodeBits bits used).
struct BfpGroup {
  uint8_t exp = 0;
  std::array<uint8_t, 16> codes{};
  bool operator==(const BfpGroup&) const = default;
};

// ---------------------------------------------------------------------------------------------
// §2 Host-side conversions (tt-metal, before upload)

/// Host fp32 → bf16 rounding (§2.1).
enum class HostBf16Rounding {
  kRne,       ///< current tt-metal / torch: RNE, NaN → 0x7FC0, overflow → ±Inf, denormals rounded
  kTruncate,  ///< legacy bfloat16(float): keep the top 16 bits
};
inline uint16_t HostFp32ToBf16(uint32_t u, HostBf16Rounding mode = HostBf16Rounding::kRne);

/// Host fp32 → bfp rounding variants (§2.2).
enum class HostBfpRounding {
  kCurrent,     ///< 2026 detail::bfp: RNE on the truncated, aligned significand; e==0 inputs → code 0
  kLegacy2025,  ///< blockfloat_common.cpp @034fc8c7: same RNE, but only ±0 gives 0 (denormals get a hidden one)
  kHalfUp,      ///< older SDKs: add half and shift (round half up), legacy zero rule
};
/// Encodes 16 consecutive fp32 values (one face row) into one group (§2.2).
BfpGroup HostEncodeBfpGroup(std::span<const uint32_t, 16> in, BfpFormat fmt,
                            HostBfpRounding mode = HostBfpRounding::kCurrent);
/// Exact value of one code, m·2^(E−127−(w−2)), rounded to fp32 (§2.3; the `dec` vector fields).
/// A zero magnitude gives ±0 following the sign bit.
float DecodeBfpValue(uint8_t exp, uint8_t code, BfpFormat fmt);

// ---------------------------------------------------------------------------------------------
// §3 Device packer (Dst → L1)

/// §3.1 fp32 Dst → bf16: NaN → ±Inf, round half away from zero, exponent-0 result → +0.
inline uint16_t PackFp32DstToBf16(uint32_t u);
/// §3.2 bf16 Dst → bf16: NaN → ±Inf, exponent-0 → +0, otherwise unchanged.
inline uint16_t PackBf16DstToBf16(uint16_t t);
/// §3.3 fp32 output from a bf16 Dst (fp32 Dst → fp32 is the identity).
inline uint32_t PackBf16DstToFp32(uint16_t t) { return static_cast<uint32_t>(t) << 16; }
/// §3.4 stage A from an fp32 Dst: the E8M6 bf16 pattern (`dev_pack_e8m6`).
inline uint16_t PackE8M6FromFp32Dst(uint32_t u);
/// §3.4 stage A from a bf16 Dst (flush before the +1 step).
inline uint16_t PackE8M6FromBf16Dst(uint16_t t);
/// §3.4 stage B: block-encodes 16 E8M6 values of one face row.
BfpGroup PackBfpStageB(std::span<const uint16_t, 16> e8m6, BfpFormat fmt);
/// §3.4 stages A+B for 16 fp32 Dst values (`dev_fp32dst`).
BfpGroup PackBfpFromFp32Dst(std::span<const uint32_t, 16> dst, BfpFormat fmt);
/// §3.4 stages A+B for 16 bf16 Dst values (`dev_bf16dst`).
BfpGroup PackBfpFromBf16Dst(std::span<const uint16_t, 16> dst, BfpFormat fmt);
/// §3.5 packer ReLU on a bf16 pattern (after early conversion): sign set → 0.
inline uint16_t PackerReluBf16(uint16_t t) { return (t & 0x8000u) ? 0 : t; }
/// §3.5 packer ReLU on an fp32 pattern.
inline uint32_t PackerReluFp32(uint32_t u) { return (u & 0x80000000u) ? 0 : u; }

// ---------------------------------------------------------------------------------------------
// §4 Unpacker (L1 → Src)

/// fp32 → tf32: drop the low 13 mantissa bits, no rounding, no flush (fp32 pattern returned).
inline uint32_t UnpackFp32ToTf32(uint32_t u) { return u & 0xFFFFE000u; }
/// fp32 → bf16: denormal → signed zero, then truncate.
inline uint16_t UnpackFp32ToBf16(uint32_t u);
/// bfp → bf16 (§4): m==0 → +0 (or −Inf 0xFF80 when the sign bit is set); exponent wraps mod 256.
inline uint16_t UnpackBfpToBf16(uint8_t exp, uint8_t code, BfpFormat fmt);

/// Source-register operand format seen by the FPU (§4 "FPU operand masking").
enum class SrcFormat {
  kBf16,  ///< bf16 / bfp8 / bfp4 / plain Float32 ALU format: only the top 7 mantissa bits count
  kTf32,  ///< Tf32 ALU format: the top 10 mantissa bits count
};
/// Masks an fp32 pattern to what the FPU sees for that operand format.
inline uint32_t MaskSrcOperand(uint32_t u, SrcFormat f) {
  return u & (f == SrcFormat::kTf32 ? 0xFFFFE000u : 0xFFFF0000u);
}

// ---------------------------------------------------------------------------------------------
// Inline definitions (hot in the emulator's inner loops).

namespace detail {
inline bool IsNanBits(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }
inline bool IsNanBf16(uint16_t t) { return (t & 0x7FFFu) > 0x7F80u; }
}  // namespace detail

inline uint16_t HostFp32ToBf16(uint32_t u, HostBf16Rounding mode) {
  if (mode == HostBf16Rounding::kTruncate) return static_cast<uint16_t>(u >> 16);
  if (detail::IsNanBits(u)) return 0x7FC0;
  uint32_t r = u + 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(r >> 16);
}

inline uint16_t PackFp32DstToBf16(uint32_t u) {
  if (detail::IsNanBits(u)) u = (u & 0x80000000u) | 0x7F800000u;
  uint16_t b = static_cast<uint16_t>((u + 0x8000u) >> 16);
  if ((b & 0x7F80u) == 0) return 0;
  return b;
}

inline uint16_t PackBf16DstToBf16(uint16_t t) {
  if (detail::IsNanBf16(t)) return static_cast<uint16_t>((t & 0x8000u) | 0x7F80u);
  if ((t & 0x7F80u) == 0) return 0;
  return t;
}

inline uint16_t PackE8M6FromFp32Dst(uint32_t u) {
  if (detail::IsNanBits(u)) u = (u & 0x80000000u) | 0x7F800000u;
  uint32_t t = u >> 16;
  t = (t + 1u) & ~1u;
  t &= 0xFFFFu;
  if ((t & 0x7F80u) == 0) return 0;
  return static_cast<uint16_t>(t);
}

inline uint16_t PackE8M6FromBf16Dst(uint16_t t16) {
  uint32_t t = t16;
  if (detail::IsNanBf16(t16)) t = (t & 0x8000u) | 0x7F80u;
  if ((t & 0x7F80u) == 0) return 0;
  t = (t + 1u) & ~1u;
  return static_cast<uint16_t>(t & 0xFFFFu);
}

inline uint16_t UnpackFp32ToBf16(uint32_t u) {
  if ((u & 0x7FFFFFFFu) < 0x800000u) u &= 0x80000000u;
  return static_cast<uint16_t>(u >> 16);
}

inline uint16_t UnpackBfpToBf16(uint8_t exp, uint8_t code, BfpFormat fmt) {
  uint32_t c8 = fmt == BfpFormat::kBfp4 ? (static_cast<uint32_t>(code & 0xFu) << 4) : code;
  uint32_t s = (c8 >> 7) & 1u;
  uint32_t m = c8 & 0x7Fu;
  if (m == 0) return s ? 0xFF80 : 0x0000;
  int z = 0;
  while (!(m & 0x40u)) {
    m <<= 1;
    ++z;
  }
  uint32_t e = (static_cast<uint32_t>(exp) - static_cast<uint32_t>(z)) & 0xFFu;
  uint32_t mant = (m & 0x3Fu) << 1;
  return static_cast<uint16_t>((s << 15) | (e << 7) | mant);
}

}  // namespace kiln::numerics
