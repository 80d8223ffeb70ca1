// Program selection (device/backends/tt_emu/program.h) against values derived by hand from the
// tt-metal formulas (conv2d_utils.cpp and friends; commits in docs/specs/tt-metal-followed.md).
// Every expected number below is worked out in the comment next to it, not taken from the code.
#include "device/backends/tt_emu/program.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>
#include <string>

namespace kiln::device::tt_emu {
namespace {

int64_t OutDim(int64_t in, int64_t k, int64_t s, int64_t pb, int64_t pe, int64_t d) {
  return (in + pb + pe - d * (k - 1) - 1) / s + 1;
}

ConvProblem Conv(int64_t N, int64_t C, int64_t O, int64_t H, int64_t W, int64_t k, int64_t s,
                 std::array<int64_t, 4> pads = {0, 0, 0, 0}, int64_t d = 1, int64_t g = 1, bool bias = true) {
  ConvProblem p;
  p.N = N, p.C = C, p.O = O, p.H = H, p.W = W, p.kh = p.kw = k, p.sh = p.sw = s, p.dh = p.dw = d;
  p.pads = pads, p.group = g, p.has_bias = bias;
  p.OH = OutDim(H, k, s, pads[0], pads[2], d);
  p.OW = OutDim(W, k, s, pads[1], pads[3], d);
  return p;
}

PrecisionConfig Prec(Arch arch, ShardLayout layout = ShardLayout::kAuto) {
  PrecisionConfig p;
  p.arch = arch;
  p.shard_layout = layout;
  return p;
}

// ---- the divisor helpers (conv2d_utils.cpp find_closest_largest_divisor*) --------------------

TEST(ProgramDecisions, FindClosestLargestDivisorWithNumPaddingAndMult) {
  // (784 tiles, 64 cores): d=64 → round_up 832, pad 48 ≥ 832/64=13 → no; 63 → 819, 35 ≥ 13; 62 → 806,
  // 22 ≥ 13; 61 → 793, 9 < 13 → 61.
  EXPECT_EQ(FindClosestLargestDivisorWithNumPaddingAndMult(784, 64, 1), 61u);
  // (784, 130): for 113 ≤ d ≤ 130 ceil(784/d) = 7 and pad 7d−784 ≥ 7; d=112 divides 784 → 112.
  EXPECT_EQ(FindClosestLargestDivisorWithNumPaddingAndMult(784, 130, 1), 112u);
  // (6272, 64, mult 8): d=64: round_up(6272,512)=6656, pad 384 ≥ 104; 63: 6552, 280 ≥ 104; 62: 6448,
  // 176 ≥ 104; 61: 13·488=6344, 72 < 104 → 61.
  EXPECT_EQ(FindClosestLargestDivisorWithNumPaddingAndMult(6272, 64, 8), 61u);
  // (13, 8): d=8: 16, pad 3 ≥ 2; d=7: 14, pad 1 < 2 → 7.   (49, 8): 8 → 56, 7 ≥ 7; 7 divides → 7.
  EXPECT_EQ(FindClosestLargestDivisorWithNumPaddingAndMult(13, 8, 1), 7u);
  EXPECT_EQ(FindClosestLargestDivisorWithNumPaddingAndMult(49, 8, 1), 7u);
  // (49, 10): d=10 → 50, pad 1 < 5 → 10.
  EXPECT_EQ(FindClosestLargestDivisorWithNumPaddingAndMult(49, 10, 1), 10u);
}

TEST(ProgramDecisions, FindClosestLargestDivisorWithNumPadding) {
  // (32, 13): 13 → 39, pad 7 ≥ 3; 12 → 36, 4 ≥ 3; 11 → 33, 1 < 3 → 11.
  EXPECT_EQ(FindClosestLargestDivisorWithNumPadding(32, 13), 11u);
  // (64, 13): 13 → 65, pad 1 < 5 → 13.   (128, 13): 130, 2 < 10 → 13.
  EXPECT_EQ(FindClosestLargestDivisorWithNumPadding(64, 13), 13u);
  EXPECT_EQ(FindClosestLargestDivisorWithNumPadding(128, 13), 13u);
  // (16, 13): 13 → 26 (10 ≥ 2), 12 → 24, 11 → 22, 10 → 20, 9 → 18 (2 ≥ 2), 8 → 16 → 8.
  EXPECT_EQ(FindClosestLargestDivisorWithNumPadding(16, 13), 8u);
  // num < start: every d > num pads d − num ≥ 1 = d/d → down to num itself.
  EXPECT_EQ(FindClosestLargestDivisorWithNumPadding(39, 64), 39u);
  EXPECT_EQ(FindClosestLargestDivisorWithNumPadding(12, 64), 12u);
  // (128, 130): 130 → pad 2 ≥ 1; 129 → 1 ≥ 1; 128 → 0 → 128.
  EXPECT_EQ(FindClosestLargestDivisorWithNumPadding(128, 130), 128u);
  EXPECT_EQ(FindClosestLargestDivisor(103, 8), 1u);  // 103 is prime
  EXPECT_EQ(FindClosestLargestDivisor(12, 8), 6u);
  EXPECT_EQ(FindClosestLargestDivisor(8, 16, 8), 8u);
  EXPECT_EQ(FindClosestLargestDivisor(12, 8, 8), 4u);
}

TEST(ProgramDecisions, DetermineLargestSubblockSize) {
  // 1×16: {2,4},{4,2} need h | 1 → no; {1,8}: 16 % 8 = 0, h = 1 → (1,8).
  EXPECT_EQ(DetermineLargestSubblockSize(1, 16, false), std::make_pair(1, 8));
  // 2×2: {2,4}: 2 % 4 ≠ 0 … {2,2}: w = block width → (2,2).
  EXPECT_EQ(DetermineLargestSubblockSize(2, 2, false), std::make_pair(2, 2));
  // 13×1: 13 is prime and no h > 1 candidate has w = 1 dividing … → (1,1).
  EXPECT_EQ(DetermineLargestSubblockSize(13, 1, false), std::make_pair(1, 1));
  // 4×8, fp32: everything with h·w > 4 skipped; {2,2}: w ≠ 8 and h ≠ 1 → skip; {1,4} → (1,4).
  EXPECT_EQ(DetermineLargestSubblockSize(4, 8, true), std::make_pair(1, 4));
  // 4×8, bf16: {2,4}: w ≠ 8, h ≠ 1 → skip; {4,2} skip; {1,8} → (1,8).
  EXPECT_EQ(DetermineLargestSubblockSize(4, 8, false), std::make_pair(1, 8));
}

TEST(ProgramDecisions, ChannelsAlignmentPackerL1AccMatmulFolding) {
  // get_input_channels_alignment: 16-byte L1 alignment / 2 bytes = 8 for row-major non-matmul HS/BS.
  EXPECT_EQ(GetInputChannelsAlignment(ShardLayout::kHeight, InputLayout::kRowMajor, false), 8);
  EXPECT_EQ(GetInputChannelsAlignment(ShardLayout::kBlock, InputLayout::kRowMajor, false), 8);
  EXPECT_EQ(GetInputChannelsAlignment(ShardLayout::kWidth, InputLayout::kRowMajor, false), 32);
  EXPECT_EQ(GetInputChannelsAlignment(ShardLayout::kHeight, InputLayout::kTile, false), 32);
  EXPECT_EQ(GetInputChannelsAlignment(ShardLayout::kHeight, InputLayout::kRowMajor, true), 32);
  // determine_packer_l1_acc = l1acc && ((bias && nb > 1) || nb > 2).
  EXPECT_TRUE(DeterminePackerL1Acc(true, true, 2));
  EXPECT_FALSE(DeterminePackerL1Acc(true, false, 2));
  EXPECT_TRUE(DeterminePackerL1Acc(true, false, 3));
  EXPECT_FALSE(DeterminePackerL1Acc(false, true, 9));
  EXPECT_FALSE(DeterminePackerL1Acc(true, true, 1));
  // use_matmul_for_1x1_conv: 1x1, stride 1, no padding, no dilation, not width sharded; groups ignored.
  EXPECT_TRUE(UseMatmulFor1x1Conv(Conv(1, 32, 32, 8, 8, 1, 1), ShardLayout::kAuto));
  EXPECT_FALSE(UseMatmulFor1x1Conv(Conv(1, 32, 32, 8, 8, 1, 2), ShardLayout::kAuto));
  EXPECT_FALSE(UseMatmulFor1x1Conv(Conv(1, 32, 32, 8, 8, 1, 1), ShardLayout::kWidth));
  EXPECT_TRUE(UseMatmulFor1x1Conv(Conv(1, 32, 32, 8, 8, 1, 1, {0, 0, 0, 0}, 1, 4), ShardLayout::kHeight));
  // auto_enable_kernel_folding (DRAM input): kernel == stride > 1, no dilation, padded H, W divisible.
  EXPECT_TRUE(AutoEnableKernelFolding(Conv(1, 32, 32, 128, 128, 8, 8), InputLayout::kRowMajor));
  EXPECT_FALSE(AutoEnableKernelFolding(Conv(1, 32, 32, 15, 16, 2, 2), InputLayout::kRowMajor));  // 15 % 2
  EXPECT_FALSE(AutoEnableKernelFolding(Conv(1, 32, 32, 16, 16, 4, 2), InputLayout::kRowMajor));  // k ≠ s
  EXPECT_FALSE(AutoEnableKernelFolding(Conv(1, 32, 32, 16, 16, 2, 2, {1, 1, 1, 1}), InputLayout::kTile));
  EXPECT_TRUE(AutoEnableKernelFolding(Conv(1, 32, 32, 16, 16, 2, 2, {1, 1, 1, 1}), InputLayout::kRowMajor));
  // compute_kernel_stride_folding_params: 128×128×32, k = s = 8 → 16×16×2048, 1×1.
  const ConvProblem f = FoldedProblem(Conv(1, 32, 32, 128, 128, 8, 8));
  EXPECT_EQ(f.C, 2048);
  EXPECT_EQ(f.H, 16);
  EXPECT_EQ(f.kh, 1);
  EXPECT_EQ(f.OH, 16);
}

TEST(ProgramDecisions, PackSrcFormatAndVersionSwitches) {
  // get_single_pack_src_format: fp32 Dst + bfp output → Bfp8_b (Float32 if precise); bf16 Dst + fp32
  // output → the bf16 conditional format; bf16 Dst + bfp → Bfp8_b (Float16_b if precise).
  EXPECT_EQ(GetSinglePackSrcFormat(DeviceDType::kBFloat8B, true, false), DeviceDType::kBFloat8B);
  EXPECT_EQ(GetSinglePackSrcFormat(DeviceDType::kBFloat8B, true, true), DeviceDType::kFloat32);
  EXPECT_EQ(GetSinglePackSrcFormat(DeviceDType::kBFloat16, true, false), DeviceDType::kBFloat16);
  EXPECT_EQ(GetSinglePackSrcFormat(DeviceDType::kFloat32, true, false), DeviceDType::kFloat32);
  EXPECT_EQ(GetSinglePackSrcFormat(DeviceDType::kFloat32, false, false), DeviceDType::kBFloat16);
  EXPECT_EQ(GetSinglePackSrcFormat(DeviceDType::kBFloat8B, false, true), DeviceDType::kBFloat16);
  EXPECT_EQ(ResolveDepthwiseProgram(DepthwiseProgram::kRecorded), DepthwiseProgram::kPoolMultiply);
  EXPECT_EQ(ResolveDepthwiseProgram(DepthwiseProgram::kDenseConv), DepthwiseProgram::kDenseConv);
  EXPECT_EQ(ResolvePartialReload(PartialReload::kRecorded), PartialReload::kTf32);
  EXPECT_EQ(ResolveFusedHardswish(FusedHardswish::kRecorded), FusedHardswish::kDropped);
  EXPECT_EQ(ResolveFusedHardswish(FusedHardswish::kApplied), FusedHardswish::kApplied);
}

TEST(ProgramDecisions, BoardInfo) {
  auto n150 = GetBoardInfo(Board::kDefault, Arch::kWormholeB0);
  ASSERT_TRUE(n150.ok());
  EXPECT_EQ(n150->board, Board::kN150);
  EXPECT_EQ(n150->grid_x * 100 + n150->grid_y, 808);
  // 1464 KiB − (29 + 69 + 16) KiB reserved = 1350 KiB.
  EXPECT_EQ(n150->l1_budget_bytes, 1350 * 1024);
  auto p150 = GetBoardInfo(Board::kDefault, Arch::kBlackhole);
  ASSERT_TRUE(p150.ok());
  EXPECT_EQ(p150->board, Board::kP150);
  EXPECT_EQ(p150->grid_x * 100 + p150->grid_y, 1310);
  EXPECT_EQ(p150->l1_budget_bytes, 1422 * 1024);  // 1536 − 114 KiB
  EXPECT_EQ(GetBoardInfo(Board::kP100, Arch::kBlackhole)->grid_x, 11);
  EXPECT_EQ(GetBoardInfo(Board::kN300, Arch::kWormholeB0)->grid_y, 8);
  EXPECT_EQ(GetBoardInfo(Board::kN150, Arch::kBlackhole).status().code(), StatusCode::kInvalidArgument);
}

TEST(ProgramDecisions, SimpleMatmulIn0BlockW) {
  // Mt = 9600, Kt = 1, Nt = 1: width 32 ≤ tile → narrow → 1-D mcast, Kt odd → 1.
  EXPECT_EQ(SimpleMatmulIn0BlockW(480 * 640, 32, 1, 8, 8), 1);
  // M = 1 (one tile row): narrow and wide → 1-D, Kt = 64 even → 2.
  EXPECT_EQ(SimpleMatmulIn0BlockW(1, 2048, 256, 8, 8), 2);
  // Mt = 49, Kt = 32, Nt = 64: not narrow (1568 vs 2048); blocks 4×4 of 16 tiles → 2-D mcast:
  // Kt % grid_x: n150 32 % 8 = 0 → 4; p150 32 % 13 ≠ 0 → 1.
  EXPECT_EQ(SimpleMatmulIn0BlockW(1568, 1024, 2048, 8, 8), 4);
  EXPECT_EQ(SimpleMatmulIn0BlockW(1568, 1024, 2048, 13, 10), 1);
}

// determine_parallel_config + determine_per_core_conv_block_config, worked through.
TEST(ProgramDecisions, ParallelAndBlockConfig) {
  // ResNet-50 3x3 64→64, N=8, 56×56 HS on n150: out_nhw_ntiles = 8·56·56/32 = 784 → 61 cores; shard
  // = round_up(25088, 61·32)/61 = 13·1952/61 = 416 rows = 13 tiles; act_block_w = round_up(64·3, 32)
  // = 192 = 6 tiles; out width 2 tiles → subblock {1,2}? 13×2: {2,4}… {1,2}: h = 1 → (1,2).
  const ConvProblem r7 = Conv(8, 64, 64, 56, 56, 3, 1, {1, 1, 1, 1});
  const ParallelConfig hs = DetermineParallelConfig(ShardLayout::kHeight, 8, 64, 56, 56, 64, 8, 8, 8, true, 0, 1);
  EXPECT_EQ(hs.num_cores_nhw, 61);
  EXPECT_EQ(hs.num_cores, 61);
  auto cc = GetConvConfigs(hs, hs, 64, r7, PrecisionConfig{}, false, false);
  ASSERT_TRUE(cc.ok());
  EXPECT_EQ(cc->per_core_out_h_ntiles, 13);
  EXPECT_EQ(cc->block.act_block_w_ntiles, 6);
  EXPECT_EQ(cc->block.out_subblock_h_ntiles, 1);
  EXPECT_EQ(cc->block.out_subblock_w_ntiles, 2);
  // BS 3x3 256→256, N=8, 28×28 s2 (14×14 out): nhw tiles 49; n150 rows = 7 (above), channel cores =
  // with_num_padding(div_up(256, 8) = 32, 8) = 8; p150 rows 10, cores 11 (above).
  const ParallelConfig bs_wh = DetermineParallelConfig(ShardLayout::kBlock, 8, 256, 14, 14, 256, 8, 8, 8, true, 0, 1);
  EXPECT_EQ(bs_wh.num_cores_nhw, 7);
  EXPECT_EQ(bs_wh.num_cores_c, 8);
  const ParallelConfig bs_bh = DetermineParallelConfig(ShardLayout::kBlock, 8, 256, 14, 14, 256, 8, 13, 10, true, 0, 1);
  EXPECT_EQ(bs_bh.num_cores_nhw, 10);
  EXPECT_EQ(bs_bh.num_cores_c, 11);
  // Output channel cores (determine_output_parallel_config): with_num_padding(8, 13) = 8.
  EXPECT_EQ(DetermineOutputParallelConfig(bs_bh, 13, 10, 256, false).num_cores_c, 8);
  // WS 384 channels: 12 tiles → 12 cores; act_block_w = 384·9/12 = 288 = 9 tiles.
  const ParallelConfig ws = DetermineParallelConfig(ShardLayout::kWidth, 2, 384, 4, 4, 353, 32, 8, 8, true, 0, 1);
  EXPECT_EQ(ws.num_cores_c, 12);
  auto wsb = DeterminePerCoreConvBlockConfig(ws, 1, 1, 384, 1, 0, 1, 3, 3, 4, false, false, false, false);
  ASSERT_TRUE(wsb.ok());
  EXPECT_EQ(wsb->act_block_w_ntiles, 9);
  // act_block_w_div 2 on 128 cores: 4096 % (32·128·2) ≠ 0 → TT-NN's assertion.
  ParallelConfig ws128 = ws;
  ws128.num_cores = ws128.num_cores_c = 128;
  EXPECT_FALSE(DeterminePerCoreConvBlockConfig(ws128, 1, 1, 4096, 1, 0, 2, 2, 2, 4, false, false, false, false).ok());
  // act_block_h_override 256 (8 tiles) on 103-tile shards: 103 % 8 ≠ 0 → largest divisor ≤ 8 = 1.
  auto ovr = DeterminePerCoreConvBlockConfig(hs, 103, 2, 16, 103, 256, 1, 4, 4, 112, false, false, false, false);
  ASSERT_TRUE(ovr.ok());
  EXPECT_EQ(ovr->act_block_h_ntiles, 1);
  // Activation reuse needs act_block_h > OW tiles: 1 tile vs 56/32 → 2 → rejected.
  EXPECT_FALSE(DeterminePerCoreConvBlockConfig(hs, 1, 2, 64, 1, 0, 1, 3, 3, 56, false, false, true, false).ok());
}

// Auto-shard worked by hand: 3x3 512→512, N=8, 7×7, pad 1, no bias, bf16 in/out, fp32 host weights
// (4096-byte tiles), fp32 accumulation off, on n150. Padded input 9×9, window origin of output
// pixel i = (i / 49)·81 + ((i % 49) / 7)·9 + i % 7; a core gathers origin(last) + 2·9 + 2 −
// origin(first) + 1 input sticks (calculate_precise_halo_output_elems).
//  HS: 13 nhw tiles → 13 cores of 32 pixels; the largest gather is core 1 (pixels 32..63: origins
//      40..99 → 80 sticks; cores 3 and 10 also 80). act_block 1×48 tiles, 16 output tiles.
//      weights 16·48 tiles·4096 = 3145728; act 48·2048 = 98304; tilized 98304; scratch 64
//      → CBs 3342400; output 16·2048 = 32768; halo 80 × 512 ch × 2 B = 81920 → total 3457088.
//  BS: rows 7, channel cores 8 → 56 cores; 64-pixel shards: core 3 (pixels 192..255: origins
//      300..417) gathers 138; 2 tiles high, 2 output tiles wide; act 2×6.
//      weights 2·6·4096 = 49152; act 12·2048 = 24576; tilized 24576; row-major act overlapped
//      (bf16 == bf16); scratch 64 → 98368; output 4·2048 = 8192; halo 138 × 64 × 2 = 17664
//      → total 124224.
//  WS: 16 cores, one nhw shard of 392 pixels → 13 tiles (act_block_h 13), 1 tile wide,
//      act_block_w 9; gathers origins 0..627 → 648 sticks.
//      weights 9·4096 = 36864; act 117·2048 = 239616; tilized 239616; row-major 2·9·2048 = 36864;
//      scratch 64 → 553024; output 13·2048 = 26624; halo 648 × 32 × 2 = 41472 → total 621120.
//  Block wins (124224 < 3457088 and 56 ≥ 8 cores; width 621120 is not smaller).
TEST(ProgramDecisions, AutoShardL1WorkedExample) {
  const ConvProblem p = Conv(8, 512, 512, 7, 7, 3, 1, {1, 1, 1, 1}, 1, 1, /*bias=*/false);
  const PrecisionConfig r = PrecisionConfig{}.Resolved(DeviceDType::kFloat32);
  const L1Usage h = CalculateL1UsageForConvOp(p, ShardLayout::kHeight, r, 8, 8, false, Arch::kWormholeB0);
  const L1Usage b = CalculateL1UsageForConvOp(p, ShardLayout::kBlock, r, 8, 8, false, Arch::kWormholeB0);
  const L1Usage w = CalculateL1UsageForConvOp(p, ShardLayout::kWidth, r, 8, 8, false, Arch::kWormholeB0);
  EXPECT_EQ(HaloInputSticksPerCore(p, 13), 80);
  EXPECT_EQ(HaloInputSticksPerCore(p, 7), 138);
  EXPECT_EQ(HaloInputSticksPerCore(p, 1), 648);
  EXPECT_EQ(h.cb_bytes, 3342400);
  EXPECT_EQ(h.total_bytes, 3457088);
  EXPECT_EQ(b.cb_bytes, 98368);
  EXPECT_EQ(b.total_bytes, 124224);
  EXPECT_EQ(b.core_count, 56);
  EXPECT_EQ(w.cb_bytes, 553024);
  EXPECT_EQ(w.total_bytes, 621120);
  EXPECT_EQ(DetermineConvConfigForAutoShard(p, r, 8, 8, false, Arch::kWormholeB0), ShardLayout::kBlock);
  auto g = SelectConvProgram(p, Prec(Arch::kWormholeB0));
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->shard_layout, ShardLayout::kBlock);
  EXPECT_TRUE(g->shard_layout_auto);
  EXPECT_EQ(g->l1_bytes_per_core, 124224);
  // Forcing height sharding overflows the 1350 KiB budget: FAILED_PRECONDITION naming the limit.
  auto hsf = SelectConvProgram(p, Prec(Arch::kWormholeB0, ShardLayout::kHeight));
  ASSERT_FALSE(hsf.ok());
  EXPECT_EQ(hsf.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(hsf.status().message().find("conv 3x3 512→512 on n150: height_sharded needs 3.30 MiB of L1 per core, "
                                        "budget 1.32 MiB"),
            std::string::npos)
      << hsf.status().message();
}

// ---- K layouts -------------------------------------------------------------------------------

// Every real (tap, chan) exactly once, padding entries are zero taps, blocks tile-aligned.
void ExpectKLayoutInvariants(const ConvProgram& g, const ConvProblem& p, const std::string& what) {
  const KLayout& k = g.k;
  ASSERT_EQ(k.K % 32, 0) << what;
  ASSERT_EQ(static_cast<int64_t>(k.tap.size()), k.K) << what;
  ASSERT_EQ(static_cast<int64_t>(k.chan.size()), k.K) << what;
  ASSERT_GE(k.num_blocks(), 1) << what;
  EXPECT_EQ(k.block_begin.front(), 0) << what;
  EXPECT_EQ(k.block_begin.back(), k.K) << what;
  for (size_t b = 1; b < k.block_begin.size(); ++b) {
    EXPECT_GT(k.block_begin[b], k.block_begin[b - 1]) << what;
    EXPECT_EQ(k.block_begin[b] % 32, 0) << what;
  }
  std::set<std::pair<int, int>> seen;
  for (int64_t i = 0; i < k.K; ++i) {
    const int t = k.tap[static_cast<size_t>(i)];
    if (t < 0) continue;
    ASSERT_LT(t, p.kh * p.kw) << what;
    const int c = k.chan[static_cast<size_t>(i)];
    ASSERT_GE(c, 0) << what;
    ASSERT_LT(c, p.C) << what;
    EXPECT_TRUE(seen.insert({t, c}).second) << what << ": (tap " << t << ", chan " << c << ") twice";
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), p.kh * p.kw * p.C) << what;
}

TEST(ProgramKLayout, InvariantsOverManyShapes) {
  int checked = 0;
  for (Arch arch : {Arch::kWormholeB0, Arch::kBlackhole})
    for (ShardLayout layout : {ShardLayout::kAuto, ShardLayout::kHeight, ShardLayout::kBlock, ShardLayout::kWidth})
      for (InputLayout il : {InputLayout::kRowMajor, InputLayout::kTile})
        for (int64_t C : {3, 8, 16, 24, 56, 64, 130, 256})
          for (int64_t k : {1, 2, 3, 5, 7})
            for (int64_t s : {1, 2}) {
              const int64_t pad = k / 2;
              const ConvProblem p = Conv(2, C, 48, 20, 20, k, s, {pad, pad, pad, pad});
              PrecisionConfig prec = Prec(arch, layout);
              prec.input_layout = il;
              auto g = SelectConvProgram(p, prec);
              if (!g.ok()) {
                EXPECT_EQ(g.status().code(), StatusCode::kFailedPrecondition) << g.status().message();
                continue;
              }
              ExpectKLayoutInvariants(g.value(), p, "C=" + std::to_string(C) + " k=" + std::to_string(k) +
                                                        " s=" + std::to_string(s) + " " + ShardLayoutName(layout));
              ++checked;
            }
  // Grouped, depthwise, folded, activation reuse, full inner dim and Kiln's act_block_w override.
  std::vector<std::pair<ConvProblem, PrecisionConfig>> extra;
  extra.push_back({Conv(1, 64, 64, 16, 16, 3, 1, {1, 1, 1, 1}, 1, 4), Prec(Arch::kWormholeB0)});
  extra.push_back({Conv(1, 64, 64, 16, 16, 3, 1, {1, 1, 1, 1}, 1, 64), Prec(Arch::kWormholeB0)});
  PrecisionConfig dense = Prec(Arch::kBlackhole);
  dense.depthwise_program = DepthwiseProgram::kDenseConv;
  extra.push_back({Conv(1, 64, 64, 16, 16, 3, 1, {1, 1, 1, 1}, 1, 64), dense});
  extra.push_back({Conv(1, 3, 32, 64, 64, 4, 4), Prec(Arch::kWormholeB0)});  // folded: K order Cin·s²
  extra.push_back({Conv(1, 5, 16, 32, 32, 2, 2), Prec(Arch::kBlackhole, ShardLayout::kHeight)});
  PrecisionConfig reuse = Prec(Arch::kWormholeB0, ShardLayout::kHeight);
  reuse.enable_activation_reuse = true;
  reuse.act_block_h_override = 128;
  extra.push_back({Conv(1, 16, 32, 64, 16, 3, 1, {1, 1, 1, 1}), reuse});
  PrecisionConfig fid = Prec(Arch::kBlackhole, ShardLayout::kBlock);
  fid.full_inner_dim = true;
  extra.push_back({Conv(2, 200, 64, 14, 14, 3, 1, {1, 1, 1, 1}), fid});
  PrecisionConfig abw = Prec(Arch::kWormholeB0, ShardLayout::kHeight);
  abw.act_block_w = 2;
  extra.push_back({Conv(1, 40, 32, 16, 16, 3, 1, {1, 1, 1, 1}), abw});
  for (size_t i = 0; i < extra.size(); ++i) {
    auto g = SelectConvProgram(extra[i].first, extra[i].second);
    ASSERT_TRUE(g.ok()) << i << ": " << g.status().message();
    ExpectKLayoutInvariants(g.value(), extra[i].first, "extra " + std::to_string(i));
    ++checked;
  }
  EXPECT_GT(checked, 400);
}

TEST(ProgramKLayout, HeightShardedCin3PacksAKernelRowPerTile) {
  // 7x7, Cin 3 (segformer stem): aligned to 8, each kernel row 7·8 = 56 → 64 wide (2 tiles), not
  // 7·32 = 224; K = 7·64 = 448 in 7 blocks. Row i, position j, channel c at i·64 + j·8 + c.
  const ConvProblem p = Conv(1, 3, 32, 512, 512, 7, 4, {3, 3, 3, 3}, 1, 1, false);
  auto g = SelectConvProgram(p, Prec(Arch::kWormholeB0, ShardLayout::kHeight));
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->k.K, 448);
  EXPECT_EQ(g->k.num_blocks(), 7);
  EXPECT_EQ(g->k.tap[2 * 64 + 5 * 8 + 1], 2 * 7 + 5);
  EXPECT_EQ(g->k.chan[2 * 64 + 5 * 8 + 1], 1);
  EXPECT_EQ(g->k.tap[2 * 64 + 5 * 8 + 3], -1);  // channel 3..7 is alignment padding
  EXPECT_EQ(g->k.tap[2 * 64 + 60], -1);         // 56..63: row padding
}

