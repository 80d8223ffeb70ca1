// Tensix FPU arithmetic: the matrix-multiply (MVMUL) fidelity model, ELWADD (the fused bias add)
// and packer L1 accumulation, as bit-exact integer models of ttsim v1.10.0.
// Spec: ../shared/reference/tt-numerics.md §5 (MVMUL), §6 (ELWADD), §7 (packer_l1_acc).
//
// Values are fp32 bit patterns (uint32_t). With a bf16 Dst (fp32_dest_acc_en = false) Dst values
// are fp32 patterns whose low 16 bits are 0, both on input and on output. Inf/NaN operands are
// treated as numbers with exponent 255 (results are not IEEE), as on the hardware.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "device/numerics/formats.h"

namespace kiln::numerics {

/// Tensix generation. The only numeric difference is the Wormhole normalisation quirk (§5.5 step 5).
enum class Arch { kWormholeB0, kBlackhole };

/// Math fidelity: the number of fidelity phases run (§5.2): LoFi 1, HiFi2 2, HiFi3 3, HiFi4 4.
enum class MathFidelity { kLoFi = 1, kHiFi2 = 2, kHiFi3 = 3, kHiFi4 = 4 };
inline int NumPhases(MathFidelity f) { return static_cast<int>(f); }
/// "LoFi", "HiFi2", "HiFi3", "HiFi4".
std::string_view MathFidelityName(MathFidelity f);

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

/// ELWADD of one element (§6). With `accumulate` false (the conv bias add) Dst is ignored
/// (treated as 0) and the result is a + b rounded into Dst; with it, Dst + a + b.
uint32_t Elwadd(uint32_t a, uint32_t b, uint32_t dst, bool accumulate, const FpuConfig& cfg);

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
FpuSlice SliceA(uint32_t a, int phase);
/// SrcB slice for phase p (§5.2) of a masked operand.
FpuSlice SliceB(uint32_t b, int phase);
/// Exponent adjustment of phase p: −127 − 5·(p&1) − 7·((p>>1)&1).
inline int PhaseAdjust(int phase) { return -127 - 5 * (phase & 1) - 7 * ((phase >> 1) & 1); }

/// The group term of 8 lanes (§5.4) from pre-sliced operands.
FpuTerm GroupTerm(const FpuSlice* a8, const FpuSlice* b8, int adj);
/// §5.5: combines two group terms with Dst, normalises and encodes into Dst's format.
uint32_t CombineWithDst(const FpuTerm& g0, const FpuTerm& g1, uint32_t dst, bool fp32_dst, Arch arch);

}  // namespace kiln::numerics
