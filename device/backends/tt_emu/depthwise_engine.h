// The 2-D depthwise program (ConvProgramPath::kDepthwise2d) emulated: TT-NN's
// Conv2dDepthwiseProgramFactory, which runs the pool compute kernel with IS_DEPTHWISE
// (tenstorrent/tt-metal @002a3f41: ttnn/cpp/ttnn/operations/conv/conv2d/device/
// conv2d_op_depthwise_program_factory.cpp, ttnn/cpp/ttnn/operations/pool/generic/device/kernels/
// compute/compute_pool_2d.cpp, ttnn/cpp/ttnn/operations/pool/pool_utils.cpp get_factory_parameters).
// Internal to the tt-emu backend (tt_conv.cc dispatches here); exposed for tests.
//
// Per output pixel (one stick) and channel c, § = docs/specs/tt-numerics.md:
//  1. The window's kh·kw input sticks (zeros at the padding) sit in the in CB in the input's data
//     format (pool get_factory_parameters: bfloat8_b → Float16_b; so bf16, or fp32 for a float32
//     input) = ConvProgram::act_dtype; the weights in the 2-D depthwise face layout (16 channels
//     of one tap per face row, so bfp weights are grouped by 16 channels of one tap) in the
//     weights dtype.
//  2. mul_tiles: per tap, ELWMUL in0 = input (SrcA) × weight (SrcB) with the compute config's
//     fidelity (numerics::Elwmul, unverified), packed to the mul CB in the input's data format.
//  3. The mul CB is tilized as kh·kw rows (taps, in window order) and reduced along the rows
//     (REDUCE_COL, PoolType::SUM) against the scaler tile 1.0 (get_bf16_pool_scalar with
//     divisor_override 1, Float16_b): modelled as MVMULs (§5) with SrcA = the 16 taps of a face
//     column, SrcB = 16 × 1.0, faces of 16 taps in order into one Dst (assumption: the reduce's
//     GAPOOL is the MVMUL datapath; unverified). Windows over 32 taps run in 32-tap chunks.
//  4. Bias: add_tiles(zero CB, bias CB) with acc_to_dest: ELWADD Dst + 0 + bias (§6, accumulate).
//  5. The fused activation on the SFPU (relu included: the pool kernel has no packer ReLU).
//  6. pack_untilize_dest to the pre-tilize CB (input data format), then fast_tilize into the
//     output CB (output dtype; bfp groups = 16 channels of one pixel; pack source format as
//     get_single_pack_src_format with bfp8_pack_precise). A Float32 pre-tilize CB is read back
//     through SrcA: Tf32 when ConvProgram::partial_reload is kTf32.
// Not modelled from the factory: it passes dilation 1 to the pool reader (dilation_h/w = 1 there);
// tt-emu uses the conv's dilation (what the conv means), see depthwise_engine.cc.
// Levels: kFast runs the same routine as kExact (depthwise layers are small: kh·kw products per
// output element).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "device/backends/backend.h"
#include "device/backends/precision.h"
#include "device/backends/tt_emu/conv_engine.h"
#include "device/backends/tt_emu/program.h"

namespace kiln::device::tt_emu {

/// Runs one 2-D depthwise conv (program.path == kDepthwise2d; G = C = O) as the pool-kernel
/// program does. x: NCHW float32; w: OIHW with I = 1; bias: [O] or null. out: (M, O) row-major
/// fp32 patterns of what the card returns (bfp outputs decoded as the host does), as RunConvProgram.
/// Errors: INVALID_ARGUMENT (not a depthwise geometry), CANCELLED / DEADLINE_EXCEEDED (checked per
/// row block).
Status RunDepthwiseProgram(const EmuGeometry& g, const ConvProgram& program, const PrecisionConfig& precision,
                           Activation activation, EmuLevel level, const float* x, const float* w, const float* bias,
                           const CancelToken* cancel, int threads, std::vector<uint32_t>* out);

}  // namespace kiln::device::tt_emu
