// Device precision configuration of one conv-style op: the knobs TT-NN exposes through
// Conv2dConfig (weights_dtype, the output `dtype`, shard_layout, act_block_w_div,
// act_block_h_override, full_inner_dim, enable_activation_reuse, bfp8_pack_precise) and its compute
// kernel config (math_fidelity, math_approx_mode, fp32_dest_acc_en, packer_l1_acc), plus the arch,
// the board, the input layout and the tt-metal tree-version switches.
//
// Defaults are TT-NN's conv defaults (docs/specs/tt-conv-dataflow.md §1; the README's table):
// HiFi4, math_approx_mode = true, fp32_dest_acc_en = true only if the input AND the weights are
// float32, packer_l1_acc = false; input bfloat16 (ttnn.from_torch(x, dtype=ttnn.bfloat16)), output =
// the input dtype, weights = the host weight tensor's dtype (float32 for ONNX float weights);
// shard layout chosen by TT-NN's auto-shard rule; row-major input; arch wormhole_b0 on its
// single-chip board. Which program each conv then gets: device/backends/tt_emu/program.h.
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

/// TT-NN's TensorMemoryLayout for the conv's activations (Conv2dConfig.shard_layout); kAuto =
/// unset, resolved by determine_conv_config_for_auto_shard (device/backends/tt_emu/program.h).
enum class ShardLayout { kAuto, kHeight, kBlock, kWidth };
const char* ShardLayoutName(ShardLayout l);  ///< "auto", "height", "block", "width"
Result<ShardLayout> ParseShardLayout(const std::string& name);

/// Layout of the input tensor handed to ttnn.conv2d: ROW_MAJOR (ttnn.from_torch's default) or TILE.
enum class InputLayout { kRowMajor, kTile };
const char* InputLayoutName(InputLayout l);  ///< "row_major", "tile"
Result<InputLayout> ParseInputLayout(const std::string& name);

/// The board (grid and L1 differ per board, not only per arch). kDefault = the arch's single-chip
/// board (n150 for wormhole_b0, p150 for blackhole).
enum class Board { kDefault, kN150, kN300, kP100, kP150 };
const char* BoardName(Board b);  ///< "default", "n150", "n300", "p100", "p150"
Result<Board> ParseBoard(const std::string& name);
/// The arch of a board's chips (n150, n300: Wormhole B0; p100, p150: Blackhole); kDefault is the
/// arch's own board, so any arch.
bool BoardFitsArch(Board b, Arch arch);

/// Behaviours that differ between tt-metal tree versions (docs/specs/tt-conv-dataflow.md marks
/// them); each default is the behaviour of the version recorded in docs/specs/tt-metal-followed.md.
enum class DepthwiseProgram {
  kRecorded,        ///< what the recorded version does (program.cc says which)
  kPoolMultiply,    ///< Conv2dDepthwiseProgramFactory: per-tap multiply, each product rounded, reduce
  kDenseConv,       ///< the generic conv with dense block-diagonal weights
};
enum class PartialReload {
  kRecorded,
  kTf32,            ///< fp32 partials reloaded through SrcA as Tf32 (stored factory versions)
  kLossless,        ///< fp32 partials reloaded exactly (later trees)
};
enum class FusedHardswish {
  kRecorded,
  kDropped,         ///< compiles to nothing (unary_op_utils.cpp get_op_init_and_func_default)
  kApplied,
};

struct PrecisionConfig {
  MathFidelity math_fidelity = MathFidelity::kHiFi4;
  /// Format of the weight matrix and the bias on the device (any DeviceDType). nullopt = TT-NN's
  /// Conv2dConfig default: the host weight tensor's own dtype (float32 for ONNX float weights).
  std::optional<DeviceDType> weights_dtype;
  /// Format the activations are converted to on the host before upload (float32, bfloat16,
  /// bfloat8_b; not bfloat4_b).
  DeviceDType input_dtype = DeviceDType::kBFloat16;
  /// Output format of the op (TT-NN's `dtype`); also the partials format between K blocks unless
  /// packer L1 accumulation is effective (float32, bfloat16, bfloat8_b; not bfloat4_b).
  /// nullopt = TT-NN's default: the input tensor's dtype.
  std::optional<DeviceDType> output_dtype;
  /// Dst register in fp32 instead of bf16. nullopt = TT-NN's rule: true iff input_dtype and
  /// weights_dtype are both float32. Use EffectiveFp32DestAcc().
  std::optional<bool> fp32_dest_acc_en;
  /// Accumulate partials in L1 with the packer (effective only when requested AND ((bias AND
  /// num_blocks > 1) OR num_blocks > 2), docs/specs/tt-numerics.md §8 item 5).
  bool packer_l1_acc = false;
  /// SFPU approximations for the fused activations (silu/gelu/sigmoid...).
  bool math_approx_mode = true;
  Arch arch = Arch::kWormholeB0;
  /// Kiln's override of in0_block_w (K-block width in 32-wide tiles; not a TT-NN knob); 0 = what
  /// the program selection decides. Exclusive with act_block_w_div > 1.
  int act_block_w = 0;
  /// Conv2dConfig knobs (TT-NN names and defaults).
  ShardLayout shard_layout = ShardLayout::kAuto;
  int act_block_w_div = 1;
  int act_block_h_override = 0;   ///< rows of the activation block, a multiple of 32; 0 = default
  bool full_inner_dim = false;
  bool enable_activation_reuse = false;
  InputLayout input_layout = InputLayout::kRowMajor;
  /// Final pack of an fp32 Dst into a bfp output through Float32 instead of Bfp8_b.
  bool bfp8_pack_precise = false;
  Board board = Board::kDefault;
  /// Residual / K-split adds in fp32 on the host instead of the card's ttnn.add in the tensors'
  /// dtype (for comparison: more accurate than the card).
  bool host_add = false;
  DepthwiseProgram depthwise_program = DepthwiseProgram::kRecorded;
  PartialReload fp32_partial_reload = PartialReload::kRecorded;
  FusedHardswish fused_hardswish = FusedHardswish::kRecorded;

  /// TT-NN's conv defaults (identical to a default-constructed PrecisionConfig).
  static PrecisionConfig TtnnConvDefaults() { return PrecisionConfig{}; }
  /// The ttaw builders' CONV_PRECISION: HiFi4 + fp32 Dst accumulation + packer L1 accumulation.
  static PrecisionConfig TtawConv();

  /// weights_dtype with TT-NN's default applied (`host` = the host weight tensor's dtype).
  DeviceDType EffectiveWeightsDType(DeviceDType host = DeviceDType::kFloat32) const;
  /// output_dtype with TT-NN's default applied (the input dtype).
  DeviceDType EffectiveOutputDType() const;
  /// fp32_dest_acc_en with TT-NN's default rule applied.
  bool EffectiveFp32DestAcc(DeviceDType host_weights = DeviceDType::kFloat32) const;
  /// Every optional filled with its default (the precision a run reports as resolved).
  PrecisionConfig Resolved(DeviceDType host_weights = DeviceDType::kFloat32) const;
  /// INVALID_ARGUMENT for bfloat4_b as input/output dtype or a negative act_block_w.
  Status Validate() const;
  /// "HiFi4 w=bfloat16 in=bfloat16 out=bfloat16 fp32_acc=0 l1_acc=0 approx=1 wormhole_b0 abw=auto".
  std::string ToString() const;

  bool operator==(const PrecisionConfig&) const = default;
};

}  // namespace kiln::device
