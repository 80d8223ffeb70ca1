// The AVX-512 path of the exact MVMUL kernel (device/numerics/mvmul_kernel.h), AVX-512F + BW: one
// 32-column block of PreparedSrcA per 512-bit vector, one int16 lane per column for
// docs/specs/tt-numerics.md §5.3–§5.4 (lanes, group sums), two 16 × int32 vectors for §5.5 (the
// combine with Dst). Results equal the scalar path (mvmul_kernel.cc) and numerics::GroupTerm /
// CombineWithDst (device/numerics/fpu.h) bit for bit, from these identities (P = slice product,
// P <= 31 · 127 = 3937 < 2^12; d = G − ep = max(raw) − raw the lane's alignment, raw = exponent(a) +
// exponent(b)):
//  * Lane R (§5.4 step 2, R = ±floor(P / 2^d + 1/2), half-up on the magnitude) in two
//    multiplications: x = maddubs((b, 1), (4·a·s_a, s_a)) = s_a·(4P + 1) (unsigned × signed byte
//    pairs; |x| <= 15749, no saturation), then R = mulhrs(x, m) with m = s_b·2^(13−d), i.e.
//    floor(s·(4P + 1) / 2^(d+2) + 1/2), s = s_a·s_b. With P / 2^d = n + f (f a multiple of 2^−d),
//    the extra 2^−(d+2) turns a tie (f = 1/2) up for s = +1 and down for s = −1 and moves no other
//    f across an integer, so this is s·floor(P / 2^d + 1/2) exactly. For d >= 14 the true R is 0,
//    and m = 8192 >> d is 0, or −1 for s_b = −1 (an arithmetic shift), where mulhrs(x, −1) is also
//    0 (|x| < 2^14). So m = srav_epi16(±8192, d), one shift per lane and K tile for every phase.
//  * A zero SrcA operand is (0, 1): x = 1 gives R = mulhrs(1, ±2^(13−d)) = 0 for any d, and its
//    exponent kZeroExp never wins the maximum where another lane is non-zero; a column whose live
//    lanes are all zero gets G <= 0, a zero term. |S| <= 8 · 3937 < 2^15 fits int16.
//  * Group term aligned to X (§5.5 step 2, ties toward +inf of the signed value, everything shifted
//    out for d >= 31): floor(S·2^13 / 2^d + 1/2) = (srav(S·2^16, d) + 4) >> 3 (nested floors; the
//    arithmetic shift fills with the sign for d >= 32, which also gives 0). S·2^16 is the unpack of
//    the int16 sums with zero, which is why columns sit at MvmulPositionOfColumn in the block.
//  * Dst held decoded between MVMULs: exponent X, 2·D (D = 2^23 | mantissa, 0 for a zero Dst) and its
//    sign as a mask; aligned with ties away: floor(D / 2^dd + 1/2) = ((2D >> dd) + 1) >> 1. After each
//    MVMUL the state is the decoding of the encoded result: +0 (X = 0, D = 0, sign +), ±Inf (X = 255,
//    D = 2^23) or a normal value; the Dst patterns are decoded once per call and encoded at its end.
//  * The exponents of §5.5 in int16 on all 32 columns (MvmulStep): X relative to the current phase,
//    Xr = X − adj, so that a group's G = max(raw) + adj compares as max(raw) against Xr and the
//    alignments X − G are differences of int16 positions; X <= 0 is Xr <= −adj, X >= 255 is
//    Xr >= 255 − adj. Only the alignments are unpacked to int32 per half, and the halves' exponent
//    changes are packed back (packs_epi32 inverts the unpacks' column order).
//  * Step 5 by the int → float conversion, as in mvmul_kernel_avx2.cc (CombineVec): the exponent of
//    float(v) gives z and the rounding carry together; the constant part of X' − X (−137 for a bf16
//    Dst in units of 2^13, −150 for an fp32 one) is subtracted from the float's bits before the
//    exponent is shifted out (a multiple of 2^23, so the mantissa bits are untouched; with a bf16
//    Dst it rides on the rounding constant, since adding a multiple of 2^16 commutes with clearing
//    the low 16 bits), and a zero total shows as e = −137 or −150 (float +0), below every non-zero
//    total's e >= −24.
// Also here, on the same identities: PrepareSrcBGroups' words 16 operands a step, the bias ELWADD of a
// row (§6 as one term of the combine with a zero Dst) and the fast level's Dst rounding of a row.
// The lanes, the int32 combine and the block loop are in mvmul_kernel_avx512_core.h, compiled here
// for AVX-512F + BW by target attributes only (no -m flags); mvmul_kernel.cc calls this file only
// where the CPU has AVX-512F and AVX-512BW.
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "device/numerics/fpu.h"
#include "device/numerics/mvmul_kernel_impl.h"

