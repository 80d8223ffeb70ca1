// The tt-emu convolution engine: conv2d and conv_transpose2d computed the way TT-NN computes them
// on a Tensix core (spec: docs/specs/tt-numerics.md §8, using the device/numerics models of
// §2–§7; every § below cites that file; background: docs/specs/tt-conv-dataflow.md). Used by the
// "tt-emu" backend (tt_emu_backend.h); exposed for tests and benchmarks.
//
// Dataflow (§8), for input x (N, C, H, W) NCHW, weights OIHW (O, C/group, kH, kW), bias [O]:
//  1. Host conversion of x to precision.input_dtype (§2.1 RNE / §2.2 bfp8_b, groups of 16
//     consecutive channels of one pixel = one face row of the [N·H·W, C] activation tile), of the
//     weights and bias to weights_dtype (bfp groups: 16 consecutive output channels of one K row).
//  2. Weights as a [K, Cout_pad] matrix, K = kH·kW·Cin_pad in (kh, kw, cin) order, Cin_pad =
//     round_up(C, 32), Cout_pad = round_up(O, 32); grouped convs are block-diagonal (zeros outside
//     the group, which are zero lanes for the FPU).
//  3. im2col'd activations tilized into output_dtype (device packer, §3), unpacked to SrcB
//     (bf16, or tf32 when float32 with fp32_dest_acc_en); weights unpacked to SrcA likewise (§4).
//  4. K walked in 32-wide tiles, per tile the fidelity phases, per phase two 16-lane MVMULs into Dst
//     (§5.6). K blocks of act_block_w tiles (default: one block per kernel row, Cin_pad·kW wide);
//     Dst is spilled between blocks to partials in output_dtype and reloaded (§8.5), or accumulated
//     in L1 (fp32 / bf16, §7) when packer_l1_acc is effective ((bias AND blocks > 1) OR blocks > 2).
//  5. Bias by ELWADD (§6) on the partials; ReLU in the packer (§3.5, exact); relu6/silu/gelu/
//     sigmoid/tanh in float on the Dst value (then rounded into Dst); final pack to output_dtype;
//     bfloat8_b outputs are read back with the host decoder (§2.3).
// Modelling choices where the spec is silent (also stated in the report's notes): an fp32 partial
// reloads into Dst exactly, and is read by the bias ELWADD as tf32 (bf16 without fp32 Dst); a
// bfloat8_b input is read through the device unpacker (§4); with packer L1 accumulation and no bias
// the last block also accumulates in L1 and the accumulated value is then packed to output_dtype.
//
// Levels:
//  * kExact: the bit-level model above (every MVMUL of §5).
//  * kFast: per K block, the sum of the fidelity phases' products computed with oneDNN fp32
//    primitives over the same device operands: one convolution (kernel 1 x kW) per kernel row for
//    the default blocking of an ungrouped conv, else im2col + one matmul per K block, in row
//    chunks. Every phase's operand slices have at most 7 significant bits, and the merged ones at
//    most 10 x 11, so every product is exact in fp32 (which is what makes fp32 primitives valid for a bf16
//    conv with fp32 accumulation; this CPU has no AVX512-BF16/AMX, so fp32 is also the fastest
//    exact-product path here). Phases that share an operand slice are merged: LoFi = A0·B0,
//    HiFi2 = A'·B0, HiFi3 = A'·B0 + A0·B1, HiFi4 = A'·B (A' = weight without mantissa bit 0).
//    The per-MVMUL alignment and Dst rounding of §5.4–5.5 are replaced by fp32 accumulation; the Dst
//    rounding per block, spills, L1 accumulation, bias ELWADD, activation and final pack are the
//    exact ones. With an fp32 Dst most outputs match the exact level bit for bit; with a bf16 Dst
//    (which the card rounds after every MVMUL) the fast level is more accurate than the card.
// Row loops run on OpenMP threads (the runtime oneDNN uses), up to std::thread::hardware_concurrency.
#pragma once

#include <string>

#include "common/status.h"
#include "device/backends/backend.h"
#include "device/tensor.h"

namespace kiln::device::tt_emu {

enum class EmuLevel { kExact, kFast };
/// "exact" / "fast".
const char* EmuLevelName(EmuLevel level);
/// "exact" | "fast" (case-insensitive); INVALID_ARGUMENT otherwise.
Result<EmuLevel> ParseEmuLevel(const std::string& name);

/// conv2d: input (N, C, H, W) float32 NCHW, weights OIHW, optional bias [O]; output (N, O, OH, OW)
/// NCHW float32 holding the values the card returns (bf16 / bfloat8_b values widened to float).
/// Errors: INVALID_ARGUMENT (shapes, params, precision), CANCELLED / DEADLINE_EXCEEDED (checked per
/// output row block), INTERNAL (oneDNN failure, fast level). `report` may be null.
Result<Tensor> Conv2d(const Tensor& input, const Tensor& weights, const Tensor* bias, const Conv2dParams& params,
                      const PrecisionConfig& precision, EmuLevel level, const CancelToken* cancel = nullptr,
                      OpReport* report = nullptr);

/// conv_transpose2d: input (N, C, H, W) NCHW, weights IOHW (C, O/group, kH, kW), optional bias [O].
/// Computed as TT-NN's mirror_kernel path: conv2d (stride 1, dilation d, no padding) over the
/// stride-dilated input padded by d·(k−1) − pad_begin / d·(k−1) − pad_end + output_padding (negative
/// amounts crop), with the spatially mirrored, transposed kernel (O, C/group, kH, kW); then the same
/// numerics as Conv2d. Errors as Conv2d.
Result<Tensor> ConvTranspose2d(const Tensor& input, const Tensor& weights, const Tensor* bias,
                               const ConvTranspose2dParams& params, const PrecisionConfig& precision, EmuLevel level,
                               const CancelToken* cancel = nullptr, OpReport* report = nullptr);

}  // namespace kiln::device::tt_emu
