// tt-emu follows the program TT-NN builds (docs/specs/tt-conv-dataflow.md): one test per dataflow
// difference, each computing the expected output of a small conv independently of conv_engine.cc —
// a chain of the verified numerics primitives (MvmulPhase, Elwadd, the packer / unpacker of
// formats.h, sfpu.h) with the K order written out by hand from the tt-metal formulas — and checking
// tt_emu::Conv2d (exact level) bit for bit, plus the reported program fields.
// Numbered like the dataflow spec's list of differences:
//  1 Cin = 3, 7x7: channel alignment 8 and kernel rows packed into 32-wide K tiles (TILE input: 32).
//  2 Block sharding: K in (channel shard, kh, kw, c_local) order, ncores_c x kh blocks.
//  3 packer_l1_acc without bias (the L1 tail): TtEmuExact.BlockSpillsL1AccAndBiasMatchNumericsChain
//    in tt_emu_test.cc.
//  4 1x1 stride-1 → matmul: activations in their own dtype, fp32 partials with fp32 accumulation.
//  5 Depthwise: program selection only (path depthwise_2d under the recorded switch).
//  6 Default dtypes: fp32 host weights stay fp32; the output follows the input dtype.
//  7 SFPU GELU: the LUT form (SfpuGeluApprox), not erf GELU.
//  10 fp32 input without fp32 Dst: the unpacker truncates fp32 → bf16 (§4), no RNE.
//  11 Special input patterns (NaN, ±Inf, denormals, ties) through the act tilizes.
// (8, device adds, and 9, PCC, are tested with the runtime.) Section numbers (§) cite
// docs/specs/tt-numerics.md.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "device/backends/tt_emu/program.h"
#include "device/backends/tt_emu/tt_conv.h"
#include "device/numerics/formats.h"
#include "device/numerics/fpu.h"
#include "device/numerics/sfpu.h"
#include "tests/device/tt_emu/chain_util.h"

namespace kiln::device {
namespace {

namespace nx = kiln::numerics;
using MF = MathFidelity;
using DT = DeviceDType;
constexpr DT kBf16 = DT::kBFloat16, kBfp8 = DT::kBFloat8B, kFp32 = DT::kFloat32;

Tensor MakeTensor(std::vector<int64_t> shape, const std::vector<float>& v) {
  auto t = Tensor::FromFloats(std::move(shape), v);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(*t);
}

// torch.randn(..., dtype=bfloat16).float() times `scale` (bf16-exact values).
std::vector<float> RandBf16(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (auto& x : v) x = nx::Bf16ToFloat(nx::HostFp32ToBf16(nx::FloatBits(nd(rng) * scale)));
  return v;
}
// Full-mantissa fp32 values (truncation and rounding to bf16 / tf32 differ for about half of them).
std::vector<float> RandFp32(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng) * scale;
  return v;
}

std::string Hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08X", v);
  return b;
}

uint32_t Bf16Bits(float f) { return static_cast<uint32_t>(nx::HostFp32ToBf16(nx::FloatBits(f))) << 16; }

// The MVMULs of K tiles [k0, k1) into Dst `d` (§5.6): per 32-wide tile the fidelity phases, per
// phase two 16-lane MVMULs. a = one output channel's SrcA row, b = the SrcB row, both K-indexed.
uint32_t MvmulTiles(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b, int64_t k0, int64_t k1, uint32_t d,
                    MF f, const nx::FpuConfig& cfg) {
  for (int64_t t = k0; t < k1; t += 32) {
    for (int ph = 0; ph < nx::NumPhases(f); ++ph) {
      d = nx::MvmulPhase(std::span<const uint32_t, 16>(&a[t], 16), std::span<const uint32_t, 16>(&b[t], 16), d, ph, cfg);
      d = nx::MvmulPhase(std::span<const uint32_t, 16>(&a[t + 16], 16), std::span<const uint32_t, 16>(&b[t + 16], 16),
                         d, ph, cfg);
    }
  }
  return d;
}

using testing::Pack32;

// A partial reloaded into Dst through SrcA (copy_block_matmul_partials): fp32 partials as Tf32
// under the recorded PartialReload (or exactly), bf16 / bfp8 partials bf16-exact; exponent 0 → +0.
uint32_t Reload(uint32_t v, DT part_dt, bool tf32) {
  if (part_dt == kFp32 && tf32) v = nx::UnpackFp32ToTf32(v);
  return ((v >> 23) & 0xFFu) == 0 ? 0u : v;
}