#define KILN_AVX512_TARGET "avx512f,avx512bw"
#include "device/numerics/mvmul_kernel_avx512_core.h"

namespace kiln::numerics::mvmul_detail {

namespace {

// The constants of Combine (the bias ELWADD's one-term combine below), made as StepConsts' are.
struct CombineConsts {
  __m512i zero, one, four, t_round, d_round, big, e150, e151, e27, b_round, b_mask, e137, m_mask, hidden, e253;
};

KILN_AVX512 CombineConsts MakeCombineConsts() {
  return {_mm512_setzero_si512(), Opaque(1), Opaque(4), Opaque(32772), Opaque(8193), Opaque(0xFFFFFF), Opaque(150),
          Opaque(151), Opaque(27), Opaque(0x8000), Opaque(static_cast<int>(0xFFFF0000u)), Opaque(150 - 13),
          Opaque(0xFFFFFE), Opaque(0x1000000), Opaque(253)};
}

// §5.5 for 16 columns: group terms (exponent E, S·2^16; both 0 for a zero term, or S = 0 and E <= 0)
// combined into the decoded Dst `s`.
template <bool kFp32Dst, bool kWormhole>
KILN_AVX512 void Combine(__m512i E0, __m512i S0, __m512i E1, __m512i S1, DstState* s, const CombineConsts& c) {
  const __m512i X = _mm512_max_epi32(_mm512_max_epi32(E0, E1), s->X);
  const __m512i d0 = _mm512_sub_epi32(X, E0), d1 = _mm512_sub_epi32(X, E1), dd = _mm512_sub_epi32(X, s->X);
  __m512i f, Xn, total;
  if (kFp32Dst) {
    // Step 2: the three terms aligned to X.
    const __m512i T0 = _mm512_srai_epi32(_mm512_add_epi32(_mm512_srav_epi32(S0, d0), c.four), 3);
    const __m512i T1 = _mm512_srai_epi32(_mm512_add_epi32(_mm512_srav_epi32(S1, d1), c.four), 3);
    const __m512i D = _mm512_srli_epi32(_mm512_add_epi32(_mm512_srlv_epi32(s->D2, dd), c.one), 1);
    total = _mm512_add_epi32(_mm512_add_epi32(_mm512_mask_sub_epi32(D, s->neg, c.zero, D), T0), T1);
  } else {
    // Steps 2 and 3 in units of 2^13 (every bf16-Dst term is a multiple of it), each alignment and
    // its pre-rounding as one floor: (floor((y + 4) / 8) + 4096) / 8192 floored is (y + 32772) >> 16
    // for a group term, ((2D >> dd) + 1 + 8192) >> 14 for Dst.
    const __m512i T0 = _mm512_srai_epi32(_mm512_add_epi32(_mm512_srav_epi32(S0, d0), c.t_round), 16);
    const __m512i T1 = _mm512_srai_epi32(_mm512_add_epi32(_mm512_srav_epi32(S1, d1), c.t_round), 16);
    const __m512i D = _mm512_srli_epi32(_mm512_add_epi32(_mm512_srlv_epi32(s->D2, dd), c.d_round), 14);
    total = _mm512_add_epi32(_mm512_add_epi32(_mm512_mask_sub_epi32(D, s->neg, c.zero, D), T0), T1);
  }
  // Step 4.
  const __mmask16 neg = _mm512_cmplt_epi32_mask(total, c.zero);
  const __m512i v = _mm512_abs_epi32(total);
  // Step 5 (mvmul_kernel_avx2.cc, CombineVec, derives the conversion's rounding).
  if (kFp32Dst) {
    const __mmask16 big = _mm512_cmpgt_epi32_mask(v, c.big);
    const __m512i x = _mm512_mask_or_epi32(v, big, _mm512_add_epi32(v, v), c.one);
    f = _mm512_castps_si512(_mm512_cvtepi32_ps(x));
    Xn = _mm512_add_epi32(X, _mm512_srli_epi32(f, 23));
    Xn = _mm512_sub_epi32(Xn, _mm512_mask_blend_epi32(big, c.e150, c.e151));
    if (kWormhole) {
      const __mmask16 quirk = _mm512_mask_cmpeq_epi32_mask(neg, v, c.one);
      Xn = _mm512_mask_add_epi32(Xn, quirk, Xn, c.e27);
    }
  } else {
    // v counts units of 2^13 (below 2^19: exact as a float); half-up to 8 significant bits.
    f = _mm512_castps_si512(_mm512_cvtepi32_ps(v));
    f = _mm512_and_si512(_mm512_add_epi32(f, c.b_round), c.b_mask);
    Xn = _mm512_sub_epi32(_mm512_add_epi32(X, _mm512_srli_epi32(f, 23)), c.e137);
  }
  // Step 6, as the decoding of the encoded result: 2·(2^23 | mantissa) = ((f << 1) & 0xFFFFFE) | 2^24.
  s->X = Xn;
  s->D2 = _mm512_ternarylogic_epi32(_mm512_slli_epi32(f, 1), c.m_mask, c.hidden, 0xEA);
  s->neg = neg;
  // +0 where the total is 0 or Xn <= 0, ±Inf where Xn >= 255: one unsigned range test for both.
  const __mmask16 odd = _mm512_testn_epi32_mask(v, v) | _mm512_cmpgt_epu32_mask(_mm512_sub_epi32(Xn, c.one), c.e253);
  if (__builtin_expect(odd != 0, 0)) {
    const __mmask16 flush = _mm512_testn_epi32_mask(v, v) | _mm512_cmplt_epi32_mask(Xn, c.one);
    const __mmask16 inf = static_cast<__mmask16>(odd & ~flush);
    s->X = _mm512_mask_mov_epi32(_mm512_mask_mov_epi32(s->X, flush, c.zero), inf, _mm512_set1_epi32(255));
    s->D2 = _mm512_mask_mov_epi32(_mm512_mask_mov_epi32(s->D2, flush, c.zero), inf, c.hidden);
    s->neg = static_cast<__mmask16>(neg & ~flush);
  }
}

}  // namespace

KILN_AVX512 __m512i Twice(__m512i v) { return _mm512_or_si512(_mm512_slli_epi32(v, 16), v); }  // the low word twice

__attribute__((target(KILN_AVX512_TARGET))) void PrepareSrcBGroupsAvx512(const uint32_t* x, int64_t groups,
                                                                         int variants, SrcFormat fmt,
                                                                         uint32_t* words, uint8_t* nz) {
  const int64_t gw = SrcBGroupWords(variants);
  const __m512i keep = _mm512_set1_epi32(static_cast<int>(MaskSrcOperand(~0u, fmt)));
  const __m512i ff = _mm512_set1_epi32(0xFF), zero = _mm512_setzero_si512(), one00 = _mm512_set1_epi32(0x100);
  // Groups g and g + 1 (16 operands) a step, the last one alone where `groups` is odd: each word
  // kind as 16 values, its low 8 stored into group g and its high 8 into group g + 1.
  for (int64_t g = 0; g < groups; g += 2) {
    const bool two = g + 1 < groups;
    const __m512i x16 = _mm512_and_si512(_mm512_maskz_loadu_epi32(two ? 0xFFFF : 0x00FF, x + 8 * g), keep);
    const __m512i e = _mm512_and_si512(_mm512_srli_epi32(x16, 23), ff);
    const __mmask16 live = _mm512_test_epi32_mask(e, e);
    const __m512i sig = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(x16, 13), _mm512_set1_epi32(0x3FF)),
                                        _mm512_set1_epi32(1024));  // §5.2's significand
    const __mmask16 neg = live & _mm512_cmplt_epi32_mask(x16, zero);
    uint32_t* w0 = words + g * gw;
    uint32_t* w1 = w0 + gw;
    auto put = [&](int64_t off, __m512i v) KILN_AVX512_LAMBDA {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(w0 + off), _mm512_castsi512_si256(v));
      if (two) _mm256_storeu_si256(reinterpret_cast<__m256i*>(w1 + off), _mm512_extracti64x4_epi64(v, 1));
    };
    put(kSrcBExpWord, Twice(_mm512_mask_mov_epi32(_mm512_set1_epi32(kZeroExpB & 0xFFFF), live, e)));
    put(kSrcBMultWord, _mm512_mask_mov_epi32(_mm512_set1_epi32(0x20002000), neg,
                                             _mm512_set1_epi32(static_cast<int>(0xE000E000u))));
    // SrcB slices (SliceB): phase 0 the top 7 significand bits, phase 2 the low 4 placed high.
    put(kSrcBPairWord, Twice(_mm512_mask_or_epi32(one00, live, one00, _mm512_srli_epi32(sig, 4))));
    if (variants == 2) {
      const __m512i lo4 = _mm512_slli_epi32(_mm512_and_si512(sig, _mm512_set1_epi32(15)), 3);
      put(kSrcBPairWord + 8, Twice(_mm512_mask_or_epi32(one00, live, one00, lo4)));
    }
    nz[g] = static_cast<uint8_t>(live);
    if (two) nz[g + 1] = static_cast<uint8_t>(live >> 8);
  }
}

