// tt-emu's element-wise add: what `ttnn.add(a, b, activations=[...])` computes on a Tensix core,
// for the residual adds of a CNN (docs/specs/tt-conv-dataflow.md §6). Used by the "tt-emu" backend
// (tt_emu_backend.h, Backend::Add); exposed for tests.
//
// What TT-NN builds (tenstorrent/tt-metal, ttnn/cpp/ttnn/operations/eltwise/; the versions read,
// for docs/specs/tt-metal-followed.md: binary/binary.cpp @42bfdec0, binary_ng/device/
// binary_ng_device_operation.cpp @b0fb323a, binary_ng/device/binary_ng_program_factory.cpp
// @5eb4ca29, binary_ng/device/kernels/compute/eltwise_binary_no_bcast.cpp @00174421,
// binary/device/kernels/compute/eltwise_binary_kernel.cpp @00174421, binary/device/
// element_wise_multi_core_program_factory.cpp @00bdd7ca, binary/common/binary_op_utils.cpp
// @27d2576c, unary/common/unary_op_utils.cpp @79b8e632):
//  * ttnn.add of two same-shape tensors runs binary_ng (binary.cpp `invoke_binary_ng_impl`; the
//    legacy program only for sharded block-float inputs or broadcasts, same compute kernel form);
//    block-float inputs are not retypecast for ADD (`needs_typecast_to_bfloat16`).
//  * Output dtype = the `dtype` argument, else input a's dtype (binary_ng_device_operation.cpp
//    `ttnn::prim::binary_ng`: output_dtype.value_or(dtype_a)).
//  * FPU or SFPU: `is_binary_sfpu_op(ADD, a, b)` is true only for a == b == FLOAT32 (ints aside).
//    FPU: `add_tiles` = ELWADD of SrcA (a) and SrcB (b) into Dst (eltwise_binary_no_bcast.cpp).
//    SFPU: both tiles unpacked to an fp32 Dst (UnpackToDestFp32), `add_binary_tile`.
//  * fp32_dest_acc_en = the OUTPUT format is Float32 (binary_ng_program_factory.cpp `create`), so a
//    bf16 / bfp8_b add accumulates into a bf16 Dst.
//  * A single RELU post-activation is the packer's ReLU (PACK_RELU, §3.5 of
//    docs/specs/tt-numerics.md); RELU6 is the SFPU `relu_max_tile(i, 6.0)` on the Dst value.
//
// Numerics per element (§ = docs/specs/tt-numerics.md), inputs as float32 host tensors:
//  1. Each operand in its device dtype: host conversion as ttnn.from_torch (§2.1 RNE, §2.2 bfp
//     groups of 16 consecutive channels at one position = one face row of the [N·H·W, C] tile);
//     values already of that dtype (a conv's output) are unchanged.
//  2. FPU path: unpack to Src (§4: bfp → bf16, fp32 → bf16 truncation, or tf32 with an fp32 Dst),
//     Elwadd (§6, accumulate off) into Dst. SFPU path: the fp32 sum rounded to nearest even
//     (the SFPU add's rounding is not verified against ttsim or a card: stated in the report).
//  3. relu6: clamp of the Dst value to [0, 6] (exact: 0 and 6 are bf16 values).
//  4. Pack to the output dtype (§3.1–§3.4) with the packer ReLU for relu; bfloat8_b / bfloat4_b
//     outputs read back with the host decoder (§2.3), as tt_conv.h's outputs.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "device/backends/backend.h"
#include "device/numerics/types.h"
#include "device/tensor.h"

namespace kiln::device::tt_emu {

/// The dtypes and activation of one ttnn.add.
struct AddConfig {
  DeviceDType a_dtype = DeviceDType::kBFloat16;
  DeviceDType b_dtype = DeviceDType::kBFloat16;
  DeviceDType out_dtype = DeviceDType::kBFloat16;  ///< TT-NN's default: a_dtype
  Activation activation = Activation::kNone;       ///< kNone, kRelu or kRelu6
  Arch arch = Arch::kWormholeB0;

  /// is_binary_sfpu_op(ADD): a and b both float32.
  bool sfpu() const { return a_dtype == DeviceDType::kFloat32 && b_dtype == DeviceDType::kFloat32; }
  /// fp32_dest_acc_en of the program: the output is float32.
  bool fp32_dst() const { return out_dtype == DeviceDType::kFloat32; }
};

/// The AddConfig a Kiln run uses for its feature maps: every tensor in the dtype convs output
/// (precision.EffectiveOutputDType(), TT-NN: the input dtype unless `dtype` is set), arch from
/// `precision`.
AddConfig AddConfigFor(const PrecisionConfig& precision, Activation act);

/// Steps 1–4 for one group of n <= 16 elements (one face row: consecutive channels at one position)
/// of a and b, given as the fp32 patterns of the host tensors; writes the n output values as fp32
/// patterns, as the host reads them back.
void AddGroup(const uint32_t* a, const uint32_t* b, int n, const AddConfig& cfg, uint32_t* out);

/// y = act(a + b) as ttnn.add computes it (header comment). a, b: float32, equal shapes and
/// layouts (backend.h ValidateAdd). Errors: INVALID_ARGUMENT (shapes, layouts), UNIMPLEMENTED (an
/// activation other than none / relu / relu6; float32 inputs with a non-float32 output, which TT-NN
/// runs with an extra typecast not modelled here), CANCELLED / DEADLINE_EXCEEDED.
/// `report` (may be null) gets op "add", implementation "ttnn.add fpu|sfpu", notes with the dtypes.
Result<Tensor> Add(const Tensor& a, const Tensor& b, const AddConfig& cfg, const CancelToken* cancel = nullptr,
                   OpReport* report = nullptr);

}  // namespace kiln::device::tt_emu