// The conv program without packer L1 accumulation and without bias, for one output pixel and 32
// output channels: K blocks `blocks` (boundaries), Dst packed to the partials dtype `part_dt` and
// reloaded between blocks, the last block packed to `out` as the host reads it.
// wk[o] / xk: SrcA / SrcB operands in K order (already unpacked and masked).
std::array<uint32_t, 32> ChainBlocks(const std::vector<std::vector<uint32_t>>& wk, const std::vector<uint32_t>& xk,
                                     const std::vector<int64_t>& blocks, DT part_dt, DT out, bool tf32_reload, MF f,
                                     const nx::FpuConfig& cfg) {
  std::array<uint32_t, 32> dst{}, part{};
  const size_t nb = blocks.size() - 1;
  for (size_t b = 0; b < nb; ++b) {
    for (int o = 0; o < 32; ++o) {
      const uint32_t d0 = b == 0 ? 0u : Reload(part[o], part_dt, tf32_reload);
      dst[o] = MvmulTiles(wk[o], xk, blocks[b], blocks[b + 1], d0, f, cfg);
    }
    if (b + 1 < nb) part = Pack32(dst, part_dt, cfg.fp32_dst, /*host=*/false);
  }
  return Pack32(dst, out, cfg.fp32_dst, /*host=*/true);
}

std::vector<int64_t> EvenBlocks(int64_t K, int64_t width) {
  std::vector<int64_t> b;
  for (int64_t k = 0; k <= K; k += width) b.push_back(k);
  return b;
}

// ---------------------------------------------------------------------------------------------
// 1. Cin = 3, 7x7, stride 2, one output pixel (the ResNet stem's shape on a 7x7 input).
// get_input_channels_alignment: ROW_MAJOR input, height sharded, not a matmul → 8 (16-byte L1
// alignment / 2-byte bf16); TILE input → 32. Cin padded = round_up(3, 1 core · 8) = 8.
// determine_per_core_conv_block_config (HS): act_block_w = round_up(8 · kw = 56, 32) = 64 = 2 tiles,
// one block per kernel row → 7 blocks, K = 7 · 64 = 448; K index of (i, j, c) = i·64 + j·8 + c
// (to_weight_special_padding_tile_layout). Per kernel row 2 K tiles = 4 MVMULs per phase, so an
// output takes 7·4·phases Dst roundings (the old per-tap padding: 7·7·2·phases), and the 8-lane
// groups of an MVMUL hold taps j and j+1 together. With a bfloat8_b output the activations are
// tilized to bfloat8_b in groups of 16 consecutive K entries (two taps of 8 channels).
// TILE input: align 32, act_block_w = round_up(32·7, 32) = 224 = 7 tiles, K index i·224 + j·32 + c.
TEST(TtEmuDataflow, Cin3Kernel7PacksKernelRowsIntoKTiles) {
  std::mt19937 rng(7);
  const auto xs = RandBf16(3 * 7 * 7, rng), ws = RandBf16(32 * 3 * 7 * 7, rng, 0.5f);
  Tensor xt = MakeTensor({1, 3, 7, 7}, xs), wt = MakeTensor({32, 3, 7, 7}, ws);
  Conv2dParams cp;
  cp.strides = {2, 2};
  auto xval = [&](int64_t c, int64_t i, int64_t j) { return xs[(c * 7 + i) * 7 + j]; };
  auto wval = [&](int64_t o, int64_t c, int64_t i, int64_t j) { return ws[((o * 3 + c) * 7 + i) * 7 + j]; };
  int checked = 0;
  for (InputLayout layout : {InputLayout::kRowMajor, InputLayout::kTile}) {
    const int64_t align = layout == InputLayout::kRowMajor ? 8 : 32;
    const int64_t row_w = layout == InputLayout::kRowMajor ? 64 : 224;  // round_up(align · 7, 32)
    const int64_t K = 7 * row_w;
    for (DT out : {kBf16, kBfp8}) {
      if (layout == InputLayout::kTile && out == kBfp8) continue;
      for (bool fp32 : {false, true})
        for (MF f : {MF::kLoFi, MF::kHiFi4}) {
          PrecisionConfig p;
          p.math_fidelity = f;
          p.fp32_dest_acc_en = fp32;
          p.weights_dtype = kBf16;
          p.output_dtype = out;
          p.input_layout = layout;
          p.shard_layout = ShardLayout::kHeight;
          OpReport rep;
          auto y = tt_emu::Conv2d(xt, wt, nullptr, cp, p, tt_emu::EmuLevel::kExact, nullptr, &rep);
          ASSERT_TRUE(y.ok()) << y.status().ToString();
          // K order by hand: i·row_w + j·align + c.
          std::vector<uint32_t> xk(static_cast<size_t>(K), 0);
          std::vector<std::vector<uint32_t>> wk(32, std::vector<uint32_t>(static_cast<size_t>(K), 0));
          for (int64_t i = 0; i < 7; ++i)
            for (int64_t j = 0; j < 7; ++j)
              for (int64_t c = 0; c < 3; ++c) {
                const int64_t k = i * row_w + j * align + c;
                xk[k] = nx::FloatBits(xval(c, i, j));
                for (int o = 0; o < 32; ++o) wk[o][k] = nx::FloatBits(wval(o, c, i, j));
              }
          if (out == kBfp8) {
            // Tilize into bfloat8_b: the packer over each 16 K entries of the im2col row from a
            // bf16 Dst holding the (bf16) inputs (§3.4), read back by the unpacker (§4).
            for (int64_t k0 = 0; k0 < K; k0 += 16) {
              std::array<uint16_t, 16> t;
              for (int i = 0; i < 16; ++i) t[i] = static_cast<uint16_t>(xk[k0 + i] >> 16);
              const nx::BfpGroup g = nx::PackBfpFromBf16Dst(t, nx::BfpFormat::kBfp8);
              for (int i = 0; i < 16; ++i)
                xk[k0 + i] = static_cast<uint32_t>(nx::UnpackBfpToBf16(g.exp, g.codes[i], nx::BfpFormat::kBfp8)) << 16;
            }
          }
          const nx::FpuConfig cfg{fp32, nx::Arch::kWormholeB0, nx::SrcFormat::kBf16, nx::SrcFormat::kBf16};
          const auto want = ChainBlocks(wk, xk, EvenBlocks(K, row_w), out, out, true, f, cfg);
          for (int o = 0; o < 32; ++o)
            ASSERT_EQ(nx::FloatBits(y->data<float>()[o]), want[o])
                << InputLayoutName(layout) << " out=" << DeviceDTypeName(out) << " fp32=" << fp32 << " "
                << MathFidelityName(f) << " column " << o << "; " << rep.blocking;
          ASSERT_TRUE(rep.program.has_value());
          EXPECT_EQ(rep.program->path, "conv2d");
          EXPECT_EQ(rep.program->cin_align, align) << rep.blocking;
          EXPECT_EQ(rep.program->cin_padded, align) << rep.blocking;
          EXPECT_EQ(rep.program->k_blocks, 7) << rep.blocking;
          EXPECT_EQ(rep.program->act_block_w_ntiles, row_w / 32) << rep.blocking;
          EXPECT_EQ(rep.program->act_dtype, out) << rep.blocking;
          ++checked;
        }
    }
  }
  EXPECT_EQ(checked, 3 * 2 * 2);
}