__attribute__((target(KILN_AVX512_TARGET))) void FillSrcABlocksAvx512(const uint32_t* a, SrcFormat fmt, int64_t cb0,
                                                                      int64_t cb1, PreparedSrcA* out) {
  PreparedSrcA& p = *out;
  const int64_t K = p.K, stride = int64_t{64} * p.rows;
  const __m512i keep = _mm512_set1_epi32(static_cast<int>(MaskSrcOperand(~0u, fmt))), ff = _mm512_set1_epi32(0xFF);
  const __m512i zero_exp = _mm512_set1_epi32(kZeroExp), zero_pair = _mm512_set1_epi32(0x0100);
  for (int64_t cb = cb0; cb < cb1; ++cb) {
    int8_t* blk = &p.lanes[static_cast<size_t>(cb * K * stride)];
    uint8_t* nz = &p.group_nz[static_cast<size_t>(cb * (K / 8))];
    std::fill(nz, nz + K / 8, uint8_t{0});
    // Positions 0..15 and 16..31: their columns' offsets from the block's first column (K apart; a
    // column past `cols` is masked off and reads as a zero operand).
    const uint32_t* base = a + cb * kMvmulColumnBlock * K;
    alignas(64) int32_t idx[kMvmulColumnBlock];
    uint32_t live = 0;
    for (int pos = 0; pos < kMvmulColumnBlock; ++pos) {
      const int64_t c = MvmulColumnOfPosition(pos);
      idx[pos] = static_cast<int32_t>(c * K);
      if (cb * kMvmulColumnBlock + c < p.cols) live |= 1u << pos;
    }
    const __m512i idx_lo = _mm512_load_si512(idx), idx_hi = _mm512_load_si512(idx + 16);
    for (int64_t k = 0; k < K; ++k) {
      int8_t* row = blk + k * stride;
      bool any = false;
      for (int h = 0; h < 2; ++h) {
        const __mmask16 in = static_cast<__mmask16>(live >> (16 * h));
        const __m512i x = _mm512_and_si512(
            _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), in, h == 0 ? idx_lo : idx_hi, base + k, 4), keep);
        // As the scalar FillSrcABlocks (mvmul_kernel.cc): exponent or kZeroExp, and per variant the
        // byte pair (4·slice·s, s) as one int16, (0, 1) for a zero operand.
        const __m512i ex = _mm512_and_si512(_mm512_srli_epi32(x, 23), ff);
        const __mmask16 nzm = _mm512_test_epi32_mask(ex, ex);
        const __mmask16 neg = nzm & _mm512_cmplt_epi32_mask(x, _mm512_setzero_si512());
        any |= nzm != 0;
        const __m512i sig = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(x, 13), _mm512_set1_epi32(0x3FF)),
                                            _mm512_set1_epi32(1024));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + 32 * h),
                            _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(zero_exp, nzm, ex)));
        for (int v = 0; v < p.variants; ++v) {
          const __m512i slice = v == 0 ? _mm512_srli_epi32(sig, 6)
                                       : _mm512_and_si512(_mm512_srli_epi32(sig, 1), _mm512_set1_epi32(31));
          const __m512i m4 = _mm512_slli_epi32(slice, 2);
          const __m512i sm = _mm512_mask_sub_epi32(m4, neg, _mm512_setzero_si512(), m4);  // 4·slice·s
          const __m512i pair = _mm512_or_si512(_mm512_and_si512(sm, ff),
                                               _mm512_mask_mov_epi32(zero_pair, neg, _mm512_set1_epi32(0xFF00)));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + 64 * (1 + v) + 32 * h),
                              _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(zero_pair, nzm, pair)));
        }
      }
      if (any) nz[k / 8] |= static_cast<uint8_t>(1u << (k % 8));
    }
  }
}