TEST(ProgramKLayout, FoldedOrderAndBlockShardedOrder) {
  // Kernel == stride 2, Cin 5 → folded K index (i·2 + j)·5 + c, padded 20 → 32 (interleaved matmul).
  const ConvProblem p = Conv(1, 5, 16, 32, 32, 2, 2);
  auto g = SelectConvProgram(p, Prec(Arch::kWormholeB0));
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->path, ConvProgramPath::kMatmul);
  EXPECT_TRUE(g->kernel_stride_folded);
  EXPECT_TRUE(g->matmul_interleaved);
  EXPECT_EQ(g->conv_in_channels, 20);
  EXPECT_EQ(g->k.K, 32);
  EXPECT_EQ(g->k.tap[(1 * 2 + 0) * 5 + 3], 2);  // tap (1, 0) = 1·kw + 0
  EXPECT_EQ(g->k.chan[(1 * 2 + 0) * 5 + 3], 3);
  EXPECT_EQ(g->k.tap[20], -1);
  EXPECT_EQ(g->act_dtype, DeviceDType::kBFloat16);  // the input dtype on the matmul path
  // BS 256 ch on p150: 11 channel shards of 24 (264 padded); shard 10 holds 240..255 then padding;
  // K row of (shard ic, kernel row i, pos j, c) = ic·3·96 + i·96 + j·24 + c.
  const ConvProblem q = Conv(8, 256, 256, 28, 28, 3, 2, {1, 1, 1, 1});
  PrecisionConfig bs = Prec(Arch::kBlackhole, ShardLayout::kBlock);
  bs.weights_dtype = DeviceDType::kBFloat8B;
  bs.output_dtype = DeviceDType::kBFloat8B;
  auto h = SelectConvProgram(q, bs);
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->num_cores_c_in, 11);
  EXPECT_EQ(h->cin_padded, 264);
  const int64_t idx = 10 * 288 + 2 * 96 + 1 * 24 + 7;
  EXPECT_EQ(h->k.tap[static_cast<size_t>(idx)], 2 * 3 + 1);
  EXPECT_EQ(h->k.chan[static_cast<size_t>(idx)], 247);
  EXPECT_EQ(h->k.tap[static_cast<size_t>(10 * 288 + 2 * 96 + 1 * 24 + 20)], -1);  // channel 260 ≥ 256
  EXPECT_EQ(h->k.tap[static_cast<size_t>(10 * 288 + 2 * 96 + 80)], -1);           // 72..95 row padding
}