// ---------------------------------------------------------------------------------------------
// 2. Block sharding: Cin = 16, 3x3, one output pixel, Cout = 32, on n150 (grid 8x8).
// determine_parallel_config (BLOCK, ROW_MAJOR orientation): cin_align = 8 (ROW_MAJOR, BS, not a
// matmul); input channel blocks = ceil(16 / 8) = 2; num_cores_c =
// find_closest_largest_divisor_with_num_padding(2, grid_x = 8): d = 8..3 pad round_up(2, d) − 2 ≥
// round_up(2, d)/d = 1, d = 2 pads 0 < 1 → 2. num_cores_nhw = 1 (one output tile row). Cin padded =
// round_up(16, 2·8) = 16, channel shard cs = 8. Output: find_closest_largest_divisor_with_num_padding
// (1 tile, 8) = 1 → Cout padded 32.
// determine_per_core_conv_block_config (BS): act_block_w = round_up(16/2 · kw = 24, 32) = 32 = 1
// tile; in0_num_blocks_w = num_cores_c · kh = 6. to_weight_tile_layout_block_sharded: K index of
// (shard ic, i, j, c_local) = ic·(3·32) + i·32 + j·8 + c_local, channel ic·8 + c_local; K = 192.
// Height sharding of the same conv: cin_align 8, Cin padded 16, act_block_w = round_up(16·3, 32) =
// 64, K index i·64 + j·16 + c in 3 blocks: the partials are rounded twice, not five times.
TEST(TtEmuDataflow, BlockShardingSplitsKByChannelShardAndKernelRow) {
  std::mt19937 rng(22);
  const auto xs = RandBf16(16 * 9, rng), ws = RandBf16(32 * 16 * 9, rng);
  Tensor xt = MakeTensor({1, 16, 3, 3}, xs), wt = MakeTensor({32, 16, 3, 3}, ws);
  auto xval = [&](int64_t c, int64_t i, int64_t j) { return nx::FloatBits(xs[(c * 3 + i) * 3 + j]); };
  auto wval = [&](int64_t o, int64_t c, int64_t i, int64_t j) { return nx::FloatBits(ws[((o * 16 + c) * 3 + i) * 3 + j]); };
  int checked = 0, differ = 0;
  for (bool fp32 : {false, true})
    for (MF f : {MF::kLoFi, MF::kHiFi4}) {
      const nx::FpuConfig cfg{fp32, nx::Arch::kWormholeB0, nx::SrcFormat::kBf16, nx::SrcFormat::kBf16};
      std::array<uint32_t, 32> want_bs{}, want_hs{};
      for (ShardLayout layout : {ShardLayout::kBlock, ShardLayout::kHeight}) {
        const bool bs = layout == ShardLayout::kBlock;
        std::vector<uint32_t> xk(192, 0);
        std::vector<std::vector<uint32_t>> wk(32, std::vector<uint32_t>(192, 0));
        for (int64_t c = 0; c < 16; ++c)
          for (int64_t i = 0; i < 3; ++i)
            for (int64_t j = 0; j < 3; ++j) {
              const int64_t k = bs ? (c / 8) * 96 + i * 32 + j * 8 + c % 8 : i * 64 + j * 16 + c;
              xk[k] = xval(c, i, j);
              for (int o = 0; o < 32; ++o) wk[o][k] = wval(o, c, i, j);
            }
        const auto want = ChainBlocks(wk, xk, EvenBlocks(192, bs ? 32 : 64), kBf16, kBf16, true, f, cfg);
        (bs ? want_bs : want_hs) = want;
        PrecisionConfig p;
        p.math_fidelity = f;
        p.fp32_dest_acc_en = fp32;
        p.weights_dtype = kBf16;
        p.shard_layout = layout;
        OpReport rep;
        auto y = tt_emu::Conv2d(xt, wt, nullptr, Conv2dParams{}, p, tt_emu::EmuLevel::kExact, nullptr, &rep);
        ASSERT_TRUE(y.ok()) << y.status().ToString();
        for (int o = 0; o < 32; ++o)
          ASSERT_EQ(nx::FloatBits(y->data<float>()[o]), want[o])
              << ShardLayoutName(layout) << " fp32=" << fp32 << " " << MathFidelityName(f) << " column " << o << "; "
              << rep.blocking;
        ASSERT_TRUE(rep.program.has_value());
        EXPECT_EQ(rep.program->shard_layout, layout);
        EXPECT_EQ(rep.program->cin_align, 8) << rep.blocking;
        EXPECT_EQ(rep.program->cin_padded, 16) << rep.blocking;
        EXPECT_EQ(rep.program->num_cores_c, bs ? 2 : 1) << rep.blocking;
        EXPECT_EQ(rep.program->k_blocks, bs ? 6 : 3) << rep.blocking;
        EXPECT_EQ(rep.program->act_block_w_ntiles, bs ? 1 : 2) << rep.blocking;
        ++checked;
      }
      for (int o = 0; o < 32; ++o) differ += want_bs[o] != want_hs[o];
    }
  EXPECT_EQ(checked, 8);
  EXPECT_GT(differ, 0) << "block and height sharding should round the partials differently somewhere";
}

