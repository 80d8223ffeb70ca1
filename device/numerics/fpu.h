// Tensix FPU arithmetic: the matrix-multiply (MVMUL) fidelity model, ELWADD (the fused bias add)
// and packer L1 accumulation, as bit-exact integer models of ttsim v1.10.0.
// Spec: docs/specs/tt-numerics.md §5 (MVMUL), §6 (ELWADD), §7 (packer_l1_acc).
//
// Values are fp32 bit patterns (uint32_t). With a bf16 Dst (fp32_dest_acc_en = false) Dst values
// are fp32 patterns whose low 16 bits are 0, both on input and on output. Inf/NaN operands are
// treated as numbers with exponent 255 (results are not IEEE), as on the hardware.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <span>
#include <utility>

#include "device/numerics/formats.h"
#include "device/numerics/types.h"

namespace kiln::numerics {

// Arch (the Wormhole normalisation quirk is §5.5 step 5) and MathFidelity (NumPhases: the number of
// fidelity phases, §5.2) are defined in device/numerics/types.h.

/// Configuration of one FPU operation.
struct FpuConfig {
  bool fp32_dst = true;                 ///< fp32_dest_acc_en: Dst holds fp32 (else bf16)
  Arch arch = Arch::kWormholeB0;
  SrcFormat a_fmt = SrcFormat::kBf16;   ///< SrcA (weights in matmul/conv) ALU format
  SrcFormat b_fmt = SrcFormat::kBf16;   ///< SrcB (activations in matmul/conv) ALU format
};

/// One MVMUL element for fidelity phase `phase` (0..3):
///   Dst ← Dst ⊕ Σ_{k=0..15} a[k]·b[k]  with the phase's operand slices (§5.2–§5.5).
/// `a` = the 16 SrcA values of one column (weights), `b` = the 16 SrcB values of one row
/// (activations), `dst` = the old Dst value. Operands are masked to their SrcFormat first.
uint32_t MvmulPhase(std::span<const uint32_t, 16> a, std::span<const uint32_t, 16> b, uint32_t dst,
                    int phase, const FpuConfig& cfg);

/// Phases 0..NumPhases(fid)-1 applied successively into Dst starting from `dst` (§5.2).
uint32_t MvmulFidelity(std::span<const uint32_t, 16> a, std::span<const uint32_t, 16> b, uint32_t dst,
                       MathFidelity fid, const FpuConfig& cfg);

/// ELWMUL of one element (mul_tiles: SrcA · SrcB into Dst). NOT verified by vectors (there is no
/// ELWMUL vector set): modelled as the MVMUL datapath of §5 with one product per lane. Per fidelity
/// phase p of `fid` (§5.2 slices: a takes the 5-bit SrcA slice, b the 7-bit SrcB slice), the lane
/// product (§5.3; a lane whose ep ≤ 0 is zero, as §12 item 3 states for ELWMUL) is a single group
/// term combined with Dst as in §5.5; phases run in order, each rounded into Dst. Dst starts at
/// `dst` (0 after tile_regs_acquire: the packer clears Dst on release). Identical to MvmulFidelity
/// with a and b in lane 0 and every other lane zero.
uint32_t Elwmul(uint32_t a, uint32_t b, uint32_t dst, MathFidelity fid, const FpuConfig& cfg);

/// ELWADD of one element (§6). With `accumulate` false (the conv bias add) Dst is ignored
/// (treated as 0) and the result is a + b rounded into Dst; with it, Dst + a + b.
inline uint32_t Elwadd(uint32_t a, uint32_t b, uint32_t dst, bool accumulate, const FpuConfig& cfg);

/// Packer L1 accumulation in fp32 (§7): out = old + new (FTZ in and out, RNE, NaN → 0x7FC00000).
uint32_t PackL1AccFp32(uint32_t old_value, uint32_t new_value);
/// Packer L1 accumulation in bf16 (§7): exact sum rounded RNE to bf16; NaN inputs read as huge
/// finite numbers; +Inf + −Inf → 0x7FC0.
uint16_t PackL1AccBf16(uint16_t old_value, uint16_t new_value);

// ---------------------------------------------------------------------------------------------
// Building blocks, exposed for the emulator's fast inner loops (same arithmetic as above).

/// One aligned addend of the §5.5 combine: sign, biased exponent and magnitude with "1.0" at bit 23.
struct FpuTerm {
  int sign = 0;
  int exp = 0;
  uint64_t mag = 0;
};

/// A pre-decoded Src operand for one phase: the phase slice and the exponent field
/// (slice 0 / exp 0 for a zero operand).
struct FpuSlice {
  uint32_t slice = 0;
  int exp = 0;
  int sign = 0;
};
/// SrcA slice for phase p (§5.2) of a masked operand.
inline FpuSlice SliceA(uint32_t a, int phase);
/// SrcB slice for phase p (§5.2) of a masked operand.
inline FpuSlice SliceB(uint32_t b, int phase);
/// Exponent adjustment of phase p: −127 − 5·(p&1) − 7·((p>>1)&1).
inline int PhaseAdjust(int phase) { return -127 - 5 * (phase & 1) - 7 * ((phase >> 1) & 1); }

/// The group term of 8 lanes (§5.4) from pre-sliced operands.
FpuTerm GroupTerm(const FpuSlice* a8, const FpuSlice* b8, int adj);
/// §5.5: combines two group terms with Dst, normalises and encodes into Dst's format.
inline uint32_t CombineWithDst(const FpuTerm& g0, const FpuTerm& g1, uint32_t dst, bool fp32_dst, Arch arch);

// ---------------------------------------------------------------------------------------------
// Inline definitions (hot in the emulator's inner loops).

inline FpuSlice SliceA(uint32_t a, int phase) {
  FpuSlice s;
  int e = static_cast<int>((a >> 23) & 0xFFu);
  if (e == 0) return s;  // zero lane: sign 0, exponent 0, slice 0
  uint32_t sig = 1024u | ((a >> 13) & 0x3FFu);
  s.slice = (phase & 1) ? ((sig >> 1) & 31u) : (sig >> 6);
  s.exp = e;
  s.sign = static_cast<int>(a >> 31);
  return s;
}

inline FpuSlice SliceB(uint32_t b, int phase) {
  FpuSlice s;
  int e = static_cast<int>((b >> 23) & 0xFFu);
  if (e == 0) return s;
  uint32_t sig = 1024u | ((b >> 13) & 0x3FFu);
  s.slice = (phase & 2) ? ((sig & 15u) << 3) : (sig >> 4);
  s.exp = e;
  s.sign = static_cast<int>(b >> 31);
  return s;
}

inline uint32_t CombineWithDst(const FpuTerm& g0, const FpuTerm& g1, uint32_t dst, bool fp32_dst, Arch arch) {
  const int sd = static_cast<int>(dst >> 31);
  const int ed = static_cast<int>((dst >> 23) & 0xFFu);
  int64_t D = ed != 0 ? static_cast<int64_t>(0x800000u | (dst & 0x7FFFFFu)) : 0;
  int X = std::max(std::max(g0.exp, g1.exp), ed);
  if (X <= 0) return 0;
  // Step 2 (alignment to X; group terms: ties toward +inf for the signed value, Dst: ties away)
  // and step 3 (bf16 Dst: pre-round to multiples of 2^13). Returns the signed magnitude.
  auto group = [&](const FpuTerm& t) -> int64_t {
    uint64_t m = t.mag;
    const int d = X - t.exp;
    const uint64_t sgn = static_cast<uint64_t>(t.sign);
    if (d > 0) m = d < 31 ? (m + (uint64_t{1} << (d - 1)) - sgn) >> d : 0;
    if (!fp32_dst) m = (m + 4096u - sgn) & ~uint64_t{0x1FFF};
    return t.sign ? -static_cast<int64_t>(m) : static_cast<int64_t>(m);
  };
  const int dd = X - ed;
  if (dd > 0) D = dd < 31 ? ((D + (int64_t{1} << (dd - 1))) >> dd) : 0;
  if (!fp32_dst) D = (D + 4096) & ~int64_t{0x1FFF};
  // Step 4: the signed sum; its sign is Dst's sign flipped when the Dst-relative total is negative.
  int64_t total = (sd ? -D : D) + group(g0) + group(g1);
  if (total == 0) return 0;
  const int sign = total < 0 ? 1 : 0;
  const uint32_t v = static_cast<uint32_t>(total < 0 ? -total : total);
  // Step 5: normalise.
  int z = std::countl_zero(v) - 8;
  if (arch == Arch::kWormholeB0 && sign && v == 1) z = -4;
  X -= z;
  const int zp = fp32_dst ? z : z - 16;
  uint64_t w = v;
  if (zp < 0) {
    const int r = -zp;
    w = (w + (uint64_t{1} << (r - 1))) >> r;
  } else {
    w <<= zp;
  }
  if (!fp32_dst) w <<= 16;
  if (w & (uint64_t{1} << 24)) X += 1;
  // Step 6: encode.
  const uint32_t mant = static_cast<uint32_t>(w) & 0x7FFFFFu;
  const uint32_t s32 = static_cast<uint32_t>(sign) << 31;
  if (X <= 0) return 0;
  if (X >= 255) return s32 | 0x7F800000u;
  return s32 | (static_cast<uint32_t>(X) << 23) | mant;
}

inline uint32_t Elwadd(uint32_t a, uint32_t b, uint32_t dst, bool accumulate, const FpuConfig& cfg) {
  a = MaskSrcOperand(a, cfg.a_fmt);
  b = MaskSrcOperand(b, cfg.b_fmt);
  if (((a >> 23) & 0xFFu) == 0) a = 0;
  if (((b >> 23) & 0xFFu) == 0) b = 0;
  uint32_t ka = (a >> 13) & 0x3FFFFu;
  uint32_t kb = (b >> 13) & 0x3FFFFu;
  if (kb > ka) std::swap(a, b);
  int ea = static_cast<int>((a >> 23) & 0xFFu);
  int eb = static_cast<int>((b >> 23) & 0xFFu);
  uint32_t A = ea ? (1024u | ((a >> 13) & 0x3FFu)) : 0;
  uint32_t B = eb ? (1024u | ((b >> 13) & 0x3FFu)) : 0;
  if (eb < ea) {
    int d = ea - eb;
    B = d < 12 ? ((B + (1u << (d - 1))) >> d) : 0;
  }
  int sa = static_cast<int>(a >> 31), sb = static_cast<int>(b >> 31);
  uint32_t T = sa == sb ? A + B : A - B;
  FpuTerm t;
  t.sign = sa;
  t.exp = ea;
  t.mag = static_cast<uint64_t>(T) << 13;
  return CombineWithDst(t, FpuTerm{}, accumulate ? dst : 0u, cfg.fp32_dst, cfg.arch);
}

}  // namespace kiln::numerics
