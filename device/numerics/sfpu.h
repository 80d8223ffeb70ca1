// The SFPU activations of the conv epilogue, as tt-llk evaluates them on the card, re-expressed in
// our own code and evaluated in fp32 (docs/specs/tt-conv-dataflow.md §5).
//
// Sources (tenstorrent/tt-llk @ 36b092e8e195f706a081e1be92e2fd75e98e50b4, common/inc/sfpu/, the
// wormhole_b0 and blackhole files are identical for every function used here):
//   ckernel_sfpu_gelu.h     _init_gelu_ / _calculate_gelu_appx_   (6-entry FP16 LUT, LReg0-2/4-6)
//   ckernel_sfpu_sigmoid.h  _init_sigmoid_ / _calculate_sigmoid_  (6-entry FP16 LUT, cut at 4.0)
//   ckernel_sfpu_silu.h     _calculate_silu_ (x * piecewise sigmoid; APPROXIMATION_MODE unused)
//   ckernel_sfpu_tanh.h     _init_tanh_ / _calculate_tanh_        (3-entry SFPLUT, APPROX unused)
//   ckernel_sfpu_activations.h  Hardsigmoid: relu_max(x * 1/6 + 0.5, 1)
//   ckernel_sfpu_relu.h     _relu_max_body_ (relu6 = relu_max_tile(x, 6.0f))
//   ckernel_sfpu_sqrt.h     _calculate_sqrt_body_ (SQRT_10-bits / SQRT_23-bits, Kokosiński et al.)
// and the instruction semantics of tenstorrent/tt-isa-documentation WormholeB0/TensixTile/
// TensixCoprocessor SFPLUT.md (Lut8ToFp32), SFPLUTFP32.md (Lut16ToFp32, FP16_6ENTRY_TABLE1/2,
// SGN_RETAIN) and SFPMAD.md (one rounding RNE, denormal inputs read as 0, denormal/-0 results
// written as +0). sfpi's lut()/lut2() set SGN_RETAIN (the result takes the input's sign: odd
// functions), lut_sign()/lut2_sign() do not (sfpi_lib.h).
//
// The non-approximate forms of gelu / sigmoid / tanh are multi-step fp32 kernels (exp + Newton
// reciprocal, erf/CDF polynomials) whose error tt-metal states as about 1 bf16 ulp; they are
// modelled here as the exact function evaluated in fp32 (libm), not instruction by instruction.
//
// Each function returns the fp32 SFPU register value before it is stored to Dst. How the SFPU
// store rounds into a bf16 Dst (fp32_dest_acc_en off) and the exact SFPMAD rounding on silicon are
// UNVERIFIED until a card run: SfpuMad uses a fully fused fp32 fma (the hardware's multiply is only
// partially fused; SFPMAD.md's bit-perfect model was not followed), which can differ in the last bit.
#pragma once

#include <cstdint>
#include <optional>

#include "device/numerics/types.h"