template <bool kFp32Dst, bool kWormhole>
__attribute__((target(KILN_AVX512_TARGET))) void ElwaddRowAvx512T(const uint32_t* a, const uint32_t* b, int64_t n,
                                                                  uint32_t keep_a, uint32_t keep_b, uint32_t* out) {
  const __m512i zero = _mm512_setzero_si512(), ff = _mm512_set1_epi32(0xFF), one = _mm512_set1_epi32(1);
  const CombineConsts cc = MakeCombineConsts();
  const __m512i k18 = _mm512_set1_epi32(0x3FFFF), m10 = _mm512_set1_epi32(0x3FF), hidden = _mm512_set1_epi32(1024);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 in = n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512i x = _mm512_and_si512(_mm512_maskz_loadu_epi32(in, a + i), _mm512_set1_epi32(static_cast<int>(keep_a)));
    __m512i y = _mm512_and_si512(_mm512_maskz_loadu_epi32(in, b + i), _mm512_set1_epi32(static_cast<int>(keep_b)));
    // §6 step 1: an exponent-0 operand is 0; step 2: |x| >= |y| on the 18 exponent and mantissa bits.
    x = _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(_mm512_srli_epi32(x, 23), ff), x);
    y = _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(_mm512_srli_epi32(y, 23), ff), y);
    const __mmask16 swap = _mm512_cmpgt_epu32_mask(_mm512_and_si512(_mm512_srli_epi32(y, 13), k18),
                                                   _mm512_and_si512(_mm512_srli_epi32(x, 13), k18));
    const __m512i hi = _mm512_mask_blend_epi32(swap, x, y), lo = _mm512_mask_blend_epi32(swap, y, x);
    const __m512i ea = _mm512_and_si512(_mm512_srli_epi32(hi, 23), ff), eb = _mm512_and_si512(_mm512_srli_epi32(lo, 23), ff);
    // Step 3; step 4 as ((2B >> d) + 1) >> 1 (d = 0 keeps B; d >= 12 gives 0 as B < 2^11).
    const __m512i A = _mm512_maskz_or_epi32(_mm512_test_epi32_mask(ea, ea), _mm512_and_si512(_mm512_srli_epi32(hi, 13), m10), hidden);
    __m512i B = _mm512_maskz_or_epi32(_mm512_test_epi32_mask(eb, eb), _mm512_and_si512(_mm512_srli_epi32(lo, 13), m10), hidden);
    B = _mm512_srli_epi32(_mm512_add_epi32(_mm512_srlv_epi32(_mm512_add_epi32(B, B), _mm512_sub_epi32(ea, eb)), one), 1);
    // Step 5: T = A ± B with the sign of the larger operand; then §5.5 as the one term of an MVMUL
    // combine with a zero Dst (S·2^16 = ±T·2^16).
    const __mmask16 sa = _mm512_cmplt_epi32_mask(hi, zero), sb = _mm512_cmplt_epi32_mask(lo, zero);
    __m512i T = _mm512_mask_sub_epi32(_mm512_add_epi32(A, B), sa ^ sb, A, B);
    T = _mm512_mask_sub_epi32(T, sa, zero, T);
    DstState st{zero, zero, 0};
    Combine<kFp32Dst, kWormhole>(ea, _mm512_slli_epi32(T, 16), zero, zero, &st, cc);
    _mm512_mask_storeu_epi32(out + i, in, Encode(st));
  }
}

