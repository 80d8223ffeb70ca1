// tt-emu's ttnn.add (device/backends/tt_emu/tt_eltwise.h) and Backend::Add on both backends.
// Expected values are worked by hand from the primitives of docs/specs/tt-numerics.md (§6 ELWADD
// with §5.5's combine, §3 packer, §2/§4 bfp), written out in the comments.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <vector>

#include "device/backends/reference/reference_backend.h"
#include "device/backends/tt_emu/tt_eltwise.h"
#include "device/backends/tt_emu/tt_emu_backend.h"

namespace kiln::device {
namespace {

float F(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t B(float f) { return std::bit_cast<uint32_t>(f); }

Tensor Make(std::vector<int64_t> shape, const std::vector<float>& v, Layout layout = Layout::kNCHW) {
  auto t = Tensor::FromFloats(shape, v);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (layout == Layout::kNCHW) return std::move(*t);
  auto u = t->ToLayout(layout);
  EXPECT_TRUE(u.ok());
  return std::move(*u);
}

tt_emu::AddConfig Cfg(DeviceDType dt, Activation act = Activation::kNone) {
  tt_emu::AddConfig c;
  c.a_dtype = c.b_dtype = c.out_dtype = dt;
  c.activation = act;
  return c;
}

uint32_t AddOne(float a, float b, const tt_emu::AddConfig& cfg) {
  const uint32_t ua = B(a), ub = B(b);
  uint32_t out = 0;
  tt_emu::AddGroup(&ua, &ub, 1, cfg, &out);
  return out;
}

// 1 + 2^-8 lies exactly between the bf16 values 1 and 1 + 2^-7. ELWADD (§6): A = 1024 (1.0,
// e 127), B = 1024 (2^-8, e 119) shifted by d = 8 with half-up: (1024 + 128) >> 8 = 4; T = 1028,
// term 1028·2^13 at e 127. §5.5 with a bf16 Dst: no pre-round change (a multiple of 2^13), v =
// 0x808000, z = 0, w = (v + 2^15) >> 16 = 0x81 — the tie rounds away from zero: 0x3F81 =
// 1.0078125. The host's fp32 add gives 1.00390625, and host RNE of that to bf16 gives 1.0.
TEST(TtEltwise, Bf16TieRoundsAwayFromZero) {
  const auto cfg = Cfg(DeviceDType::kBFloat16);
  EXPECT_EQ(AddOne(1.0f, F(0x3B800000u), cfg), 0x3F810000u);
  EXPECT_EQ(AddOne(F(0x3B800000u), 1.0f, cfg), 0x3F810000u);  // operand order does not matter
  EXPECT_EQ(AddOne(-1.0f, -F(0x3B800000u), cfg), 0xBF810000u);
  EXPECT_NE(1.0f + F(0x3B800000u), F(0x3F810000u));
  // 1 - 2^-8: T = 1024 - 4 = 1020, v = 0x7F8000, z = 1 → e 126, w = (v + 2^14) >> 15 = 0xFF:
  // 0x3F7F = 0.99609375, the exact difference.
  EXPECT_EQ(AddOne(1.0f, -F(0x3B800000u), cfg), 0x3F7F0000u);
  // Inputs are first rounded to bf16 on the host (§2.1 RNE): 1 + 2^-9 → 1.0; 1.0 + 1.0 = 2.0.
  EXPECT_EQ(AddOne(F(0x3F804000u), 1.0f, cfg), 0x40000000u);
}

// With a float32 output the program runs with fp32_dest_acc_en: the same ELWADD term combines
// into an fp32 Dst without rounding (zp = 0): 0x3F808000 = 1 + 2^-8 exactly.
TEST(TtEltwise, Fp32OutputUsesFp32Dst) {
  tt_emu::AddConfig cfg = Cfg(DeviceDType::kBFloat16);
  cfg.out_dtype = DeviceDType::kFloat32;
  EXPECT_TRUE(cfg.fp32_dst());
  EXPECT_FALSE(cfg.sfpu());
  EXPECT_EQ(AddOne(1.0f, F(0x3B800000u), cfg), 0x3F808000u);
  // float32 + float32 is the SFPU add (is_binary_sfpu_op): the fp32 sum.
  const auto f32 = Cfg(DeviceDType::kFloat32);
  EXPECT_TRUE(f32.sfpu());
  EXPECT_EQ(AddOne(1.0f, 1e-3f, f32), B(1.0f + 1e-3f));
}

// relu: the packer ReLU after the bf16 pack (§3.5); relu6: the SFPU clamp of the Dst value.
TEST(TtEltwise, ReluAndRelu6) {
  const auto relu = Cfg(DeviceDType::kBFloat16, Activation::kRelu);
  EXPECT_EQ(AddOne(1.0f, -3.0f, relu), 0u);
  EXPECT_EQ(AddOne(3.0f, -1.0f, relu), B(2.0f));
  EXPECT_EQ(AddOne(-1.0f, -F(0x3B800000u), relu), 0u);
  EXPECT_EQ(AddOne(1.0f, F(0x3B800000u), relu), 0x3F810000u);
  const auto relu6 = Cfg(DeviceDType::kBFloat16, Activation::kRelu6);
  EXPECT_EQ(AddOne(5.0f, 2.0f, relu6), B(6.0f));
  EXPECT_EQ(AddOne(-5.0f, 2.0f, relu6), 0u);
  EXPECT_EQ(AddOne(1.0f, F(0x3B800000u), relu6), 0x3F810000u);
}

// bfloat8_b everywhere, shape (1, 16, 2, 1): one bfp group = the 16 channels of one position.
// Position 0: a = (1, 0, ...), b = (0, 3/128, 0, ...). Inputs (§2.2): a's group E = 127, 1.0 →
// code 64; b's group E = 121 (3/128 = 1.5·2^-6), code 96; unpacked (§4) exactly. ELWADD with a 0
// operand returns the other one. Output group (§3.4): E8M6 of 1.0 = 0x3F80, of 3/128 = 0x3CC0;
// E = 127; channel 1: S = 128 | 0x40 = 192, d = 6, m = (192 + 64) >> 7 = 2 → 2·2^-6 = 0.03125
// (the fp32 add gives 0.0234375). Position 1: only b's 3/128 → its own group E = 121 → exact.
TEST(TtEltwise, Bfp8OutputGroupsChannelsOfOnePosition) {
  std::vector<float> a(32, 0.0f), b(32, 0.0f);
  a[0 * 2 + 0] = 1.0f;          // (c 0, p 0)
  b[1 * 2 + 0] = 3.0f / 128.0f; // (c 1, p 0)
  b[1 * 2 + 1] = 3.0f / 128.0f; // (c 1, p 1)
  const auto cfg = Cfg(DeviceDType::kBFloat8B);
  for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
    Tensor ta = Make({1, 16, 2, 1}, a, layout), tb = Make({1, 16, 2, 1}, b, layout);
    auto y = tt_emu::Add(ta, tb, cfg);
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    EXPECT_EQ(y->layout(), layout);
    auto yn = y->ToLayout(Layout::kNCHW);
    ASSERT_TRUE(yn.ok());
    const float* v = yn->data<float>();
    EXPECT_EQ(v[0 * 2 + 0], 1.0f);
    EXPECT_EQ(v[1 * 2 + 0], 0.03125f);
    EXPECT_EQ(v[1 * 2 + 1], 3.0f / 128.0f);
    for (int i = 4; i < 32; ++i) EXPECT_EQ(v[i], 0.0f) << i;
    EXPECT_EQ(v[1], 0.0f);
  }
  // Packer ReLU on bfp8 acts after stage A: a negative sum becomes a zero code.
  std::vector<float> n(16, 0.0f), m(16, 0.0f);
  n[0] = -1.0f;
  m[1] = 0.5f;
  auto y = tt_emu::Add(Make({1, 16, 1, 1}, n), Make({1, 16, 1, 1}, m), Cfg(DeviceDType::kBFloat8B, Activation::kRelu));
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(y->data<float>()[0], 0.0f);
  EXPECT_EQ(y->data<float>()[1], 0.5f);
}

TEST(TtEltwise, Errors) {
  Tensor a = Make({1, 2, 1, 1}, {1, 2}), b = Make({1, 1, 2, 1}, {1, 2});
  auto y = tt_emu::Add(a, b, Cfg(DeviceDType::kBFloat16));
  EXPECT_EQ(y.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(y.status().message().find("[1, 2, 1, 1]"), std::string::npos) << y.status().message();
  y = tt_emu::Add(a, a, Cfg(DeviceDType::kBFloat16, Activation::kSilu));
  EXPECT_EQ(y.status().code(), StatusCode::kUnimplemented);
  tt_emu::AddConfig c = Cfg(DeviceDType::kFloat32);
  c.out_dtype = DeviceDType::kBFloat16;
  EXPECT_EQ(tt_emu::Add(a, a, c).status().code(), StatusCode::kUnimplemented);
}

// Backend::Add on both backends: the reference is the fp32 sum; tt-emu the card's add, or the fp32
// sum with precision.host_add.
TEST(BackendAdd, ReferenceAndTtEmu) {
  auto ref = MakeReferenceBackend();
  auto emu = MakeTtEmuBackend();
  ASSERT_TRUE(ref.ok() && emu.ok());
  EXPECT_TRUE((*ref)->capabilities().add);
  EXPECT_TRUE((*emu)->capabilities().add);
  const float tie = F(0x3B800000u);
  Tensor a = Make({1, 2, 1, 2}, {1.0f, -1.0f, 2.0f, 5.0f});
  Tensor b = Make({1, 2, 1, 2}, {tie, -tie, -3.0f, 2.0f});
  ExecContext ctx;
  OpReport rep;
  ctx.report = &rep;
  auto r = (*ref)->Add(a, b, Activation::kNone, ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->data<float>()[0], 1.0f + tie);
  EXPECT_EQ(rep.op, "add");
  auto e = (*emu)->Add(a, b, Activation::kNone, ctx);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(B(e->data<float>()[0]), 0x3F810000u);
  EXPECT_EQ(B(e->data<float>()[1]), 0xBF810000u);
  EXPECT_EQ(e->data<float>()[2], -1.0f);
  EXPECT_EQ(rep.implementation, "ttnn.add fpu (ELWADD)");
  ctx.precision.host_add = true;
  for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kRelu6}) {
    auto h = (*emu)->Add(a, b, act, ctx);
    auto rr = (*ref)->Add(a, b, act, ctx);
    ASSERT_TRUE(h.ok() && rr.ok());
    for (int i = 0; i < 4; ++i) EXPECT_EQ(B(h->data<float>()[i]), B(rr->data<float>()[i])) << i;
  }
  // Errors: the shared validation on both, activations by capability.
  Tensor c = Make({1, 4, 1, 1}, {1, 2, 3, 4});
  EXPECT_EQ((*ref)->Add(a, c, Activation::kNone, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*emu)->Add(a, c, Activation::kNone, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*ref)->Add(a, b, Activation::kSilu, {}).ok());
  EXPECT_EQ((*emu)->Add(a, b, Activation::kSilu, {}).status().code(), StatusCode::kUnimplemented);
  CancelToken cancel;
  cancel.Cancel();
  ExecContext cc;
  cc.cancel = &cancel;
  EXPECT_EQ((*emu)->Add(a, b, Activation::kNone, cc).status().code(), StatusCode::kCancelled);
}

// A backend that does not override Add answers UNIMPLEMENTED (backend.h default).
TEST(BackendAdd, DefaultIsUnimplemented) {
  class NoAdd final : public Backend {
   public:
    std::string name() const override { return "noadd"; }
    BackendCapabilities capabilities() const override { return {}; }
    Result<Tensor> Conv2d(const Tensor&, const Tensor&, const Tensor*, const Conv2dParams&,
                          const ExecContext&) override {
      return Unimplemented("x");
    }
    Result<Tensor> ConvTranspose2d(const Tensor&, const Tensor&, const Tensor*, const ConvTranspose2dParams&,
                                   const ExecContext&) override {
      return Unimplemented("x");
    }
  } be;
  EXPECT_FALSE(be.capabilities().add);
  Tensor a = Make({1, 1, 1, 1}, {1});
  EXPECT_EQ(be.Add(a, a, Activation::kNone, {}).status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kiln::device
