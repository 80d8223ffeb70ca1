// The AVX-512 FP16 path of the exact MVMUL kernel (device/numerics/mvmul_kernel.h): the AVX-512 path's
// lanes, group terms and block loop (mvmul_kernel_avx512_core.h), with a bf16 Dst's combine
// (docs/specs/tt-numerics.md §5.5) run on all 32 columns of a block in int16 instead of two halves
// of 16 int32 (no unpacks to int32, no packs back), and step 5's normalisation by the int16 → fp16
// conversion of AVX512-FP16. Needs AVX-512F, BW, FP16 and VBMI2 (Intel Sapphire Rapids and later);
// an fp32 Dst, and a bf16 Dst call whose patterns have non-zero low 16 bits, run the AVX-512 path.
// Results equal it, the scalar path and numerics::CombineWithDst bit for bit, from these identities
// (bf16 Dst; per column: group sums S0, S1 (|S| <= 8 · 3937 = 31496, zero where G <= 0), alignments
// d0, d1, dd >= 0 to X = max(G0, G1, Dst's exponent), Dst = ±M · 2^(X − 7 − bias) with M its 8-bit
// significand, 128..255, or 0):
//  * Group term, units of 2^13 (HalfStep in mvmul_kernel_avx512_core.h: T = (S·2^16 >> d + 32772)
//    >> 16). For d <= 15, S·2^16 >> d = I·2^16 + F with I = S >> d (vpsravw) and F the low 16 bits
//    of (S:0) >> d (vpshrdvw, 0 for d = 0), so T = I + (F >= 32764, unsigned). For d >= 16,
//    |S·2^16 >> d| <= 31496 < 32764 gives T = 0 (and vpshrdvw counts modulo 16): the masked shift
//    zeroes those columns.
//  * Dst term: ((2D >> dd) + 8193) >> 14 with 2D = M · 2^17 is floor(M · 8 / 2^dd + 1/2) for dd <= 17
//    (the extra 2^−14 moves no fraction of M · 2^(3 − dd) across an integer) and 0 beyond, which is
//    avg_epu16(16·M >> dd, 0) = (floor(16·M / 2^dd) + 1) >> 1 (vpsrlvw gives 0 for dd >= 16). The
//    state holds 16·M (M16).
//  * The total ±Dt + T0 + T1 lies in (−2^16, 2^16): it is summed with saturating adds, in the order
//    T0 + T1, then ±Dt (|Dt| <= 8 · 255 = 2040), then the two carries, so a sum that saturated ends
//    with |total| >= 32768 − 2040 − 2 = 30726, and one that did not is exact. Where some column's
//    |total| reaches 29998 (any threshold up to 30726 would do), the whole block runs the int32 step
//    for that MVMUL instead (ToBlock32, MvmulStep, FromBlock32: the int32 state of a bf16 Dst holds
//    2D = M16 · 2^13 exactly).
//  * Step 5 (round half away from zero to 8 significant bits): v = |total| < 29998 converts to fp16
//    truncated to 11 significant bits ({rz-sae}), then (h + 4) & ~7 rounds half up at 8 bits. The
//    half point lies on the 11-bit grid, so truncation first changes no result: floor(floor(v / 2^t)
//    / 2^3 + 1/2) = floor(v / 2^(t+3) + 1/2) (nested floors with an integer addend). fp16's exponent
//    field is 15 + log2 of the rounded v where float's is 127 + the same, so X' = X + field − 25
//    (mvmul_kernel_avx512.cc subtracts 137 from float's); the −25 rides on the rounding constant, as
//    a multiple of 2^10 commutes with clearing the low 3 bits. The new M16 is 16 · (128 | the 7
//    mantissa bits kept). A zero total, X' <= 0 and X' >= 255 are the rare columns, as in the int32
//    step. Wormhole's −1 quirk (§5.5 step 5) concerns an fp32 Dst only.
#include "device/numerics/mvmul_kernel_impl.h"

#if KILN_MVMUL_AVX512FP16

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "device/numerics/fpu.h"