// ---------------------------------------------------------------------------------------------
// 4. 1x1 stride-1 conv → ttnn::linear (use_matmul_for_1x1_conv). fp32 input and fp32 host weights
// (weights_dtype unset) → fp32_dest_acc_en; output bfloat16. The activations are tilized in their own
// dtype (float32 → Tf32 in SrcB), not into the bf16 output as the conv program does; the matmul's
// intermediate CB is Float32 (interm0 with fp32 accumulation), reloaded through SrcA as Tf32 under
// the recorded PartialReload (exactly under kLossless).
// Auto-shard + matmul keeps the operands DRAM interleaved; create_simple_matmul_program_config for
// M = 1 pixel, K = 96, N = 32: Mt = Kt/3 = 1, Nt = 1, height 32 ≤ 32 → narrow → 1-D mcast
// (get_mcast_1d_config): in0_block_w = Kt even ? 2 : 1 = 1 → 3 K blocks of one tile, K order = Cin.
TEST(TtEmuDataflow, MatmulPathKeepsActivationDtypeAndFp32Partials) {
  std::mt19937 rng(44);
  const auto xs = RandFp32(96, rng), ws = RandFp32(32 * 96, rng);
  Tensor xt = MakeTensor({1, 96, 1, 1}, xs), wt = MakeTensor({32, 96, 1, 1}, ws);
  int checked = 0;
  for (PartialReload reload : {PartialReload::kRecorded, PartialReload::kLossless})
    for (MF f : {MF::kLoFi, MF::kHiFi4}) {
      PrecisionConfig p;
      p.math_fidelity = f;
      p.input_dtype = kFp32;
      p.output_dtype = kBf16;
      p.fp32_partial_reload = reload;
      OpReport rep;
      auto y = tt_emu::Conv2d(xt, wt, nullptr, Conv2dParams{}, p, tt_emu::EmuLevel::kExact, nullptr, &rep);
      ASSERT_TRUE(y.ok()) << y.status().ToString();
      std::vector<uint32_t> xk(96);
      std::vector<std::vector<uint32_t>> wk(32, std::vector<uint32_t>(96));
      for (int k = 0; k < 96; ++k) {
        xk[k] = nx::UnpackFp32ToTf32(nx::FloatBits(xs[k]));  // §4: Float32 → Tf32 with an fp32 Dst
        for (int o = 0; o < 32; ++o) wk[o][k] = nx::UnpackFp32ToTf32(nx::FloatBits(ws[o * 96 + k]));
      }
      const nx::FpuConfig cfg{true, nx::Arch::kWormholeB0, nx::SrcFormat::kTf32, nx::SrcFormat::kTf32};
      const auto want = ChainBlocks(wk, xk, EvenBlocks(96, 32), kFp32, kBf16, reload == PartialReload::kRecorded, f, cfg);
      for (int o = 0; o < 32; ++o)
        ASSERT_EQ(nx::FloatBits(y->data<float>()[o]), want[o])
            << "reload=" << (reload == PartialReload::kRecorded ? "recorded" : "lossless") << " " << MathFidelityName(f)
            << " column " << o << "; " << rep.blocking;
      ASSERT_TRUE(rep.program.has_value());
      EXPECT_EQ(rep.program->path, "matmul") << rep.blocking;
      EXPECT_EQ(rep.program->act_dtype, kFp32) << rep.blocking;
      EXPECT_EQ(rep.program->partials_dtype, kFp32) << rep.blocking;
      EXPECT_EQ(rep.program->k_blocks, 3) << rep.blocking;
      EXPECT_EQ(rep.program->act_block_w_ntiles, 1) << rep.blocking;
      EXPECT_EQ(rep.program->pack_src_dtype, kBf16) << rep.blocking;
      ++checked;
    }
  EXPECT_EQ(checked, 4);
  // The same conv with stride 2 stays on the conv program, whose activations take the output dtype.
  PrecisionConfig p;
  p.input_dtype = kFp32;
  p.output_dtype = kBf16;
  Conv2dParams s2;
  s2.strides = {2, 2};
  OpReport rep;
  ASSERT_TRUE(tt_emu::Conv2d(xt, wt, nullptr, s2, p, tt_emu::EmuLevel::kExact, nullptr, &rep).ok());
  ASSERT_TRUE(rep.program.has_value());
  EXPECT_EQ(rep.program->path, "conv2d");
  EXPECT_EQ(rep.program->act_dtype, kBf16);
}

