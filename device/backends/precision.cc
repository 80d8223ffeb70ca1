#include "device/backends/precision.h"

#include <algorithm>
#include <cctype>

namespace kiln::device {

namespace {

std::string Lower(const std::string& s) {
  std::string r;
  for (char c : s) r.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return r;
}

}  // namespace

const char* ShardLayoutName(ShardLayout l) {
  switch (l) {
    case ShardLayout::kAuto: return "auto";
    case ShardLayout::kHeight: return "height";
    case ShardLayout::kBlock: return "block";
    case ShardLayout::kWidth: return "width";
  }
  return "?";
}

Result<ShardLayout> ParseShardLayout(const std::string& name) {
  const std::string s = Lower(name);
  if (s == "auto" || s.empty()) return ShardLayout::kAuto;
  if (s == "height" || s == "height_sharded") return ShardLayout::kHeight;
  if (s == "block" || s == "block_sharded") return ShardLayout::kBlock;
  if (s == "width" || s == "width_sharded") return ShardLayout::kWidth;
  return InvalidArgument("unknown shard_layout '" + name + "' (expected auto, height, block, width)");
}

const char* InputLayoutName(InputLayout l) { return l == InputLayout::kTile ? "tile" : "row_major"; }

Result<InputLayout> ParseInputLayout(const std::string& name) {
  const std::string s = Lower(name);
  if (s == "row_major" || s == "rm") return InputLayout::kRowMajor;
  if (s == "tile") return InputLayout::kTile;
  return InvalidArgument("unknown input layout '" + name + "' (expected row_major, tile)");
}

const char* BoardName(Board b) {
  switch (b) {
    case Board::kDefault: return "default";
    case Board::kN150: return "n150";
    case Board::kN300: return "n300";
    case Board::kP100: return "p100";
    case Board::kP150: return "p150";
  }
  return "?";
}

Result<Board> ParseBoard(const std::string& name) {
  const std::string s = Lower(name);
  if (s == "default" || s.empty()) return Board::kDefault;
  if (s == "n150") return Board::kN150;
  if (s == "n300") return Board::kN300;
  if (s == "p100") return Board::kP100;
  if (s == "p150") return Board::kP150;
  return InvalidArgument("unknown board '" + name + "' (expected n150, n300, p100, p150)");
}

PrecisionConfig PrecisionConfig::TtawConv() {
  PrecisionConfig p;
  p.math_fidelity = MathFidelity::kHiFi4;
  p.fp32_dest_acc_en = true;
  p.packer_l1_acc = true;
  p.math_approx_mode = false;  // "exact SFPU activations" (CONV_PRECISION, precision.h)
  return p;
}

DeviceDType PrecisionConfig::EffectiveWeightsDType(DeviceDType host) const { return weights_dtype.value_or(host); }

DeviceDType PrecisionConfig::EffectiveOutputDType() const { return output_dtype.value_or(input_dtype); }

bool PrecisionConfig::EffectiveFp32DestAcc(DeviceDType host_weights) const {
  if (fp32_dest_acc_en.has_value()) return *fp32_dest_acc_en;
  return input_dtype == DeviceDType::kFloat32 && EffectiveWeightsDType(host_weights) == DeviceDType::kFloat32;
}

PrecisionConfig PrecisionConfig::Resolved(DeviceDType host_weights) const {
  PrecisionConfig r = *this;
  r.weights_dtype = EffectiveWeightsDType(host_weights);
  r.output_dtype = EffectiveOutputDType();
  r.fp32_dest_acc_en = EffectiveFp32DestAcc(host_weights);
  return r;
}

bool BoardFitsArch(Board b, Arch arch) {
  if (b == Board::kDefault) return true;
  return (b == Board::kP100 || b == Board::kP150) == (arch == Arch::kBlackhole);
}

Status PrecisionConfig::Validate() const {
  if (!BoardFitsArch(board, arch)) {
    return InvalidArgument(std::string("board ") + BoardName(board) + " is not a " + ArchName(arch) +
                           " board (n150, n300: wormhole_b0; p100, p150: blackhole)");
  }
  if (input_dtype == DeviceDType::kBFloat4B) {
    return InvalidArgument("input dtype bfloat4_b is not supported (float32, bfloat16, bfloat8_b)");
  }
  if (EffectiveOutputDType() == DeviceDType::kBFloat4B) {
    return InvalidArgument("output dtype bfloat4_b is not supported (float32, bfloat16, bfloat8_b)");
  }
  if (act_block_w < 0) {
    return InvalidArgument("act_block_w must be >= 0 (0 = default), got " + std::to_string(act_block_w));
  }
  if (act_block_w_div < 1) {
    return InvalidArgument("act_block_w_div must be >= 1, got " + std::to_string(act_block_w_div));
  }
  if (act_block_w > 0 && act_block_w_div > 1) {
    return InvalidArgument("act_block_w (Kiln's in0_block_w override) and act_block_w_div are exclusive");
  }
  if (act_block_h_override < 0 || act_block_h_override % 32 != 0) {
    return InvalidArgument("act_block_h_override must be a multiple of 32 (tile height), got " +
                           std::to_string(act_block_h_override));
  }
  return Status::Ok();
}

std::string PrecisionConfig::ToString() const {
  std::string s = MathFidelityName(math_fidelity);
  s += std::string(" w=") + (weights_dtype ? DeviceDTypeName(*weights_dtype) : "host");
  s += std::string(" in=") + DeviceDTypeName(input_dtype);
  s += std::string(" out=") + DeviceDTypeName(EffectiveOutputDType());
  s += " fp32_acc=" + std::string(EffectiveFp32DestAcc() ? "1" : "0");
  if (!fp32_dest_acc_en.has_value()) s += "(default)";
  s += " l1_acc=" + std::string(packer_l1_acc ? "1" : "0");
  s += " approx=" + std::string(math_approx_mode ? "1" : "0");
  s += std::string(" ") + ArchName(arch);
  if (board != Board::kDefault) s += std::string("/") + BoardName(board);
  s += std::string(" shard=") + ShardLayoutName(shard_layout);
  s += " abw=" + (act_block_w == 0 ? std::string("auto") : std::to_string(act_block_w));
  if (act_block_w_div > 1) s += " abw_div=" + std::to_string(act_block_w_div);
  if (act_block_h_override > 0) s += " abh=" + std::to_string(act_block_h_override);
  if (full_inner_dim) s += " full_inner_dim=1";
  if (enable_activation_reuse) s += " act_reuse=1";
  s += std::string(" in_layout=") + InputLayoutName(input_layout);
  if (bfp8_pack_precise) s += " bfp8_pack_precise=1";
  if (host_add) s += " host_add=1";
  return s;
}

}  // namespace kiln::device
