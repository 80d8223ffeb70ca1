// The exact MVMUL kernel of the tt-emu exact level: the fidelity sequence of docs/specs/tt-numerics.md
// §5 run over one K block of one activation row against many weight columns, bit for bit the
// chain of numerics::MvmulPhase (device/numerics/fpu.h) in the order of §5.6:
//   for each output column o: for each 32-deep K tile t0 of [k0, k1): for each phase p:
//     Dst[o] ← MV(t0 .. t0+15), then Dst[o] ← MV(t0+16 .. t0+31)
// Four implementations behind one interface: a scalar one (the fallback, and with MvmulPhase the
// oracle of the tests), and three vectorised across the 32 output columns of a block in int16 lanes
// (they share the activation operand, so §5.4's 8-lane maximum becomes a vertical max; the per-lane
// alignment does not depend on the phase, so its rounding multiplier is computed once per K tile
// for all phases): an AVX-512 one (AVX-512F + BW, one block per 512-bit vector,
// mvmul_kernel_avx512.cc, which derives the lane arithmetic), the same with a bf16 Dst combined on
// all 32 columns in int16 (mvmul_kernel_avx512fp16.cc, AVX512-FP16 + VBMI2 too) and an AVX2 one (two
// 256-bit halves); chosen at run time (__builtin_cpu_supports; the vector code is compiled with
// target attributes, not -mavx2 / -mavx512f).
//
// Zero MVMULs: an MVMUL whose lanes are all zero (§5.3: exponent field 0 on either side) is not
// computed. It is not a no-op in general: §5.5 maps a Dst of −0 or a denormal to +0 and an exponent-255
// pattern to ±Inf (sign | 0x7F800000), and leaves +0 and normal values unchanged. The kernel applies
// that mapping (CombineWithDst with two zero terms) when it skips. Every MVMUL result is a fixed
// point of the mapping, so only zero MVMULs before the first computed one of a call can change
// Dst, and only once. Results therefore equal the unskipped MvmulPhase chain for every Dst
// pattern. A 16-lane MVMUL is skipped when both of its 8-lane groups are zero: all SrcB operands of
// the group zero (shared by all columns), or all SrcA operands of the group zero in every column
// of a 32-column block. Within a computed MVMUL, a group that is zero in that sense is not summed,
// and in a summed group only the lanes non-zero on both sides (SrcB non-zero, and SrcA non-zero in
// some column of the block) are visited: a zero lane contributes R = 0 and, its raw exponent being
// below every possible group maximum (kZeroExp, kZeroExpB in mvmul_kernel_impl.h), never raises
// §5.4's maximum. So a conv whose K holds padding (a Cin = 3 conv pads each tap's channels to 8) or
// post-ReLU zeros costs in proportion to its non-zero lanes, bit for bit the same.
//
// Use (the tt-emu exact level, device/backends/tt_emu/conv_engine.cc):
//   once per conv : a = PrepareSrcA(w, O_pad, K, fid, a_fmt), w[o * K + k] the device weights in
//                   the conv's K order (already or not yet masked), O_pad columns (zero weights in
//                   padded columns give Dst 0 from 0);
//   once per row  : PrepareSrcBRow(x, K, fid, b_fmt, &b), x the row's im2col SrcB values in the same
//                   K order; `b` is per thread and reused, so no allocation per row. Or, where each
//                   group of 8 K entries is padding or reads channels 8j .. 8j + 7 of one input
//                   pixel (those past the last channel zero), the input image prepared once per
//                   conv (PrepareSrcBGroups), ShapeSrcBRow once per reused `b`, and per row one
//                   pointer and mask per group into it (ZeroSrcBGroup for padding);
//   per K block   : dst[0 .. O_pad) = 0 (first block / L1 accumulation) or the reloaded partials,
//                   then RunKBlock(a, b, kb0, kb1, 0, O_pad, fid, fp32_dst, arch, dst.data());
//                   kb0, kb1 multiples of 32 (a K block is whole 32-deep tiles). Consecutive K
//                   blocks may go in one call where nothing happens to Dst between them (the
//                   engine's PartialsRoundTripExact).
// A call may cover any column range [o0, o1) (dst then holds o1 − o0 values); ranges on multiples
// of kMvmulColumnBlock (32) waste no work. Nothing is shared between calls: calls on different rows
// may run on different threads at once, and a column's result does not depend on how columns or
// rows are split between calls or threads.
//
// Speed (bench/tt_emu/RESULTS.md): on the AVX-512 path, per core, up to 24.7 GMAC/s at LoFi and
// 7.9 at HiFi4 with a bf16 Dst on the K blocks of a 64→64 3×3 conv (kiln_mvmul_kernel_bench, a quiet
// run of 2026-12-02 on a shared 2-core AMD Zen 5 VM; busy runs measure less). About 44 % of a LoFi
// MVMUL's time is the combine with Dst and 43 % the lanes (RESULTS.md, "The exact kernel's bounds").
// PreparedSrcA's lanes are 64-byte aligned: with malloc's 16-byte alignment most of the 512-bit row
// loads straddled two cache lines (RESULTS.md, "The SrcA lanes' alignment").
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/memory.h"
#include "common/status.h"
#include "device/numerics/formats.h"
#include "device/numerics/fpu.h"
#include "device/numerics/types.h"