// ---------------------------------------------------------------------------------------------
// 5. Depthwise 3x3 (groups = Cin = Cout = 8, 8x8 map): is_2d_depthwise_conv; the recorded
// select_program_factory runs Conv2dDepthwiseProgramFactory (DepthwiseProgram::kRecorded resolves
// to kPoolMultiply), kDenseConv keeps the generic conv. Program selection only: the pool-multiply
// numerics are tested with the engine that implements them.
TEST(TtEmuDataflow, DepthwiseProgramSelection) {
  tt_emu::ConvProblem pb;
  pb.C = pb.O = pb.group = 8;
  pb.H = pb.W = 8;
  pb.kh = pb.kw = 3;
  pb.pads = {1, 1, 1, 1};
  pb.OH = pb.OW = 8;
  PrecisionConfig p;
  auto rec = tt_emu::SelectConvProgram(pb, p);
  ASSERT_TRUE(rec.ok()) << rec.status().ToString();
  EXPECT_EQ(rec->path, tt_emu::ConvProgramPath::kDepthwise2d);
  EXPECT_EQ(rec->depthwise_program, DepthwiseProgram::kPoolMultiply);
  EXPECT_EQ(tt_emu::ToProgramReport(*rec).path, "depthwise_2d");
  EXPECT_EQ(rec->cin_align, 32);  // depthwise: get_input_channels_alignment is bypassed (32)
  p.depthwise_program = DepthwiseProgram::kDenseConv;
  auto dense = tt_emu::SelectConvProgram(pb, p);
  ASSERT_TRUE(dense.ok()) << dense.status().ToString();
  EXPECT_EQ(dense->path, tt_emu::ConvProgramPath::kConv2d);
  EXPECT_EQ(dense->depthwise_program, DepthwiseProgram::kDenseConv);
  EXPECT_EQ(tt_emu::ToProgramReport(*dense).path, "conv2d");
  // Not depthwise (Cout ≠ groups): the generic conv whatever the switch says.
  pb.O = 16;
  p.depthwise_program = DepthwiseProgram::kRecorded;
  auto grouped = tt_emu::SelectConvProgram(pb, p);
  ASSERT_TRUE(grouped.ok()) << grouped.status().ToString();
  EXPECT_EQ(grouped->path, tt_emu::ConvProgramPath::kConv2d);
}

