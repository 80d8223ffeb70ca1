// TEMPORARY (lead's local stand-in until the program-selection branch lands; never committed).
#include <algorithm>

#include "device/backends/tt_emu/program.h"

namespace kiln::device::tt_emu {

namespace {
int64_t RU(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
}  // namespace

const char* ConvProgramPathName(ConvProgramPath p) {
  switch (p) {
    case ConvProgramPath::kConv2d: return "conv2d";
    case ConvProgramPath::kMatmul: return "matmul";
    case ConvProgramPath::kDepthwise2d: return "depthwise_2d";
    case ConvProgramPath::kDepthwise1d: return "depthwise_1d";
  }
  return "?";
}

bool UseMatmulFor1x1Conv(const ConvProblem& p, ShardLayout requested) {
  return p.kh == 1 && p.kw == 1 && p.sh == 1 && p.sw == 1 && p.pads == std::array<int64_t, 4>{0, 0, 0, 0} &&
         p.dh == 1 && p.dw == 1 && requested != ShardLayout::kWidth;
}
int GetInputChannelsAlignment(ShardLayout layout, InputLayout input_layout, bool is_mm_conv) {
  if (!is_mm_conv && layout != ShardLayout::kWidth && input_layout == InputLayout::kRowMajor) return 8;
  return 32;
}
bool DeterminePackerL1Acc(bool packer_l1_acc, bool enable_bias, int64_t nb) {
  return packer_l1_acc && ((enable_bias && nb > 1) || nb > 2);
}

Result<ConvProgram> SelectConvProgram(const ConvProblem& p, const PrecisionConfig& pc, DeviceDType host_w) {
  ConvProgram r;
  const bool mm = UseMatmulFor1x1Conv(p, pc.shard_layout);
  r.path = mm ? ConvProgramPath::kMatmul : ConvProgramPath::kConv2d;
  r.shard_layout = pc.shard_layout == ShardLayout::kAuto ? ShardLayout::kHeight : pc.shard_layout;
  const bool dw = p.group == p.C && p.group == p.O && p.group > 1;
  r.cin_align = dw ? 32 : GetInputChannelsAlignment(r.shard_layout, pc.input_layout, mm);
  r.cin_padded = RU(p.C, r.cin_align);
  r.cout_padded = RU(p.O, 32);
  const int64_t Cp = r.cin_padded;
  if (mm) {
    r.k.K = RU(p.C, 32);
    for (int64_t k = 0; k < r.k.K; ++k) {
      r.k.tap.push_back(k < p.C ? 0 : -1);
      r.k.chan.push_back(static_cast<int32_t>(k));
    }
  } else {
    const int64_t row_w = RU(Cp * p.kw, 32);
    r.k.K = p.kh * row_w;
    r.k.tap.assign(r.k.K, -1);
    r.k.chan.assign(r.k.K, 0);
    for (int64_t i = 0; i < p.kh; ++i)
      for (int64_t j = 0; j < p.kw; ++j)
        for (int64_t c = 0; c < p.C; ++c) {
          const int64_t k = i * row_w + j * Cp + c;
          r.k.tap[k] = static_cast<int32_t>(i * p.kw + j);
          r.k.chan[k] = static_cast<int32_t>(c);
        }
  }
  int64_t bw = mm ? r.k.K : RU(Cp * p.kw, 32);
  if (pc.act_block_w > 0) bw = pc.act_block_w * 32;
  for (int64_t k = 0; k < r.k.K; k += bw) r.k.block_begin.push_back(k);
  r.k.block_begin.push_back(r.k.K);
  r.act_block_w_ntiles = static_cast<int>(bw / 32);
  r.weights_dtype = pc.EffectiveWeightsDType(host_w);
  r.output_dtype = pc.EffectiveOutputDType();
  r.fp32_dest_acc = pc.EffectiveFp32DestAcc(host_w);
  r.act_dtype = mm ? pc.input_dtype : r.output_dtype;
  r.l1_acc_effective = DeterminePackerL1Acc(pc.packer_l1_acc, p.has_bias, r.k.num_blocks());
  r.partials_dtype = (mm && r.fp32_dest_acc) ? DeviceDType::kFloat32 : r.output_dtype;
  r.bfp8_pack_precise = pc.bfp8_pack_precise;
  r.fp32_reload_tf32 = pc.fp32_partial_reload != PartialReload::kLossless;
  r.activation = p.activation;
  return r;
}

ProgramReport ToProgramReport(const ConvProgram& p) {
  ProgramReport r;
  r.path = ConvProgramPathName(p.path);
  r.shard_layout = p.shard_layout;
  r.cin_align = p.cin_align;
  r.cin_padded = p.cin_padded;
  r.k_blocks = static_cast<int>(p.k.num_blocks());
  r.act_block_w_ntiles = p.act_block_w_ntiles;
  r.l1_acc_effective = p.l1_acc_effective;
  r.partials_dtype = p.partials_dtype;
  r.act_dtype = p.act_dtype;
  return r;
}

std::string ConvProgramSummary(const ConvProgram& p) {
  return std::string("program=") + ConvProgramPathName(p.path) + " shard=" + ShardLayoutName(p.shard_layout) +
         " cin_align=" + std::to_string(p.cin_align) + " K=" + std::to_string(p.k.K) + " k_blocks=" +
         std::to_string(p.k.num_blocks()) + " partials=" + DeviceDTypeName(p.partials_dtype) +
         (p.l1_acc_effective ? " l1_acc" : "") + " Dst=" + (p.fp32_dest_acc ? "fp32" : "bf16");
}

}  // namespace kiln::device::tt_emu