void ElwaddRowAvx512(const uint32_t* a, const uint32_t* b, int64_t n, const FpuConfig& cfg, uint32_t* out) {
  const uint32_t ka = MaskSrcOperand(0xFFFFFFFFu, cfg.a_fmt), kb = MaskSrcOperand(0xFFFFFFFFu, cfg.b_fmt);
  const bool wh = cfg.arch == Arch::kWormholeB0;
  if (cfg.fp32_dst) {
    (wh ? ElwaddRowAvx512T<true, true> : ElwaddRowAvx512T<true, false>)(a, b, n, ka, kb, out);
  } else {
    (wh ? ElwaddRowAvx512T<false, true> : ElwaddRowAvx512T<false, false>)(a, b, n, ka, kb, out);
  }
}

__attribute__((target(KILN_AVX512_TARGET))) void AddIntoDstRowAvx512(const float* s, int64_t n, bool fp32_dst,
                                                                     uint32_t* dst) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u)), ff = _mm512_set1_epi32(0xFF);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 in = n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 sum = _mm512_add_ps(_mm512_castsi512_ps(_mm512_maskz_loadu_epi32(in, dst + i)), _mm512_maskz_loadu_ps(in, s + i));
    __m512i u = _mm512_castps_si512(sum);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    u = _mm512_mask_ternarylogic_epi32(u, nan, sign, inf, 0xEA);  // (u & sign) | inf where NaN
    if (!fp32_dst) u = _mm512_and_si512(_mm512_add_epi32(u, _mm512_set1_epi32(0x8000)), _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
    u = _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(_mm512_srli_epi32(u, 23), ff), u);
    _mm512_mask_storeu_epi32(dst + i, in, u);
  }
}