// ---------------------------------------------------------------------------------------------
// 6. Default dtypes (conv2d.cpp; weights_dtype std::nullopt in conv2d_device_operation_types.hpp):
// the fp32 host weights stay fp32 on the card, the output takes the input's dtype. A 1x1 stride-2
// conv of one pixel (the conv program, not the matmul), Cin = Cout = 32, height sharded: cin_align
// 8, Cin padded 32, act_block_w = round_up(32, 32) → one K block, K index = c.
//  (a) bf16 input: fp32_dest_acc_en off (input not fp32); the Float32 weights are unpacked to SrcA
//      as bf16 by truncation (§4 UnpackFp32ToBf16), not host-rounded; output bf16.
//  (b) fp32 input: fp32_dest_acc_en on; weights and activations Tf32 (§4); output float32 (Dst as is).
TEST(TtEmuDataflow, DefaultDtypesKeepFp32WeightsAndFollowTheInput) {
  std::mt19937 rng(66);
  const auto ws = RandFp32(32 * 32, rng);
  Tensor wt = MakeTensor({32, 32, 1, 1}, ws);
  Conv2dParams cp;
  cp.strides = {2, 2};
  for (bool fp32_in : {false, true}) {
    const auto xs = fp32_in ? RandFp32(32, rng) : RandBf16(32, rng);
    Tensor xt = MakeTensor({1, 32, 1, 1}, xs);
    for (MF f : {MF::kLoFi, MF::kHiFi4}) {
      PrecisionConfig p;  // weights_dtype, output_dtype, fp32_dest_acc_en unset
      p.math_fidelity = f;
      p.input_dtype = fp32_in ? kFp32 : kBf16;
      p.shard_layout = ShardLayout::kHeight;
      OpReport rep;
      auto y = tt_emu::Conv2d(xt, wt, nullptr, cp, p, tt_emu::EmuLevel::kExact, nullptr, &rep);
      ASSERT_TRUE(y.ok()) << y.status().ToString();
      std::vector<uint32_t> xk(32);
      std::vector<std::vector<uint32_t>> wk(32, std::vector<uint32_t>(32));
      for (int k = 0; k < 32; ++k) {
        const uint32_t xb = nx::FloatBits(xs[k]);
        xk[k] = fp32_in ? nx::UnpackFp32ToTf32(xb) : xb;
        for (int o = 0; o < 32; ++o) {
          const uint32_t wb = nx::FloatBits(ws[o * 32 + k]);
          wk[o][k] = fp32_in ? nx::UnpackFp32ToTf32(wb) : static_cast<uint32_t>(nx::UnpackFp32ToBf16(wb)) << 16;
        }
      }
      const nx::SrcFormat sf = fp32_in ? nx::SrcFormat::kTf32 : nx::SrcFormat::kBf16;
      const nx::FpuConfig cfg{fp32_in, nx::Arch::kWormholeB0, sf, sf};
      const DT out = fp32_in ? kFp32 : kBf16;
      const auto want = ChainBlocks(wk, xk, {0, 32}, out, out, true, f, cfg);
      for (int o = 0; o < 32; ++o)
        ASSERT_EQ(nx::FloatBits(y->data<float>()[o]), want[o])
            << "fp32 input=" << fp32_in << " " << MathFidelityName(f) << " column " << o << "; " << rep.blocking;
      ASSERT_TRUE(rep.precision.weights_dtype.has_value());
      EXPECT_EQ(*rep.precision.weights_dtype, kFp32);
      ASSERT_TRUE(rep.precision.output_dtype.has_value());
      EXPECT_EQ(*rep.precision.output_dtype, out);
      EXPECT_EQ(rep.precision.fp32_dest_acc_en, std::optional<bool>(fp32_in));
      ASSERT_TRUE(rep.program.has_value());
      EXPECT_EQ(rep.program->act_dtype, out) << rep.blocking;
      EXPECT_EQ(rep.program->k_blocks, 1) << rep.blocking;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// 7. A fused GELU is gelu_tile<fast_and_approx = true> in the conv epilogue: the 6-piece LUT
// (numerics::SfpuGeluApprox, ckernel_sfpu_gelu.h), evaluated on the Dst value after the last block,
// then stored into Dst (RNE into a bf16 Dst: sfpu.h's stated, unverified choice) and packed.
// A 1x1 stride-2 conv of one pixel (conv program, one K block), bf16 throughout.
TEST(TtEmuDataflow, FusedGeluIsTheLutApproximation) {
  std::mt19937 rng(77);
  const auto xs = RandBf16(32, rng), ws = RandBf16(32 * 32, rng, 0.25f);  // pre-activations ~ N(0, 2)
  Tensor xt = MakeTensor({1, 32, 1, 1}, xs), wt = MakeTensor({32, 32, 1, 1}, ws);
  Conv2dParams cp;
  cp.strides = {2, 2};
  cp.activation = Activation::kGelu;
  int differ_from_erf = 0;
  for (bool fp32 : {false, true}) {
    PrecisionConfig p;
    p.fp32_dest_acc_en = fp32;
    p.weights_dtype = kBf16;
    p.shard_layout = ShardLayout::kHeight;
    OpReport rep;
    auto y = tt_emu::Conv2d(xt, wt, nullptr, cp, p, tt_emu::EmuLevel::kExact, nullptr, &rep);
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    const nx::FpuConfig cfg{fp32, nx::Arch::kWormholeB0, nx::SrcFormat::kBf16, nx::SrcFormat::kBf16};
    std::vector<uint32_t> xk(32);
    std::vector<std::vector<uint32_t>> wk(32, std::vector<uint32_t>(32));
    for (int k = 0; k < 32; ++k) {
      xk[k] = nx::FloatBits(xs[k]);
      for (int o = 0; o < 32; ++o) wk[o][k] = nx::FloatBits(ws[o * 32 + k]);
    }
    auto into_dst = [&](float v) { return fp32 ? nx::FloatBits(v) : Bf16Bits(v); };
    std::array<uint32_t, 32> d_lut{}, d_erf{};
    for (int o = 0; o < 32; ++o) {
      const float pre = nx::BitsFloat(MvmulTiles(wk[o], xk, 0, 32, 0u, MF::kHiFi4, cfg));
      d_lut[o] = into_dst(nx::SfpuGeluApprox(pre));
      d_erf[o] = into_dst(0.5f * pre * (1.0f + std::erf(pre * 0.70710678118654752f)));
    }
    const auto want = Pack32(d_lut, kBf16, fp32, true), libm = Pack32(d_erf, kBf16, fp32, true);
    for (int o = 0; o < 32; ++o) {
      ASSERT_EQ(nx::FloatBits(y->data<float>()[o]), want[o]) << "fp32=" << fp32 << " column " << o;
      differ_from_erf += want[o] != libm[o];
    }
  }
  EXPECT_GT(differ_from_erf, 8) << "the LUT GELU should differ from erf GELU on these inputs";
}

// ---------------------------------------------------------------------------------------------
// 10. fp32 input, bf16 weights → fp32_dest_acc_en off: the unpacker reads the Float32 activations
// into a bf16 SrcB by truncation (§4 UnpackFp32ToBf16: denormals to zero, then the top 16 bits),
// not by RNE. Both for the default output (float32, following the input) and a bf16 output (where
// the tilize into bf16 is the unpacker's truncation followed by a lossless bf16 pack).
// 1x1 stride-2 conv of one pixel, Cin = Cout = 32, height sharded → one K block, K index = c.
TEST(TtEmuDataflow, Fp32InputWithoutFp32DstIsTruncated) {
  std::mt19937 rng(1010);
  const auto xs = RandFp32(32, rng), ws = RandBf16(32 * 32, rng);
  Tensor xt = MakeTensor({1, 32, 1, 1}, xs), wt = MakeTensor({32, 32, 1, 1}, ws);
  Conv2dParams cp;
  cp.strides = {2, 2};
  int differ_from_rne = 0;
  for (bool out_default : {true, false})
    for (MF f : {MF::kLoFi, MF::kHiFi4}) {
      PrecisionConfig p;
      p.math_fidelity = f;
      p.input_dtype = kFp32;
      p.weights_dtype = kBf16;
      if (!out_default) p.output_dtype = kBf16;
      p.shard_layout = ShardLayout::kHeight;
      OpReport rep;
      auto y = tt_emu::Conv2d(xt, wt, nullptr, cp, p, tt_emu::EmuLevel::kExact, nullptr, &rep);
      ASSERT_TRUE(y.ok()) << y.status().ToString();
      const DT out = out_default ? kFp32 : kBf16;
      std::vector<uint32_t> xk(32), xr(32);
      std::vector<std::vector<uint32_t>> wk(32, std::vector<uint32_t>(32));
      for (int k = 0; k < 32; ++k) {
        xk[k] = static_cast<uint32_t>(nx::UnpackFp32ToBf16(nx::FloatBits(xs[k]))) << 16;
        xr[k] = Bf16Bits(xs[k]);
        for (int o = 0; o < 32; ++o) wk[o][k] = nx::FloatBits(ws[o * 32 + k]);
      }
      const nx::FpuConfig cfg{false, nx::Arch::kWormholeB0, nx::SrcFormat::kBf16, nx::SrcFormat::kBf16};
      const auto want = ChainBlocks(wk, xk, {0, 32}, out, out, true, f, cfg);
      const auto rne = ChainBlocks(wk, xr, {0, 32}, out, out, true, f, cfg);
      for (int o = 0; o < 32; ++o) {
        ASSERT_EQ(nx::FloatBits(y->data<float>()[o]), want[o])
            << "out=" << DeviceDTypeName(out) << " " << MathFidelityName(f) << " column " << o << "; " << rep.blocking;
        differ_from_rne += want[o] != rne[o];
      }
      EXPECT_EQ(rep.precision.fp32_dest_acc_en, std::optional<bool>(false));
      ASSERT_TRUE(rep.program.has_value());
      EXPECT_EQ(rep.program->act_dtype, out) << rep.blocking;
    }
  EXPECT_GT(differ_from_rne, 8) << "truncating and rounding the fp32 inputs should differ on these inputs";
}

// ---------------------------------------------------------------------------------------------
// 11. The host conversion and act tilize of special input patterns (NaN, ±Inf, denormals, ±0, RNE
// ties and the RNE overflow to Inf), which the conv engine converts value by value without
// branches (conv_engine.cc, TilizeValue): a 1x1 conv of one pixel whose weights are the identity,
// so each output column carries one tilized activation through an exact HiFi4 MVMUL chain. The
// tilizes: bf16 input (host RNE, then the bf16 pack), fp32 input without fp32 Dst (unpacker
// truncation), fp32 input with fp32 Dst and a bf16 act (the packer's rounding from an fp32 Dst),
// and the matmul path (the unpacker alone: Tf32 with an fp32 Dst, bf16 truncation without).
TEST(TtEmuDataflow, SpecialActivationPatternsTilizeValueByValue) {
  const uint32_t special[] = {0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0x7F800000u, 0xFF800000u, 0x00000001u,
                              0x807FFFFFu, 0x80000000u, 0x00000000u, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x3F808000u,
                              0x3F818000u, 0x3F80FFFFu, 0xBF817FFFu, 0x00800000u, 0x80FFFFFFu, 0x3F800001u,
                              0x7F7F8000u, 0x00FF8000u, 0x3FFFFFFFu, 0xC0000001u};
  std::mt19937 rng(1111);
  std::vector<float> xs = RandFp32(32, rng, 3.0f), ws(32 * 32, 0.0f);
  for (size_t k = 0; k < std::size(special); ++k) xs[k] = nx::BitsFloat(special[k]);
  for (int o = 0; o < 32; ++o) ws[static_cast<size_t>(o * 33)] = 1.0f;
  Tensor xt = MakeTensor({1, 32, 1, 1}, xs), wt = MakeTensor({32, 32, 1, 1}, ws);
  struct Config {
    const char* name;
    DT input, act;
    bool fp32_dst, matmul;
  };
  const Config configs[] = {{"bf16 input", kBf16, kBf16, false, false},
                            {"fp32 input, bf16 Dst", kFp32, kBf16, false, false},
                            {"fp32 input, fp32 Dst, bf16 act", kFp32, kBf16, true, false},
                            {"fp32 input, matmul", kFp32, kFp32, true, true},
                            {"fp32 input, matmul, bf16 Dst", kFp32, kFp32, false, true}};
  std::vector<std::vector<uint32_t>> tilized;
  for (const Config& c : configs) {
    PrecisionConfig p;
    p.math_fidelity = MF::kHiFi4;
    p.input_dtype = c.input;
    p.weights_dtype = kBf16;
    p.output_dtype = c.act;
    p.fp32_dest_acc_en = c.fp32_dst;
    p.shard_layout = ShardLayout::kHeight;
    Conv2dParams cp;
    if (!c.matmul) cp.strides = {2, 2};
    OpReport rep;
    auto y = tt_emu::Conv2d(xt, wt, nullptr, cp, p, tt_emu::EmuLevel::kExact, nullptr, &rep);
    ASSERT_TRUE(y.ok()) << c.name << ": " << y.status().ToString();
    ASSERT_TRUE(rep.program.has_value());
    ASSERT_EQ(rep.program->path, c.matmul ? "matmul" : "conv2d") << c.name;
    ASSERT_EQ(rep.program->act_dtype, c.act) << c.name;
    std::vector<uint32_t> xk(32);
    std::vector<std::vector<uint32_t>> wk(32, std::vector<uint32_t>(32, 0u));
    for (int k = 0; k < 32; ++k) {
      const uint32_t u = nx::FloatBits(xs[static_cast<size_t>(k)]);
      if (c.matmul) {  // §4: Tf32 with an fp32 Dst, truncated to bf16 without
        xk[k] = c.fp32_dst ? nx::UnpackFp32ToTf32(u) : static_cast<uint32_t>(nx::UnpackFp32ToBf16(u)) << 16;
      } else if (c.input == kBf16) {
        xk[k] = static_cast<uint32_t>(nx::PackBf16DstToBf16(nx::HostFp32ToBf16(u))) << 16;  // §2.1, §3.2
      } else if (!c.fp32_dst) {
        xk[k] = static_cast<uint32_t>(nx::PackBf16DstToBf16(nx::UnpackFp32ToBf16(u))) << 16;  // §4, §3.2
      } else {
        xk[k] = static_cast<uint32_t>(nx::PackFp32DstToBf16(u)) << 16;  // §3.1
      }
      wk[static_cast<size_t>(k)][static_cast<size_t>(k)] = 0x3F800000u;
    }
    tilized.push_back(xk);
    const nx::FpuConfig cfg{c.fp32_dst, nx::Arch::kWormholeB0, nx::SrcFormat::kBf16,
                            c.act == kFp32 && c.fp32_dst ? nx::SrcFormat::kTf32 : nx::SrcFormat::kBf16};
    const auto want = ChainBlocks(wk, xk, {0, 32}, c.act, c.act, true, MF::kHiFi4, cfg);
    for (int o = 0; o < 32; ++o)
      ASSERT_EQ(Hex(nx::FloatBits(y->data<float>()[o])), Hex(want[static_cast<size_t>(o)]))
          << c.name << ", input pattern " << Hex(nx::FloatBits(xs[static_cast<size_t>(o)])) << "; " << rep.blocking;
  }
  // The tilizes differ on these patterns (e.g. 0x7F7FFFFF: Inf after RNE, 0x7F7F after truncation).
  for (size_t i = 1; i < tilized.size(); ++i) EXPECT_NE(tilized[i], tilized[i - 1]) << configs[i].name;
}

}  // namespace
}  // namespace kiln::device
