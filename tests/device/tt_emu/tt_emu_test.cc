// tt-emu backend tests:
//  * end to end bit-exactness of the conv dataflow against kacc32.jsonl (a 1x1 conv of one pixel,
//    Cin = 32, Cout = 16 is exactly one K tile of MVMULs, then the packer);
//  * tt-emu against the fp32 reference backend on the tt-metal conv shapes of docs/specs/tt-numerics.md §13
//    (spatial size and batch scaled down; channels, kernel, stride, pad, dilation, groups kept),
//    each passing tt-metal's threshold for its precision config (§9);
//  * PCC(HiFi4) >= PCC(HiFi2) >= PCC(LoFi) on random data; fast vs exact agreement.
// Section numbers (§) cite docs/specs/tt-numerics.md.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "device/backends/reference/reference_backend.h"
#include "device/backends/tt_emu/transpose.h"
#include "device/backends/tt_emu/tt_conv.h"
#include "device/backends/tt_emu/tt_emu_backend.h"
#include "device/numerics/formats.h"
#include "device/numerics/fpu.h"
#include "device/numerics/mvmul_kernel.h"
#include "device/numerics/pcc.h"
#include "tests/device/tt_emu/chain_util.h"

namespace kiln::device {
namespace {

namespace nx = kiln::numerics;

uint32_t HexOf(const nlohmann::json& v) { return static_cast<uint32_t>(std::stoul(v.get<std::string>(), nullptr, 16)); }

Tensor MakeTensor(std::vector<int64_t> shape, const std::vector<float>& v) {
  auto t = Tensor::FromFloats(std::move(shape), v);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(*t);
}

// torch.randn(..., dtype=bfloat16).float() (§8.1), times `scale`.
std::vector<float> RandBf16(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (auto& x : v) x = nx::Bf16ToFloat(nx::HostFp32ToBf16(nx::FloatBits(nd(rng)))) * scale;
  return v;
}

struct ShapeCase;
void PrintTo(const ShapeCase& c, std::ostream* os);

using MF = MathFidelity;
using DT = DeviceDType;
constexpr DT kBf16 = DT::kBFloat16, kBfp8 = DT::kBFloat8B, kFp32 = DT::kFloat32;

// ---------------------------------------------------------------------------------------------
// Bit-exact end to end: kacc32 vectors through the conv dataflow.

TEST(TtEmuExact, Kacc32VectorsThroughConv1x1) {
  std::ifstream in(std::string(KILN_TEST_DATA) + "/tt-vectors/kacc32.jsonl");
  ASSERT_TRUE(in);
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << line;
    const bool tf32 = j.at("a_fmt") == "tf32";
    std::vector<float> w(16 * 32), x(32);
    for (int k = 0; k < 32; ++k) {
      x[k] = nx::BitsFloat(HexOf(j.at("x").at(k)));
      for (int o = 0; o < 16; ++o) w[o * 32 + k] = nx::BitsFloat(HexOf(j.at("w").at(k).at(o)));
    }
    Tensor xt = MakeTensor({1, 32, 1, 1}, x), wt = MakeTensor({16, 32, 1, 1}, w);
    for (const char* arch_key : {"wh", "bh"}) {
      for (const auto& [key, res] : j.at(arch_key).items()) {
        const bool fp32 = key.rfind("fp32_", 0) == 0;
        if (tf32 && !fp32) continue;  // tt-metal only unpacks to tf32 with an fp32 Dst (§8.3)
        PrecisionConfig p;
        p.arch = std::string(arch_key) == "wh" ? Arch::kWormholeB0 : Arch::kBlackhole;
        p.math_fidelity = *ParseMathFidelity(key.substr(5));
        p.fp32_dest_acc_en = fp32;
        p.weights_dtype = p.input_dtype = tf32 ? DeviceDType::kFloat32 : DeviceDType::kBFloat16;
        // bfloat8_b outputs also tilize the activations to bfloat8_b (§8.2): covered by the next test.
        for (DeviceDType out : {DeviceDType::kFloat32, DeviceDType::kBFloat16}) {
          if (tf32 && out != DeviceDType::kFloat32) continue;  // the activations are tilized into the output dtype
          p.output_dtype = out;
          OpReport rep;
          auto y = tt_emu::Conv2d(xt, wt, nullptr, Conv2dParams{}, p, tt_emu::EmuLevel::kExact, nullptr, &rep);
          ASSERT_TRUE(y.ok()) << y.status().ToString();
          const float* yv = y->data<float>();
          for (int o = 0; o < 16; ++o) {
            uint32_t want;
            if (out == DeviceDType::kFloat32) {
              want = HexOf(res.at("dst").at(o));
            } else {
              want = HexOf(res.at("pack_bf16").at(o)) << 16;
            }
            ASSERT_EQ(nx::FloatBits(yv[o]), want)
                << "kacc32 id " << j.at("id") << " " << arch_key << "." << key << " out "
                << DeviceDTypeName(out) << " column " << o << std::hex << ": got " << nx::FloatBits(yv[o])
                << " want " << want;
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 36 * 2 * 8 * 2 + 12 * 2 * 4);
}

// bfloat8_b output: activations bfloat8_b-exact (so the tilize is lossless), expected values from
// the numerics building blocks (themselves checked bit for bit by the vector tests).
TEST(TtEmuExact, Bfp8OutputMatchesNumericsChain) {
  std::mt19937 rng(99);
  auto xs = RandBf16(32, rng), ws = RandBf16(16 * 32, rng);
  std::array<uint32_t, 32> xq;
  for (int h = 0; h < 2; ++h) {
    std::array<uint32_t, 16> grp;
    for (int i = 0; i < 16; ++i) grp[i] = nx::FloatBits(xs[h * 16 + i]);
    auto g = nx::HostEncodeBfpGroup(grp, nx::BfpFormat::kBfp8);
    for (int i = 0; i < 16; ++i) xq[h * 16 + i] = nx::FloatBits(nx::DecodeBfpValue(g.exp, g.codes[i], nx::BfpFormat::kBfp8));
  }
  std::vector<float> xv(32);
  for (int k = 0; k < 32; ++k) xv[k] = nx::BitsFloat(xq[k]);
  Tensor xt = MakeTensor({1, 32, 1, 1}, xv), wt = MakeTensor({16, 32, 1, 1}, ws);
  for (bool fp32 : {false, true}) {
    for (MF f : {MF::kLoFi, MF::kHiFi2, MF::kHiFi3, MF::kHiFi4}) {
      PrecisionConfig p;
      p.math_fidelity = f;
      p.fp32_dest_acc_en = fp32;
      p.output_dtype = kBfp8;
      auto y = tt_emu::Conv2d(xt, wt, nullptr, Conv2dParams{}, p, tt_emu::EmuLevel::kExact);
      ASSERT_TRUE(y.ok());
      nx::FpuConfig cfg{fp32, nx::Arch::kWormholeB0, nx::SrcFormat::kBf16, nx::SrcFormat::kBf16};
      std::array<uint32_t, 16> dst;
      for (int o = 0; o < 16; ++o) {
        std::array<uint32_t, 16> a0, a1, b0, b1;
        for (int k = 0; k < 16; ++k) {
          a0[k] = nx::FloatBits(ws[o * 32 + k]);
          a1[k] = nx::FloatBits(ws[o * 32 + 16 + k]);
          b0[k] = xq[k];
          b1[k] = xq[16 + k];
        }
        uint32_t d = 0;
        const int nph = nx::NumPhases(f);
        for (int ph = 0; ph < nph; ++ph) {
          d = nx::MvmulPhase(a0, b0, d, ph, cfg);
          d = nx::MvmulPhase(a1, b1, d, ph, cfg);
        }
        dst[o] = d;
      }
      nx::BfpGroup g;
      if (fp32) {
        g = nx::PackBfpFromFp32Dst(dst, nx::BfpFormat::kBfp8);
      } else {
        std::array<uint16_t, 16> t;
        for (int i = 0; i < 16; ++i) t[i] = static_cast<uint16_t>(dst[i] >> 16);
        g = nx::PackBfpFromBf16Dst(t, nx::BfpFormat::kBfp8);
      }
      for (int o = 0; o < 16; ++o)
        EXPECT_EQ(nx::FloatBits(y->data<float>()[o]), nx::FloatBits(nx::DecodeBfpValue(g.exp, g.codes[o], nx::BfpFormat::kBfp8)))
            << MathFidelityName(f) << " fp32=" << fp32 << " column " << o;
    }
  }
}

// K blocking, partial spills, packer L1 accumulation and the bias ELWADD (§8.4-8.6) against a
// straightforward chain of numerics calls: a 1x1 conv of one pixel, Cin = 96 (three 32-deep K
// tiles), Cout = 32 (two bfp groups), act_block_w = 1 → three K blocks, act_block_w = 2 → two
// (64 + 32; there packer_l1_acc is effective only with a bias).
TEST(TtEmuExact, BlockSpillsL1AccAndBiasMatchNumericsChain) {
  std::mt19937 rng(2024);
  auto xs = RandBf16(96, rng), ws = RandBf16(32 * 96, rng), bs = RandBf16(32, rng, 10.0f);
  // bfloat8_b-exact activations (the tilize into a bfloat8_b output is then lossless).
  for (int h = 0; h < 6; ++h) {
    std::array<uint32_t, 16> grp;
    for (int i = 0; i < 16; ++i) grp[i] = nx::FloatBits(xs[h * 16 + i]);
    auto g = nx::HostEncodeBfpGroup(grp, nx::BfpFormat::kBfp8);
    for (int i = 0; i < 16; ++i) xs[h * 16 + i] = nx::DecodeBfpValue(g.exp, g.codes[i], nx::BfpFormat::kBfp8);
  }
  Tensor xt = MakeTensor({1, 96, 1, 1}, xs), wt = MakeTensor({32, 96, 1, 1}, ws), bt = MakeTensor({32}, bs);
  int checked = 0, l1_tails = 0;
  for (bool fp32 : {false, true})
    for (bool l1 : {false, true})
      for (bool with_bias : {false, true})
        for (DT out : {kBf16, kBfp8, kFp32})
          for (MF f : {MF::kLoFi, MF::kHiFi4})
            for (int abw : {1, 2}) {
            PrecisionConfig p;
            p.math_fidelity = f;
            p.fp32_dest_acc_en = fp32;
            p.packer_l1_acc = l1;
            p.output_dtype = out;
            p.act_block_w = abw;
            p.arch = Arch::kBlackhole;
            p.weights_dtype = kBf16;  // the chain converts weights and bias to bf16 (no longer the default)
            OpReport rep;
            // Stride 2 keeps the one-pixel 1x1 conv on the conv program (a stride-1 1x1 conv runs as
            // ttnn::linear, whose partials differ: MatmulPathKeepsActivationDtypeAndFp32Partials).
            Conv2dParams cp;
            cp.strides = {2, 2};
            auto y = tt_emu::Conv2d(xt, wt, with_bias ? &bt : nullptr, cp, p, tt_emu::EmuLevel::kExact, nullptr, &rep);
            ASSERT_TRUE(y.ok()) << y.status().ToString();
            const int nb = abw == 1 ? 3 : 2;
            const bool l1_eff = l1 && ((with_bias && nb > 1) || nb > 2);
            const nx::FpuConfig cfg{fp32, nx::Arch::kBlackhole, nx::SrcFormat::kBf16, nx::SrcFormat::kBf16};
            const int nph = f == MF::kLoFi ? 1 : 4;
            auto pack = [&](const std::array<uint32_t, 32>& d, DT dt, bool host) {
              return testing::Pack32(d, dt, fp32, host);
            };
            std::array<uint32_t, 32> dst{}, part{}, acc{};
            for (int b = 0; b < nb; ++b) {
              const int t_begin = b * abw, t_end = std::min(3, t_begin + abw);
              // packer_l1_acc without bias: the last block accumulates in Dst on top of the L1 sum
              // reloaded, and is packed without L1 accumulation (determine_packer_l1_acc's tail).
              const bool l1_tail = l1_eff && !with_bias && b == nb - 1;
              for (int o = 0; o < 32; ++o) {
                uint32_t d = l1_tail ? acc[o] : (b == 0 || l1_eff) ? 0u : part[o];
                // fp32 partials come back through SrcA as Tf32 (PartialReload::kTf32, the recorded tree).
                const bool fp32_part = l1_tail ? fp32 : (!l1_eff && out == kFp32);
                if (fp32_part && b > 0) d &= 0xFFFFE000u;
                for (int t = t_begin; t < t_end; ++t) {  // K tiles in order, phases inside each tile (§5.6)
                  std::array<uint32_t, 16> a0, a1, b0, b1;
                  for (int k = 0; k < 16; ++k) {
                    a0[k] = nx::FloatBits(ws[o * 96 + t * 32 + k]);
                    a1[k] = nx::FloatBits(ws[o * 96 + t * 32 + 16 + k]);
                    b0[k] = nx::FloatBits(xs[t * 32 + k]);
                    b1[k] = nx::FloatBits(xs[t * 32 + 16 + k]);
                  }
                  for (int ph = 0; ph < nph; ++ph) {
                    d = nx::MvmulPhase(a0, b0, d, ph, cfg);
                    d = nx::MvmulPhase(a1, b1, d, ph, cfg);
                  }
                }
                dst[o] = d;
              }
              if (l1_tail) {
                ++l1_tails;
              } else if (l1_eff) {
                for (int o = 0; o < 32; ++o) {
                  if (fp32) {
                    acc[o] = b == 0 ? dst[o] : nx::PackL1AccFp32(acc[o], dst[o]);
                  } else {
                    const uint16_t nv = nx::PackBf16DstToBf16(static_cast<uint16_t>(dst[o] >> 16));
                    acc[o] = static_cast<uint32_t>(b == 0 ? nv : nx::PackL1AccBf16(static_cast<uint16_t>(acc[o] >> 16), nv))
                             << 16;
                  }
                }
                part = acc;
              } else if (b < nb - 1 || with_bias) {
                part = pack(dst, out, false);
              }
            }
            const DT part_dt = l1_eff ? (fp32 ? kFp32 : kBf16) : out;
            if (with_bias) {
              nx::FpuConfig ecfg = cfg;
              if (part_dt == kFp32 && fp32) ecfg.a_fmt = nx::SrcFormat::kTf32;
              for (int o = 0; o < 32; ++o) {
                uint32_t a = part[o];
                if (part_dt == kFp32) a = fp32 ? (a & 0xFFFFE000u) : (static_cast<uint32_t>(nx::UnpackFp32ToBf16(a)) << 16);
                const uint32_t bias_dev = static_cast<uint32_t>(nx::HostFp32ToBf16(nx::FloatBits(bs[o]))) << 16;
                dst[o] = nx::Elwadd(a, bias_dev, 0, false, ecfg);
              }
            }
            const auto want = pack(dst, out, true);
            for (int o = 0; o < 32; ++o)
              ASSERT_EQ(nx::FloatBits(y->data<float>()[o]), want[o])
                  << "fp32=" << fp32 << " l1=" << l1 << " bias=" << with_bias << " out=" << DeviceDTypeName(out) << " "
                  << MathFidelityName(f) << " column " << o << "; " << rep.blocking;
            ASSERT_TRUE(rep.program.has_value());
            EXPECT_EQ(rep.program->k_blocks, nb) << rep.blocking;
            EXPECT_EQ(rep.program->act_block_w_ntiles, abw) << rep.blocking;
            EXPECT_EQ(rep.program->l1_acc_effective, l1_eff) << rep.blocking;
            ++checked;
          }
  EXPECT_EQ(checked, 96);
  EXPECT_EQ(l1_tails, 2 * 3 * 2);  // fp32 x out x fidelity with l1, no bias, 3 blocks
}

// ---------------------------------------------------------------------------------------------
// tt-metal conv shapes (§13), scaled down.

struct ShapeCase {
  const char* name;
  int64_t N, C, O, H, W, kh, kw, sh, sw;
  std::array<int64_t, 4> pads;  // ONNX order (top, left, bottom, right)
  int64_t dil, group;
  DeviceDType out, wdt;
  MathFidelity fid;
  bool fp32_acc, l1_acc, bias;
  Activation act = Activation::kNone;
  float bias_scale = 10.0f;
  double custom_pcc = 0.0;
  bool transposed = false;
  int64_t out_pad = 0;
  bool fast_compare = false;
  DeviceDType in = DeviceDType::kBFloat16;
};


void PrintTo(const ShapeCase& c, std::ostream* os) { *os << c.name; }

// Rows of docs/specs/tt-numerics.md §13 (N and H×W reduced).
const std::vector<ShapeCase>& Cases() {
  static const std::vector<ShapeCase> cases = {
      {"r01_features_ws", 1, 384, 353, 8, 8, 3, 3, 2, 2, {1, 2, 2, 3}, 1, 1, kBf16, kBf16, MF::kHiFi4, true, true, true},
      {"r01_features_ws_bfp8", 1, 384, 353, 8, 8, 3, 3, 2, 2, {1, 2, 2, 3}, 1, 1, kBfp8, kBf16, MF::kHiFi4, false, false, true},
      {"r02_features_bs", 2, 128, 128, 8, 8, 1, 1, 2, 2, {0, 0, 0, 0}, 1, 1, kBf16, kBf16, MF::kHiFi4, true, false, true},
      {"r03_features_hs", 1, 16, 16, 16, 16, 5, 5, 2, 2, {2, 3, 4, 5}, 1, 1, kBfp8, kBf16, MF::kHiFi4, false, false, true},
      {"r04_activation_relu", 1, 256, 256, 8, 8, 3, 3, 2, 2, {1, 1, 1, 1}, 1, 1, kBfp8, kBf16, MF::kHiFi4, true, false, true, Activation::kRelu},
      {"r04_activation_sigmoid", 1, 256, 256, 8, 8, 3, 3, 2, 2, {1, 1, 1, 1}, 1, 1, kBf16, kBf16, MF::kHiFi4, true, false, true, Activation::kSigmoid},
      {"r04_activation_tanh", 1, 256, 256, 8, 8, 3, 3, 2, 2, {1, 1, 1, 1}, 1, 1, kBf16, kBf16, MF::kHiFi4, true, false, true, Activation::kTanh},
      {"r05_activation_gelu", 1, 32, 32, 16, 16, 3, 3, 2, 2, {1, 1, 1, 1}, 1, 1, kBfp8, kBf16, MF::kHiFi4, true, false, true, Activation::kGelu},
      {"r05_activation_silu", 1, 32, 32, 16, 16, 3, 3, 2, 2, {1, 1, 1, 1}, 1, 1, kBf16, kBf16, MF::kHiFi4, true, false, true, Activation::kSilu},
      {"r06_resnet50", 1, 16, 64, 12, 12, 4, 4, 1, 1, {0, 0, 0, 0}, 1, 1, kBf16, kBfp8, MF::kLoFi, false, true, true},
      {"r07_resnet50", 1, 64, 64, 8, 8, 3, 3, 1, 1, {1, 1, 1, 1}, 1, 1, kBfp8, kBfp8, MF::kLoFi, false, true, true},
      {"r08_resnet50", 1, 128, 128, 8, 8, 3, 3, 2, 2, {1, 1, 1, 1}, 1, 1, kBfp8, kBfp8, MF::kLoFi, false, true, true},
      {"r09_resnet50", 1, 256, 256, 8, 8, 3, 3, 2, 2, {1, 1, 1, 1}, 1, 1, kBfp8, kBfp8, MF::kLoFi, false, true, true},
      {"r10_resnet50", 1, 512, 512, 7, 7, 3, 3, 1, 1, {1, 1, 1, 1}, 1, 1, kBfp8, kBfp8, MF::kLoFi, false, true, true},
      {"r11_resnet50_1x1s2", 1, 64, 256, 8, 8, 1, 1, 2, 2, {0, 0, 0, 0}, 1, 1, kBfp8, kBfp8, MF::kLoFi, false, true, true},
      {"r12_resnet50_1x1s2", 1, 1024, 2048, 4, 4, 1, 1, 2, 2, {0, 0, 0, 0}, 1, 1, kBfp8, kBfp8, MF::kLoFi, false, true, true},
      {"r13_segformer", 1, 3, 32, 32, 32, 7, 7, 4, 4, {3, 3, 3, 3}, 1, 1, kBf16, kBf16, MF::kLoFi, false, false, false},
      {"r14_segformer", 1, 32, 32, 32, 32, 8, 8, 8, 8, {0, 0, 0, 0}, 1, 1, kBf16, kBf16, MF::kLoFi, false, false, false},
      {"r15_segformer_dw", 1, 128, 128, 16, 16, 3, 3, 1, 1, {1, 1, 1, 1}, 1, 128, kBf16, kBf16, MF::kLoFi, false, false, false},
      {"r16_segformer_dw", 1, 576, 576, 8, 8, 3, 3, 2, 2, {0, 0, 0, 0}, 1, 576, kBf16, kBf16, MF::kLoFi, false, false, false},
      {"r17_segformer_1x1", 1, 256, 150, 16, 16, 1, 1, 1, 1, {0, 0, 0, 0}, 1, 1, kBf16, kBf16, MF::kLoFi, false, false, false},
      {"r18_model_k_dil2", 1, 32, 48, 20, 20, 3, 3, 1, 1, {0, 0, 0, 0}, 2, 1, kBfp8, kBfp8, MF::kLoFi, false, false, true},
      {"r19_model_k_dil8", 1, 56, 64, 24, 24, 3, 3, 1, 1, {0, 0, 0, 0}, 8, 1, kBfp8, kBfp8, MF::kLoFi, false, false, true},
      {"r20_unet", 1, 3, 32, 16, 20, 3, 3, 1, 1, {1, 1, 1, 1}, 1, 1, kBfp8, kBf16, MF::kLoFi, false, false, false},
      {"r21_unet", 1, 512, 512, 6, 8, 3, 3, 1, 1, {1, 1, 1, 1}, 1, 1, kBf16, kBf16, MF::kLoFi, false, false, false},
      {"r22_unet_cout1", 1, 32, 1, 16, 16, 1, 1, 1, 1, {0, 0, 0, 0}, 1, 1, kBf16, kBf16, MF::kLoFi, false, false, false},
      {"r23_conv_ws", 1, 2048, 512, 4, 4, 3, 3, 1, 1, {1, 1, 1, 1}, 1, 1, kBfp8, kBf16, MF::kHiFi4, true, true, true, Activation::kNone, 50.0f, 0.99},
      {"r24_conv_ws_abw2", 1, 4096, 1280, 3, 3, 2, 2, 1, 1, {1, 1, 1, 1}, 1, 1, kBf16, kBf16, MF::kHiFi4, true, true, true, Activation::kNone, 10.0f, 0.99},
      {"r25_conv_ws_1x1", 1, 1232, 3024, 2, 2, 1, 1, 1, 1, {0, 0, 0, 0}, 1, 1, kBfp8, kBf16, MF::kHiFi4, true, true, true, Activation::kNone, 10.0f, 0.99},
      {"r26_conv_dram", 1, 10, 64, 32, 16, 4, 4, 2, 2, {1, 1, 1, 1}, 1, 1, kBf16, kBfp8, MF::kLoFi, true, true, true, Activation::kNone, 10.0f, 0.0, false, 0, true, kFp32},
      {"r27_conv_dram_dil2", 1, 32, 48, 24, 24, 3, 3, 1, 1, {0, 0, 0, 0}, 2, 1, kBf16, kBfp8, MF::kLoFi, true, true, true, Activation::kNone, 10.0f, 0.0, false, 0, true, kBfp8},
      {"r28_conv_dram_wide", 1, 2944, 2944, 3, 3, 3, 3, 1, 1, {0, 0, 0, 0}, 1, 1, kBf16, kBfp8, MF::kHiFi4, true, true, true, Activation::kNone, 10.0f, 0.0, false, 0, true},
      {"r29_panoptic", 1, 2048, 256, 1, 1, 1, 1, 1, 1, {0, 0, 0, 0}, 1, 1, kBf16, kBfp8, MF::kHiFi4, false, false, true},
      {"r30_panoptic_pad8", 1, 512, 512, 2, 2, 3, 3, 1, 1, {8, 8, 8, 8}, 1, 1, kBf16, kBfp8, MF::kHiFi4, false, false, false},
      {"r31_panoptic_stem", 1, 3, 64, 16, 32, 3, 3, 2, 2, {1, 1, 1, 1}, 1, 1, kBf16, kBfp8, MF::kHiFi4, false, false, false},
      {"r32_convT", 1, 64, 64, 8, 8, 3, 3, 2, 2, {1, 1, 1, 1}, 1, 1, kBf16, kBf16, MF::kHiFi4, false, false, true, Activation::kNone, 10.0f, 0.0, true, 1},
      {"r32_convT_bfp8", 1, 64, 64, 8, 8, 3, 3, 2, 2, {1, 1, 1, 1}, 1, 1, kBfp8, kBf16, MF::kHiFi4, false, false, true, Activation::kNone, 10.0f, 0.0, true, 1},
      {"r33_convT", 1, 64, 64, 4, 4, 8, 8, 4, 4, {2, 2, 2, 2}, 1, 1, kBf16, kBf16, MF::kHiFi4, false, false, true, Activation::kNone, 10.0f, 0.0, true, 2},
      {"r34_convT_k2s2", 2, 256, 128, 4, 4, 2, 2, 2, 2, {0, 0, 0, 0}, 1, 1, kBf16, kBf16, MF::kHiFi4, false, false, true, Activation::kNone, 10.0f, 0.0, true, 0},
      // Not in §13: conv_transpose2d with groups, dilation, asymmetric pads and output_padding.
      {"x_convT_groups_dil", 1, 32, 16, 6, 6, 3, 3, 2, 2, {1, 0, 0, 2}, 2, 2, kBf16, kBf16, MF::kHiFi4, false, false, true, Activation::kRelu6, 10.0f, 0.0, true, 1},
      {"x_conv_groups4_dil3", 1, 64, 32, 12, 12, 3, 3, 1, 2, {2, 0, 1, 3}, 3, 4, kBfp8, kBfp8, MF::kHiFi2, false, false, true},
  };
  return cases;
}

// Multiply-accumulates of a case times its fidelity phases: the exact level's cost.
int64_t PhaseMacs(const ShapeCase& c, int64_t OH, int64_t OW) {
  const int64_t cin_pad = (c.C + 31) / 32 * 32;  // the emulator walks padded K (block-diagonal groups)
  return c.N * OH * OW * c.O * cin_pad * c.kh * c.kw * nx::NumPhases(c.fid);
}

class TtMetalShapes : public ::testing::TestWithParam<ShapeCase> {};

TEST_P(TtMetalShapes, PassesTtMetalPccThreshold) {
  const ShapeCase& c = GetParam();
  std::mt19937 rng(1234);
  const int64_t Cg = c.C / c.group;
  Tensor x = MakeTensor({c.N, c.C, c.H, c.W}, RandBf16(c.N * c.C * c.H * c.W, rng));
  std::vector<int64_t> wshape = c.transposed ? std::vector<int64_t>{c.C, c.O / c.group, c.kh, c.kw}
                                             : std::vector<int64_t>{c.O, Cg, c.kh, c.kw};
  Tensor w = MakeTensor(wshape, RandBf16(c.O * Cg * c.kh * c.kw, rng));
  Tensor b = MakeTensor({c.O}, RandBf16(c.O, rng, c.bias_scale));
  const Tensor* bp = c.bias ? &b : nullptr;

  PrecisionConfig p;
  p.math_fidelity = c.fid;
  p.weights_dtype = c.wdt;
  p.input_dtype = c.in;
  p.output_dtype = c.out;
  p.fp32_dest_acc_en = c.fp32_acc;
  p.packer_l1_acc = c.l1_acc;

  auto ref_backend = MakeReferenceBackend();
  ASSERT_TRUE(ref_backend.ok());
  ExecContext ref_ctx;
  Result<Tensor> ref = Status(StatusCode::kUnknown, "unset");
  Conv2dParams cp;
  ConvTranspose2dParams tp;
  if (c.transposed) {
    tp.strides = {c.sh, c.sw};
    tp.pads = c.pads;
    tp.dilations = {c.dil, c.dil};
    tp.output_padding = {c.out_pad, c.out_pad};
    tp.group = c.group;
    tp.activation = c.act;
    ref = (*ref_backend)->ConvTranspose2d(x, w, bp, tp, ref_ctx);
  } else {
    cp.strides = {c.sh, c.sw};
    cp.pads = c.pads;
    cp.dilations = {c.dil, c.dil};
    cp.group = c.group;
    cp.activation = c.act;
    ref = (*ref_backend)->Conv2d(x, w, bp, cp, ref_ctx);
  }
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const int64_t OH = ref->dim(2), OW = ref->dim(3);
  // The exact level where it stays cheap, else fast (both share the spill / bias / pack model).
  const int64_t cost = PhaseMacs(c, c.transposed ? OH : OH, c.transposed ? OW : OW);
  const auto level = cost <= 150'000'000 ? tt_emu::EmuLevel::kExact : tt_emu::EmuLevel::kFast;
  OpReport rep;
  auto out = c.transposed ? tt_emu::ConvTranspose2d(x, w, bp, tp, p, level, nullptr, &rep)
                          : tt_emu::Conv2d(x, w, bp, cp, p, level, nullptr, &rep);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->shape(), ref->shape());
  EXPECT_FALSE(rep.blocking.empty());

  RecordProperty("level", tt_emu::EmuLevelName(level));
  if (c.fast_compare) {
    const bool fp32_no_bfp8 = c.fp32_acc && c.in != kBfp8 && c.wdt != kBfp8;
    auto ok = nx::FastCompare(ref->span<float>(), out->span<float>(), Cg * c.kh * c.kw, fp32_no_bfp8);
    ASSERT_TRUE(ok.ok());
    EXPECT_TRUE(*ok) << c.name << " (" << tt_emu::EmuLevelName(level) << ") fails fast_compare; " << rep.blocking;
    return;
  }
  double thr;
  if (c.transposed) {
    thr = nx::ConvTransposePccThreshold(c.fp32_acc, c.fid, c.out == kBfp8);
  } else {
    nx::ConvPccRuleInput r;
    r.fp32_accum = c.fp32_acc;
    r.fidelity = c.fid;
    r.bfp8_output = c.out == kBfp8;
    r.activation = c.act;
    r.cin_kh_kw = c.C * c.kh * c.kw;
    r.custom = c.custom_pcc;
    thr = nx::ConvPccThreshold(r);
  }
  auto pcc = nx::CompPcc(ref->span<float>(), out->span<float>(), thr);
  ASSERT_TRUE(pcc.ok());
  EXPECT_TRUE(pcc->pass) << c.name << " (" << tt_emu::EmuLevelName(level) << "): PCC " << pcc->pcc << " < " << thr
                         << "; " << rep.blocking;
  EXPECT_LT(pcc->pcc, 1.0) << "the emulator should not reproduce fp32 exactly";
  RecordProperty("pcc", std::to_string(pcc->pcc));
}

INSTANTIATE_TEST_SUITE_P(Section13, TtMetalShapes, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<ShapeCase>& i) { return std::string(i.param.name); });

// ---------------------------------------------------------------------------------------------

double PccOf(const Tensor& ref, const Tensor& out) {
  auto r = nx::CompPcc(ref.span<float>(), out.span<float>(), 0.0);
  EXPECT_TRUE(r.ok());
  return r->pcc;
}

TEST(TtEmuExact, FidelityOrderingOnRandomData) {
  std::mt19937 rng(7);
  Tensor x = MakeTensor({1, 64, 8, 8}, RandBf16(64 * 64, rng));
  Tensor w = MakeTensor({32, 64, 3, 3}, RandBf16(32 * 64 * 9, rng));
  Conv2dParams cp;
  cp.pads = {1, 1, 1, 1};
  auto ref = (*MakeReferenceBackend())->Conv2d(x, w, nullptr, cp, ExecContext{});
  ASSERT_TRUE(ref.ok());
  std::map<MF, double> pcc;
  for (MF f : {MF::kLoFi, MF::kHiFi2, MF::kHiFi3, MF::kHiFi4}) {
    PrecisionConfig p;
    p.math_fidelity = f;
    p.fp32_dest_acc_en = true;
    p.output_dtype = kFp32;  // keep the fidelity effect visible (no bf16 output rounding)
    auto y = tt_emu::Conv2d(x, w, nullptr, cp, p, tt_emu::EmuLevel::kExact);
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    pcc[f] = PccOf(*ref, *y);
  }
  const double lofi = pcc[MF::kLoFi], hifi2 = pcc[MF::kHiFi2], hifi3 = pcc[MF::kHiFi3], hifi4 = pcc[MF::kHiFi4];
  EXPECT_GE(hifi4, hifi2);
  EXPECT_GE(hifi2, lofi);
  EXPECT_GE(hifi4, hifi3);
  EXPECT_GT(hifi4, 0.99999);
  EXPECT_LT(lofi, hifi4);  // LoFi keeps 5 weight bits and 7 activation bits
  RecordProperty("pcc_lofi", std::to_string(lofi));
  RecordProperty("pcc_hifi4", std::to_string(hifi4));
}

// The exact level through the vectorised MVMUL kernel equals the scalar oracle bit for bit on whole
// convs (the shapes of the conv-case networks: a 7x7 stem with Cin = 3, a 3x3 residual conv, a
// strided 1x1, a depthwise 3x3 and a grouped conv, with and without bias / activations), and one
// thread equals two.
TEST(TtEmuExact, VectorKernelAndThreadCountDoNotChangeABit) {
  struct Case {
    int64_t C, O, H, kh, s, pad, group;
    bool bias;
    Activation act;
    MF fid;
    bool fp32;
  };
  const Case cases[] = {{3, 16, 20, 7, 2, 3, 1, true, Activation::kRelu, MF::kHiFi4, false},
                        {32, 32, 10, 3, 1, 1, 1, true, Activation::kNone, MF::kLoFi, true},
                        {48, 64, 8, 1, 2, 0, 1, false, Activation::kRelu6, MF::kHiFi2, false},
                        {32, 32, 9, 3, 1, 1, 32, true, Activation::kRelu6, MF::kHiFi3, true},
                        {24, 24, 7, 3, 1, 1, 3, false, Activation::kSilu, MF::kHiFi4, true}};
  std::mt19937 rng(77);
  int compared = 0;
  for (const Case& c : cases) {
    Tensor x = MakeTensor({1, c.C, c.H, c.H}, RandBf16(c.C * c.H * c.H, rng));
    Tensor w = MakeTensor({c.O, c.C / c.group, c.kh, c.kh}, RandBf16(c.O * c.C / c.group * c.kh * c.kh, rng));
    Tensor b = MakeTensor({c.O}, RandBf16(c.O, rng));
    Conv2dParams cp;
    cp.strides = {c.s, c.s};
    cp.pads = {c.pad, c.pad, c.pad, c.pad};
    cp.group = c.group;
    cp.activation = c.act;
    PrecisionConfig p;
    p.math_fidelity = c.fid;
    p.fp32_dest_acc_en = c.fp32;
    Tensor* bias = c.bias ? &b : nullptr;
    nx::SetMvmulKernel(nx::MvmulKernelPath::kScalar);
    auto scalar = tt_emu::Conv2d(x, w, bias, cp, p, tt_emu::EmuLevel::kExact, nullptr, nullptr, 1);
    ASSERT_TRUE(scalar.ok());
    for (auto path : {nx::MvmulKernelPath::kAvx2, nx::MvmulKernelPath::kAvx512, nx::MvmulKernelPath::kAvx512Fp16}) {
      if (!nx::MvmulKernelSupported(path)) continue;
      nx::SetMvmulKernel(path);
      ASSERT_EQ(nx::ActiveMvmulKernel(), path);
      auto vec1 = tt_emu::Conv2d(x, w, bias, cp, p, tt_emu::EmuLevel::kExact, nullptr, nullptr, 1);
      auto vec2 = tt_emu::Conv2d(x, w, bias, cp, p, tt_emu::EmuLevel::kExact, nullptr, nullptr, 2);
      ASSERT_TRUE(vec1.ok() && vec2.ok());
      ASSERT_EQ(scalar->num_elements(), vec1->num_elements());
      const char* name = nx::MvmulKernelPathName(path);
      for (int64_t i = 0; i < scalar->num_elements(); ++i) {
        ASSERT_EQ(nx::FloatBits(scalar->data<float>()[i]), nx::FloatBits(vec1->data<float>()[i]))
            << name << " case C=" << c.C << " i=" << i;
        ASSERT_EQ(nx::FloatBits(vec1->data<float>()[i]), nx::FloatBits(vec2->data<float>()[i]))
            << name << " case C=" << c.C << " i=" << i;
      }
    }
    nx::ResetMvmulKernel();
    ++compared;
  }
  EXPECT_EQ(compared, 5);
  // On this machine the widest vector path is the one taken by default, not the fallback.
  EXPECT_EQ(nx::ActiveMvmulKernel(), nx::BestMvmulKernel());
  if (nx::MvmulKernelSupported(nx::MvmulKernelPath::kAvx2)) {
    EXPECT_NE(nx::ActiveMvmulKernel(), nx::MvmulKernelPath::kScalar);
  }
}

// The exact level's bound on prepared weights (conv_engine.h kMaxPreparedSrcABytes): weights
// prepared and run in chunks of 32 or 64 output columns (whole kernel blocks) give what one whole preparation gives, bit
// for bit — bfp8 outputs (groups of 16 columns), bias, L1 accumulation, padded output channels,
// both Dst formats, one and two threads.
TEST(TtEmuExact, PreparedWeightChunksDoNotChangeABit) {
  std::mt19937 rng(5);
  Tensor x = MakeTensor({1, 40, 9, 9}, RandBf16(40 * 81, rng));
  Tensor w = MakeTensor({72, 40, 3, 3}, RandBf16(72 * 40 * 9, rng));
  Tensor b = MakeTensor({72}, RandBf16(72, rng, 4.0f));
  Conv2dParams cp;
  cp.pads = {1, 1, 1, 1};
  cp.activation = Activation::kRelu;
  int compared = 0;
  for (bool fp32 : {false, true}) {
    for (bool l1 : {false, true}) {
      PrecisionConfig p;
      p.math_fidelity = MF::kHiFi2;
      p.fp32_dest_acc_en = fp32;
      p.packer_l1_acc = l1;
      p.output_dtype = DeviceDType::kBFloat8B;
      p.weights_dtype = DeviceDType::kBFloat8B;
      auto whole = tt_emu::Conv2d(x, w, &b, cp, p, tt_emu::EmuLevel::kExact, nullptr, nullptr, 1);
      ASSERT_TRUE(whole.ok()) << whole.status().ToString();
      for (int64_t cols : {32, 64}) {
        // Bytes of `cols` prepared columns at this K (K <= 9 · 64 here; the bound rounds down to 32s).
        tt_emu::SetMaxPreparedSrcABytesForTesting(nx::PreparedSrcABytes(cols, 640, MF::kHiFi2));
        auto one = tt_emu::Conv2d(x, w, &b, cp, p, tt_emu::EmuLevel::kExact, nullptr, nullptr, 1);
        auto two = tt_emu::Conv2d(x, w, &b, cp, p, tt_emu::EmuLevel::kExact, nullptr, nullptr, 2);
        tt_emu::SetMaxPreparedSrcABytesForTesting(0);
        ASSERT_TRUE(one.ok() && two.ok());
        for (int64_t i = 0; i < whole->num_elements(); ++i) {
          ASSERT_EQ(nx::FloatBits(whole->data<float>()[i]), nx::FloatBits(one->data<float>()[i]))
              << "fp32=" << fp32 << " l1=" << l1 << " cols=" << cols << " i=" << i;
          ASSERT_EQ(nx::FloatBits(whole->data<float>()[i]), nx::FloatBits(two->data<float>()[i]))
              << "fp32=" << fp32 << " l1=" << l1 << " cols=" << cols << " i=" << i;
        }
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 8);
}

// Transpose32 (the activations' and outputs' layout changes) against the element-by-element
// definition: shapes below, at and past its 16×16 and 8×16 blocks, strides wider than the matrix.
TEST(Transpose32, MatchesDefinitionOnEveryEdge) {
  int checked = 0;
  for (int64_t rows : {1, 3, 8, 15, 16, 17, 24, 33, 64}) {
    for (int64_t cols : {1, 5, 16, 31, 48}) {
      const int64_t ss = cols + 3, ds = rows + 5;
      std::vector<uint32_t> src(static_cast<size_t>(rows * ss)), dst(static_cast<size_t>(cols * ds), 0xDEADBEEFu);
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint32_t>(i * 2654435761u);
      tt_emu::Transpose32(src.data(), rows, cols, ss, dst.data(), ds);
      for (int64_t c = 0; c < cols; ++c) {
        for (int64_t r = 0; r < ds; ++r) {
          const uint32_t want = r < rows ? src[static_cast<size_t>(r * ss + c)] : 0xDEADBEEFu;  // padding untouched
          ASSERT_EQ(dst[static_cast<size_t>(c * ds + r)], want) << rows << "x" << cols << " r=" << r << " c=" << c;
        }
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 45);
}

// The exact level's SrcB image (conv_engine.h kMaxSrcBImageBytes: operands prepared once per input
// pixel, a row read as pointers into it) gives the bits the per-row im2col preparation gives:
// channels a multiple of 8 and not (Cin = 3 and 12: groups that end in the image's zero
// channels), stride, dilation, groups, 1×1 convs (stride 1: the matmul path), batches of 2, border
// rows (padding), an fp32 input with an fp32 Dst (Tf32 operands), every fidelity, one thread on the
// scalar kernel path and two on the best one. A bfp8 input is tilized per row, so it reads rows
// either way. The report's note says which source ran.
TEST(TtEmuExact, SrcBImageMatchesPerRowPreparation) {
  struct Case {
    const char* name;
    int64_t N, C, O, H, W, k, s, dil, group, pad;
    MF fid;
    DT in;
    bool fp32;
    bool image;  // whether the image applies
  };
  const Case cases[] = {
      {"c64 3x3", 1, 64, 40, 9, 9, 3, 1, 1, 1, 1, MF::kLoFi, kBf16, false, true},
      {"cin3 7x7 s2 n2", 2, 3, 32, 13, 11, 7, 2, 1, 1, 3, MF::kHiFi4, kBf16, false, true},
      {"cin12 d2 n2", 2, 12, 24, 8, 8, 3, 1, 2, 1, 2, MF::kHiFi2, kBf16, false, true},
      {"grouped", 1, 40, 40, 7, 7, 3, 1, 1, 4, 1, MF::kHiFi3, kBf16, false, true},
      {"1x1 s2", 1, 32, 48, 10, 10, 1, 2, 1, 1, 0, MF::kLoFi, kBf16, false, true},
      {"1x1 s1 (matmul path)", 2, 40, 24, 5, 7, 1, 1, 1, 1, 0, MF::kHiFi4, kBf16, false, true},
      {"fp32 in", 1, 16, 32, 6, 6, 3, 1, 1, 1, 1, MF::kHiFi4, kFp32, true, true},
      {"bfp8 in", 1, 32, 32, 6, 6, 3, 1, 1, 1, 1, MF::kHiFi2, kBfp8, false, false},
  };
  std::mt19937 rng(31);
  auto source = [](const OpReport& r) {
    for (const auto& [k, v] : r.notes)
      if (k == "exact_srcb") return v;
    return std::string("none");
  };
  int compared = 0;
  for (const Case& c : cases) {
    Tensor x = MakeTensor({c.N, c.C, c.H, c.W}, RandBf16(c.N * c.C * c.H * c.W, rng));
    Tensor w = MakeTensor({c.O, c.C / c.group, c.k, c.k}, RandBf16(c.O * (c.C / c.group) * c.k * c.k, rng));
    Tensor b = MakeTensor({c.O}, RandBf16(c.O, rng, 4.0f));
    Conv2dParams cp;
    cp.strides = {c.s, c.s};
    cp.dilations = {c.dil, c.dil};
    cp.group = c.group;
    cp.pads = {c.pad, c.pad, c.pad, c.pad};
    cp.activation = Activation::kRelu;
    PrecisionConfig p;
    p.math_fidelity = c.fid;
    p.input_dtype = c.in;
    p.fp32_dest_acc_en = c.fp32;
    for (int threads : {1, 2}) {
      OpReport img_rep, row_rep;
      tt_emu::SetSrcBImageForTesting(false);
      auto rows = tt_emu::Conv2d(x, w, &b, cp, p, tt_emu::EmuLevel::kExact, nullptr, &row_rep, threads);
      tt_emu::SetSrcBImageForTesting(true);
      // The image's preparation and gather on the scalar path (threads 1) and on the best one.
      if (threads == 1) nx::SetMvmulKernel(nx::MvmulKernelPath::kScalar);
      auto img = tt_emu::Conv2d(x, w, &b, cp, p, tt_emu::EmuLevel::kExact, nullptr, &img_rep, threads);
      nx::ResetMvmulKernel();
      ASSERT_TRUE(img.ok()) << c.name << ": " << img.status().ToString();
      ASSERT_TRUE(rows.ok()) << c.name << ": " << rows.status().ToString();
      EXPECT_EQ(source(img_rep), c.image ? "image" : "rows") << c.name;
      EXPECT_EQ(source(row_rep), "rows") << c.name;
      ASSERT_EQ(img->num_elements(), rows->num_elements());
      for (int64_t i = 0; i < img->num_elements(); ++i)
        ASSERT_EQ(nx::FloatBits(img->data<float>()[i]), nx::FloatBits(rows->data<float>()[i]))
            << c.name << " threads=" << threads << " i=" << i;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 16);
}

// The exact rows written straight into the NCHW output from each tile (conv_engine.h,
// RunConvProgram's `nchw`) give what the (M, O) row buffer transposed afterwards gives: a batch of
// 3 whose images end inside a row tile (7×6 = 42 pixels, tiles of 8 rows), weights prepared in
// column chunks of 32 (the tile's columns land at an offset), padded output channels (O = 40), one
// and two threads.
TEST(TtEmuExact, DirectNchwRowsMatchTheRowBuffer) {
  std::mt19937 rng(41);
  Tensor x = MakeTensor({3, 24, 7, 6}, RandBf16(3 * 24 * 42, rng));
  Tensor w = MakeTensor({40, 24, 3, 3}, RandBf16(40 * 24 * 9, rng));
  Tensor b = MakeTensor({40}, RandBf16(40, rng, 4.0f));
  Conv2dParams cp;
  cp.pads = {1, 1, 1, 1};
  PrecisionConfig p;
  p.math_fidelity = MF::kHiFi2;
  int compared = 0;
  for (int64_t chunk_cols : {0, 32}) {
    tt_emu::SetMaxPreparedSrcABytesForTesting(chunk_cols == 0 ? 0 : nx::PreparedSrcABytes(chunk_cols, 9 * 32, MF::kHiFi2));
    for (int threads : {1, 2}) {
      auto direct = tt_emu::Conv2d(x, w, &b, cp, p, tt_emu::EmuLevel::kExact, nullptr, nullptr, threads);
      tt_emu::SetDirectNchwForTesting(false);
      auto rows = tt_emu::Conv2d(x, w, &b, cp, p, tt_emu::EmuLevel::kExact, nullptr, nullptr, threads);
      tt_emu::SetDirectNchwForTesting(true);
      ASSERT_TRUE(direct.ok()) << direct.status().ToString();
      ASSERT_TRUE(rows.ok()) << rows.status().ToString();
      ASSERT_EQ(direct->shape(), rows->shape());
      for (int64_t i = 0; i < direct->num_elements(); ++i)
        ASSERT_EQ(nx::FloatBits(direct->data<float>()[i]), nx::FloatBits(rows->data<float>()[i]))
            << "chunk=" << chunk_cols << " threads=" << threads << " i=" << i;
      ++compared;
    }
  }
  tt_emu::SetMaxPreparedSrcABytesForTesting(0);
  EXPECT_EQ(compared, 4);
}

// K blocks fused into one kernel call (the fast level: Dst kept between blocks) where the
// partials' pack and reload give Dst back unchanged (conv_engine.cc PartialsRoundTripExact: bf16 Dst
// with bf16 or fp32 partials, fp32 Dst with fp32 partials reloaded losslessly) give the bits the
// block-by-block run gives, on both levels: height sharding (3 K blocks) and block sharding (one K
// tile per block), bias or not, ReLU, every fidelity; the configurations whose round trip rounds
// (fp32 Dst with bf16 partials, Tf32 reloads, L1 accumulation) run unfused either way and are
// compared too.
TEST(TtEmuExact, FusedKBlocksMatchBlockByBlockBits) {
  std::mt19937 rng(17);
  Tensor x = MakeTensor({1, 40, 7, 9}, RandBf16(40 * 63, rng));
  Tensor w = MakeTensor({40, 40, 3, 3}, RandBf16(40 * 40 * 9, rng));
  Tensor b = MakeTensor({40}, RandBf16(40, rng, 4.0f));
  struct Cfg {
    bool fp32;
    DeviceDType out;
    PartialReload reload;
    bool l1;
  };
  const Cfg cfgs[] = {{false, DeviceDType::kBFloat16, PartialReload::kRecorded, false},
                      {false, DeviceDType::kFloat32, PartialReload::kTf32, false},
                      {true, DeviceDType::kFloat32, PartialReload::kLossless, false},
                      {true, DeviceDType::kFloat32, PartialReload::kTf32, false},
                      {true, DeviceDType::kBFloat16, PartialReload::kRecorded, false},
                      {false, DeviceDType::kBFloat16, PartialReload::kRecorded, true}};
  int compared = 0;
  for (const Cfg& c : cfgs) {
    for (ShardLayout layout : {ShardLayout::kHeight, ShardLayout::kBlock}) {
      for (MF f : {MF::kLoFi, MF::kHiFi2, MF::kHiFi3, MF::kHiFi4}) {
        for (bool bias : {false, true}) {
          Conv2dParams cp;
          cp.pads = {1, 1, 1, 1};
          cp.activation = bias ? Activation::kRelu : Activation::kNone;
          PrecisionConfig p;
          p.math_fidelity = f;
          p.fp32_dest_acc_en = c.fp32;
          p.output_dtype = c.out;
          p.fp32_partial_reload = c.reload;
          p.packer_l1_acc = c.l1;
          p.shard_layout = layout;
          for (tt_emu::EmuLevel level : {tt_emu::EmuLevel::kExact, tt_emu::EmuLevel::kFast}) {
            auto fused = tt_emu::Conv2d(x, w, bias ? &b : nullptr, cp, p, level, nullptr, nullptr, 2);
            tt_emu::SetFuseExactKBlocksForTesting(false);
            auto blocks = tt_emu::Conv2d(x, w, bias ? &b : nullptr, cp, p, level, nullptr, nullptr, 1);
            tt_emu::SetFuseExactKBlocksForTesting(true);
            ASSERT_TRUE(fused.ok()) << fused.status().ToString();
            ASSERT_TRUE(blocks.ok()) << blocks.status().ToString();
            for (int64_t i = 0; i < fused->num_elements(); ++i)
              ASSERT_EQ(nx::FloatBits(fused->data<float>()[i]), nx::FloatBits(blocks->data<float>()[i]))
                  << tt_emu::EmuLevelName(level) << " fp32=" << c.fp32 << " out=" << DeviceDTypeName(c.out)
                  << " layout=" << ShardLayoutName(layout) << " " << MathFidelityName(f) << " bias=" << bias << " i=" << i;
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_EQ(compared, 6 * 2 * 4 * 2 * 2);
}

TEST(TtEmuFast, AgreesWithExact) {
  std::mt19937 rng(11);
  Tensor x = MakeTensor({1, 64, 8, 8}, RandBf16(64 * 64, rng));
  Tensor w = MakeTensor({64, 64, 3, 3}, RandBf16(64 * 64 * 9, rng));
  Tensor b = MakeTensor({64}, RandBf16(64, rng, 10.0f));
  Conv2dParams cp;
  cp.pads = {1, 1, 1, 1};
  for (MF f : {MF::kLoFi, MF::kHiFi2, MF::kHiFi3, MF::kHiFi4}) {
    for (bool fp32 : {false, true}) {
      PrecisionConfig p;
      p.math_fidelity = f;
      p.fp32_dest_acc_en = fp32;
      // Height sharding (3 K blocks), where the bounds below were measured; auto-shard picks block
      // sharding for this small map (24 blocks: ShardLayoutChangesBlockingAndPcc).
      p.shard_layout = ShardLayout::kHeight;
      auto e = tt_emu::Conv2d(x, w, &b, cp, p, tt_emu::EmuLevel::kExact);
      auto q = tt_emu::Conv2d(x, w, &b, cp, p, tt_emu::EmuLevel::kFast);
      ASSERT_TRUE(e.ok() && q.ok());
      double pcc = PccOf(*e, *q);
      EXPECT_GT(pcc, 0.9999) << MathFidelityName(f) << " fp32=" << fp32;
      // bf16 outputs: the fast level accumulates each block in fp32 instead of the per-MVMUL
      // alignment and Dst rounding of §5.4-5.5, so outputs differ by a few bf16 ulps; near
      // cancellation (|y| small against the output range) the ulp count is not meaningful.
      float max_abs = 0;
      for (int64_t i = 0; i < e->num_elements(); ++i) max_abs = std::max(max_abs, std::fabs(e->data<float>()[i]));
      int64_t max_ulp = 0, max_ulp_all = 0, same = 0;
      for (int64_t i = 0; i < e->num_elements(); ++i) {
        const int32_t a = static_cast<int32_t>(nx::FloatBits(e->data<float>()[i]) >> 16);
        const int32_t bq = static_cast<int32_t>(nx::FloatBits(q->data<float>()[i]) >> 16);
        auto ord = [](int32_t v) { return (v & 0x8000) ? -(v & 0x7FFF) : v; };
        const int64_t u = std::abs(ord(a) - ord(bq));
        max_ulp_all = std::max(max_ulp_all, u);
        if (std::fabs(e->data<float>()[i]) >= max_abs / 64) max_ulp = std::max(max_ulp, u);
        same += a == bq;
      }
      std::printf("fast-vs-exact %s fp32=%d: PCC %.7f, max %lld bf16 ulp where |y| >= max|y|/64 (%lld overall), "
                  "%.1f%% identical\n",
                  MathFidelityName(f), fp32, pcc, static_cast<long long>(max_ulp), static_cast<long long>(max_ulp_all),
                  100.0 * same / e->num_elements());
      // Bounds measured on this case (fp32 Dst ≤ 20, bf16 Dst ≤ 160), with margin: a 1-ulp flip of a
      // bf16 partial spill is many ulps of a smaller final value.
      EXPECT_LE(max_ulp, fp32 ? 64 : 256) << MathFidelityName(f) << " fp32=" << fp32;
      EXPECT_GT(100.0 * same / e->num_elements(), fp32 ? 80.0 : 10.0) << MathFidelityName(f) << " fp32=" << fp32;
    }
  }
}

TEST(TtEmuBackend, RegistryReportAndErrors) {
  BackendRegistry reg;
  ASSERT_TRUE(RegisterTtEmuBackend(reg).ok());
  auto be = reg.Create("tt-emu", BackendOptions{0, {{"level", "fast"}}});
  ASSERT_TRUE(be.ok());
  EXPECT_EQ((*be)->name(), "tt-emu");
  EXPECT_TRUE((*be)->capabilities().honours_precision);
  EXPECT_FALSE(reg.Create("tt-emu", BackendOptions{0, {{"level", "turbo"}}}).ok());
  EXPECT_FALSE(reg.Create("tt-emu", BackendOptions{0, {{"colour", "red"}}}).ok());
  EXPECT_EQ(reg.Create("tt-emu", BackendOptions{0, {{"colour", "red"}}}).status().message(),
            "tt-emu: unknown setting 'colour' (known: level)");
  auto settings = reg.Settings("tt-emu");
  ASSERT_TRUE(settings.ok());
  ASSERT_EQ(settings->size(), 1u);
  EXPECT_EQ((*settings)[0].key, "level");
  EXPECT_EQ((*settings)[0].default_value, "exact");
  EXPECT_FALSE((*settings)[0].help.empty());
  auto by_default = MakeTtEmuBackend();
  ASSERT_TRUE(by_default.ok());
  EXPECT_NE((*by_default)->capabilities().description.find("level exact"), std::string::npos);

  std::mt19937 rng(3);
  Tensor x = MakeTensor({1, 64, 6, 6}, RandBf16(64 * 36, rng));
  Tensor w = MakeTensor({16, 64, 3, 3}, RandBf16(16 * 64 * 9, rng));
  Tensor b = MakeTensor({16}, RandBf16(16, rng));
  OpReport rep;
  ExecContext ctx;
  ctx.report = &rep;
  ctx.precision.packer_l1_acc = true;
  ctx.precision.shard_layout = ShardLayout::kHeight;  // one K block per kernel row
  auto y = (*be)->Conv2d(x, w, &b, Conv2dParams{}, ctx);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{1, 16, 4, 4}));
  EXPECT_EQ(rep.implementation, "fast");
  EXPECT_EQ(rep.macs, 16 * 16 * 64 * 9);
  // K = 3*3*64 in kernel-row blocks of 3*64 = 192; bias + 3 blocks → L1 accumulation effective.
  ASSERT_TRUE(rep.program.has_value());
  EXPECT_NE(rep.blocking.find("K=576"), std::string::npos) << rep.blocking;
  EXPECT_EQ(rep.program->k_blocks, 3) << rep.blocking;
  EXPECT_EQ(rep.program->act_block_w_ntiles, 6) << rep.blocking;
  EXPECT_TRUE(rep.program->l1_acc_effective) << rep.blocking;

  ctx.precision.act_block_w = 9;  // one block of 288, two blocks
  ctx.precision.packer_l1_acc = false;
  y = (*be)->Conv2d(x, w, &b, Conv2dParams{}, ctx);
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(rep.program->k_blocks, 2) << rep.blocking;
  EXPECT_EQ(rep.program->act_block_w_ntiles, 9) << rep.blocking;
  EXPECT_FALSE(rep.program->l1_acc_effective) << rep.blocking;
  EXPECT_EQ(rep.program->partials_dtype, DeviceDType::kBFloat16) << rep.blocking;

  ctx.precision.output_dtype = DeviceDType::kBFloat4B;
  EXPECT_EQ((*be)->Conv2d(x, w, &b, Conv2dParams{}, ctx).status().code(), StatusCode::kInvalidArgument);
  ctx.precision = PrecisionConfig{};
  Tensor bad_w = MakeTensor({16, 32, 3, 3}, std::vector<float>(16 * 32 * 9, 1.0f));
  EXPECT_EQ((*be)->Conv2d(x, bad_w, nullptr, Conv2dParams{}, ctx).status().code(), StatusCode::kInvalidArgument);
  CancelToken tok;
  tok.Cancel();
  ctx.cancel = &tok;
  EXPECT_EQ((*be)->Conv2d(x, w, nullptr, Conv2dParams{}, ctx).status().code(), StatusCode::kCancelled);
}

TEST(TtEmuExact, PackerReluAndNhwcLayout) {
  std::mt19937 rng(5);
  Tensor x = MakeTensor({1, 8, 5, 5}, RandBf16(8 * 25, rng));
  Tensor w = MakeTensor({4, 8, 3, 3}, RandBf16(4 * 8 * 9, rng));
  Conv2dParams cp;
  cp.activation = Activation::kRelu;
  PrecisionConfig p;
  auto y = tt_emu::Conv2d(x, w, nullptr, cp, p, tt_emu::EmuLevel::kExact);
  ASSERT_TRUE(y.ok());
  cp.activation = Activation::kNone;
  auto z = tt_emu::Conv2d(x, w, nullptr, cp, p, tt_emu::EmuLevel::kExact);
  ASSERT_TRUE(z.ok());
  for (int64_t i = 0; i < y->num_elements(); ++i) {
    float a = y->data<float>()[i], bb = z->data<float>()[i];
    EXPECT_EQ(a, bb > 0 ? bb : 0.0f);
    EXPECT_FALSE(std::signbit(a));
  }
  auto xn = x.ToLayout(Layout::kNHWC);
  ASSERT_TRUE(xn.ok());
  auto yn = tt_emu::Conv2d(*xn, w, nullptr, cp, p, tt_emu::EmuLevel::kExact);
  ASSERT_TRUE(yn.ok());
  EXPECT_EQ(yn->layout(), Layout::kNHWC);
  auto back = yn->ToLayout(Layout::kNCHW);
  for (int64_t i = 0; i < z->num_elements(); ++i) EXPECT_EQ(back->data<float>()[i], z->data<float>()[i]);
}

}  // namespace
}  // namespace kiln::device
