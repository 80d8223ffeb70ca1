// Program selection: the decisions TT-NN's conv2d makes, one function each, named after the
// tenstorrent/tt-metal function it follows (ttnn/cpp/ttnn/operations/conv/conv2d/conv2d_utils.cpp
// unless noted; file commits in docs/specs/tt-metal-followed.md). Re-expressed, not copied.
// K layouts and the L1 estimate live in program_layout.cc. Interface: program.h.
#include "device/backends/tt_emu/program.h"

#include <algorithm>
#include <cstdio>

namespace kiln::device::tt_emu {
namespace {

int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
int64_t DivUp(int64_t v, int64_t m) { return (v + m - 1) / m; }

// Usable L1 per core: MEM_L1_SIZE (tt_metal/hw/inc/<arch>/dev_mem_map.h: 1464 KiB wormhole,
// 1536 KiB blackhole) minus what is not the allocator's. Approximate: firmware/mailbox map end
// (~29 KiB), the kernel-config ring buffer (~69 KiB) and the l1_small region (16 KiB, the
// l1_small_size tt-metal's conv tests open the device with) are taken off; the exact
// unreserved base depends on the tree and the device open parameters.
constexpr int64_t kL1Reserved = 29 * 1024 + 69 * 1024 + 16 * 1024;

std::string MiB(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

const char* LayoutWord(ShardLayout l) {
  switch (l) {
    case ShardLayout::kHeight: return "height_sharded";
    case ShardLayout::kBlock: return "block_sharded";
    case ShardLayout::kWidth: return "width_sharded";
    case ShardLayout::kAuto: return "auto";
  }
  return "?";
}

std::string ConvName(const ConvProblem& p, Board board) {
  return "conv " + std::to_string(p.kh) + "x" + std::to_string(p.kw) + " " + std::to_string(p.C) + "→" +
         std::to_string(p.O) + " on " + BoardName(board);
}

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

Result<BoardInfo> GetBoardInfo(Board board, Arch arch) {
  if (board == Board::kDefault) board = arch == Arch::kBlackhole ? Board::kP150 : Board::kN150;
  if (!BoardFitsArch(board, arch)) {
    return InvalidArgument(std::string("board ") + BoardName(board) + " is not a " + ArchName(arch) + " board");
  }
  BoardInfo b{board, arch, 8, 8, 0};
  switch (board) {
    // wormhole_b0_80_arch.yaml nebula_x1 (n150): compute_with_storage_grid_range [0,0]..[7,7].
    case Board::kN150: b.grid_x = 8; b.grid_y = 8; break;
    // nebula_x2 (n300) per chip: 8×8 with ethernet dispatch (wormhole_b0_80_arch_eth_dispatch.yaml;
    // 8×7 with tensix dispatch in wormhole_b0_80_arch.yaml).
    case Board::kN300: b.grid_x = 8; b.grid_y = 8; break;
    // blackhole_140_arch.yaml, dispatch on a column (DispatchCoreConfig::get_default_axis = COL):
    // unharvested 14×10 tensix (p150) → [0,0]..[12,9]; 2× harvested 12×10 (p100) → [0,0]..[10,9].
    case Board::kP150: b.grid_x = 13; b.grid_y = 10; break;
    case Board::kP100: b.grid_x = 11; b.grid_y = 10; break;
    case Board::kDefault: break;
  }
  const int64_t l1 = arch == Arch::kBlackhole ? 1536 * 1024 : 1464 * 1024;
  b.l1_budget_bytes = l1 - kL1Reserved;
  return b;
}

// --- find_closest_largest_divisor family --------------------------------------------------------

uint32_t FindClosestLargestDivisor(uint32_t num, uint32_t start_divisor) {
  uint32_t d = start_divisor;
  while (d > 1 && num % d != 0) --d;
  return d;
}

uint32_t FindClosestLargestDivisor(uint32_t num1, uint32_t num2, uint32_t start_divisor) {
  uint32_t d = start_divisor;
  while (d > 1 && (num1 % d != 0 || num2 % d != 0)) --d;
  return d;
}

uint32_t FindClosestLargestDivisorWithNumPadding(uint32_t num, uint32_t start_divisor) {
  // Largest d ≤ start whose padding round_up(num, d) − num stays below one share padded/d.
  uint32_t d = start_divisor;
  uint32_t padded = static_cast<uint32_t>(RoundUp(num, d));
  while (d > 1 && (padded - num) >= padded / d) {
    --d;
    padded = static_cast<uint32_t>(RoundUp(num, d));
  }
  return d;
}

uint32_t FindClosestLargestDivisorWithNumPadding(uint32_t num1, uint32_t num2, uint32_t start_divisor) {
  uint32_t d = start_divisor;
  auto bad = [&](uint32_t dd) {
    const uint32_t p1 = static_cast<uint32_t>(RoundUp(num1, dd)), p2 = static_cast<uint32_t>(RoundUp(num2, dd));
    return (p1 - num1) >= p1 / dd || (p2 - num2) >= p2 / dd;
  };
  while (d > 1 && bad(d)) --d;
  return d;
}

uint32_t FindClosestLargestDivisorWithNumPaddingAndMult(uint32_t num, uint32_t start_divisor, uint32_t mult) {
  uint32_t d = start_divisor;
  uint32_t padded = static_cast<uint32_t>(RoundUp(num, static_cast<int64_t>(d) * mult));
  while ((padded - num) >= padded / d && d > 1) {
    --d;
    padded = static_cast<uint32_t>(RoundUp(num, static_cast<int64_t>(d) * mult));
  }
  return d;
}

// --- program path ---------------------------------------------------------------------------------

bool UseMatmulFor1x1Conv(const ConvProblem& p, ShardLayout requested) {
  // Groups are ignored by the recorded version (the parameter is unnamed there).
  return p.kh == 1 && p.kw == 1 && p.sh == 1 && p.sw == 1 && p.pads == std::array<int64_t, 4>{0, 0, 0, 0} &&
         p.dh == 1 && p.dw == 1 && requested != ShardLayout::kWidth;
}

bool Is1dDepthwiseConv(const ConvProblem& p) {
  const bool dw = p.group == p.C && p.group == p.O;
  return dw && p.kh == 1 && p.H == 1 && p.kw == 1 && !p.has_bias;
}

bool Is2dDepthwiseConv(const ConvProblem& p) {
  const bool dw = p.group == p.C && p.group == p.O;
  const bool h1d = p.kh == 1 && p.H == 1, w1d = p.kw == 1 && p.W == 1;
  return dw && !h1d && !w1d && (p.kh > 1 || p.kw > 1);
}

bool AutoEnableKernelFolding(const ConvProblem& p, InputLayout input_layout) {
  if (p.sh != p.kh || p.sw != p.kw) return false;
  if (p.sh == 1 && p.sw == 1) return false;
  if (p.dh != 1 || p.dw != 1) return false;
  const int64_t ph = p.H + p.pads[0] + p.pads[2], pw = p.W + p.pads[1] + p.pads[3];
  if (ph % p.sh != 0 || pw % p.sw != 0) return false;
  const bool zero_pad = p.pads == std::array<int64_t, 4>{0, 0, 0, 0};
  // A host input goes to DRAM (conv2d.cpp conv2d_DRAM), so the is_dram() branch decides.
  return input_layout == InputLayout::kRowMajor || zero_pad;
}

ConvProblem FoldedProblem(const ConvProblem& p) {
  ConvProblem f = p;
  f.H = (p.H + p.pads[0] + p.pads[2]) / p.sh;
  f.W = (p.W + p.pads[1] + p.pads[3]) / p.sw;
  f.C = p.C * p.sh * p.sw;
  f.kh = DivUp(p.kh, p.sh);
  f.kw = DivUp(p.kw, p.sw);
  f.sh = f.sw = 1;
  f.pads = {0, 0, 0, 0};
  f.OH = f.H - f.kh + 1;
  f.OW = f.W - f.kw + 1;
  // Groups: the dense block-diagonal weight is folded like any other (prepare_conv2d_weights.cpp).
  f.group = 1;
  return f;
}

int GetInputChannelsAlignment(ShardLayout layout, InputLayout input_layout, bool is_mm_conv) {
  // Not matmul, not width sharded, row-major input: the halo writes row-major sticks, so 16-byte L1
  // alignment / 2-byte bf16 = 8 channels. Everything else: one tile width.
  if (!is_mm_conv && layout != ShardLayout::kWidth && input_layout == InputLayout::kRowMajor) return 8;
  return 32;
}

ParallelConfig DetermineParallelConfig(ShardLayout layout, int64_t batch, int64_t in_channels, int64_t out_h,
                                       int64_t out_w, int64_t out_channels, int cin_align, int grid_x, int grid_y,
                                       bool enable_channels_padding, int act_block_h_override, int64_t groups) {
  if (groups == in_channels && groups == out_channels) cin_align = 32;  // depthwise
  const uint32_t out_nhw_ntiles = static_cast<uint32_t>(DivUp(batch * out_h * out_w, 32));
  const uint32_t out_c_ntiles = static_cast<uint32_t>(DivUp(out_channels, 32));
  const uint32_t abh_ntiles = act_block_h_override == 0 ? 1 : static_cast<uint32_t>(act_block_h_override / 32);
  const uint32_t max_cores = static_cast<uint32_t>(grid_x * grid_y);
  ParallelConfig pc;
  pc.layout = layout;
  if (layout == ShardLayout::kBlock) {
    const uint32_t c_blocks = static_cast<uint32_t>(DivUp(in_channels, cin_align));
    pc.num_cores_nhw = static_cast<int>(
        FindClosestLargestDivisorWithNumPaddingAndMult(out_nhw_ntiles, static_cast<uint32_t>(grid_y), abh_ntiles));
    pc.num_cores_c = static_cast<int>(
        enable_channels_padding ? FindClosestLargestDivisorWithNumPadding(c_blocks, static_cast<uint32_t>(grid_x))
                                : FindClosestLargestDivisor(out_c_ntiles, c_blocks, static_cast<uint32_t>(grid_x)));
    pc.num_cores = pc.num_cores_nhw * pc.num_cores_c;
  } else if (layout == ShardLayout::kWidth) {
    const uint32_t c_ntiles = static_cast<uint32_t>(DivUp(in_channels, 32));
    pc.num_cores_c = static_cast<int>(enable_channels_padding ? FindClosestLargestDivisorWithNumPadding(c_ntiles, max_cores)
                                                              : FindClosestLargestDivisor(c_ntiles, max_cores));
    pc.num_cores_nhw = 1;
    pc.num_cores = pc.num_cores_c;
  } else {  // height
    pc.num_cores_nhw =
        static_cast<int>(FindClosestLargestDivisorWithNumPaddingAndMult(out_nhw_ntiles, max_cores, abh_ntiles));
    pc.num_cores_c = 1;
    pc.num_cores = pc.num_cores_nhw;
  }
  return pc;
}

ParallelConfig DetermineOutputParallelConfig(const ParallelConfig& input, int grid_x, int grid_y, int64_t out_channels,
                                             bool is_mm_conv) {
  ParallelConfig out = input;
  if (is_mm_conv) return out;
  const uint32_t oc_ntiles = static_cast<uint32_t>(DivUp(out_channels, 32));
  if (input.layout == ShardLayout::kWidth) {
    out.num_cores_c = static_cast<int>(FindClosestLargestDivisorWithNumPadding(oc_ntiles, static_cast<uint32_t>(grid_x * grid_y)));
    out.num_cores = out.num_cores_c;
  } else if (input.layout == ShardLayout::kBlock) {
    out.num_cores_c = static_cast<int>(FindClosestLargestDivisorWithNumPadding(oc_ntiles, static_cast<uint32_t>(grid_x)));
    out.num_cores = out.num_cores_nhw * out.num_cores_c;
  }
  return out;
}

std::pair<int, int> DetermineLargestSubblockSize(int block_h, int block_w, bool fp32_accum) {
  static constexpr std::array<std::pair<int, int>, 20> kSubblocks = {{
      {2, 4}, {4, 2}, {1, 8}, {8, 1}, {1, 7}, {7, 1}, {2, 3}, {3, 2}, {1, 6}, {6, 1},
      {1, 5}, {5, 1}, {2, 2}, {1, 4}, {4, 1}, {1, 3}, {3, 1}, {1, 2}, {2, 1}, {1, 1},
  }};
  for (auto [h, w] : kSubblocks) {
    if (fp32_accum && h * w > 4) continue;  // half of Dst holds 4 fp32 tiles
    if (block_h % h != 0 || block_w % w != 0) continue;
    if (w != block_w && h != 1) continue;  // a multi-row subblock must span the block width
    return {h, w};
  }
  return {1, 1};
}

Result<ConvBlockConfig> DeterminePerCoreConvBlockConfig(const ParallelConfig& input, int per_core_out_h_ntiles,
                                                        int per_core_out_w_ntiles, int64_t padded_in_channels,
                                                        int64_t padded_out_h_ntiles_per_core,
                                                        int act_block_h_override, int act_block_w_div, int64_t kh,
                                                        int64_t kw, int64_t out_w, bool fp32_accum, bool full_inner_dim,
                                                        bool enable_activation_reuse, bool is_1d_depthwise) {
  ConvBlockConfig b;
  b.act_block_h_ntiles = per_core_out_h_ntiles;
  if (act_block_h_override > 0) {
    const uint32_t o = static_cast<uint32_t>(act_block_h_override / 32);
    b.act_block_h_ntiles = padded_out_h_ntiles_per_core % o == 0
                               ? static_cast<int>(o)
                               : static_cast<int>(FindClosestLargestDivisor(
                                     static_cast<uint32_t>(padded_out_h_ntiles_per_core), o));
  }
  if (input.layout == ShardLayout::kHeight && enable_activation_reuse && b.act_block_h_ntiles <= DivUp(out_w, 32)) {
    return FailedPrecondition("activation reuse needs act_block_h (" + std::to_string(b.act_block_h_ntiles) +
                              " tiles) > output width in tiles (" + std::to_string(DivUp(out_w, 32)) + ")");
  }
  int64_t abw = 0;
  if (input.layout == ShardLayout::kHeight) {
    abw = is_1d_depthwise ? RoundUp(padded_in_channels, 32)
                          : RoundUp(padded_in_channels * kw * (enable_activation_reuse ? kh : 1), 32);
  } else if (input.layout == ShardLayout::kBlock) {
    abw = RoundUp(padded_in_channels / input.num_cores_c * kw * (full_inner_dim ? kh : 1), 32);
  } else {
    const int64_t div = static_cast<int64_t>(32) * input.num_cores * act_block_w_div;
    if (padded_in_channels % div != 0) {
      return FailedPrecondition("width_sharded needs Cin padded (" + std::to_string(padded_in_channels) +
                                ") to be a multiple of 32 x " + std::to_string(input.num_cores) + " cores x act_block_w_div " +
                                std::to_string(act_block_w_div));
    }
    abw = padded_in_channels * kh * kw / (input.num_cores * act_block_w_div);
  }
  if (abw % 32 != 0) {
    return FailedPrecondition("activation block width " + std::to_string(abw) + " is not a multiple of 32");
  }
  b.act_block_w_ntiles = static_cast<int>(abw / 32);
  auto [sh, sw] = DetermineLargestSubblockSize(b.act_block_h_ntiles, per_core_out_w_ntiles, fp32_accum);
  b.out_subblock_h_ntiles = sh;
  b.out_subblock_w_ntiles = sw;
  return b;
}

Result<ConvConfigs> GetConvConfigs(const ParallelConfig& input, const ParallelConfig& output, int64_t in_channels_padded,
                                   const ConvProblem& p, const PrecisionConfig& precision, bool fp32_accum,
                                   bool is_1d_depthwise) {
  ConvConfigs c;
  const int64_t nhw = p.N * p.OH * p.OW;
  c.cout_padded = RoundUp(p.O, static_cast<int64_t>(output.num_cores_c) * 32);
  // create_sharded_memory_config_from_parallel_config: rows padded to num_cores_nhw tiles (not for WS).
  const int64_t nhw_padded = output.layout == ShardLayout::kWidth ? nhw : RoundUp(nhw, 32LL * output.num_cores_nhw);
  const int64_t shard_h = nhw_padded / output.num_cores_nhw;
  const int64_t shard_w = c.cout_padded / output.num_cores_c;
  c.per_core_out_h_ntiles = static_cast<int>(DivUp(shard_h, 32));
  c.per_core_out_w_ntiles = static_cast<int>(DivUp(shard_w, 32));
  c.nhw_out_padded_ntiles_per_core = shard_h / 32;
  auto b = DeterminePerCoreConvBlockConfig(
      input, c.per_core_out_h_ntiles, c.per_core_out_w_ntiles, in_channels_padded, c.nhw_out_padded_ntiles_per_core,
      precision.act_block_h_override, precision.act_block_w_div, p.kh, p.kw, p.OW, fp32_accum, precision.full_inner_dim,
      precision.enable_activation_reuse, is_1d_depthwise);
  if (!b.ok()) return b.status();
  c.block = b.value();
  return c;
}

bool DeterminePackerL1Acc(bool packer_l1_acc, bool enable_bias, int64_t in0_num_blocks_w) {
  return packer_l1_acc && ((enable_bias && in0_num_blocks_w > 1) || in0_num_blocks_w > 2);
}

DeviceDType GetSinglePackSrcFormat(DeviceDType output, bool fp32_dest_acc, bool bfp8_pack_precise) {
  const bool bfp = output == DeviceDType::kBFloat8B || output == DeviceDType::kBFloat4B;
  if (fp32_dest_acc) {
    if (bfp) return bfp8_pack_precise ? DeviceDType::kFloat32 : DeviceDType::kBFloat8B;
    return output;  // Float16_b / Float32 pack as themselves
  }
  if (output == DeviceDType::kFloat32) return DeviceDType::kBFloat16;  // the bf16 Dst (unpack conditional format)
  if (bfp) return bfp8_pack_precise ? DeviceDType::kBFloat16 : DeviceDType::kBFloat8B;
  return output;
}

int SimpleMatmulIn0BlockW(int64_t m, int64_t k, int64_t n, int grid_x, int grid_y) {
  const int64_t mt = DivUp(m, 32), kt = DivUp(k, 32), nt = DivUp(n, 32);
  const int64_t height = mt * 32, width = nt * 32;
  // is_narrow_shape with all operands in DRAM.
  const int64_t ratio = height > width ? height / width : width / height;
  const bool narrow = ratio > 8 || height <= 32 || width <= 32;
  const bool wide = narrow && width > height, tall = narrow && !wide;
  constexpr int64_t kPerCore = 16;  // get_per_core_factor, assumed to fit (approximation)
  const int64_t nby = (mt - 1) / kPerCore + 1, nbx = (nt - 1) / kPerCore + 1;
  int64_t cr_x = 0, cr_y = 0;  // get_core_range
  if (!(nby == 1 && nbx == 1) && nby <= grid_y && nbx <= grid_x) {
    cr_x = nbx;
    cr_y = nby;
  }
  if (cr_y == 1 || wide || cr_x == 1 || tall) return kt % 2 == 0 ? 2 : 1;  // get_mcast_1d_config
  return static_cast<int>(kt % grid_x == 0 ? kt / grid_x : 1);            // 2-D mcast, all DRAM interleaved
}

DepthwiseProgram ResolveDepthwiseProgram(DepthwiseProgram d) {
  return d == DepthwiseProgram::kRecorded ? DepthwiseProgram::kPoolMultiply : d;
}
PartialReload ResolvePartialReload(PartialReload r) {
  return r == PartialReload::kRecorded ? PartialReload::kTf32 : r;
}
FusedHardswish ResolveFusedHardswish(FusedHardswish h) {
  return h == FusedHardswish::kRecorded ? FusedHardswish::kDropped : h;
}

const char* TtMetalFollowed() {
  return "tt-metal conv2d/conv2d_utils.cpp@002a3f41 conv2d.cpp@645aa768 "
         "conv2d_op_program_factory_common.cpp@003324fc prepare_conv2d_weights.cpp@002a3f41 "
         "device/conv2d_device_operation.cpp@002a3f41 unary_op_utils.cpp@005cd99a "
         "(docs/specs/tt-metal-followed.md)";
}

ProgramReport ToProgramReport(const ConvProgram& g) {
  ProgramReport r;
  r.path = ConvProgramPathName(g.path);
  r.kernel_stride_folded = g.kernel_stride_folded;
  r.shard_layout = g.shard_layout;
  r.shard_layout_auto = g.shard_layout_auto;
  r.board = g.board;
  r.grid_x = g.grid_x;
  r.grid_y = g.grid_y;
  r.num_cores = g.num_cores;
  r.num_cores_nhw = g.num_cores_nhw;
  r.num_cores_c = g.num_cores_c_in;
  r.cin_align = g.cin_align;
  r.cin_padded = g.cin_padded;
  // The depthwise pool program has no K blocks: its taps are multiplied and reduced per channel
  // (depthwise_engine.h), so the generic conv's blocking is not reported for it.
  const bool pool = g.path == ConvProgramPath::kDepthwise2d;
  r.k_blocks = pool ? 0 : static_cast<int>(g.k.num_blocks());
  r.act_block_h_ntiles = g.act_block_h_ntiles;
  r.act_block_w_ntiles = g.act_block_w_ntiles;
  r.l1_acc_effective = g.l1_acc_effective;
  r.partials_dtype = pool ? g.act_dtype : g.partials_dtype;  // pool: the mul CB holds the products
  r.pack_src_dtype = g.pack_src_dtype;
  r.act_dtype = g.act_dtype;
  r.l1_bytes_per_core = g.l1_bytes_per_core;
  r.notes = g.notes;
  return r;
}

std::string ConvProgramSummary(const ConvProgram& g) {
  std::string s = std::string("program=") + ConvProgramPathName(g.path);
  if (g.kernel_stride_folded) s += "(folded)";
  s += std::string(" shard=") + ShardLayoutName(g.shard_layout) + (g.shard_layout_auto ? "(auto)" : "");
  if (g.matmul_interleaved) s += " interleaved";
  s += std::string(" board=") + BoardName(g.board) + " grid=" + std::to_string(g.grid_x) + "x" + std::to_string(g.grid_y);
  s += " cores=" + std::to_string(g.num_cores) + " (nhw " + std::to_string(g.num_cores_nhw) + ", c_in " +
       std::to_string(g.num_cores_c_in) + ", c_out " + std::to_string(g.num_cores_c_out) + ")";
  s += " cin_align=" + std::to_string(g.cin_align) + " cin_padded=" + std::to_string(g.cin_padded);
  if (g.path == ConvProgramPath::kDepthwise2d) {
    s += " per-tap multiply + reduce (no K blocks)";
  } else {
    s += " K=" + std::to_string(g.k.K) + " k_blocks=" + std::to_string(g.k.num_blocks());
  }
  s += " act_block_h=" + std::to_string(g.act_block_h_ntiles) + " act_block_w=" + std::to_string(g.act_block_w_ntiles);
  s += std::string(" l1_acc=") + (g.l1_acc_effective ? "1" : "0");
  s += std::string(" act=") + DeviceDTypeName(g.act_dtype) + " partials=" + DeviceDTypeName(g.partials_dtype) +
       " pack_src=" + DeviceDTypeName(g.pack_src_dtype) + " out=" + DeviceDTypeName(g.output_dtype);
  s += " l1=" + MiB(g.l1_bytes_per_core) + "/" + MiB(g.l1_budget_bytes);
  return s;
}

// --- SelectConvProgram -------------------------------------------------------------------------------

namespace {
Result<ConvProgram> SelectOne(const ConvProblem& problem, const PrecisionConfig& precision,
                              DeviceDType host_weights_dtype);
}  // namespace

Result<ConvProgram> SelectConvProgram(const ConvProblem& problem, const PrecisionConfig& precision,
                                      DeviceDType host_weights_dtype) {
  auto whole = SelectOne(problem, precision, host_weights_dtype);
  if (whole.ok() || whole.status().code() != StatusCode::kFailedPrecondition ||
      whole.status().message().find("of L1 per core") == std::string::npos) {
    return whole;
  }
  // A host input takes conv2d.cpp's DRAM path, which slices the output when one conv does not fit L1
  // (the matmul path never slices). Each slice is a conv of its own (auto-shard included).
  const ConvProblem& p = problem;
  if (UseMatmulFor1x1Conv(p, precision.shard_layout) || AutoEnableKernelFolding(p, precision.input_layout)) {
    return whole;
  }
  for (int64_t n = 2; n <= p.OH; ++n) {
    ConvProblem s = p;
    s.OH = DivUp(p.OH, n);
    // prepare_conv2d_weights.cpp's slice: input rows of the first slice, no bottom padding.
    s.H = (s.OH - 1) * p.sh + (p.kh - 1) * (p.dh - 1) + p.kh - p.pads[0];
    s.pads[2] = 0;
    auto sliced = SelectOne(s, precision, host_weights_dtype);
    if (sliced.ok()) {
      ConvProgram g = std::move(sliced).value();
      g.dram_slices = static_cast<int>(n);
      g.notes.push_back("DRAM slicing: " + std::to_string(n) + " output-height slices of " + std::to_string(s.OH) +
                        " rows (whole conv: " + whole.status().message() + ")");
      return g;
    }
    if (sliced.status().message().find("of L1 per core") == std::string::npos) return sliced;
  }
  return whole;
}

namespace {
Result<ConvProgram> SelectOne(const ConvProblem& problem, const PrecisionConfig& precision,
                              DeviceDType host_weights_dtype) {
  if (Status st = precision.Validate(); !st.ok()) return st;
  const ConvProblem& p0 = problem;
  if (p0.N < 1 || p0.C < 1 || p0.O < 1 || p0.kh < 1 || p0.kw < 1 || p0.sh < 1 || p0.sw < 1 || p0.dh < 1 ||
      p0.dw < 1 || p0.group < 1 || p0.C % p0.group != 0 || p0.O % p0.group != 0 || p0.OH < 1 || p0.OW < 1) {
    return InvalidArgument("conv shape is not valid for program selection");
  }
  auto board = GetBoardInfo(precision.board, precision.arch);
  if (!board.ok()) return board.status();
  const BoardInfo& bi = board.value();
  PrecisionConfig r = precision.Resolved(host_weights_dtype);

  ConvProgram g;
  g.board = bi.board;
  g.grid_x = bi.grid_x;
  g.grid_y = bi.grid_y;
  g.l1_budget_bytes = bi.l1_budget_bytes;
  g.weights_dtype = r.EffectiveWeightsDType();
  g.output_dtype = r.EffectiveOutputDType();
  g.fp32_dest_acc = r.EffectiveFp32DestAcc();
  g.partial_reload = ResolvePartialReload(precision.fp32_partial_reload);
  g.fused_hardswish = ResolveFusedHardswish(precision.fused_hardswish);
  g.bfp8_pack_precise = precision.bfp8_pack_precise;
  // Kiln's Activation has no HARDSWISH (device/numerics/types.h), so nothing is dropped here.
  g.activation = problem.activation;

  // conv2d.cpp: matmul for 1x1 stride-1 convs, then kernel == stride folding (which also makes a matmul).
  bool mm = UseMatmulFor1x1Conv(p0, precision.shard_layout);
  ConvProblem p = p0;
  if (AutoEnableKernelFolding(p0, precision.input_layout)) {
    g.kernel_stride_folded = true;
    p = FoldedProblem(p0);
    mm = p0.kh == p0.sh && p0.kw == p0.sw;
    g.notes.push_back("kernel == stride: input folded to " + std::to_string(p.C) + " channels (auto_enable_kernel_folding)");
  }
  g.conv_in_channels = p.C;
  const bool dw = p0.group == p0.C && p0.group == p0.O;
  const bool dw1d = !mm && Is1dDepthwiseConv(p0);
  const bool dw2d = !mm && !g.kernel_stride_folded && Is2dDepthwiseConv(p0);
  g.depthwise_program = ResolveDepthwiseProgram(precision.depthwise_program);
  if (!dw2d && !dw1d) g.depthwise_program = DepthwiseProgram::kDenseConv;

  // Shard layout.
  g.shard_layout_auto = precision.shard_layout == ShardLayout::kAuto;
  g.shard_layout = g.shard_layout_auto
                       ? DetermineConvConfigForAutoShard(p, r, bi.grid_x, bi.grid_y, mm, bi.arch)
                       : precision.shard_layout;
  if (mm && g.shard_layout == ShardLayout::kWidth) {
    return FailedPrecondition(ConvName(p0, bi.board) + ": width_sharded input on the matmul path (kernel == stride "
                                                       "folding) is not supported");
  }
  if (dw1d && g.shard_layout != ShardLayout::kHeight) {
    return FailedPrecondition(ConvName(p0, bi.board) + ": 1-D depthwise supports only height sharding");
  }

  // Channels and cores.
  g.cin_align = dw ? 32 : GetInputChannelsAlignment(g.shard_layout, precision.input_layout, mm);
  const ParallelConfig pin = DetermineParallelConfig(g.shard_layout, p.N, p.C, p.OH, p.OW, p.O, g.cin_align, bi.grid_x,
                                                     bi.grid_y, !mm, precision.act_block_h_override, p.group);
  const ParallelConfig pout = DetermineOutputParallelConfig(pin, bi.grid_x, bi.grid_y, p.O, mm);
  g.num_cores_nhw = pin.num_cores_nhw;
  g.num_cores_c_in = pin.num_cores_c;
  g.num_cores_c_out = pout.num_cores_c;
  g.num_cores = std::max(pin.num_cores, pout.num_cores);
  g.cin_padded = RoundUp(p.C, static_cast<int64_t>(pin.num_cores_c) * g.cin_align);
  auto cfg = GetConvConfigs(pin, pout, g.cin_padded, p, r, g.fp32_dest_acc, dw1d);
  if (!cfg.ok()) return FailedPrecondition(ConvName(p0, bi.board) + ": " + cfg.status().message());
  const ConvConfigs& cc = cfg.value();
  g.cout_padded = cc.cout_padded;
  g.act_block_h_ntiles = cc.block.act_block_h_ntiles;
  g.act_block_w_ntiles = cc.block.act_block_w_ntiles;
  g.out_subblock_h_ntiles = cc.block.out_subblock_h_ntiles;
  g.out_subblock_w_ntiles = cc.block.out_subblock_w_ntiles;
  g.per_core_out_h_ntiles = cc.per_core_out_h_ntiles;
  g.per_core_out_w_ntiles = cc.per_core_out_w_ntiles;

  // Path and K layout.
  if (mm) {
    g.path = ConvProgramPath::kMatmul;
    g.act_dtype = r.input_dtype;  // tilized in its own dtype for ttnn::linear
    if (g.shard_layout_auto) {
      // Auto-shard + matmul: the input stays DRAM interleaved and ttnn::linear picks its config.
      g.matmul_interleaved = true;
      const int64_t K = RoundUp(p.C * p.kh * p.kw, 32);
      g.act_block_w_ntiles = SimpleMatmulIn0BlockW(p.N * p.OH * p.OW, K, p.O, bi.grid_x, bi.grid_y);
      g.k = KLayoutInterleavedMatmul(p.C, p.kh, p.kw, g.act_block_w_ntiles);
      g.cin_padded = RoundUp(p.C, 32);
      g.notes.push_back("matmul on DRAM-interleaved operands: in0_block_w from create_simple_matmul_program_config "
                        "(approximate: L1 fit of 16x16-tile blocks assumed)");
    } else if (g.shard_layout == ShardLayout::kHeight) {
      g.k = KLayoutHeightSharded(p.C, g.cin_padded, 1, 1, g.act_block_w_ntiles, false);
    } else {
      g.k = KLayoutBlockSharded(p.C, g.cin_padded, 1, 1, g.num_cores_c_in, false);
    }
    if (g.kernel_stride_folded) g.k = UnfoldKLayout(g.k, p0.C, p0.sh, p0.sw, p0.kw);
  } else {
    g.path = ConvProgramPath::kConv2d;
    g.act_dtype = g.output_dtype;  // ACT_TILIZED CB has the output data format (get_cb_info)
    if (dw2d && g.depthwise_program == DepthwiseProgram::kPoolMultiply) {
      g.path = ConvProgramPath::kDepthwise2d;
      g.act_dtype = r.input_dtype == DeviceDType::kFloat32 ? DeviceDType::kFloat32 : DeviceDType::kBFloat16;
      g.notes.push_back("2-D depthwise: Conv2dDepthwiseProgramFactory (per-tap multiply + reduce)");
      if (p.dh != 1 || p.dw != 1) {
        // The factory sets the pool reader's dilation to 1 on the recorded tree
        // (conv2d_op_depthwise_program_factory.cpp); tt-emu keeps the conv's dilation.
        g.notes.push_back("dilated 2-D depthwise: the recorded factory passes dilation 1 to its reader; tt-emu "
                          "applies the conv's dilation, so a card run may differ");
      }
    } else if (dw1d) {
      g.path = ConvProgramPath::kDepthwise1d;
      g.notes.push_back("1-D depthwise without bias: compute_depthwise_conv1d.cpp");
    } else if (dw) {
      g.notes.push_back("depthwise as the generic conv with dense block-diagonal weights");
    }
    // The depthwise programs get the K layout the generic conv has for the same shard layout.
    if (g.shard_layout == ShardLayout::kHeight) {
      g.k = KLayoutHeightSharded(p.C, g.cin_padded, p.kh, p.kw, g.act_block_w_ntiles, precision.enable_activation_reuse);
    } else if (g.shard_layout == ShardLayout::kBlock) {
      g.k = KLayoutBlockSharded(p.C, g.cin_padded, p.kh, p.kw, g.num_cores_c_in, precision.full_inner_dim);
    } else {
      g.k = KLayoutWidthSharded(p.C, g.cin_padded, p.kh, p.kw, g.act_block_w_ntiles);
    }
  }
  if (precision.act_block_w > 0 && g.path != ConvProgramPath::kDepthwise2d && g.path != ConvProgramPath::kDepthwise1d) {
    ResplitKBlocks(&g.k, precision.act_block_w);
    g.act_block_w_ntiles = precision.act_block_w;
    g.notes.push_back("act_block_w=" + std::to_string(precision.act_block_w) + " (Kiln override of in0_block_w)");
  }

  // Partials, L1 accumulation, pack.
  const int64_t nb = g.k.num_blocks();
  const bool kblocked = g.path == ConvProgramPath::kConv2d || g.path == ConvProgramPath::kMatmul;
  g.l1_acc_effective = kblocked && DeterminePackerL1Acc(precision.packer_l1_acc, p.has_bias, nb);
  if (g.path == ConvProgramPath::kMatmul) {
    // Matmul factories: interm0 is Float32 whenever fp32 accumulation is on.
    g.partials_dtype = g.fp32_dest_acc ? DeviceDType::kFloat32
                                       : (g.l1_acc_effective ? DeviceDType::kBFloat16 : g.output_dtype);
    if (precision.packer_l1_acc) g.notes.push_back("matmul L1 accumulation rule taken as determine_packer_l1_acc's");
  } else {
    g.partials_dtype = g.l1_acc_effective ? (g.fp32_dest_acc ? DeviceDType::kFloat32 : DeviceDType::kBFloat16)
                                          : g.output_dtype;
  }
  g.pack_src_dtype = GetSinglePackSrcFormat(g.output_dtype, g.fp32_dest_acc, precision.bfp8_pack_precise);

  // L1 (not for the interleaved matmul, whose CB sizes ttnn::linear fits itself).
  if (!g.matmul_interleaved) {
    const L1Usage u = CalculateL1UsageForConvOp(p, g.shard_layout, r, bi.grid_x, bi.grid_y, mm, bi.arch);
    g.l1_bytes_per_core = u.total_bytes;
    g.notes.push_back("L1 per core " + MiB(u.total_bytes) + " (CBs " + MiB(u.cb_bytes) + ", output " +
                      MiB(u.tensor_bytes) + ", halo " + MiB(u.halo_bytes) + ", TT-NN's estimate)");
    if (u.total_bytes > bi.l1_budget_bytes) {
      return FailedPrecondition(ConvName(p0, bi.board) + ": " + LayoutWord(g.shard_layout) + " needs " +
                                MiB(u.total_bytes) + " of L1 per core, budget " + MiB(bi.l1_budget_bytes));
    }
  }
  if (g.fp32_dest_acc && g.partials_dtype == DeviceDType::kFloat32 && nb > 1) {
    g.notes.push_back(std::string("fp32 partials reloaded ") +
                      (g.partial_reload == PartialReload::kTf32 ? "as Tf32 (recorded version)" : "losslessly"));
  }
  return g;
}
}  // namespace

}  // namespace kiln::device::tt_emu
