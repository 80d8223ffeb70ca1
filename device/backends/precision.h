// Device precision configuration of one conv-style op: the knobs TT-NN exposes through
// Conv2dConfig (weights_dtype, the output `dtype`, act_block_w) and its compute kernel config
// (math_fidelity, math_approx_mode, fp32_dest_acc_en, packer_l1_acc), plus the architecture.
//
// Defaults are TT-NN's conv defaults (docs/specs/tt-numerics.md §8 item 3, "Default compute
// config"; docs/specs/tt-conv-dataflow.md §1): HiFi4, math_approx_mode = true, fp32_dest_acc_en =
// true only if the input AND the weights are float32, packer_l1_acc = false; weights, input and
// output in bfloat16 (TT-NN's Conv2dConfig weights_dtype default and the output dtype following a
// bf16 input); arch wormhole_b0; act_block_w = 0 meaning "TT-NN's height-sharded default: one K
// block per kernel row, round_up(Cin_pad * kw, 32) wide" (docs/specs/tt-numerics.md §8 item 4).
// Note: the ttaw conv builders (Python, CONV_PRECISION) deliberately run "HiFi4+fp32+l1acc" with
// exact SFPU activations instead; `PrecisionConfig::TtawConv()` gives that.
//
// The fp32 reference backend ignores every field (it always computes in float32); tt-emu models them.
#pragma once

#include <optional>
#include <string>

#include "common/status.h"
#include "device/numerics/types.h"

namespace kiln::device {

// MathFidelity, DeviceDType and Arch (and their name / parse functions) are the one definition of
// each in device/numerics/types.h, re-exported here for the device API.
using numerics::Arch;
using numerics::ArchName;
using numerics::DeviceDType;
using numerics::DeviceDTypeName;
using numerics::MathFidelity;
using numerics::MathFidelityName;
using numerics::ParseArch;
using numerics::ParseDeviceDType;
using numerics::ParseMathFidelity;

struct PrecisionConfig {
  MathFidelity math_fidelity = MathFidelity::kHiFi4;
  /// Format of the weight matrix and the bias on the device (any DeviceDType).
  DeviceDType weights_dtype = DeviceDType::kBFloat16;
  /// Format the activations are converted to on the host before upload (float32, bfloat16,
  /// bfloat8_b; not bfloat4_b).
  DeviceDType input_dtype = DeviceDType::kBFloat16;
  /// Output format of the op (TT-NN's `dtype`); also the partials format between K blocks unless
  /// packer L1 accumulation is effective (float32, bfloat16, bfloat8_b; not bfloat4_b).
  DeviceDType output_dtype = DeviceDType::kBFloat16;
  /// Dst register in fp32 instead of bf16. nullopt = TT-NN's rule: true iff input_dtype and
  /// weights_dtype are both float32. Use EffectiveFp32DestAcc().
  std::optional<bool> fp32_dest_acc_en;
  /// Accumulate partials in L1 with the packer (effective only when requested AND ((bias AND
  /// num_blocks > 1) OR num_blocks > 2), docs/specs/tt-numerics.md §8 item 5).
  bool packer_l1_acc = false;
  /// SFPU approximations for the fused activations (silu/gelu/sigmoid...).
  bool math_approx_mode = true;
  Arch arch = Arch::kWormholeB0;
  /// K-block width in 32-wide tiles; 0 = TT-NN's height-sharded default (see header comment).
  int act_block_w = 0;

  /// TT-NN's conv defaults (identical to a default-constructed PrecisionConfig).
  static PrecisionConfig TtnnConvDefaults() { return PrecisionConfig{}; }
  /// The ttaw builders' CONV_PRECISION: HiFi4 + fp32 Dst accumulation + packer L1 accumulation.
  static PrecisionConfig TtawConv();

  /// fp32_dest_acc_en with TT-NN's default rule applied.
  bool EffectiveFp32DestAcc() const;
  /// INVALID_ARGUMENT for bfloat4_b as input/output dtype or a negative act_block_w.
  Status Validate() const;
  /// "HiFi4 w=bfloat16 in=bfloat16 out=bfloat16 fp32_acc=0 l1_acc=0 approx=1 wormhole_b0 abw=auto".
  std::string ToString() const;

  bool operator==(const PrecisionConfig&) const = default;
};

}  // namespace kiln::device