void RunAvx512(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0, int64_t k1, int64_t o0, int64_t o1, int p0,
               int p1, bool fp32_dst, Arch arch, uint32_t* dst) {
  // One instantiation per SrcA layout, Dst format, arch and phase count (one, or several: a LoFi
  // layout only ever runs one, as RunKBlockPhases refuses more phases than the operands were
  // prepared for and returns before an empty range), so the inner loops carry no tests and each
  // loop is compiled alone.
  using Fn = void (*)(const PreparedSrcA&, const PreparedSrcB&, int64_t, int64_t, int64_t, int64_t, int, int, uint32_t*);
  static constexpr Fn kFns[3][2][2] = {
      {{RunAvx512T<2, true, Dst32<false, false>>, RunAvx512T<2, true, Dst32<false, true>>},
       {RunAvx512T<2, true, Dst32<true, false>>, RunAvx512T<2, true, Dst32<true, true>>}},
      {{RunAvx512T<3, true, Dst32<false, false>>, RunAvx512T<3, true, Dst32<false, true>>},
       {RunAvx512T<3, true, Dst32<true, false>>, RunAvx512T<3, true, Dst32<true, true>>}},
      {{RunAvx512T<3, false, Dst32<false, false>>, RunAvx512T<3, false, Dst32<false, true>>},
       {RunAvx512T<3, false, Dst32<true, false>>, RunAvx512T<3, false, Dst32<true, true>>}}};
  const int layout = a.rows == 2 ? 0 : p1 - p0 == 1 ? 1 : 2;
  kFns[layout][fp32_dst][arch == Arch::kWormholeB0](a, b, k0, k1, o0, o1, p0, p1, dst);
}

}  // namespace kiln::numerics::mvmul_detail

#endif  // defined(__x86_64__)