namespace kiln::numerics {

/// Columns per SrcA block: the vector paths hold one block's 32 columns in the 32 int16 lanes of a
/// 512-bit vector (the AVX2 path in two 256-bit halves). Column ranges that start and end on
/// multiples of kMvmulColumnBlock waste no work.
inline constexpr int64_t kMvmulColumnBlock = 32;

/// Position of column c (0..31) of a block in its 32 int16 lanes, and back: the order in which the
/// 128-bit-lane unpacks of a 512-bit vector (mvmul_kernel_avx512.cc) turn the 32 int16 group sums
/// into two int32 vectors holding columns 0..15 and 16..31 in order. Lane L (0..3) of 128 bits holds
/// columns 4L..4L+3 in its words 0..3 and 16+4L..16+4L+3 in its words 4..7.
constexpr int MvmulColumnOfPosition(int pos) { return (pos / 8) * 4 + (pos % 8 < 4 ? pos % 4 : 16 + pos % 4); }
constexpr int MvmulPositionOfColumn(int c) { return (c % 16) / 4 * 8 + (c < 16 ? 0 : 4) + c % 4; }

/// SrcA operands (weights) of every output column, prepared once per conv.
///
/// Layout: columns in blocks of 32 (the last block padded with zero columns), each block's columns at
/// the positions of MvmulPositionOfColumn; per block and k, `rows` = 1 + variants rows of 64 bytes:
///  row 0: 32 int16, the exponent field of a non-zero operand, kZeroExp (−4096) for a zero one (its
///         lane exponent never wins §5.4's maximum);
///  row 1 + v, v = phase & 1 (v = 0 only for LoFi): 32 byte pairs (4·slice·s, s), slice the §5.2
///         magnitude of variant v, s = −1 for a negative operand and +1 otherwise (zero operand:
///         (0, 1)). With SrcB's pair (b, 1), the unsigned × signed byte dot product of a pair is
///         s·(4·P + 1), P = slice_a · slice_b (mvmul_kernel_avx512.cc derives the rounding from it).
/// Memory: 64 · (1 + variants) · K · RoundUp(cols, 32) / 32 bytes of lanes plus RoundUp(cols, 32) · K
/// / 256 bytes of masks — 4 bytes per weight for LoFi, 6 for HiFi2..HiFi4 (a 2048→2048 3×3 conv,
/// K = 18432: 151 MB LoFi, 226 MB HiFi2..4).
struct PreparedSrcA {
  int64_t cols = 0;       ///< output columns (logical)
  int64_t K = 0;          ///< reduction length, a multiple of 32
  int variants = 0;       ///< 1 (LoFi) or 2
  int rows = 0;           ///< 64-byte rows per block and k: 1 + variants
  int phases = 0;         ///< NumPhases of the fidelity prepared for
  /// [cols/32][K][rows][64], see above; 64-byte aligned, so that every row is one cache line.
  std::vector<int8_t, AlignedAllocator<int8_t, 64>> lanes;
  std::vector<uint8_t> group_nz;  ///< [cols/32][K/8]: bit l set if any of the block's 32 columns has a
                                  ///< non-zero operand in lane l of the 8-lane group (K index 8q + l)
  /// Bytes held by the prepared operands.
  size_t bytes() const { return lanes.size() + group_nz.size(); }
};

/// SrcB slice variants prepared for `fid` (v = (phase >> 1) & 1, §5.2): 1 up to HiFi2, else 2.
inline int SrcBVariants(MathFidelity fid) { return NumPhases(fid) >= 3 ? 2 : 1; }

/// One prepared SrcB group: the 8 operands of K indices 8q .. 8q+7 (§5.4's 8-lane group) as
/// 8 · (2 + variants) 32-bit words, each holding its 16-bit value twice (so that a vector path
/// broadcasts it with one 32-bit broadcast load):
///   words [0, 8)              exponent field (kZeroExpB = −8192 for a zero operand);
///   words [8, 16)             the rounding multiplier's base 2^13, negated for a negative operand
///                             (int16 ±0x2000; +0x2000 for a zero one);
///   words [16 + 8v, 24 + 8v)  per variant v, bytes (slice, 1) of the §5.2 slice magnitude;
/// and an 8-bit mask, bit l set where lane l's operand is non-zero (§5.3: exponent field not 0).
inline constexpr int64_t kSrcBExpWord = 0, kSrcBMultWord = 8, kSrcBPairWord = 16;
constexpr int64_t SrcBGroupWords(int variants) { return 8 * (2 + variants); }

/// SrcB operands (one im2col row of activations) as what the kernel reads: per 8-lane group q of K
/// a pointer to its prepared words (above) and its mask. The words may live anywhere: in `words`
/// (PrepareSrcBRow), or, where a conv's K groups are 8 consecutive channels of one input pixel,
/// in an image of the input prepared once per conv (PrepareSrcBGroups, conv_engine.cc) — a row is
/// then K/8 pointers, with no im2col copy and no per-row preparation.
/// Memory: K/8 · 9 bytes, plus 4 · (2 + variants) · K bytes in `words` where PrepareSrcBRow fills it.
/// Not copyable (`group` may point into `words`); moving keeps the pointers valid.
struct PreparedSrcB {
  int64_t K = 0;
  int phases = 0;                      ///< NumPhases of the fidelity prepared for
  int variants = 0;                    ///< SrcBVariants of that fidelity
  std::vector<const uint32_t*> group;  ///< [K/8]: group q's SrcBGroupWords(variants) words
  std::vector<uint8_t> nz_mask;        ///< [K/8]: group q's mask
  std::vector<uint32_t> words;         ///< PrepareSrcBRow's groups

