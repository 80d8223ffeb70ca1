// The device-level vocabulary shared by the Tensix numerics models (device/numerics), the backends
// (device/backends: PrecisionConfig in precision.h, the conv parameters in backend.h, re-exported
// there as kiln::device::MathFidelity etc.) and everything above them: math fidelity, device data
// type, Tensix architecture and the activation fused into a conv. Each concept has exactly one type
// and one name/parse pair, defined here because device/numerics is the lowest layer that needs them.
//
// Names are TT-NN's spellings (MathFidelity.HiFi4, ttnn.bfloat8_b, "wormhole_b0"); parsing is
// case-insensitive and also takes the short forms listed per function. Parse errors are
// INVALID_ARGUMENT naming the rejected text and the accepted names.
#pragma once

#include <string_view>

#include "common/status.h"

namespace kiln::numerics {

/// Math fidelity of the FPU's matrix multiply. The value is the number of fidelity phases run
/// (LoFi 1, HiFi2 2, HiFi3 3, HiFi4 4); which operand slices each phase multiplies is modelled in
/// device/numerics/fpu.h (MvmulPhase).
enum class MathFidelity : int { kLoFi = 1, kHiFi2 = 2, kHiFi3 = 3, kHiFi4 = 4 };
/// Number of fidelity phases of `f` (1..4).
inline constexpr int NumPhases(MathFidelity f) { return static_cast<int>(f); }

/// Device data formats. bfloat8_b / bfloat4_b are block-float formats: one shared 8-bit exponent
/// per 16 values of a tile face row (encodings in device/numerics/formats.h, tile byte layouts in
/// device/numerics/tile.h).
enum class DeviceDType : int { kFloat32 = 0, kBFloat16 = 1, kBFloat8B = 2, kBFloat4B = 3 };

/// Tensix generation. The only numeric difference modelled is Wormhole's normalisation quirk in
/// the FPU's final combine (device/numerics/fpu.h, CombineWithDst).
enum class Arch : int { kWormholeB0 = 0, kBlackhole = 1 };

/// Activation fused after a conv (applied to conv + bias). relu6 = min(max(x, 0), 6);
/// silu = x·sigmoid(x); gelu = the exact erf form 0.5·x·(1 + erf(x/√2)); tanh is in tt-metal's
/// conv activation tests. The fp32 definitions are device::ApplyActivation (device/backends/
/// backend.h). kHardswish is accepted by the backend API only: Kiln's plan never fuses HardSwish,
/// because a fused HARDSWISH compiles to nothing on the recorded tt-metal tree (tt-emu follows
/// PrecisionConfig::fused_hardswish when one is requested).
enum class Activation : int { kNone = 0, kRelu, kRelu6, kSilu, kGelu, kSigmoid, kTanh, kHardswish };

/// "LoFi", "HiFi2", "HiFi3", "HiFi4".
const char* MathFidelityName(MathFidelity f);
/// "float32", "bfloat16", "bfloat8_b", "bfloat4_b".
const char* DeviceDTypeName(DeviceDType d);
/// "wormhole_b0", "blackhole".
const char* ArchName(Arch a);
/// "none", "relu", "relu6", "silu", "gelu", "sigmoid", "tanh".
const char* ActivationName(Activation a);

/// Inverse of MathFidelityName ("lofi", "HIFI4" ... accepted).
Result<MathFidelity> ParseMathFidelity(std::string_view name);
/// Inverse of DeviceDTypeName; also "fp32", "bf16", "float16_b", "bfp8_b", "bfp8", "bfp4_b", "bfp4".
Result<DeviceDType> ParseDeviceDType(std::string_view name);
/// Inverse of ArchName; also "wormhole", "wh", "bh".
Result<Arch> ParseArch(std::string_view name);
/// Inverse of ActivationName; also "" / "identity" / "linear" → kNone.
Result<Activation> ParseActivation(std::string_view name);

}  // namespace kiln::numerics