#define KILN_AVX512_TARGET "avx512f,avx512bw,avx512fp16,avx512vbmi2"
#include "device/numerics/mvmul_kernel_avx512_core.h"

namespace kiln::numerics::mvmul_detail {

namespace {

// A bf16 Dst block in int16 per position (MvmulPositionOfColumn order): Xr = X − adj as in
// DstBlock, M16 = 16 · M (M the 8-bit significand, 128..255; 0 for a zero Dst), and the signs.
struct DstBlock16 {
  __m512i Xr, M16;
  __mmask32 neg;
};

KILN_AVX512 __m512i Opaque16(int v) {
  __m512i x = _mm512_set1_epi16(static_cast<int16_t>(v));
  asm("" : "+v"(x));
  return x;
}

// The int16 step's constants (as StepConsts, made once per call).
struct Step16Consts {
  StepConsts c32;  // the int32 step's, for its rare MVMULs
  __m512i c16, c32764, minus1, round_e, fff8, m7f0, h800, c29997;
};

KILN_AVX512 Step16Consts MakeStep16Consts() {
  return {MakeStepConsts(), Opaque16(16), Opaque16(32764), Opaque16(-1), Opaque16(4 - 25 * 1024), Opaque16(0xFFF8),
          Opaque16(0x7F0), Opaque16(0x800), Opaque16(29997)};
}

// The int32 state of the same Dst (lo.X, hi.X unused, as in DstBlock), and back.
KILN_AVX512 DstBlock ToBlock32(const DstBlock16& s) {
  const __m512i zero = _mm512_setzero_si512(), nv = _mm512_movm_epi16(s.neg);
  DstBlock b;
  b.Xr = s.Xr;
  b.lo.X = b.hi.X = zero;
  b.lo.D2 = _mm512_slli_epi32(_mm512_unpacklo_epi16(s.M16, zero), 13);
  b.hi.D2 = _mm512_slli_epi32(_mm512_unpackhi_epi16(s.M16, zero), 13);
  b.lo.neg = _mm512_cmplt_epi32_mask(_mm512_unpacklo_epi16(nv, nv), zero);
  b.hi.neg = _mm512_cmplt_epi32_mask(_mm512_unpackhi_epi16(nv, nv), zero);
  return b;
}

KILN_AVX512 DstBlock16 FromBlock32(const DstBlock& b) {
  const __m512i ones = _mm512_set1_epi32(-1);
  DstBlock16 s;
  s.Xr = b.Xr;
  s.M16 = _mm512_packus_epi32(_mm512_srli_epi32(b.lo.D2, 13), _mm512_srli_epi32(b.hi.D2, 13));
  s.neg = _mm512_movepi16_mask(
      _mm512_packs_epi32(_mm512_maskz_mov_epi32(b.lo.neg, ones), _mm512_maskz_mov_epi32(b.hi.neg, ones)));
  return s;
}

// One 16-lane MVMUL of 32 columns with a bf16 Dst (§5.5, the identities above). kTwo false: t1 is
// the zero term and is left out, as in MvmulStep.
template <bool kWormhole, bool kTwo>
KILN_AVX512 void MvmulStep16(const Term& t0, const Term& t1, DstBlock16* s, const PhaseConsts& pc,
                             const Step16Consts& c) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512i Xm = _mm512_max_epi16(kTwo ? _mm512_max_epi16(t0.mr, t1.mr) : t0.mr, s->Xr);
  const __m512i dd = _mm512_sub_epi16(Xm, s->Xr);
  // A group term's integer part I (0 where d >= 16) and its carry (F >= 32764).
  auto term = [&](const Term& t, __mmask32* carry) KILN_AVX512_LAMBDA {
    const __m512i d = _mm512_sub_epi16(Xm, t.mr);
    const __mmask32 in = _mm512_cmplt_epu16_mask(d, c.c16);
    *carry = _mm512_mask_cmpge_epu16_mask(in, _mm512_shrdv_epi16(zero, t.S, d), c.c32764);
    return _mm512_maskz_srav_epi16(in, t.S, d);
  };
  __mmask32 c0, c1 = 0;
  __m512i tot = term(t0, &c0);
  if (kTwo) tot = _mm512_adds_epi16(tot, term(t1, &c1));
  __m512i Dt = _mm512_avg_epu16(_mm512_srlv_epi16(s->M16, dd), zero);
  tot = _mm512_adds_epi16(tot, _mm512_mask_sub_epi16(Dt, s->neg, zero, Dt));
  tot = _mm512_mask_subs_epi16(tot, c0, tot, c.minus1);
  if (kTwo) tot = _mm512_mask_subs_epi16(tot, c1, tot, c.minus1);
  // Steps 4 and 5.
  const __m512i v = _mm512_abs_epi16(tot);
  const __m512i f =
      _mm512_castph_si512(_mm512_cvt_roundepu16_ph(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
  const __m512i h = _mm512_and_si512(_mm512_add_epi16(f, c.round_e), c.fff8);  // exponent field − 25
  const __m512i Xn = _mm512_add_epi16(Xm, _mm512_srai_epi16(h, 10));
  // Rare: X' outside [1, 254] (one unsigned range test, as in MvmulStep), or v − 1 > 29996: a zero
  // total, or |total| >= 29998, which may have saturated.
  const __mmask32 odd = _mm512_cmpgt_epu16_mask(_mm512_sub_epi16(Xn, pc.one), c.c32.c253) |
                        _mm512_cmpgt_epu16_mask(_mm512_add_epi16(v, c.minus1), c.c29997);
  if (__builtin_expect(odd != 0, 0)) {
    if (_mm512_cmpgt_epu16_mask(v, c.c29997) != 0) {
      DstBlock b = ToBlock32(*s);
      MvmulStep<false, kWormhole, kTwo>(t0, t1, &b, pc, c.c32);
      *s = FromBlock32(b);
      return;
    }
    // +0 where the total is 0 or X' <= 0, ±Inf (X = 255, M = 128, the sign kept) where X' >= 255.
    const __mmask32 flush = _mm512_testn_epi16_mask(v, v) | _mm512_cmplt_epi16_mask(Xn, pc.one);
    const __mmask32 inf = static_cast<__mmask32>(odd & ~flush);
    s->Xr = _mm512_mask_mov_epi16(_mm512_mask_mov_epi16(Xn, flush, pc.nadj), inf, pc.inf);
    s->M16 = _mm512_mask_mov_epi16(
        _mm512_mask_mov_epi16(_mm512_ternarylogic_epi32(_mm512_slli_epi16(h, 1), c.m7f0, c.h800, 0xEA), flush, zero),
        inf, c.h800);
    s->neg = static_cast<__mmask32>(_mm512_movepi16_mask(tot) & ~flush);
    return;
  }
  s->Xr = Xn;
  s->M16 = _mm512_ternarylogic_epi32(_mm512_slli_epi16(h, 1), c.m7f0, c.h800, 0xEA);  // (h << 1) & 0x7F0 | 0x800
  s->neg = _mm512_movepi16_mask(tot);
}

// RunAvx512T's policy for a bf16 Dst whose patterns have their low 16 bits 0 (RunAvx512Fp16 checks).
template <bool kWormhole>
struct DstBf16 {
  using State = DstBlock16;
  using Consts = Step16Consts;
  static KILN_AVX512 Consts MakeConsts() { return MakeStep16Consts(); }
  // The high halves of the 32 patterns in position order (packus inverts the unpacks' order), then
  // the bf16 fields.
  static KILN_AVX512 State Load(const uint32_t* tmp, int adj) {
    const __m512i w = _mm512_packus_epi32(_mm512_srli_epi32(_mm512_load_si512(tmp), 16),
                                          _mm512_srli_epi32(_mm512_load_si512(tmp + 16), 16));
    const __m512i X = _mm512_and_si512(_mm512_srli_epi16(w, 7), _mm512_set1_epi16(0xFF));
    State s;
    s.M16 = _mm512_maskz_mov_epi16(
        _mm512_test_epi16_mask(X, X),
        _mm512_ternarylogic_epi32(_mm512_slli_epi16(w, 4), _mm512_set1_epi16(0x7F0), _mm512_set1_epi16(0x800), 0xEA));
    s.neg = _mm512_movepi16_mask(w);
    s.Xr = _mm512_sub_epi16(X, _mm512_set1_epi16(static_cast<int16_t>(adj)));
    return s;
  }
  static KILN_AVX512 void Store(const State& s, int adj, uint32_t* tmp) {
    const __m512i X = _mm512_add_epi16(s.Xr, _mm512_set1_epi16(static_cast<int16_t>(adj)));  // 0 .. 255
    __m512i w = _mm512_ternarylogic_epi32(_mm512_slli_epi16(X, 7), _mm512_srli_epi16(s.M16, 4),
                                          _mm512_set1_epi16(0x7F), 0xF8);  // (X << 7) | (M16 >> 4 & 0x7F)
    w = _mm512_mask_mov_epi16(w, s.neg, _mm512_or_si512(w, _mm512_set1_epi16(static_cast<int16_t>(0x8000))));
    _mm512_store_si512(tmp, _mm512_unpacklo_epi16(_mm512_setzero_si512(), w));
    _mm512_store_si512(tmp + 16, _mm512_unpackhi_epi16(_mm512_setzero_si512(), w));
  }
  template <bool kTwo>
  static KILN_AVX512 void Step(const Term& t0, const Term& t1, State* s, const PhaseConsts& pc, const Consts& c) {
    MvmulStep16<kWormhole, kTwo>(t0, t1, s, pc, c);
  }
};

}  // namespace

__attribute__((target(KILN_AVX512_TARGET))) void RunAvx512Fp16(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0, int64_t k1, int64_t o0, int64_t o1, int p0,
                   int p1, bool fp32_dst, Arch arch, uint32_t* dst) {
  // A bf16 Dst holds patterns with their low 16 bits 0 (the engine's, and every MVMUL result); a
  // call given others, and an fp32 Dst, run the int32 state.
  bool bf16 = !fp32_dst;
  for (int64_t i = 0; bf16 && i < o1 - o0; i += 16) {
    const __mmask16 in = o1 - o0 - i >= 16 ? static_cast<__mmask16>(0xFFFF)
                                           : static_cast<__mmask16>((1u << (o1 - o0 - i)) - 1);
    bf16 = _mm512_mask_test_epi32_mask(in, _mm512_maskz_loadu_epi32(in, dst + i), _mm512_set1_epi32(0xFFFF)) == 0;
  }
  if (!bf16) {
    RunAvx512(a, b, k0, k1, o0, o1, p0, p1, fp32_dst, arch, dst);
    return;
  }
  // One instantiation per SrcA layout, arch and phase count, as in RunAvx512 (the arch does not
  // change a bf16 Dst's arithmetic; the int32 step of the rare MVMULs takes it anyway).
  using Fn = void (*)(const PreparedSrcA&, const PreparedSrcB&, int64_t, int64_t, int64_t, int64_t, int, int, uint32_t*);
  static constexpr Fn kFns[3][2] = {
      {RunAvx512T<2, true, DstBf16<false>>, RunAvx512T<2, true, DstBf16<true>>},
      {RunAvx512T<3, true, DstBf16<false>>, RunAvx512T<3, true, DstBf16<true>>},
      {RunAvx512T<3, false, DstBf16<false>>, RunAvx512T<3, false, DstBf16<true>>}};
  const int layout = a.rows == 2 ? 0 : p1 - p0 == 1 ? 1 : 2;
  kFns[layout][arch == Arch::kWormholeB0](a, b, k0, k1, o0, o1, p0, p1, dst);
}

}  // namespace kiln::numerics::mvmul_detail

#endif  // KILN_MVMUL_AVX512FP16
