// K layouts of the weight matrix (prepare_conv2d_weights.cpp) and the per-core L1 estimate of
// conv2d_utils.cpp calculate_L1_usage_for_conv_op / conv2d_op_program_factory_common.cpp get_cb_info
// (tenstorrent/tt-metal; commits in docs/specs/tt-metal-followed.md). Re-expressed, not copied.
// Interface and conventions: program.h.
#include <algorithm>
#include <cmath>

#include "device/backends/tt_emu/program.h"

namespace kiln::device::tt_emu {
namespace {

int64_t RoundUp(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
int64_t DivUp(int64_t v, int64_t m) { return (v + m - 1) / m; }

KLayout EmptyLayout(int64_t K) {
  KLayout k;
  k.K = K;
  k.tap.assign(static_cast<size_t>(K), -1);
  k.chan.assign(static_cast<size_t>(K), -1);
  return k;
}

void Put(KLayout* k, int64_t index, int64_t tap, int64_t chan, int64_t C) {
  if (chan >= C) return;  // channel padding stays a zero entry
  k->tap[static_cast<size_t>(index)] = static_cast<int32_t>(tap);
  k->chan[static_cast<size_t>(index)] = static_cast<int32_t>(chan);
}

void UniformBlocks(KLayout* k, int64_t width) {
  k->block_begin.clear();
  for (int64_t b = 0; b < k->K; b += width) k->block_begin.push_back(b);
  k->block_begin.push_back(k->K);
}

// tt::tile_size per data format (32×32 tile; bfp: 1 exponent byte per 16 values).
int64_t TileBytes(DeviceDType d) {
  switch (d) {
    case DeviceDType::kFloat32: return 4096;
    case DeviceDType::kBFloat16: return 2048;
    case DeviceDType::kBFloat8B: return 1024 + 64;
    case DeviceDType::kBFloat4B: return 512 + 64;
  }
  return 2048;
}

// conv2d_op_program_factory_common.cpp get_noc_transfer_rate (GB/s, clamped linear).
float NocTransferRate(uint32_t bytes, bool blackhole) {
  const uint32_t lo = 16, hi = blackhole ? 2048 : 1024;
  const float min_rate = blackhole ? 0.671f : 0.868f, peak = blackhole ? 48.5f : 27.7f;
  const uint32_t c = std::max(lo, std::min(bytes, hi));
  return min_rate + (peak - min_rate) / static_cast<float>(hi - lo) * static_cast<float>(c - lo);
}

// conv2d_op_program_factory_common.cpp is_split_reader_supported / is_split_reader_viable.
bool SplitReaderSupported(ShardLayout layout, bool is_1d_dw, int act_block_h, int per_core_out_h, int64_t cin,
                          int64_t cout, int64_t kw, bool blackhole, bool fp32_input) {
  if (layout != ShardLayout::kHeight || is_1d_dw || act_block_h <= 1) return false;
  const float unit = static_cast<float>((fp32_input ? 4 : 2) * cin * kw);
  const float time = unit / NocTransferRate(static_cast<uint32_t>(unit), blackhole);
  const float weights_cost = static_cast<float>(1.0 * cin * cout * kw) / (blackhole ? 32 : 16);
  const float act_cost = static_cast<float>(per_core_out_h) * 32.0f * time;
  return act_cost > weights_cost;
}

}  // namespace

int64_t HaloInputSticksPerCore(const ConvProblem& p, int num_cores_nhw) {
  const int64_t ph = p.H + p.pads[0] + p.pads[2], pw = p.W + p.pads[1] + p.pads[3];
  const int64_t nhw = p.N * p.OH * p.OW;
  // get_output_shard_y(snap_to_tile): output rows padded to num_cores_nhw tiles.
  const int64_t shard = RoundUp(nhw, 32LL * num_cores_nhw) / num_cores_nhw;
  auto origin = [&](int64_t i) {  // generate_op_trace_metadata: window origin of output pixel i
    const int64_t n = i / (p.OH * p.OW), r = i % (p.OH * p.OW);
    return n * ph * pw + (r / p.OW) * p.sh * pw + (r % p.OW) * p.sw;
  };
  const int64_t halo = (p.dh * (p.kh - 1)) * pw + p.dw * (p.kw - 1);  // halo_with_pad_len
  int64_t most = 0;
  for (int64_t start = 0; start < nhw; start += shard) {
    const int64_t end = std::min(start + shard, nhw) - 1;
    most = std::max(most, origin(end) + halo - origin(start) + 1);
  }
  return most;
}

KLayout KLayoutHeightSharded(int64_t C, int64_t cin_padded, int64_t kh, int64_t kw, int act_block_w_ntiles,
                             bool activation_reuse) {
  const int64_t block = static_cast<int64_t>(act_block_w_ntiles) * 32;
  if (activation_reuse) {  // whole (kh, kw, c) inner dim in one block
    KLayout k = EmptyLayout(RoundUp(cin_padded * kh * kw, 32));
    for (int64_t i = 0; i < kh; ++i)
      for (int64_t j = 0; j < kw; ++j)
        for (int64_t c = 0; c < cin_padded; ++c) Put(&k, (i * kw + j) * cin_padded + c, i * kw + j, c, C);
    UniformBlocks(&k, std::max<int64_t>(block, 32));
    return k;
  }
  // One kernel row per block: row i starts at i·block; within it (j, c) contiguous.
  KLayout k = EmptyLayout(kh * block);
  for (int64_t i = 0; i < kh; ++i)
    for (int64_t j = 0; j < kw; ++j)
      for (int64_t c = 0; c < cin_padded; ++c) Put(&k, i * block + j * cin_padded + c, i * kw + j, c, C);
  UniformBlocks(&k, block);
  return k;
}

KLayout KLayoutBlockSharded(int64_t C, int64_t cin_padded, int64_t kh, int64_t kw, int num_cores_c,
                            bool full_inner_dim) {
  const int64_t cs = cin_padded / num_cores_c;  // channels per shard
  const int64_t row_stride = RoundUp(cs * kw * (full_inner_dim ? kh : 1), 32);
  const int64_t shard_rows = full_inner_dim ? row_stride : row_stride * kh;
  KLayout k = EmptyLayout(shard_rows * num_cores_c);
  for (int64_t ic = 0; ic < num_cores_c; ++ic)
    for (int64_t i = 0; i < kh; ++i)
      for (int64_t j = 0; j < kw; ++j)
        for (int64_t c = 0; c < cs; ++c) {
          const int64_t inner = full_inner_dim ? (i * kw + j) * cs + c : i * row_stride + j * cs + c;
          Put(&k, ic * shard_rows + inner, i * kw + j, ic * cs + c, C);
        }
  UniformBlocks(&k, row_stride);  // ncores_c × kh blocks (ncores_c with full_inner_dim)
  return k;
}

KLayout KLayoutWidthSharded(int64_t C, int64_t cin_padded, int64_t kh, int64_t kw, int act_block_w_ntiles) {
  const int64_t block = static_cast<int64_t>(act_block_w_ntiles) * 32;
  KLayout k = EmptyLayout(RoundUp(cin_padded * kh * kw, block));
  for (int64_t t = 0; t < kh * kw; ++t)
    for (int64_t c = 0; c < cin_padded; ++c) Put(&k, t * cin_padded + c, t, c, C);
  UniformBlocks(&k, block);
  return k;
}

KLayout KLayoutInterleavedMatmul(int64_t C, int64_t kh, int64_t kw, int in0_block_w) {
  KLayout k = EmptyLayout(RoundUp(C * kh * kw, 32));
  for (int64_t t = 0; t < kh * kw; ++t)
    for (int64_t c = 0; c < C; ++c) Put(&k, t * C + c, t, c, C);
  UniformBlocks(&k, static_cast<int64_t>(std::max(in0_block_w, 1)) * 32);
  return k;
}

KLayout UnfoldKLayout(const KLayout& folded, int64_t C, int64_t sh, int64_t sw, int64_t kw) {
  KLayout k = folded;
  for (size_t i = 0; i < k.tap.size(); ++i) {
    if (folded.tap[i] < 0) continue;
    const int64_t f = folded.chan[i];  // folded channel (i·sw + j)·C + c (to_folded_weight_layout)
    const int64_t pos = f / C, c = f % C;
    const int64_t ti = pos / sw, tj = pos % sw;
    (void)sh;
    k.tap[i] = static_cast<int32_t>(ti * kw + tj);
    k.chan[i] = static_cast<int32_t>(c);
  }
  return k;
}

void ResplitKBlocks(KLayout* k, int ntiles) { UniformBlocks(k, static_cast<int64_t>(ntiles) * 32); }

// --- L1 estimate ---------------------------------------------------------------------------------

L1Usage CalculateL1UsageForConvOp(const ConvProblem& p, ShardLayout layout, const PrecisionConfig& r, int grid_x,
                                  int grid_y, bool is_mm_conv, Arch arch) {
  L1Usage u;
  const DeviceDType in = r.input_dtype, out = r.EffectiveOutputDType();
  const DeviceDType w = r.EffectiveWeightsDType();
  const bool fp32_acc = r.EffectiveFp32DestAcc();
  const bool is_1d_dw = Is1dDepthwiseConv(p);
  // Halo output is row-major bf16 or fp32 ("Output of halo op is always ROW_MAJOR").
  const DeviceDType conv_in = in == DeviceDType::kFloat32 ? DeviceDType::kFloat32 : DeviceDType::kBFloat16;
  const int64_t in_datum = conv_in == DeviceDType::kFloat32 ? 4 : 2;

  const int align = GetInputChannelsAlignment(layout, r.input_layout, is_mm_conv);
  const int64_t c_aligned = RoundUp(p.C, align);
  const int64_t w_rows = c_aligned * p.kh * p.kw, w_cols = RoundUp(p.O, 32);  // the estimate's weight shape

  const ParallelConfig pin = DetermineParallelConfig(layout, p.N, p.C, p.OH, p.OW, p.O, align, grid_x, grid_y,
                                                     !is_mm_conv, r.act_block_h_override, p.group);
  const ParallelConfig pout = DetermineOutputParallelConfig(pin, grid_x, grid_y, p.O, is_mm_conv);
  u.core_count = std::max(pin.num_cores, pout.num_cores);
  const int64_t cin_padded = RoundUp(p.C, static_cast<int64_t>(pin.num_cores_c) * align);
  auto cfg = GetConvConfigs(pin, pout, cin_padded, p, r, fp32_acc, is_1d_dw);
  ConvConfigs cc;
  if (cfg.ok()) {
    cc = cfg.value();
  } else {  // TT-NN estimates with unchecked (release-build) arithmetic; mirror it coarsely
    cc.per_core_out_h_ntiles = static_cast<int>(DivUp(p.N * p.OH * p.OW, 32 * pin.num_cores_nhw));
    cc.per_core_out_w_ntiles = static_cast<int>(DivUp(p.O, 32 * pout.num_cores_c));
    cc.block.act_block_h_ntiles = cc.per_core_out_h_ntiles;
    cc.block.act_block_w_ntiles = static_cast<int>(std::max<int64_t>(1, DivUp(cin_padded * p.kw, 32)));
  }
  const ConvBlockConfig& b = cc.block;
  const int64_t out_ntiles = static_cast<int64_t>(cc.per_core_out_h_ntiles) * cc.per_core_out_w_ntiles;

  const int64_t wmh_ntiles = w_rows / 32, wmw_ntiles = w_cols / 32;
  const int64_t num_blocks_act_h = b.act_block_h_ntiles > 0 ? cc.per_core_out_h_ntiles / b.act_block_h_ntiles : 1;
  const int64_t num_blocks_act_w = b.act_block_w_ntiles > 0 ? wmh_ntiles / b.act_block_w_ntiles : 1;
  const int64_t c_blocks = cc.per_core_out_w_ntiles > 0 ? wmw_ntiles / cc.per_core_out_w_ntiles : 1;
  const int64_t nb = layout == ShardLayout::kBlock ? num_blocks_act_w * c_blocks : num_blocks_act_w;
  const bool l1acc = DeterminePackerL1Acc(r.packer_l1_acc, p.has_bias, nb);
  const DeviceDType partial = l1acc ? (fp32_acc ? DeviceDType::kFloat32 : DeviceDType::kBFloat16) : out;

  // Activation block (calculate_act_cb_size_with_reuse when activation reuse is on).
  int64_t act_tiles = static_cast<int64_t>(b.act_block_h_ntiles) * b.act_block_w_ntiles;
  if (r.enable_activation_reuse) {
    const int64_t img_w_tiles = DivUp(p.OW, 32);
    const int64_t loops = DivUp(b.act_block_h_ntiles, img_w_tiles);
    const int64_t mod = p.OW % 32, leftover = mod == 0 ? 0 : 32 - mod;
    const int64_t len = loops * c_aligned * p.kw * (1 + leftover * p.kh) * in_datum;
    act_tiles = img_w_tiles * b.act_block_w_ntiles + DivUp(len, TileBytes(conv_in));
  }
  int64_t cb = 0;
  int64_t weight_tiles = static_cast<int64_t>(cc.per_core_out_w_ntiles) *
                         (is_1d_dw ? b.act_block_h_ntiles : b.act_block_w_ntiles);
  if (layout == ShardLayout::kHeight && num_blocks_act_h > 1 && !r.enable_activation_reuse) weight_tiles *= p.kh;
  cb += weight_tiles * TileBytes(w);
  const bool partial_global = partial == out && !is_1d_dw;  // output layout TILE
  if (!partial_global) cb += (is_1d_dw ? 1 : out_ntiles) * TileBytes(partial);
  const DeviceDType act_df = layout == ShardLayout::kHeight ? conv_in : out;
  cb += act_tiles * TileBytes(act_df);
  if (SplitReaderSupported(layout, is_1d_dw, b.act_block_h_ntiles, cc.per_core_out_h_ntiles, c_aligned, w_cols, p.kw,
                           arch == Arch::kBlackhole, conv_in == DeviceDType::kFloat32)) {
    cb += static_cast<int64_t>(b.act_block_h_ntiles / 2) * b.act_block_w_ntiles * TileBytes(act_df);
  }
  if (is_1d_dw) cb += TileBytes(out);                                           // TEMP_SUM
  cb += static_cast<int64_t>(b.act_block_h_ntiles) * b.act_block_w_ntiles * TileBytes(out);  // ACT_TILIZED
  if (p.has_bias) cb += cc.per_core_out_w_ntiles * TileBytes(w);                 // BIAS
  if (layout == ShardLayout::kWidth) cb += 2 * b.act_block_w_ntiles * TileBytes(conv_in);
  if (layout == ShardLayout::kBlock && conv_in != out) cb += act_tiles * TileBytes(conv_in);
  cb += 64;  // L1 scratchpad
  u.cb_bytes = cb;
  u.tensor_bytes = out_ntiles * TileBytes(out);

  // Halo output (sliding_window.cpp calculate_precise_halo_output_elems): the most input sticks
  // one core gathers — from its first output pixel's window origin to its last one's window end,
  // in the padded input's flattened (n, y, x) index — times the channel shard.
  const int64_t c_shard = RoundUp(p.C, static_cast<int64_t>(pin.num_cores_c) * align) / pin.num_cores_c;
  u.halo_bytes = HaloInputSticksPerCore(p, pin.num_cores_nhw) * c_shard * in_datum;
  u.total_bytes = u.cb_bytes + u.tensor_bytes + u.halo_bytes;
  return u;
}

ShardLayout DetermineConvConfigForAutoShard(const ConvProblem& p, const PrecisionConfig& r, int grid_x, int grid_y,
                                            bool is_mm_conv, Arch arch) {
  const L1Usage height = CalculateL1UsageForConvOp(p, ShardLayout::kHeight, r, grid_x, grid_y, is_mm_conv, arch);
  if (Is1dDepthwiseConv(p)) return ShardLayout::kHeight;  // 1-D depthwise supports only height sharding
  const L1Usage block = CalculateL1UsageForConvOp(p, ShardLayout::kBlock, r, grid_x, grid_y, is_mm_conv, arch);
  const L1Usage width = CalculateL1UsageForConvOp(p, ShardLayout::kWidth, r, grid_x, grid_y, is_mm_conv, arch);
  ShardLayout win = ShardLayout::kHeight;
  int64_t best = height.total_bytes;
  // Block only if it also slices the channels (uses at least grid_x cores).
  if (block.total_bytes < best && block.core_count >= grid_x) {
    win = ShardLayout::kBlock;
    best = block.total_bytes;
  }
  if (width.total_bytes < best && !is_mm_conv) win = ShardLayout::kWidth;
  return win;
}

}  // namespace kiln::device::tt_emu
