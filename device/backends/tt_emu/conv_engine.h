// The tt-emu conv engine: one conv2d emulated as the program `ConvProgram` describes
// (device/backends/tt_emu/program.h), on the instruction models of device/numerics
// (docs/specs/tt-numerics.md §2–§7; the dataflow around them: docs/specs/tt-conv-dataflow.md).
// Internal to the tt-emu backend (tt_conv.cc is its API); exposed for tests and benchmarks.
//
// Per output row m (one output pixel, all output channels), for input x (N, C, H, W) NCHW:
//  1. Host conversion of x to input_dtype (§2.1 RNE / §2.2 bfp groups of 16 channels of a pixel),
//     of the weights and bias to the weights dtype (bfp groups: 16 output channels of one K row).
//  2. The activation operand: on the conv path the im2col'd block is tilized into the program's
//     act dtype (the output dtype; bfp groups = 16 consecutive K entries of the row, so the K
//     layout decides them); an fp32 input is read by the unpacker, which truncates to bf16 without
//     fp32 Dst (§4) and keeps fp32 with it. On the matmul path the activations stay in their own
//     dtype. Unpacked to SrcB (bf16, or tf32 for float32 with fp32 Dst); weights to SrcA likewise.
//  3. K in the program's order (KLayout: taps, channels, padding), per 32-wide K tile the fidelity
//     phases, per phase two 16-lane MVMULs into Dst (§5). Between K blocks Dst is packed to the
//     partials CB (program.partials_dtype) and reloaded (fp32 partials through SrcA as Tf32, or
//     losslessly: PartialReload), or accumulated in L1 when packer_l1_acc is effective: with bias
//     every block accumulates in L1; without bias blocks 0..nb−2 do, the sum is reloaded into Dst,
//     the last block accumulates on top of it in Dst and is packed without L1 accumulation.
//  4. Bias (in the weights dtype) by ELWADD (§6) on the partials read through SrcA; ReLU as the
//     packer ReLU (§3.5); other activations on the SFPU (approximations, then rounded into Dst);
//     final pack to the output dtype (pack source format: §3, bfp8_pack_precise = Float32 source).
// Levels: kExact runs every MVMUL; kFast replaces the per-MVMUL alignment / Dst rounding inside a
// K block by fp32 sums of exact products (oneDNN), keeping everything between blocks exact
// (tt_conv.h explains why the products are exact).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "device/backends/backend.h"
#include "device/backends/tt_emu/program.h"

namespace kiln::device::tt_emu {

enum class EmuLevel { kExact, kFast };

/// Memory of the exact level's prepared weights (numerics::PreparedSrcA, device/numerics/mvmul_kernel.h:
/// 4 bytes per weight for LoFi, 6 for HiFi2..HiFi4, over K = kh·kw·Cin_padded and Cout_padded, e.g.
/// 226 MB for a 2048→2048 3×3 conv at HiFi4) is bounded by this per conv call: larger weights are
/// prepared and run in chunks of output columns (multiples of numerics::kMvmulColumnBlock, 32) of at
/// most this size, one after another, each over every row. Columns are independent, so the result is the same bit for bit;
/// the cost is one more SrcB gather (kMaxSrcBImageBytes; without the image, im2col and SrcB
/// preparation) per row and chunk.
inline constexpr int64_t kMaxPreparedSrcABytes = int64_t{64} << 20;
/// Tests: replaces kMaxPreparedSrcABytes for calls that start afterwards (0 restores it), so that
/// the column chunking runs on small convs.
void SetMaxPreparedSrcABytesForTesting(int64_t bytes);
/// Tests: false makes the exact level run every K block as its own kernel call, and both levels pack
/// and reload the partials between blocks, also where that round trip is exact and skipped (the
/// default, true); the outputs must not differ by a bit.
void SetFuseExactKBlocksForTesting(bool fuse);
/// The exact level's SrcB operands are prepared once per call for the whole input (per pixel, 8
/// channels a group: numerics::PrepareSrcBGroups) where the K layout allows (every group of 8 K
/// entries is padding or channels 8j .. 8j + 7 of one tap, a run of channels that ends inside a
/// group ending at the last channel, C − 1) and the act tilize is per element. This bounds that
/// image (bytes: N·H·W·⌈C/8⌉ · (4 · numerics::SrcBGroupWords + 1), 97 bytes per 8 input channels
/// up to HiFi2, 129 from HiFi3: 640×640×3 and 160×160×128 take 53 MB each); a larger input
/// prepares each im2col row instead (numerics::PrepareSrcBRow), the same bits.
inline constexpr int64_t kMaxSrcBImageBytes = int64_t{128} << 20;
/// Tests: false makes the exact level prepare every im2col row (no SrcB image); true (the
/// default) restores the image; the outputs must not differ by a bit.
void SetSrcBImageForTesting(bool use);
/// Tests: false makes RunConvProgram ignore `nchw` (the exact rows go to `out`, and the caller
/// transposes them); true (the default) restores the direct write; the outputs must not differ.
void SetDirectNchwForTesting(bool use);

/// Per-thread buffers reused across conv calls (the engine's device images and output rows), so that
/// a run of convs reuses pages instead of faulting in (and zeroing) fresh ones on every call: a
/// ScratchBuffer takes slot `slot`'s vector from the calling thread's cache (empty the first time,
/// or while another ScratchBuffer on this thread holds it) and gives it back when destroyed, where
/// it is kept only up to kScratchKeepBytes of capacity (larger ones are freed), so a thread that has
/// run convs holds at most 4 · kScratchKeepBytes (32 MB). Contents are unspecified on taking: every
/// user assigns, or resizes and then writes every element.
inline constexpr int64_t kScratchKeepBytes = int64_t{8} << 20;
enum class ScratchSlot { kOutput, kActivations, kWeights, kSrcBImage };
struct ScratchBuffer {
  explicit ScratchBuffer(ScratchSlot slot);
  ~ScratchBuffer();
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ScratchSlot slot;
  std::vector<uint32_t> v;
};

/// The conv's shape after conv_transpose2d lowering; every field in elements.
struct EmuGeometry {
  int64_t N, C, H, W, O, G, Cg, Og, kh, kw, sh, sw, dh, dw, pt, pl, OH, OW;
  int64_t O_pad;  ///< program.cout_padded
  int64_t M;      ///< N·OH·OW output rows
};

/// Runs one conv as `program` says. x: NCHW float32; w: OIHW; bias: [O] or null.
/// out: (M, O) row-major fp32 patterns of what the card returns (bfp outputs decoded as the host does);
/// resized, every element written on success, unspecified after an error — unless the exact level
/// writes `nchw`. nchw (may be null): an (N, O, OH, OW) float32 buffer; where given, the exact level
/// writes the same patterns there instead (each tile's rows transposed from L1; stats->nchw_written;
/// `out` is then neither resized nor written).
/// Errors: CANCELLED / DEADLINE_EXCEEDED (checked per row block), INTERNAL (oneDNN, fast level).
struct EmuStats {
  double fast_matmul_seconds = 0;
  bool srcb_image = false;  ///< the exact level read SrcB from the prepared image (kMaxSrcBImageBytes)
  bool nchw_written = false;  ///< the output went to RunConvProgram's `nchw`, not to `out`
};
Status RunConvProgram(const EmuGeometry& g, const ConvProgram& program, const PrecisionConfig& precision,
                      Activation activation, EmuLevel level, const float* x, const float* w, const float* bias,
                      const CancelToken* cancel, int threads, std::vector<uint32_t>* out, EmuStats* stats,
                      float* nchw = nullptr);

}  // namespace kiln::device::tt_emu