namespace kiln::numerics {

/// Every activation Kiln fuses into a conv, plus the other epilogue ops TT-NN can fuse
/// (HARDSWISH, HARDSIGMOID, SQRT) so the version switches have a model to apply.
enum class SfpuOp : int { kRelu, kRelu6, kSilu, kGelu, kSigmoid, kTanh, kHardswish, kHardsigmoid, kSqrt };

/// "relu", "relu6", "silu", "gelu", "sigmoid", "tanh", "hardswish", "hardsigmoid", "sqrt".
const char* SfpuOpName(SfpuOp op);
/// The SFPU op of a fused activation; nullopt for kNone.
std::optional<SfpuOp> SfpuOpForActivation(Activation a);

/// Whether the conv epilogue computes the op's fast/approximate form (the `approx_mode` to pass to
/// SfpuEval). The conv program factories build the compute kernel with ComputeConfig{math_fidelity,
/// fp32_dest_acc_en, compile_args, defines} -- no math_approx_mode, so APPROX = false (tt-metal
/// ttnn/cpp/ttnn/operations/conv/conv2d/device/conv2d_op_width_sharded_program_factory.cpp
/// @9568a92c) -- and call unary get_defines(op, params) without an input dtype. For an activation
/// without parameters get_op_init_and_func_default (unary_op_utils.cpp @005cd99a) emits:
///   GELU    -> gelu_tile(i), template default fast_and_approx = true            -> true
///   SIGMOID -> sigmoid_tile(i), default fast_and_approx = false (older: APPROX)  -> false
///   TANH    -> tanh_tile(i), default false; but the followed calculate_tanh (tt-metal llk_sfpu/
///              ckernel_sfpu_tanh.h @a7a6cf7d, tt-llk _calculate_tanh_) is the LUT for either
///              flag, so the card computes the LUT                                   -> true
///   SILU, HARDSIGMOID, SQRT: <APPROX> = false (silu/hardsigmoid have one form)    -> false
///   RELU6   -> relu_max_tile(i, 0x40c00000u); RELU -> the packer's ReLU (exact)   -> false
///   HARDSWISH -> {} (compiles to nothing); the caller's version switch decides     -> false
bool SfpuConvEpilogueApprox(SfpuOp op);
/// The compute-API call the conv epilogue makes for `op`, for reports ("gelu_tile<true>"). For
/// HARDSWISH this is the applied form; whether it is dropped is the caller's version switch.
const char* SfpuConvEpilogueCall(SfpuOp op);

/// Evaluates `op` on one fp32 value as the SFPU does. approx_mode selects the fast form of gelu,
/// sigmoid, tanh and sqrt (tanh's accurate form is that of later trees); silu, hardsigmoid,
/// hardswish, relu and relu6 have one form. `arch` is the model's seam; it changes nothing today:
/// the tables are identical on wormhole_b0 and blackhole (diffed in tt-llk @36b092e8).
float SfpuEval(SfpuOp op, float x, bool approx_mode, Arch arch);

// ---- Instruction models (tt-isa-documentation, see above) ---------------------------------------

/// SFPMAD: a * b + c, denormal inputs as 0, one RNE rounding, denormal or -0 results as +0.
float SfpuMad(float a, float b, float c);
/// SFPLUT's 8-bit coefficient format: 0xFF = 0, else sign | exponent 127 - e(3 bits) | 4-bit mantissa.
float Lut8ToFp32(uint8_t x);
/// SFPLUTFP32's 16-bit coefficient format: FP16 bit layout, exponent 31 reads as 0 and exponent 0
/// as a normal 2^-15 (no subnormals).
float Lut16ToFp32(uint16_t x);

/// SFPLUT table: LReg0..2 each hold (slope << 8) | intercept in Lut8 form; pieces |x| < 1, < 2, >= 2.
struct SfpLut3 {
  uint16_t l[3];
};
/// SFPLUT: slope * |x| + intercept of x's piece; sign_retain copies x's sign onto the result.
float SfpLut(const SfpLut3& t, float x, bool sign_retain);

/// SFPLUTFP32 FP16_6ENTRY table: slopes in LReg0..2, intercepts in LReg4..6, two Lut16 halves per
/// register (low half = the even piece). Pieces |x| < 0.5, < 1, < 1.5, < 2, < cut, >= cut with
/// cut = 3.0 (TABLE1) or 4.0 (TABLE2).
struct SfpLut6 {
  uint32_t slope[3];
  uint32_t intercept[3];
  bool table2;
};
/// SFPLUTFP32 (FP16_6ENTRY_TABLE1/2).
float SfpLut6Eval(const SfpLut6& t, float x, bool sign_retain);
/// Slope and intercept of piece 0..5 of a 6-entry table, decoded.
float SfpLut6Slope(const SfpLut6& t, int piece);
float SfpLut6Intercept(const SfpLut6& t, int piece);

/// _init_gelu_: f(|x|) ≈ gelu(|x|) - |x|/2 (an even function; lut2_sign, so no sign copy), TABLE1.
/// Note lreg4's low half is 0x86D8 (-1.0443e-4), not the -0.0150 (0xA3AE) of the comment next to it.
inline constexpr SfpLut6 kGeluLut{{0x37E7322Bu, 0x38E138F3u, 0x38003852u},
                                  {0xB12286D8u, 0xB437B479u, 0x7C00AFA4u}, false};
/// _init_sigmoid_: sigmoid(|x|) - 0.5 (odd; lut2 with SGN_RETAIN), TABLE2 (cut at 4.0).
inline constexpr SfpLut6 kSigmoidLut6{{0x32F433D9u, 0x300A318Au, 0x7C002A35u},
                                      {0x23C89018u, 0x30272BAAu, 0x37FF34CCu}, true};
/// tt-metal's sigmoid_appx_init (llk_sfpu/ckernel_sfpu_sigmoid_appx.h @0d8858c5): the same table
/// with the first intercept pinned to 0 (0x7C00) so that sigmoid(0) = 0.5.
inline constexpr SfpLut6 kSigmoidLut6ZeroB0{{0x32F433D9u, 0x300A318Au, 0x7C002A35u},
                                            {0x23C87C00u, 0x30272BAAu, 0x37FF34CCu}, true};
/// The legacy 3-piece SFPLUT sigmoid (0x3DFF/0x21D8/0xFF10) that ckernel_sfpu_sigmoid_appx.h
/// @0d8858c5 says it replaced; saturates to 1.0 for |x| >= 2.
inline constexpr SfpLut3 kSigmoidLut3Legacy{{0x3DFF, 0x21D8, 0xFF10}};
/// _init_tanh_: 0.90625|x|; 0.09375|x| + 0.8125; 1 (SFPLUT, SGN_RETAIN).
inline constexpr SfpLut3 kTanhLut{{0x1DFF, 0x481A, 0xFF00}};

/// Which approximate sigmoid table a tree uses (version-dependent, see the tables above).
enum class SigmoidApproxTable { kLut6, kLut6ZeroIntercept, kLut3Legacy };

// ---- Per-op forms ----------------------------------------------------------------------------------

/// relu by sign bit (the packer's ReLU zeroes every value with the sign bit set, -0 and -NaN too).
float SfpuRelu(float x);
/// _relu_max_body_: min(x, t) then max(., 0); NaN passes through.
float SfpuReluMax(float x, float threshold);
/// gelu_tile<true>: x/2 + f(|x|) (kGeluLut). Max |error| vs erf GELU 0.0235 (at x ≈ -0.25).
float SfpuGeluApprox(float x);
/// The accurate gelu, modelled as 0.5·x·(1 + erf(x/√2)) in fp32.
float SfpuGeluAccurate(float x);
/// sigmoid_tile<.., true>: table(x) + 0.5. kLut6 max |error| 0.0177, kLut3Legacy 0.1192.
float SfpuSigmoidApprox(float x, SigmoidApproxTable table = SigmoidApproxTable::kLut6);
/// The accurate sigmoid, modelled as 1 / (1 + exp(-x)) in fp32.
float SfpuSigmoidAccurate(float x);
/// _calculate_silu_: x · s(|x|) (1 - s for x < 0), s = 0.229|x| + 0.5 for |x| <= 1, a degree-4
/// polynomial for |x| < 5, else 1. Max |error| vs x·sigmoid(x) 0.0433 (at |x| → 5).
float SfpuSilu(float x);
/// tanh LUT (kTanhLut). Continuous; max |error| 0.145 (at |x| = 1).
float SfpuTanhApprox(float x);
/// The accurate tanh (later trees), modelled as tanh in fp32.
float SfpuTanhAccurate(float x);
/// Hardsigmoid: relu_max(x · 0.16666667f + 0.5, 1) (one MAD).
float SfpuHardsigmoid(float x);
/// x · hardsigmoid(x), the applied form of a fused HARDSWISH.
float SfpuHardswish(float x);
/// _calculate_sqrt_body_<approx>: magic-constant rsqrt seed + one (10-bit) or two (23-bit) refinement
/// steps; negative x -> NaN.
float SfpuSqrt(float x, bool approx);

}  // namespace kiln::numerics
