// tt-emu's device-side data conversions, shared by the conv, depthwise and eltwise engines
// (conv_engine.cc, depthwise_engine.cc, tt_eltwise.cc): host conversion before upload, the
// unpacker into Src, the Src ALU format, and the packer out of Dst. Section numbers (§) cite
// docs/specs/tt-numerics.md. Values travel as fp32 bit patterns (bf16 / bfp values widened).
#pragma once

#include <array>
#include <cstdint>

#include "device/backends/precision.h"
#include "device/numerics/formats.h"

namespace kiln::device::tt_emu {

inline bool IsBfp(DeviceDType d) { return d == DeviceDType::kBFloat8B || d == DeviceDType::kBFloat4B; }

/// c ? a : b as bit operations: GCC's vectoriser takes these where a condition that does not
/// depend on the values (a dtype, an fp32 Dst) stops it (the per-value helpers below).
[[gnu::always_inline]] inline uint32_t SelectBits(bool c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return (a & m) | (b & ~m);
}

/// Host conversion of one value to a dtype converted value by value (float32: unchanged;
/// bfloat16: HostFp32ToBf16, §2.1 RNE with NaN → 0x7FC0, widened), written without branches so that
/// loops over values vectorise (always inlined, also into the AVX clones of conv_engine.cc). bfp
/// dtypes convert groups: HostConvertGroup.
[[gnu::always_inline]] inline uint32_t HostConvertValue(uint32_t u, DeviceDType dt) {
  const uint32_t rne = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  const uint32_t bf16 = numerics::detail::IsNanBits(u) ? 0x7FC00000u : rne;
  return SelectBits(dt == DeviceDType::kFloat32, u, bf16);
}

/// The packer of one Dst value to bfloat16 without the packer ReLU (§3.1, §3.2), widened: from an
/// fp32 Dst PackFp32DstToBf16, from a bf16 Dst (its low 16 bits ignored) PackBf16DstToBf16 (NaN →
/// ±Inf, exponent 0 → +0). Without branches, for loops that vectorise (PackRow, the act tilize;
/// always inlined, also into the AVX clones of conv_engine.cc).
[[gnu::always_inline]] inline uint32_t PackBf16Value(uint32_t d, bool fp32_dst) {
  // fp32 Dst: NaN → ±Inf, add half, then exponent 0 → +0 (PackFp32DstToBf16).
  const uint32_t f = numerics::detail::IsNanBits(d) ? (d & 0x80000000u) | 0x7F800000u : d;
  const uint32_t fr = (f + 0x8000u) & 0xFFFF0000u;
  // bf16 Dst: the high half, NaN → ±Inf (PackBf16DstToBf16).
  const uint32_t b0 = d & 0xFFFF0000u;
  const uint32_t b = (b0 & 0x7FFFFFFFu) > 0x7F800000u ? (b0 & 0x80000000u) | 0x7F800000u : b0;
  const uint32_t u = SelectBits(fp32_dst, fr, b);
  return (u & 0x7F800000u) == 0 ? 0u : u;
}

/// Host conversion (tt-metal, before upload) of up to 16 fp32 patterns forming one group to `dt`
/// (§2.1 RNE / §2.2 bfp): returns the values as the device unpacker reads them (bf16-exact patterns
/// except for float32).
inline void HostConvertGroup(const uint32_t* in, int n, DeviceDType dt, uint32_t* out) {
  namespace nx = kiln::numerics;
  switch (dt) {
    case DeviceDType::kFloat32:
      for (int i = 0; i < n; ++i) out[i] = in[i];
      return;
    case DeviceDType::kBFloat16:
      for (int i = 0; i < n; ++i) out[i] = HostConvertValue(in[i], dt);
      return;
    case DeviceDType::kBFloat8B:
    case DeviceDType::kBFloat4B: {
      const nx::BfpFormat f = nx::BfpFormatOf(dt);
      std::array<uint32_t, 16> g{};
      for (int i = 0; i < n; ++i) g[i] = in[i];
      const nx::BfpGroup enc = nx::HostEncodeBfpGroup(g, f, nx::HostBfpRounding::kCurrent);
      for (int i = 0; i < n; ++i) out[i] = static_cast<uint32_t>(nx::UnpackBfpToBf16(enc.exp, enc.codes[i], f)) << 16;
      return;
    }
  }
}

/// A stored value of format `dt` unpacked into a Src register (§4): float32 as tf32 with an fp32
/// Dst, truncated to bf16 without; bf16 / unpacked bfp values are bf16-exact already. Selects
/// without branches (always inlined, also into the AVX clones of conv_engine.cc), so that loops
/// over values vectorise.
[[gnu::always_inline]] inline uint32_t UnpackToSrc(uint32_t v, DeviceDType dt, bool fp32_dst) {
  namespace nx = kiln::numerics;
  const uint32_t bf16 = static_cast<uint32_t>(nx::UnpackFp32ToBf16(v)) << 16;
  return SelectBits(dt == DeviceDType::kFloat32, SelectBits(fp32_dst, nx::UnpackFp32ToTf32(v), bf16), v);
}

/// The Src ALU format of an operand stored as `dt` (Tf32 only for float32 with an fp32 Dst).
inline numerics::SrcFormat SrcFmtOf(DeviceDType dt, bool fp32_dst) {
  return (dt == DeviceDType::kFloat32 && fp32_dst) ? numerics::SrcFormat::kTf32 : numerics::SrcFormat::kBf16;
}

/// The packer of n Dst values to `dt` (§3), with the packer ReLU (§3.5). host_view: bfp values
/// decoded as the host does (§2.3) instead of the device unpacker (§4). precise: a Float32 pack
/// source for bfp outputs from an fp32 Dst (bfp8_pack_precise; §3.4 note: no E8M6 LSB clearing).
inline void PackRow(const uint32_t* dst, int64_t n, DeviceDType dt, bool fp32_dst, bool relu, bool host_view,
                    bool precise, uint32_t* out) {
  namespace nx = kiln::numerics;
  switch (dt) {
    case DeviceDType::kFloat32:
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t u = fp32_dst ? dst[i] : nx::PackBf16DstToFp32(static_cast<uint16_t>(dst[i] >> 16));
        out[i] = relu ? nx::PackerReluFp32(u) : u;
      }
      return;
    case DeviceDType::kBFloat16:
      if (!fp32_dst) {
        // PackBf16DstToBf16 (and the ReLU) without branches, 16 values a step through a local copy
        // (no aliasing between dst and out to check), so that the compiler vectorises the step.
        const uint32_t relu_mask = relu ? 0x80000000u : 0u;
        auto one = [relu_mask](uint32_t d) -> uint32_t {
          const uint32_t u = PackBf16Value(d, false);
          return (u & relu_mask) != 0 ? 0u : u;  // packer ReLU
        };
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
          uint32_t t[16];
          for (int j = 0; j < 16; ++j) t[j] = dst[i + j];
          for (int j = 0; j < 16; ++j) out[i + j] = one(t[j]);
        }
        for (; i < n; ++i) out[i] = one(dst[i]);
        return;
      }
      for (int64_t i = 0; i < n; ++i) {
        uint16_t t = nx::PackFp32DstToBf16(dst[i]);
        if (relu) t = nx::PackerReluBf16(t);
        out[i] = static_cast<uint32_t>(t) << 16;
      }
      return;
    case DeviceDType::kBFloat8B:
    case DeviceDType::kBFloat4B: {
      const nx::BfpFormat f = nx::BfpFormatOf(dt);
      for (int64_t g0 = 0; g0 < n; g0 += 16) {
        std::array<uint16_t, 16> e{};
        for (int i = 0; i < 16 && g0 + i < n; ++i) {
          const uint32_t d = dst[g0 + i];
          if (precise && fp32_dst) {
            // Float32 source: truncation to 16 bits, NaN → ±Inf, exponent 0 → +0, no LSB clearing.
            const uint32_t u = nx::detail::IsNanBits(d) ? ((d & 0x80000000u) | 0x7F800000u) : d;
            const uint16_t t = static_cast<uint16_t>(u >> 16);
            e[i] = (t & 0x7F80u) == 0 ? 0 : t;
          } else {
            e[i] = fp32_dst ? nx::PackE8M6FromFp32Dst(d) : nx::PackE8M6FromBf16Dst(static_cast<uint16_t>(d >> 16));
          }
          if (relu) e[i] = nx::PackerReluBf16(e[i]);
        }
        const nx::BfpGroup g = nx::PackBfpStageB(e, f);
        for (int i = 0; i < 16 && g0 + i < n; ++i) {
          out[g0 + i] = host_view ? nx::FloatBits(nx::DecodeBfpValue(g.exp, g.codes[i], f))
                                  : static_cast<uint32_t>(nx::UnpackBfpToBf16(g.exp, g.codes[i], f)) << 16;
        }
      }
      return;
    }
  }
}

}  // namespace kiln::device::tt_emu