// ---- docs/specs/tt-numerics.md §13: the 34 shapes of tt-metal's conv tests, both archs ------------------

struct Row {
  int id;
  int64_t N, C, O, H, W, k, s;
  std::array<int64_t, 4> pads;  // ONNX order (top, left, bottom, right)
  int64_t dil, groups;
  ShardLayout layout;  // kAuto where §13 gives none
  int abh = 0, abw_div = 1;
  DeviceDType out = DeviceDType::kBFloat16, w = DeviceDType::kBFloat16;
  bool fp32 = false, l1acc = false, bias = true;
  // Expected per arch {wormhole n150, blackhole p150}; K = 0: not asserted; ok = false: rejected.
  ConvProgramPath path = ConvProgramPath::kConv2d;
  int align = 8;
  std::array<int64_t, 2> K{0, 0}, blocks{0, 0};
  std::array<bool, 2> ok{true, true};
};

// Expected K / blocks, derived per row (cp = Cin padded, rw = kernel-row width round_up(cp·k, 32)):
//  1 WS 384: 12 cores, cp 384, block 384·9/12 = 288 → K 3456, 12 blocks.
//  2 BS 128 1x1 s2: 8 ch cores (16 blocks of 8), cs 16 → rw 32; K 8·32 = 256, 8 blocks (p150: 8 too).
//  3 HS 16, k5: rw round_up(80, 32) = 96 → K 480, 5 blocks.       4 WS 256: 8 cores, 288 → 2304/8.
//  5 HS 32 k3: rw 96 → 288/3.      6 HS 16 k4: rw 64 → 256/4.       7 HS 64: rw 192 → 576/3.
//  8 HS 128: rw 384 → 1152/3.
//  9 BS 256: n150 8 shards of 32, rw 96 → 8·3·96 = 2304, 24 blocks; p150 11 shards of 24 (cp 264),
//    rw round_up(72, 32) = 96 → 11·3·96 = 3168, 33 blocks.
// 10 BS 512: n150 8 × 64, rw 192 → 4608/24; p150 13 shards (cp 520) of 40, rw 128 → 13·3·128 = 4992/39.
// 11 HS 64 1x1 s2: rw 64 → 64/1.
// 12 BS 1024 1x1 s2: n150 8 × 128 → 1024/8; p150 13 shards (cp 1040) of 80 → rw 96 → 1248/13.
// 13 HS 3 k7: 8·7 = 56 → 64 → 448/7.
// 14 k = s = 8: folded to 2048 channels, 1x1 matmul, HS: cp 2048 → one 2048 block.
// 15, 16 depthwise: the 2-D depthwise program, with the generic conv's K layout: 15 HS, Cin 128
//    aligned to 32: rw 384 → 1152/3; 16 WS 576: 18 tiles → 18 cores, block 576·9/18 = 288 → 5184/18.
// 17 HS 1x1 256: matmul, one 256 block.   18 HS 32 k3: 288/3.   19 HS 56 k3: rw 192 → 576/3.
// 20 HS 3 k3: 24 → 32 → 96/3.   21 BS 512 as 10.
// 22 auto 1x1 32→1: matmul interleaved, K 32, in0_block_w 1 (narrow) → 1 block.
// 23 WS 2048: 64 cores, cp 2048, block 2048·9/64 = 288 → 18432/64.
// 24 WS 4096, abw_div 2: n150 64 cores: 4096·4/128 = 128 → 16384/128; p150 128 cores: 4096 is not
//    a multiple of 32·128·2 = 8192 → rejected.
// 25 WS 1x1 1232: 39 tiles → 39 cores, cp 1248, block 32 → 1248/39.
// 29 auto 1x1 2048 on a 1×1 image: matmul interleaved, Kt 64, in0_block_w 2 → 2048/32.
// 32 convT k3 s2 p1 op1 lowered: 514×514 input, k3 s1 p0, HS 64: rw 192 → 576/3.
// 33 convT k8 s4 p2 op2 lowered: 137×137, k8, HS 64: rw 512 → 4096/8.
// 34 convT k2 s2 lowered: 33×33, k2 s1, BS 256: n150 8 × 32, rw 64 → 8·2·64 = 1024/16;
//    p150 11 × 24 (cp 264), rw 64 → 11·2·64 = 1408/22.
// 26-28, 30, 31 run with auto-shard (DRAM tests): a self-consistent choice or an L1 rejection.
std::vector<Row> Section13() {
  using L = ShardLayout;
  using P = ConvProgramPath;
  const DeviceDType bf = DeviceDType::kBFloat16, b8 = DeviceDType::kBFloat8B;
  std::vector<Row> r;
  auto add = [&](Row x) { r.push_back(x); };
  add({1, 2, 384, 353, 8, 8, 3, 2, {1, 2, 2, 3}, 1, 1, L::kWidth, 0, 1, bf, bf, true, false, true, P::kConv2d, 32, {3456, 3456}, {12, 12}});
  add({2, 2, 128, 128, 32, 32, 1, 2, {0, 0, 0, 0}, 1, 1, L::kBlock, 0, 1, bf, bf, true, false, true, P::kConv2d, 8, {256, 256}, {8, 8}});
  add({3, 2, 16, 16, 256, 256, 5, 2, {2, 3, 4, 5}, 1, 1, L::kHeight, 32, 1, bf, bf, true, false, true, P::kConv2d, 8, {480, 480}, {5, 5}});
  add({4, 2, 256, 256, 8, 8, 3, 2, {1, 1, 1, 1}, 1, 1, L::kWidth, 0, 1, b8, bf, true, false, true, P::kConv2d, 32, {2304, 2304}, {8, 8}});
  add({5, 2, 32, 32, 256, 256, 3, 2, {1, 1, 1, 1}, 1, 1, L::kHeight, 0, 1, b8, bf, true, false, true, P::kConv2d, 8, {288, 288}, {3, 3}});
  add({6, 16, 16, 64, 115, 115, 4, 1, {0, 0, 0, 0}, 1, 1, L::kHeight, 256, 1, b8, b8, false, true, true, P::kConv2d, 8, {256, 256}, {4, 4}});
  add({7, 8, 64, 64, 56, 56, 3, 1, {1, 1, 1, 1}, 1, 1, L::kHeight, 0, 1, b8, b8, false, true, true, P::kConv2d, 8, {576, 576}, {3, 3}});
  add({8, 8, 128, 128, 56, 56, 3, 2, {1, 1, 1, 1}, 1, 1, L::kHeight, 0, 1, b8, b8, false, true, true, P::kConv2d, 8, {1152, 1152}, {3, 3}});
  add({9, 8, 256, 256, 28, 28, 3, 2, {1, 1, 1, 1}, 1, 1, L::kBlock, 0, 1, b8, b8, false, true, true, P::kConv2d, 8, {2304, 3168}, {24, 33}});
  add({10, 8, 512, 512, 7, 7, 3, 1, {1, 1, 1, 1}, 1, 1, L::kBlock, 0, 1, b8, b8, false, true, true, P::kConv2d, 8, {4608, 4992}, {24, 39}});
  add({11, 20, 64, 256, 56, 56, 1, 2, {0, 0, 0, 0}, 1, 1, L::kHeight, 0, 1, b8, b8, false, true, true, P::kConv2d, 8, {64, 64}, {1, 1}});
  add({12, 20, 1024, 2048, 14, 14, 1, 2, {0, 0, 0, 0}, 1, 1, L::kBlock, 0, 1, b8, b8, false, true, true, P::kConv2d, 8, {1024, 1248}, {8, 13}});
  add({13, 1, 3, 32, 512, 512, 7, 4, {3, 3, 3, 3}, 1, 1, L::kHeight, 64, 1, bf, bf, false, false, false, P::kConv2d, 8, {448, 448}, {7, 7}});
  add({14, 1, 32, 32, 128, 128, 8, 8, {0, 0, 0, 0}, 1, 1, L::kHeight, 0, 1, bf, bf, false, false, false, P::kMatmul, 32, {2048, 2048}, {1, 1}});
  add({15, 1, 128, 128, 128, 128, 3, 1, {1, 1, 1, 1}, 1, 128, L::kHeight, 0, 1, bf, bf, false, false, false, P::kDepthwise2d, 32, {1152, 1152}, {3, 3}});
  add({16, 1, 576, 576, 8, 8, 3, 2, {0, 0, 0, 0}, 1, 576, L::kWidth, 0, 1, bf, bf, false, false, false, P::kDepthwise2d, 32, {5184, 5184}, {18, 18}});
  add({17, 1, 256, 150, 128, 128, 1, 1, {0, 0, 0, 0}, 1, 1, L::kHeight, 0, 1, bf, bf, false, false, false, P::kMatmul, 32, {256, 256}, {1, 1}});
  add({18, 1, 32, 48, 252, 252, 3, 1, {0, 0, 0, 0}, 2, 1, L::kHeight, 0, 1, b8, b8, false, false, true, P::kConv2d, 8, {288, 288}, {3, 3}});
  add({19, 1, 56, 64, 240, 240, 3, 1, {0, 0, 0, 0}, 8, 1, L::kHeight, 0, 1, b8, b8, false, false, true, P::kConv2d, 8, {576, 576}, {3, 3}});
  add({20, 1, 3, 32, 480, 640, 3, 1, {1, 1, 1, 1}, 1, 1, L::kHeight, 64, 1, bf, bf, false, false, false, P::kConv2d, 8, {96, 96}, {3, 3}});
  add({21, 1, 512, 512, 30, 40, 3, 1, {1, 1, 1, 1}, 1, 1, L::kBlock, 0, 1, bf, bf, false, false, false, P::kConv2d, 8, {4608, 4992}, {24, 39}});
  add({22, 1, 32, 1, 480, 640, 1, 1, {0, 0, 0, 0}, 1, 1, L::kAuto, 0, 1, bf, bf, false, false, false, P::kMatmul, 32, {32, 32}, {1, 1}});
  add({23, 2, 2048, 512, 17, 17, 3, 1, {1, 1, 1, 1}, 1, 1, L::kWidth, 0, 1, bf, bf, true, true, true, P::kConv2d, 32, {18432, 18432}, {64, 64}});
  add({24, 2, 4096, 1280, 15, 15, 2, 1, {1, 1, 1, 1}, 1, 1, L::kWidth, 0, 2, bf, bf, true, true, true, P::kConv2d, 32, {16384, 0}, {128, 0}, {true, false}});
  add({25, 1, 1232, 3024, 14, 14, 1, 1, {0, 0, 0, 0}, 1, 1, L::kWidth, 0, 1, bf, bf, true, true, true, P::kConv2d, 32, {1248, 1248}, {39, 39}});
  add({26, 1, 10, 64, 4096, 512, 4, 2, {1, 1, 1, 1}, 1, 1, L::kAuto, 256, 1, bf, b8, true, true, true});
  add({27, 1, 32, 48, 1020, 1020, 3, 1, {0, 0, 0, 0}, 2, 1, L::kAuto, 0, 1, bf, b8, true, true, true});
  add({28, 1, 2944, 2944, 48, 48, 3, 1, {0, 0, 0, 0}, 1, 1, L::kAuto, 0, 1, bf, b8, true, true, true});
  add({29, 1, 2048, 256, 1, 1, 1, 1, {0, 0, 0, 0}, 1, 1, L::kAuto, 0, 1, bf, b8, false, false, true, P::kMatmul, 32, {2048, 2048}, {32, 32}});
  add({30, 1, 512, 512, 32, 64, 3, 1, {8, 8, 8, 8}, 1, 1, L::kAuto, 0, 1, bf, b8, false, false, false});
  add({31, 1, 3, 64, 512, 1024, 3, 2, {1, 1, 1, 1}, 1, 1, L::kAuto, 0, 1, bf, b8, false, false, false});
  add({32, 1, 64, 64, 514, 514, 3, 1, {0, 0, 0, 0}, 1, 1, L::kHeight, 0, 1, b8, bf, false, false, true, P::kConv2d, 8, {576, 576}, {3, 3}});
  add({33, 1, 64, 64, 137, 137, 8, 1, {0, 0, 0, 0}, 1, 1, L::kHeight, 0, 1, bf, bf, false, false, true, P::kConv2d, 8, {4096, 4096}, {8, 8}});
  add({34, 16, 256, 128, 33, 33, 2, 1, {0, 0, 0, 0}, 1, 1, L::kBlock, 0, 1, bf, bf, false, false, true, P::kConv2d, 8, {1024, 1408}, {16, 22}});
  return r;
}

