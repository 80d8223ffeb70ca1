// The 2-D depthwise program (device/backends/tt_emu/depthwise_engine.h):
//  * tt_emu::Conv2d on depthwise convs against a hand-written chain of the numerics primitives
//    (per tap an ELWMUL written as a one-lane MvmulFidelity, packed to bf16; the taps reduced by
//    MVMULs against 1.0; bias ELWADD into Dst; SFPU relu6; pack), bit for bit;
//  * the DepthwiseProgram switch: kDenseConv runs the generic conv, kPoolMultiply / kRecorded the
//    pool program;
//  * a MobileNetV2-like depthwise layer within tt-metal's conv PCC threshold against fp32.
// Section numbers (§) cite docs/specs/tt-numerics.md.
#include <gtest/gtest.h>

#include <array>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "device/backends/reference/reference_backend.h"
#include "device/backends/tt_emu/tt_conv.h"
#include "device/numerics/formats.h"
#include "device/numerics/fpu.h"
#include "device/numerics/pcc.h"
#include "device/numerics/sfpu.h"

namespace kiln::device {
namespace {

namespace nx = kiln::numerics;
using DT = DeviceDType;

Tensor MakeTensor(std::vector<int64_t> shape, const std::vector<float>& v) {
  auto t = Tensor::FromFloats(std::move(shape), v);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(*t);
}

std::vector<float> Randn(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng) * scale;
  return v;
}

uint32_t Bf16(float f) { return static_cast<uint32_t>(nx::HostFp32ToBf16(nx::FloatBits(f))) << 16; }

// Dst → bf16 CB (§3.1 / §3.2) as an fp32 pattern.
uint32_t PackBf16(uint32_t d, bool fp32) {
  return static_cast<uint32_t>(fp32 ? nx::PackFp32DstToBf16(d) : nx::PackBf16DstToBf16(static_cast<uint16_t>(d >> 16)))
         << 16;
}

struct DwCase {
  int64_t C, H, W, k, s, pad;
  DT out;
  MathFidelity fid;
  bool fp32, bias;
  Activation act;
  DT wdt = DT::kBFloat16;
};

// Weights as the card holds them: bf16, or bfp8 groups of 16 channels of one tap (the 2-D
// depthwise face layout); [ch][tap] fp32 patterns.
std::vector<uint32_t> DeviceWeights(const std::vector<float>& w, int64_t C, int64_t T, DT wdt) {
  std::vector<uint32_t> q(w.size(), 0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c0 = 0; c0 < C; c0 += 16) {
      std::array<uint32_t, 16> g{};
      for (int i = 0; i < 16 && c0 + i < C; ++i) g[i] = nx::FloatBits(w[(c0 + i) * T + t]);
      if (wdt == DT::kBFloat8B) {
        const nx::BfpGroup e = nx::HostEncodeBfpGroup(g, nx::BfpFormat::kBfp8);
        for (int i = 0; i < 16 && c0 + i < C; ++i)
          q[(c0 + i) * T + t] = static_cast<uint32_t>(nx::UnpackBfpToBf16(e.exp, e.codes[i], nx::BfpFormat::kBfp8)) << 16;
      } else {
        for (int i = 0; i < 16 && c0 + i < C; ++i) q[(c0 + i) * T + t] = Bf16(nx::BitsFloat(g[i]));
      }
    }
  return q;
}

// The hand-written chain for bf16 input (host RNE) and bf16 or bfp8 weights.
std::vector<uint32_t> Chain(const DwCase& c, const std::vector<float>& x, const std::vector<float>& w,
                            const std::vector<float>& b, int64_t OH, int64_t OW) {
  const nx::FpuConfig cfg{c.fp32, Arch::kWormholeB0, nx::SrcFormat::kBf16, nx::SrcFormat::kBf16};
  const int64_t Cp = (c.C + 31) / 32 * 32, T = c.k * c.k;
  std::vector<uint32_t> out(static_cast<size_t>(OH * OW * c.C));
  std::array<uint32_t, 16> ones;
  ones.fill(0x3F800000u);
  const std::vector<uint32_t> wq = DeviceWeights(w, c.C, T, c.wdt);
  const std::vector<uint32_t> bq = DeviceWeights(b, c.C, 1, c.wdt);  // bias in the weights dtype
  for (int64_t oy = 0; oy < OH; ++oy)
    for (int64_t ox = 0; ox < OW; ++ox) {
      std::vector<uint32_t> dst(static_cast<size_t>(Cp), 0);
      for (int64_t ch = 0; ch < c.C; ++ch) {
        std::array<uint32_t, 32> prod{};
        for (int64_t t = 0; t < T; ++t) {
          const int64_t y = oy * c.s - c.pad + t / c.k, xx = ox * c.s - c.pad + t % c.k;
          std::array<uint32_t, 16> a{}, bw{};
          a[0] = (y < 0 || y >= c.H || xx < 0 || xx >= c.W) ? 0u : Bf16(x[(ch * c.H + y) * c.W + xx]);
          bw[0] = wq[ch * T + t];
          prod[t] = PackBf16(nx::MvmulFidelity(a, bw, 0, c.fid, cfg), c.fp32);
        }
        uint32_t d = 0;
        d = nx::MvmulFidelity(std::span<const uint32_t, 16>(prod.data(), 16), ones, d, c.fid, cfg);
        if (T > 16) d = nx::MvmulFidelity(std::span<const uint32_t, 16>(prod.data() + 16, 16), ones, d, c.fid, cfg);
        if (c.bias) d = nx::Elwadd(0u, bq[ch], d, true, cfg);
        if (c.act == Activation::kRelu6) {
          const float f = nx::SfpuEval(nx::SfpuOp::kRelu6, nx::BitsFloat(d), false, Arch::kWormholeB0);
          d = c.fp32 ? nx::FloatBits(f) : Bf16(f);
        }
        dst[ch] = PackBf16(d, c.fp32);  // pre-tilize CB (bf16), then tilized back (exact)
      }
      uint32_t* o = &out[static_cast<size_t>((oy * OW + ox) * c.C)];
      if (c.out == DT::kBFloat16) {
        for (int64_t ch = 0; ch < c.C; ++ch) o[ch] = dst[ch];
      } else {
        for (int64_t g0 = 0; g0 < Cp; g0 += 16) {
          std::array<uint32_t, 16> d32{};
          std::array<uint16_t, 16> d16{};
          for (int i = 0; i < 16; ++i) {
            d32[i] = dst[g0 + i];
            d16[i] = static_cast<uint16_t>(dst[g0 + i] >> 16);
          }
          const nx::BfpGroup g = c.fp32 ? nx::PackBfpFromFp32Dst(d32, nx::BfpFormat::kBfp8)
                                        : nx::PackBfpFromBf16Dst(d16, nx::BfpFormat::kBfp8);
          for (int i = 0; i < 16 && g0 + i < c.C; ++i)
            o[g0 + i] = nx::FloatBits(nx::DecodeBfpValue(g.exp, g.codes[i], nx::BfpFormat::kBfp8));
        }
      }
    }
  return out;
}

Result<Tensor> RunEmu(const Tensor& x, const Tensor& w, const Tensor* b, int64_t s, int64_t pad, Activation act,
                      const PrecisionConfig& p, OpReport* rep) {
  Conv2dParams cp;
  cp.strides = {s, s};
  cp.pads = {pad, pad, pad, pad};
  cp.group = x.dim(1);
  cp.activation = act;
  return tt_emu::Conv2d(x, w, b, cp, p, tt_emu::EmuLevel::kExact, nullptr, rep);
}

TEST(TtEmuDepthwise, MatchesPrimitiveChain) {
  const std::vector<DwCase> cases = {
      {40, 6, 7, 3, 1, 1, DT::kBFloat16, MathFidelity::kHiFi4, true, true, Activation::kNone},
      {40, 6, 7, 3, 2, 1, DT::kBFloat8B, MathFidelity::kHiFi4, true, true, Activation::kRelu6},
      {40, 6, 7, 3, 1, 1, DT::kBFloat8B, MathFidelity::kLoFi, false, false, Activation::kNone},
      {40, 6, 7, 3, 2, 1, DT::kBFloat16, MathFidelity::kHiFi2, false, true, Activation::kRelu6},
      {16, 7, 7, 5, 1, 2, DT::kBFloat16, MathFidelity::kHiFi4, true, false, Activation::kRelu6},  // 25 taps
      {40, 6, 7, 3, 1, 1, DT::kBFloat8B, MathFidelity::kHiFi4, true, true, Activation::kNone, DT::kBFloat8B},
  };
  int checked = 0;
  for (const DwCase& c : cases) {
    std::mt19937 rng(7 + checked);
    const std::vector<float> x = Randn(c.C * c.H * c.W, rng), w = Randn(c.C * c.k * c.k, rng, 0.5f),
                             b = Randn(c.C, rng);
    Tensor xt = MakeTensor({1, c.C, c.H, c.W}, x), wt = MakeTensor({c.C, 1, c.k, c.k}, w), bt = MakeTensor({c.C}, b);
    PrecisionConfig p;
    p.math_fidelity = c.fid;
    p.weights_dtype = c.wdt;
    p.output_dtype = c.out;
    p.fp32_dest_acc_en = c.fp32;
    OpReport rep;
    auto y = RunEmu(xt, wt, c.bias ? &bt : nullptr, c.s, c.pad, c.act, p, &rep);
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    ASSERT_TRUE(rep.program.has_value());
    EXPECT_EQ(rep.program->path, "depthwise_2d") << rep.blocking;
    EXPECT_EQ(rep.program->k_blocks, 0) << rep.blocking;  // the pool program has no K blocks
    const int64_t OH = y->dim(2), OW = y->dim(3);
    const std::vector<uint32_t> want = Chain(c, x, w, b, OH, OW);
    for (int64_t ch = 0; ch < c.C; ++ch)
      for (int64_t s = 0; s < OH * OW; ++s)
        ASSERT_EQ(nx::FloatBits(y->data<float>()[ch * OH * OW + s]), want[static_cast<size_t>(s * c.C + ch)])
            << "case " << checked << " channel " << ch << " pixel " << s << "; " << rep.blocking;
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

TEST(TtEmuDepthwise, SwitchSelectsDenseOrPoolProgram) {
  std::mt19937 rng(3);
  const int64_t C = 64, H = 10;
  Tensor x = MakeTensor({1, C, H, H}, Randn(C * H * H, rng)), w = MakeTensor({C, 1, 3, 3}, Randn(C * 9, rng, 0.3f));
  PrecisionConfig p;
  p.weights_dtype = DT::kBFloat16;
  std::vector<std::vector<uint32_t>> bits;
  for (DepthwiseProgram d : {DepthwiseProgram::kRecorded, DepthwiseProgram::kPoolMultiply, DepthwiseProgram::kDenseConv}) {
    p.depthwise_program = d;
    OpReport rep;
    auto y = RunEmu(x, w, nullptr, 1, 1, Activation::kNone, p, &rep);
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    ASSERT_TRUE(rep.program.has_value());
    EXPECT_EQ(rep.program->path, d == DepthwiseProgram::kDenseConv ? "conv2d" : "depthwise_2d");
    bits.emplace_back();
    for (float f : y->span<float>()) bits.back().push_back(nx::FloatBits(f));
  }
  EXPECT_EQ(bits[0], bits[1]);  // kRecorded = kPoolMultiply on the recorded tree
  // The dense conv sums the 9 exact products in one MVMUL chain; the pool program rounds each
  // product to bf16 first: some outputs differ.
  int differ = 0;
  for (size_t i = 0; i < bits[0].size(); ++i) differ += bits[0][i] != bits[2][i];
  EXPECT_GT(differ, 0);
}

// MobileNetV2 (width 0.5) stage-4 depthwise layer: 192 channels × 3×3, stride 1, pad 1, bias,
// relu6, at 14×14 (the model's map; batch 1), TT-NN defaults (bf16 in / out, HiFi4).
TEST(TtEmuDepthwise, MobileNetV2LayerWithinTtMetalPcc) {
  std::mt19937 rng(11);
  const int64_t C = 192, H = 14;
  std::vector<float> xv = Randn(C * H * H, rng);
  for (auto& v : xv) v = std::max(0.0f, v);  // the input follows a relu6
  Tensor x = MakeTensor({1, C, H, H}, xv), w = MakeTensor({C, 1, 3, 3}, Randn(C * 9, rng, 0.3f)),
         b = MakeTensor({C}, Randn(C, rng, 0.5f));
  Conv2dParams cp;
  cp.pads = {1, 1, 1, 1};
  cp.group = C;
  cp.activation = Activation::kRelu6;
  auto ref_backend = MakeReferenceBackend();
  ASSERT_TRUE(ref_backend.ok());
  ExecContext ctx;
  auto ref = (*ref_backend)->Conv2d(x, w, &b, cp, ctx);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  for (MathFidelity fid : {MathFidelity::kHiFi4, MathFidelity::kLoFi}) {
    PrecisionConfig p;
    p.math_fidelity = fid;
    OpReport rep;
    auto y = RunEmu(x, w, &b, 1, 1, Activation::kRelu6, p, &rep);
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    ASSERT_TRUE(rep.program.has_value());
    EXPECT_EQ(rep.program->path, "depthwise_2d");
    nx::ConvPccRuleInput r;
    r.fidelity = fid;
    r.activation = Activation::kRelu6;
    r.cin_kh_kw = C * 9;
    const double thr = nx::ConvPccThreshold(r);
    auto pcc = nx::CompPcc(ref->span<float>(), y->span<float>(), thr);
    ASSERT_TRUE(pcc.ok());
    EXPECT_TRUE(pcc->pass) << MathFidelityName(fid) << ": PCC " << pcc->pcc << " < " << thr;
    EXPECT_LT(pcc->pcc, 1.0);
    RecordProperty(std::string("pcc_") + MathFidelityName(fid), std::to_string(pcc->pcc));
    std::printf("mobilenetv2 dw layer %s: PCC %.6f (threshold %.3f)\n", MathFidelityName(fid), pcc->pcc, thr);
  }
}

}  // namespace
}  // namespace kiln::device