  PreparedSrcB() = default;
  PreparedSrcB(const PreparedSrcB&) = delete;
  PreparedSrcB& operator=(const PreparedSrcB&) = delete;
  PreparedSrcB(PreparedSrcB&&) = default;
  PreparedSrcB& operator=(PreparedSrcB&&) = default;
};

/// Bytes PrepareSrcA(·, cols, K, fid, ·) holds (PreparedSrcA::bytes() of the result): 2 · (1 + variants)
/// · K · RoundUp(cols, 32) + RoundUp(cols, 32) · K / 256, variants = 1 for LoFi, else 2.
inline int64_t PreparedSrcABytes(int64_t cols, int64_t K, MathFidelity fid) {
  const int64_t c32 = (cols + 31) / 32 * 32, rows = 1 + (NumPhases(fid) >= 2 ? 2 : 1);
  return 2 * rows * K * c32 + c32 * K / 256;
}

/// Prepares the SrcA operands of `cols` columns, `a[o * K + k]` = column o's weight for k (fp32
/// patterns; masked to `fmt` here, §4), for fidelity `fid` (also usable for any lower fidelity).
/// Errors: INVALID_ARGUMENT when K is not a positive multiple of 32 or cols < 1.
Result<PreparedSrcA> PrepareSrcA(const uint32_t* a, int64_t cols, int64_t K, MathFidelity fid, SrcFormat fmt);

/// PrepareSrcA in two steps, for callers that fill the blocks on several threads: the storage of
/// `cols` columns (contents unset until filled; the same errors as PrepareSrcA), then blocks
/// [cb0, cb1) of kMvmulColumnBlock columns filled from `a` (a[o * K + k], as for PrepareSrcA).
/// Blocks are independent: disjoint ranges may be filled at once. PrepareSrcA = AllocateSrcA, then
/// FillSrcABlocks over every block.
Result<PreparedSrcA> AllocateSrcA(int64_t cols, int64_t K, MathFidelity fid);
void FillSrcABlocks(const uint32_t* a, SrcFormat fmt, int64_t cb0, int64_t cb1, PreparedSrcA* p);

/// Prepares one activation row `b[0 .. K)` (fp32 patterns; masked to `fmt` here) into `out`,
/// reusing its buffers (no allocation once they are large enough): groups in `words`.
/// Errors: INVALID_ARGUMENT when K is not a positive multiple of 32.
Status PrepareSrcBRow(const uint32_t* b, int64_t K, MathFidelity fid, SrcFormat fmt, PreparedSrcB* out);

/// Prepares `groups` SrcB groups from x[0 .. 8 · groups) (fp32 patterns; masked to `fmt` here):
/// group g from x[8g .. 8g+7] into words[g · SrcBGroupWords(SrcBVariants(fid)) ...] and nz[g].
/// Groups are independent: disjoint ranges may be prepared on several threads at once.
void PrepareSrcBGroups(const uint32_t* x, int64_t groups, MathFidelity fid, SrcFormat fmt, uint32_t* words,
                       uint8_t* nz);

/// The words of a group of 8 zero operands for any fidelity (its mask is 0), for the groups of a
/// row that read K padding or taps outside the input.
const uint32_t* ZeroSrcBGroup();

/// Sets out's K, phases and variants for `fid` and sizes `group` and `nz_mask` to K/8, whose
/// entries the caller then sets: group[q] → SrcBGroupWords(variants) words prepared by
/// PrepareSrcBGroups (or PrepareSrcBRow) for at least `fid`, nz_mask[q] the mask prepared with them.
/// Errors: INVALID_ARGUMENT when K is not a positive multiple of 32.
Status ShapeSrcBRow(int64_t K, MathFidelity fid, PreparedSrcB* out);

/// Runs the fidelity sequence of `fid` over K tiles [k0, k1) for columns [o0, o1):
/// dst[o − o0] ← the §5.6 MVMUL chain from its current value (Dst patterns in the Dst format: with a
/// bf16 Dst, fp32 patterns whose low 16 bits are 0; other patterns follow §5.5's arithmetic as
/// MvmulPhase does). `arch` selects the Wormhole normalisation quirk (§5.5 step 5).
/// Errors: INVALID_ARGUMENT when k0, k1 are not multiples of 32 with 0 <= k0 <= k1 <= K, when
/// 0 <= o0 <= o1 <= a.cols fails, when a and b differ in K, or when `fid` needs more phases than
/// a or b were prepared for. dst is unchanged on error.
Status RunKBlock(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0, int64_t k1, int64_t o0, int64_t o1,
                 MathFidelity fid, bool fp32_dst, Arch arch, uint32_t* dst);

/// As RunKBlock, but only phases [phase_begin, phase_end) of the sequence (0 <= begin <= end <= the
/// prepared phases): one phase alone is one MVMUL per K half (the `phase` fields of
/// tests/data/tt-vectors/mvmul.jsonl). RunKBlock(fid) = RunKBlockPhases(0, NumPhases(fid)).
Status RunKBlockPhases(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0, int64_t k1, int64_t o0, int64_t o1,
                       int phase_begin, int phase_end, bool fp32_dst, Arch arch, uint32_t* dst);

/// The conv's fused bias add over a row: out[i] = Elwadd(a[i], b[i], 0, /*accumulate=*/false, cfg)
/// (device/numerics/fpu.h, docs/specs/tt-numerics.md §6: SrcA a, SrcB b, a zero Dst), for i in
/// [0, n), on the path RunKBlock takes (16 values per step on AVX-512, the scalar model elsewhere);
/// `out` may be `a` or `b`.
void ElwaddRow(const uint32_t* a, const uint32_t* b, int64_t n, const FpuConfig& cfg, uint32_t* out);

/// The fast level's Dst update over a row (device/backends/tt_emu/conv_engine.h, EmuLevel::kFast: a K
/// block's fp32 sum of exact products rounded into Dst): dst[i] ← round(float(dst[i]) + s[i]), the
/// fp32 add rounding to nearest even, then a NaN → ±Inf, a bf16 Dst (fp32_dst false) rounded half
/// away from zero to 8 significant bits ((u + 0x8000) & 0xFFFF0000, like §5.5's normaliser), and an
/// exponent-0 result → +0. Start from dst = +0 for a block that starts Dst from zero. On the path
/// RunKBlock takes (16 values a step on AVX-512).
void AddIntoDstRow(const float* s, int64_t n, bool fp32_dst, uint32_t* dst);

/// The implementation RunKBlock uses; all give identical results.
enum class MvmulKernelPath { kScalar, kAvx2, kAvx512, kAvx512Fp16 };
/// "scalar", "avx2", "avx512" or "avx512fp16".
const char* MvmulKernelPathName(MvmulKernelPath p);
/// Whether this CPU runs path `p`: scalar always; avx2 on x86-64 with AVX2; avx512 with AVX-512F
/// and AVX-512BW (mvmul_kernel_avx512.cc); avx512fp16 with those, AVX512-FP16 and AVX512-VBMI2
/// (mvmul_kernel_avx512fp16.cc: avx512 with a bf16 Dst combined in int16; the same for an fp32 Dst).
bool MvmulKernelSupported(MvmulKernelPath p);
/// The widest path this CPU supports (avx512fp16, else avx512, else avx2, else scalar).
MvmulKernelPath BestMvmulKernel();
/// The path RunKBlock takes now: BestMvmulKernel(), unless forced by SetMvmulKernel or by the
/// environment variable KILN_MVMUL_KERNEL=scalar|avx2|avx512|avx512fp16 read at the first call
/// (the tests' and benchmarks' switch; a path the CPU lacks falls back to the best one it has).
MvmulKernelPath ActiveMvmulKernel();
/// Forces path `p` (where supported, else the best one) for the whole process; thread-safe, takes
/// effect for calls that start afterwards. ResetMvmulKernel() returns to the automatic choice.
void SetMvmulKernel(MvmulKernelPath p);
void ResetMvmulKernel();

}  // namespace kiln::numerics