TEST(ProgramSection13, AllShapesBothArchs) {
  const std::vector<Row> rows = Section13();
  ASSERT_EQ(rows.size(), 34u);
  for (const Row& row : rows) {
    const ConvProblem p = Conv(row.N, row.C, row.O, row.H, row.W, row.k, row.s, row.pads, row.dil, row.groups, row.bias);
    for (int a = 0; a < 2; ++a) {
      const Arch arch = a == 0 ? Arch::kWormholeB0 : Arch::kBlackhole;
      PrecisionConfig prec = Prec(arch, row.layout);
      prec.act_block_h_override = row.abh;
      prec.act_block_w_div = row.abw_div;
      prec.output_dtype = row.out;
      prec.weights_dtype = row.w;
      prec.fp32_dest_acc_en = row.fp32;
      prec.packer_l1_acc = row.l1acc;
      if (row.id == 13 || row.id >= 14) prec.math_fidelity = MathFidelity::kLoFi;
      const std::string what = "row " + std::to_string(row.id) + " " + ArchName(arch);
      auto g = SelectConvProgram(p, prec, DeviceDType::kFloat32);
      if (!row.ok[a]) {
        ASSERT_FALSE(g.ok()) << what;
        EXPECT_EQ(g.status().code(), StatusCode::kFailedPrecondition) << what;
        continue;
      }
      if (row.K[a] == 0 && row.layout == ShardLayout::kAuto) {
        // Auto-shard DRAM rows: a choice or an L1 rejection naming the limit.
        if (!g.ok()) {
          EXPECT_EQ(g.status().code(), StatusCode::kFailedPrecondition) << what;
          EXPECT_NE(g.status().message().find("of L1 per core, budget"), std::string::npos) << what;
          continue;
        }
        const PrecisionConfig res = prec.Resolved(DeviceDType::kFloat32);
        const bool mm = g->path == ConvProgramPath::kMatmul;
        const ConvProblem eff = g->kernel_stride_folded ? FoldedProblem(p) : p;
        EXPECT_EQ(g->shard_layout, DetermineConvConfigForAutoShard(eff, res, g->grid_x, g->grid_y, mm, arch)) << what;
        EXPECT_LE(g->l1_bytes_per_core, g->l1_budget_bytes) << what;
        ExpectKLayoutInvariants(g.value(), p, what);
        continue;
      }
      ASSERT_TRUE(g.ok()) << what << ": " << g.status().message();
      EXPECT_EQ(g->path, row.path) << what;
      EXPECT_EQ(g->cin_align, row.align) << what;
      EXPECT_EQ(g->k.K, row.K[a]) << what;
      EXPECT_EQ(g->k.num_blocks(), row.blocks[a]) << what;
      if (row.layout != ShardLayout::kAuto) {
        EXPECT_EQ(g->shard_layout, row.layout) << what;
      }
      EXPECT_EQ(g->grid_x, a == 0 ? 8 : 13) << what;
      ExpectKLayoutInvariants(g.value(), p, what);
      // Resolved dtypes and the partials rule (get_cb_info): L1 accumulation only when effective.
      EXPECT_EQ(g->output_dtype, row.out) << what;
      EXPECT_EQ(g->weights_dtype, row.w) << what;
      EXPECT_EQ(g->fp32_dest_acc, row.fp32) << what;
      const bool l1 = row.l1acc && ((row.bias && row.blocks[a] > 1) || row.blocks[a] > 2);
      if (row.path == ConvProgramPath::kConv2d) {
        EXPECT_EQ(g->l1_acc_effective, l1) << what;
        EXPECT_EQ(g->partials_dtype, l1 ? (row.fp32 ? DeviceDType::kFloat32 : DeviceDType::kBFloat16) : row.out) << what;
        EXPECT_EQ(g->act_dtype, row.out) << what;
      }
    }
  }
}

