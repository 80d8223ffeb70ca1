// The tt-emu convolution engine: conv2d and conv_transpose2d computed the way TT-NN computes them
// on a Tensix core (spec: docs/specs/tt-numerics.md §8, using the device/numerics models of
// §2–§7; every § below cites that file; background: docs/specs/tt-conv-dataflow.md). Used by the
// "tt-emu" backend (tt_emu_backend.h); exposed for tests and benchmarks.
//
// Each conv first selects the program TT-NN builds for it (program.h: path, shard layout, channel
// alignment, K order and blocks, partial formats), then emulates that program (conv_engine.h, which
// describes the dataflow step by step).
//
// Levels:
//  * kExact: the bit-level model (every MVMUL of §5).
//  * kFast: per K block, the sum of the fidelity phases' products computed with oneDNN fp32
//    primitives over the same device operands: one convolution (kernel 1 x kW) per kernel row when
//    each K block is one kernel row of an ungrouped conv, else im2col + one matmul per K block, in
//    row chunks. Every phase's operand slices have at most 7 significant bits, and the merged ones
//    at most 10 x 11, so every product is exact in fp32. Phases that share an operand slice are
//    merged: LoFi = A0·B0, HiFi2 = A'·B0, HiFi3 = A'·B0 + A0·B1, HiFi4 = A'·B (A' = weight without
//    mantissa bit 0). The per-MVMUL alignment and Dst rounding of §5.4–5.5 are replaced by fp32
//    accumulation; the Dst rounding per block, spills, L1 accumulation, bias ELWADD, activation and
//    final pack are the exact ones. With an fp32 Dst most outputs match the exact level bit for
//    bit; with a bf16 Dst (which the card rounds after every MVMUL) the fast level is more accurate
//    than the card.
// Row loops run on OpenMP threads (the runtime oneDNN uses), up to std::thread::hardware_concurrency.
#pragma once

#include <string>

#include "common/status.h"
#include "device/backends/backend.h"
#include "device/backends/tt_emu/conv_engine.h"
#include "device/tensor.h"

namespace kiln::device::tt_emu {

/// "exact" / "fast".
const char* EmuLevelName(EmuLevel level);
/// "exact" | "fast" (case-insensitive); INVALID_ARGUMENT otherwise.
Result<EmuLevel> ParseEmuLevel(const std::string& name);

/// conv2d: input (N, C, H, W) float32 NCHW, weights OIHW, optional bias [O]; output (N, O, OH, OW)
/// NCHW float32 holding the values the card returns (bf16 / bfloat8_b values widened to float).
/// Errors: INVALID_ARGUMENT (shapes, params, precision), FAILED_PRECONDITION (a program TT-NN would
/// refuse: program.h SelectConvProgram), CANCELLED / DEADLINE_EXCEEDED (checked per
/// output row block), INTERNAL (oneDNN failure, fast level). `report` may be null.
/// `threads`: worker threads for the row loops, 0 = std::thread::hardware_concurrency (results do
/// not depend on it: rows are independent).
Result<Tensor> Conv2d(const Tensor& input, const Tensor& weights, const Tensor* bias, const Conv2dParams& params,
                      const PrecisionConfig& precision, EmuLevel level, const CancelToken* cancel = nullptr,
                      OpReport* report = nullptr, int threads = 0);

/// conv_transpose2d: input (N, C, H, W) NCHW, weights IOHW (C, O/group, kH, kW), optional bias [O].
/// Computed as TT-NN's mirror_kernel path: conv2d (stride 1, dilation d, no padding) over the
/// stride-dilated input padded by d·(k−1) − pad_begin / d·(k−1) − pad_end + output_padding (negative
/// amounts crop), with the spatially mirrored, transposed kernel (O, C/group, kH, kW); then the same
/// numerics as Conv2d. Errors as Conv2d.
Result<Tensor> ConvTranspose2d(const Tensor& input, const Tensor& weights, const Tensor* bias,
                               const ConvTranspose2dParams& params, const PrecisionConfig& precision, EmuLevel level,
                               const CancelToken* cancel = nullptr, OpReport* report = nullptr);

}  // namespace kiln::device::tt_emu