TEST(ProgramSection13, ActBlockHeightByArch) {
  // Row 7 (HS 3x3 64, N=8 56×56): n150 61 cores → 13-tile shards; p150 112 cores: round_up(25088,
  // 3584) = 25088 → 224 rows = 7 tiles. act_block_h = the shard (no override).
  // Row 6 (abh 256 = 8 tiles, 6272 nhw tiles): n150 61 cores → 103-tile shards → divisor 1;
  // p150: 112 cores (q(d−1) < 784 first holds at d = 112) → 56-tile shards → 8.
  struct Case { int row; std::array<int, 2> abh; };
  const std::vector<Row> rows = Section13();
  for (const Case& c : {Case{7, {13, 7}}, Case{6, {1, 8}}}) {
    const Row& row = rows[static_cast<size_t>(c.row - 1)];
    const ConvProblem p = Conv(row.N, row.C, row.O, row.H, row.W, row.k, row.s, row.pads, row.dil, row.groups, row.bias);
    for (int a = 0; a < 2; ++a) {
      PrecisionConfig prec = Prec(a == 0 ? Arch::kWormholeB0 : Arch::kBlackhole, row.layout);
      prec.act_block_h_override = row.abh;
      prec.weights_dtype = row.w;
      prec.output_dtype = row.out;
      auto g = SelectConvProgram(p, prec);
      ASSERT_TRUE(g.ok()) << g.status().message();
      EXPECT_EQ(g->act_block_h_ntiles, c.abh[a]) << "row " << c.row << " arch " << a;
    }
  }
}

TEST(ProgramSelection, DtypesDefaultsAndErrors) {
  // TT-NN defaults: output = input dtype, weights = the host tensor's dtype; fp32 accumulation only
  // for fp32 input and weights; the matmul path tilizes activations in the input dtype.
  PrecisionConfig p;
  p.input_dtype = DeviceDType::kFloat32;
  auto g = SelectConvProgram(Conv(1, 16, 16, 8, 8, 3, 1, {1, 1, 1, 1}), p, DeviceDType::kFloat32);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->output_dtype, DeviceDType::kFloat32);
  EXPECT_EQ(g->weights_dtype, DeviceDType::kFloat32);
  EXPECT_TRUE(g->fp32_dest_acc);
  EXPECT_EQ(g->pack_src_dtype, DeviceDType::kFloat32);
  auto m = SelectConvProgram(Conv(1, 16, 16, 8, 8, 1, 1), PrecisionConfig{}, DeviceDType::kBFloat16);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->weights_dtype, DeviceDType::kBFloat16);
  EXPECT_FALSE(m->fp32_dest_acc);
  // act_block_w with act_block_w_div is a config error; a board of the other arch too.
  PrecisionConfig bad;
  bad.act_block_w = 2;
  bad.act_block_w_div = 2;
  EXPECT_EQ(SelectConvProgram(Conv(1, 16, 16, 8, 8, 3, 1), bad).status().code(), StatusCode::kInvalidArgument);
  PrecisionConfig wrong;
  wrong.board = Board::kP150;
  EXPECT_EQ(SelectConvProgram(Conv(1, 16, 16, 8, 8, 3, 1), wrong).status().code(), StatusCode::kInvalidArgument);
  // 1-D depthwise without bias (H = 1, 1x1 kernel, groups = C = O) on the conv path? use_matmul
  // catches a 1x1 stride-1 conv first, so give it stride 2.
  ConvProblem d1 = Conv(1, 64, 64, 1, 32, 1, 2, {0, 0, 0, 0}, 1, 64, false);
  auto dw = SelectConvProgram(d1, PrecisionConfig{});
  ASSERT_TRUE(dw.ok()) << dw.status().message();
  EXPECT_EQ(dw->path, ConvProgramPath::kDepthwise1d);
  EXPECT_EQ(dw->shard_layout, ShardLayout::kHeight);
  EXPECT_FALSE(ConvProgramSummary(g.value()).empty());
}

TEST(ProgramSelection, DramSlicingKeepsTheKLayout) {
  // §13 row 32 (conv_transpose 64→64 lowered to a 514×514 stride-1 conv, HS): one conv needs more
  // than the budget (128-tile act blocks), so conv2d_DRAM slices the output height; the K order
  // and blocks (3 × 192) are those of the whole conv, only act_block_h / cores change.
  const ConvProblem p = Conv(1, 64, 64, 514, 514, 3, 1);
  PrecisionConfig prec = Prec(Arch::kWormholeB0, ShardLayout::kHeight);
  auto g = SelectConvProgram(p, prec);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_GT(g->dram_slices, 1);
  EXPECT_EQ(g->k.K, 576);
  EXPECT_EQ(g->k.num_blocks(), 3);
  EXPECT_LE(g->l1_bytes_per_core, g->l1_budget_bytes);
  // The matmul path never slices: a 1x1 conv whose act block cannot fit stays rejected or fits as
  // ttnn::linear chooses (interleaved, no L1 check).
  auto mm = SelectConvProgram(Conv(1, 64, 64, 1024, 1024, 1, 1), Prec(Arch::kWormholeB0));
  ASSERT_TRUE(mm.ok()) << mm.status().message();
  EXPECT_TRUE(mm->matmul_interleaved);
  EXPECT_EQ(mm->dram_slices, 1);
}

}  // namespace
}  // namespace kiln::device::tt_emu
