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
// Also here, on the same identities: PrepareSrcBRow's words 16 operands a step, the bias ELWADD of a
// row (§6 as one term of the combine with a zero Dst) and the fast level's Dst rounding of a row.
// Compiled for AVX-512 by target attributes only; mvmul_kernel.cc calls this file only where the CPU
// has AVX-512F and AVX-512BW.
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "device/numerics/fpu.h"
#include "device/numerics/mvmul_kernel_impl.h"

#define KILN_AVX512 __attribute__((target("avx512f,avx512bw"), always_inline)) inline
#define KILN_AVX512_LAMBDA __attribute__((target("avx512f,avx512bw"), always_inline))

namespace kiln::numerics::mvmul_detail {

namespace {

KILN_AVX512 __m512i Load(const int8_t* p) { return _mm512_loadu_si512(p); }
KILN_AVX512 __m512i Bcast(uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }

// Per K tile and 8-lane group q of one block, over the group's `n` live lanes (SrcB non-zero and
// SrcA non-zero in some column of the block; the others give R = 0 and never win the maximum):
// the maximum raw exponent per position (int16) and per column (int32, columns 0..15 and 16..31),
// and per live lane j its offset and rounding multiplier ±2^(13−d).
struct GroupPrep {
  int n = 0;  // live lanes; 0 = the group term is zero in every column
  __m512i maxraw;
  __m512i mult[8];
  int lane[8];
};

// The live lanes of the group of K indices kq .. kq+7 at `ag` (`live`: bit l for lane l) at their
// offsets lane[0 .. n) (lane[j] = j when all 8 are live), and raw[j] = exponent(a) + exponent(b) of
// lane lane[j] per position; returns n and sets *mr to the maximum of the raw values.
template <int kRows>
KILN_AVX512 int RawExponents(const int8_t* ag, const PreparedSrcB& b, int64_t kq, unsigned live, __m512i* raw,
                             int* lane, __m512i* mr) {
  constexpr int64_t kStride = 64 * kRows;
  __m512i m = _mm512_set1_epi16(INT16_MIN);
  int n = 0;
  if (live == 0xFFu) {  // dense: lane j at offset j, unrolled (raw[] stays in registers), a max tree
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      lane[j] = j;
      raw[j] = _mm512_add_epi16(Load(ag + j * kStride), Bcast(b.exp[static_cast<size_t>(kq + j)]));
    }
    m = _mm512_max_epi16(_mm512_max_epi16(_mm512_max_epi16(raw[0], raw[1]), _mm512_max_epi16(raw[2], raw[3])),
                         _mm512_max_epi16(_mm512_max_epi16(raw[4], raw[5]), _mm512_max_epi16(raw[6], raw[7])));
    n = 8;
  } else {
    for (; live != 0; live &= live - 1, ++n) {
      const int l = __builtin_ctz(live);
      lane[n] = l;
      raw[n] = _mm512_add_epi16(Load(ag + l * kStride), Bcast(b.exp[static_cast<size_t>(kq + l)]));
      m = _mm512_max_epi16(m, raw[n]);
    }
  }
  *mr = m;
  return n;
}

// The rounding multiplier of lane l: s_b·2^(13−d), d = mr − raw (0 <= d < 2^15 per position).
KILN_AVX512 __m512i Multiplier(const PreparedSrcB& b, int64_t k, __m512i mr, __m512i raw) {
  return _mm512_srav_epi16(Bcast(b.mult[static_cast<size_t>(k)]), _mm512_sub_epi16(mr, raw));
}

template <int kRows>
KILN_AVX512 void PrepGroup(const int8_t* ablk, const PreparedSrcB& b, int64_t q, unsigned live, GroupPrep* g) {
  const int64_t kq = q * 8;
  __m512i raw[8];
  g->n = RawExponents<kRows>(ablk + kq * 64 * kRows, b, kq, live, raw, g->lane, &g->maxraw);
  if (g->n == 8) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) g->mult[j] = Multiplier(b, kq + j, g->maxraw, raw[j]);
  } else {
    for (int j = 0; j < g->n; ++j) g->mult[j] = Multiplier(b, kq + g->lane[j], g->maxraw, raw[j]);
  }
}

// The signed R of lane l (offset in the group) with multiplier `mult` for a phase: SrcA byte pairs
// of row `a_row` (1 + v), SrcB pairs `bpair`.
template <int kRows>
KILN_AVX512 __m512i LaneR(const int8_t* ag, const uint32_t* bpair, int l, __m512i mult, int a_row) {
  const __m512i x = _mm512_maddubs_epi16(Bcast(bpair[l]), Load(ag + l * 64 * kRows + 64 * a_row));
  return _mm512_mulhrs_epi16(x, mult);
}

// §5.4 step 3 for one phase: S over the live lanes of group q, zero where `valid` (G > 0) is not set.
template <int kRows>
KILN_AVX512 __m512i GroupSum(const int8_t* ablk, const PreparedSrcB& b, int64_t q, int v, int vb, const GroupPrep& g,
                             __mmask32 valid) {
  const int8_t* ag = ablk + q * 8 * 64 * kRows;
  const uint32_t* bp = &b.pair[static_cast<size_t>(vb * b.K + q * 8)];
  const int ar = 1 + v;
  if (g.n == 8) {  // every lane live (dense data): lane j at offset j, fully unrolled
    __m512i s0 = _mm512_add_epi16(LaneR<kRows>(ag, bp, 0, g.mult[0], ar), LaneR<kRows>(ag, bp, 2, g.mult[2], ar));
    __m512i s1 = _mm512_add_epi16(LaneR<kRows>(ag, bp, 1, g.mult[1], ar), LaneR<kRows>(ag, bp, 3, g.mult[3], ar));
    s0 = _mm512_add_epi16(s0, _mm512_add_epi16(LaneR<kRows>(ag, bp, 4, g.mult[4], ar), LaneR<kRows>(ag, bp, 6, g.mult[6], ar)));
    s1 = _mm512_add_epi16(s1, _mm512_add_epi16(LaneR<kRows>(ag, bp, 5, g.mult[5], ar), LaneR<kRows>(ag, bp, 7, g.mult[7], ar)));
    return _mm512_maskz_add_epi16(valid, s0, s1);
  }
  __m512i s0 = LaneR<kRows>(ag, bp, g.lane[0], g.mult[0], ar), s1 = _mm512_setzero_si512();
  int j = 1;
  for (; j + 1 < g.n; j += 2) {
    s1 = _mm512_add_epi16(s1, LaneR<kRows>(ag, bp, g.lane[j], g.mult[j], ar));
    s0 = _mm512_add_epi16(s0, LaneR<kRows>(ag, bp, g.lane[j + 1], g.mult[j + 1], ar));
  }
  if (j < g.n) s1 = _mm512_add_epi16(s1, LaneR<kRows>(ag, bp, g.lane[j], g.mult[j], ar));
  return _mm512_maskz_add_epi16(valid, s0, s1);
}

// A group's term for one phase, per position (int16): S, zero where G <= 0, and mr, the group's
// maximum raw exponent max(exponent(a) + exponent(b)), so G = mr + adj. Term{} (S = 0, mr = 0) is
// the zero term of a group with no live lane: the kernel keeps X relative to the phase (Xr = X − adj
// >= −adj >= 127, see DstBlock), so mr = 0 never raises it, and S = 0 adds nothing.
struct Term {
  __m512i S, mr;
};

// §5.4 step 1 for a prepared group and phase: G = mr + adj, the term zero where G <= 0, i.e. where
// mr <= −adj (S = 0 there; mr + adj <= 0 <= X never raises X).
template <int kRows>
KILN_AVX512 Term PhaseTerm(const int8_t* ablk, const PreparedSrcB& b, int64_t q, int p, const GroupPrep& g,
                           __m512i nadj16) {
  Term t{};
  if (g.n == 0) return t;
  const __mmask32 valid = _mm512_cmpgt_epi16_mask(g.maxraw, nadj16);
  t.S = GroupSum<kRows>(ablk, b, q, p & 1, (p >> 1) & 1, g, valid);
  t.mr = g.maxraw;
  return t;
}

// One phase alone (LoFi, or a phase range of one): PrepGroup, GroupSum and PhaseTerm in one pass
// over the group's live lanes, the multipliers kept in registers.
template <int kRows>
KILN_AVX512 Term SinglePhaseTerm(const int8_t* ablk, const PreparedSrcB& b, int64_t q, unsigned live, int p,
                                 __m512i nadj16) {
  Term t{};
  if (live == 0) return t;
  const int64_t kq = q * 8;
  const int8_t* ag = ablk + kq * 64 * kRows;
  const uint32_t* bp = &b.pair[static_cast<size_t>(((p >> 1) & 1) * b.K + kq)];
  const int ar = 1 + (p & 1);
  __m512i raw[8], mr;
  int lane[8];
  const int n = RawExponents<kRows>(ag, b, kq, live, raw, lane, &mr);
  __m512i s0 = _mm512_setzero_si512(), s1 = s0;
  if (n == 8) {  // constant lane offsets
#pragma GCC unroll 4
    for (int j = 0; j < 8; j += 2) {
      s0 = _mm512_add_epi16(s0, LaneR<kRows>(ag, bp, j, Multiplier(b, kq + j, mr, raw[j]), ar));
      s1 = _mm512_add_epi16(s1, LaneR<kRows>(ag, bp, j + 1, Multiplier(b, kq + j + 1, mr, raw[j + 1]), ar));
    }
  } else {
    for (int j = 0; j < n; ++j) {
      const __m512i R = LaneR<kRows>(ag, bp, lane[j], Multiplier(b, kq + lane[j], mr, raw[j]), ar);
      if (j & 1) s1 = _mm512_add_epi16(s1, R);
      else s0 = _mm512_add_epi16(s0, R);
    }
  }
  t.S = _mm512_maskz_add_epi16(_mm512_cmpgt_epi16_mask(mr, nadj16), s0, s1);
  t.mr = mr;
  return t;
}

// Decoded Dst of 16 columns (see the header): exponent, 2·D, sign.
struct DstState {
  __m512i X, D2;
  __mmask16 neg;
};

KILN_AVX512 DstState Decode(__m512i dst) {
  const __m512i ed = _mm512_and_si512(_mm512_srli_epi32(dst, 23), _mm512_set1_epi32(0xFF));
  const __m512i D = _mm512_or_si512(_mm512_and_si512(dst, _mm512_set1_epi32(0x7FFFFF)), _mm512_set1_epi32(0x800000));
  return {ed, _mm512_maskz_slli_epi32(_mm512_test_epi32_mask(ed, ed), D, 1), _mm512_cmplt_epi32_mask(dst, _mm512_setzero_si512())};
}

KILN_AVX512 __m512i Encode(const DstState& s) {
  const __m512i r = _mm512_or_si512(_mm512_slli_epi32(s.X, 23),
                                    _mm512_and_si512(_mm512_srli_epi32(s.D2, 1), _mm512_set1_epi32(0x7FFFFF)));
  return _mm512_mask_or_epi32(r, s.neg, r, _mm512_set1_epi32(static_cast<int>(0x80000000u)));
}

// The combine's constants, made once per call and hidden from the optimiser (an empty asm), so that
// the loops keep them in registers or reload them from the stack instead of rebuilding each one
// (mov + broadcast) per MVMUL.
struct CombineConsts {
  __m512i zero, one, four, t_round, d_round, big, e150, e151, e27, b_round, b_mask, e137, m_mask, hidden, e253;
};

KILN_AVX512 __m512i Opaque(int v) {
  __m512i x = _mm512_set1_epi32(v);
  asm("" : "+v"(x));
  return x;
}

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

// The decoded Dst of one 32-column block between MVMULs (see the header): X per position (int16,
// MvmulPositionOfColumn order) relative to the phase, Xr = X − adj (so a group's exponent G = mr +
// adj compares as mr against Xr, and §5.5's exponent bookkeeping runs on all 32 columns at once in
// int16), and per half (columns 0..15 lo, 16..31 hi, the order of the int16 → int32 unpacks) 2·D and
// the sign.
struct DstBlock {
  __m512i Xr;
  DstState lo, hi;  // lo.X, hi.X unused
};

// Per-phase constants (int16): −adj (the G > 0 test, and the Xr of X = 0), 1 − adj (the Xr of X = 1)
// and 255 − adj (the Xr of ±Inf).
struct PhaseConsts {
  __m512i nadj, one, inf;
};

KILN_AVX512 PhaseConsts MakePhaseConsts(int adj) {
  return {_mm512_set1_epi16(static_cast<int16_t>(-adj)), _mm512_set1_epi16(static_cast<int16_t>(1 - adj)),
          _mm512_set1_epi16(static_cast<int16_t>(255 - adj))};
}

// Step 5's exponent change per column: the float conversion's exponent field with the −137 (bf16
// Dst: 150 − 13 for the units of 2^13) or −150 / −151 (fp32 Dst) already applied, so that X' =
// X + e. A zero total gives e = −137 or −150 (its float is +0), a non-zero one e >= −24: e < −64
// marks the zero totals, for which step 4 gives +0.
struct StepConsts {
  __m512i four, one, t_round, d_round, big, b_round, b_mask, e150, m_mask, hidden, e27, minus1;
  __m512i c253, zero_e;  // int16: the range test of X' (1 <= X' <= 254), e below which the total is 0
};

KILN_AVX512 StepConsts MakeStepConsts() {
  return {Opaque(4), Opaque(1), Opaque(32772), Opaque(8193), _mm512_set1_epi32(0xFFFFFF),
          Opaque(static_cast<int>(0x8000u - (137u << 23))), Opaque(static_cast<int>(0xFFFF0000u)),
          _mm512_set1_epi32(150 << 23), Opaque(0xFFFFFE), Opaque(0x1000000), _mm512_set1_epi32(27),
          _mm512_set1_epi32(-1), _mm512_set1_epi16(253), _mm512_set1_epi16(-64)};
}

// §5.5 steps 2–5 for one half (16 columns, int32): group terms S0, S1 (S·2^16) with alignments d0, d1,
// and the Dst term (2·D in s->D2, sign s->neg) with alignment dd, all to X. Sets s->D2 and s->neg to
// the result's (before the +0 / ±Inf mapping) and returns its exponent change e (StepConsts).
template <bool kFp32Dst, bool kWormhole, bool kTwo>
KILN_AVX512 __m512i HalfStep(__m512i S0, __m512i d0, __m512i S1, __m512i d1, __m512i dd, DstState* s,
                             const StepConsts& c) {
  const __m512i zero = _mm512_setzero_si512();
  __m512i total, f, e;
  if (kFp32Dst) {
    const __m512i T0 = _mm512_srai_epi32(_mm512_add_epi32(_mm512_srav_epi32(S0, d0), c.four), 3);
    const __m512i D = _mm512_srli_epi32(_mm512_add_epi32(_mm512_srlv_epi32(s->D2, dd), c.one), 1);
    total = _mm512_add_epi32(_mm512_mask_sub_epi32(D, s->neg, zero, D), T0);
    if (kTwo) total = _mm512_add_epi32(total, _mm512_srai_epi32(_mm512_add_epi32(_mm512_srav_epi32(S1, d1), c.four), 3));
  } else {
    // Steps 2 and 3 in units of 2^13 (every bf16-Dst term is a multiple of it), each alignment and
    // its pre-rounding as one floor: (floor((y + 4) / 8) + 4096) / 8192 floored is (y + 32772) >> 16
    // for a group term, ((2D >> dd) + 1 + 8192) >> 14 for Dst.
    const __m512i T0 = _mm512_srai_epi32(_mm512_add_epi32(_mm512_srav_epi32(S0, d0), c.t_round), 16);
    const __m512i D = _mm512_srli_epi32(_mm512_add_epi32(_mm512_srlv_epi32(s->D2, dd), c.d_round), 14);
    total = _mm512_add_epi32(_mm512_mask_sub_epi32(D, s->neg, zero, D), T0);
    if (kTwo) total = _mm512_add_epi32(total, _mm512_srai_epi32(_mm512_add_epi32(_mm512_srav_epi32(S1, d1), c.t_round), 16));
  }
  // Step 4.
  s->neg = _mm512_cmplt_epi32_mask(total, zero);
  const __m512i v = _mm512_abs_epi32(total);
  // Step 5 (mvmul_kernel_avx2.cc, CombineVec, derives the conversion's rounding).
  if (kFp32Dst) {
    const __mmask16 big = _mm512_cmpgt_epi32_mask(v, c.big);
    const __m512i x = _mm512_mask_or_epi32(v, big, _mm512_add_epi32(v, v), c.one);
    f = _mm512_sub_epi32(_mm512_castps_si512(_mm512_cvtepi32_ps(x)), c.e150);  // exponent field − 150
    e = _mm512_mask_sub_epi32(_mm512_srai_epi32(f, 23), big, _mm512_srai_epi32(f, 23), c.one);
    if (kWormhole) e = _mm512_mask_add_epi32(e, _mm512_cmpeq_epi32_mask(total, c.minus1), e, c.e27);
  } else {
    // v counts units of 2^13 (below 2^19: exact as a float); half-up to 8 significant bits, and −137
    // on the exponent field: subtracting a multiple of 2^16 commutes with clearing the low 16 bits.
    f = _mm512_and_si512(_mm512_add_epi32(_mm512_castps_si512(_mm512_cvtepi32_ps(v)), c.b_round), c.b_mask);
    e = _mm512_srai_epi32(f, 23);
  }
  // Step 6, as the decoding of the encoded result: 2·(2^23 | mantissa) = ((f << 1) & 0xFFFFFE) | 2^24
  // (f's low 23 bits are the mantissa: the exponent offsets are multiples of 2^23).
  s->D2 = _mm512_ternarylogic_epi32(_mm512_slli_epi32(f, 1), c.m_mask, c.hidden, 0xEA);
  return e;
}

// The rare columns of an MVMUL step (mvmul_kernel.h, §5.5 step 1 and 6): +0 where the total is 0 or
// X' <= 0, ±Inf (X = 255, D = 2^23, the sign kept) where X' >= 255.
KILN_AVX512 void FixRareColumns(__m512i Xn, __m512i e_lo, __m512i e_hi, __mmask32 odd, const PhaseConsts& pc,
                                const StepConsts& c, DstBlock* s) {
  const __m512i zero = _mm512_setzero_si512();
  const __mmask32 flush = _mm512_cmplt_epi16_mask(_mm512_packs_epi32(e_lo, e_hi), c.zero_e) |
                          _mm512_cmplt_epi16_mask(Xn, pc.one);
  const __mmask32 inf = odd & ~flush;
  s->Xr = _mm512_mask_mov_epi16(_mm512_mask_mov_epi16(Xn, flush, pc.nadj), inf, pc.inf);
  // The same masks per half: flush where e < −64 or Xr < 1 − adj, ±Inf where Xr > 254 − adj.
  const __m512i one32 = _mm512_srai_epi32(_mm512_unpacklo_epi16(zero, pc.one), 16);  // 1 − adj per column
  const __m512i top32 = _mm512_add_epi32(one32, _mm512_set1_epi32(253));             // 254 − adj
  const __m512i ze32 = _mm512_set1_epi32(-64);
  auto half = [&](DstState* h, __m512i Xh, __m512i eh) KILN_AVX512_LAMBDA {
    const __mmask16 fl = _mm512_cmplt_epi32_mask(eh, ze32) | _mm512_cmplt_epi32_mask(Xh, one32);
    const __mmask16 in = static_cast<__mmask16>(_mm512_cmpgt_epi32_mask(Xh, top32) & ~fl);
    h->D2 = _mm512_mask_mov_epi32(_mm512_mask_mov_epi32(h->D2, fl, zero), in, c.hidden);
    h->neg = static_cast<__mmask16>(h->neg & ~fl);
  };
  half(&s->lo, _mm512_srai_epi32(_mm512_unpacklo_epi16(zero, Xn), 16), e_lo);
  half(&s->hi, _mm512_srai_epi32(_mm512_unpackhi_epi16(zero, Xn), 16), e_hi);
}

// One 16-lane MVMUL of 32 columns (§5.5): the two group terms combined into the block's Dst. The
// exponent bookkeeping runs in int16 on all 32 positions (X = max(G0, G1, Dst's) as Xr, the
// alignments, X' = X + e and its range test); the int16 → int32 unpacks of S (S·2^16) and of the
// alignments put columns 0..15 and 16..31 in the lo and hi halves, and packs_epi32 of the halves'
// exponent changes returns them to their positions. kTwo false: t1 is the zero term (Term{}), which
// the step then leaves out (it never raises X and adds 0).
template <bool kFp32Dst, bool kWormhole, bool kTwo = true>
KILN_AVX512 void MvmulStep(const Term& t0, const Term& t1, DstBlock* s, const PhaseConsts& pc, const StepConsts& c) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512i Xm = _mm512_max_epi16(kTwo ? _mm512_max_epi16(t0.mr, t1.mr) : t0.mr, s->Xr);
  const __m512i d0 = _mm512_sub_epi16(Xm, t0.mr), dd = _mm512_sub_epi16(Xm, s->Xr);
  const __m512i d1 = kTwo ? _mm512_sub_epi16(Xm, t1.mr) : zero;
  // Alignments are >= 0 (and below 2^15): zero-extended.
  const __m512i e_lo = HalfStep<kFp32Dst, kWormhole, kTwo>(
      _mm512_unpacklo_epi16(zero, t0.S), _mm512_unpacklo_epi16(d0, zero), kTwo ? _mm512_unpacklo_epi16(zero, t1.S) : zero,
      kTwo ? _mm512_unpacklo_epi16(d1, zero) : zero, _mm512_unpacklo_epi16(dd, zero), &s->lo, c);
  const __m512i e_hi = HalfStep<kFp32Dst, kWormhole, kTwo>(
      _mm512_unpackhi_epi16(zero, t0.S), _mm512_unpackhi_epi16(d0, zero), kTwo ? _mm512_unpackhi_epi16(zero, t1.S) : zero,
      kTwo ? _mm512_unpackhi_epi16(d1, zero) : zero, _mm512_unpackhi_epi16(dd, zero), &s->hi, c);
  const __m512i e = _mm512_packs_epi32(e_lo, e_hi);  // −151 .. 40: no saturation
  const __m512i Xn = _mm512_add_epi16(Xm, e);
  s->Xr = Xn;
  // +0 where the total is 0 (e < −64) or X' <= 0, ±Inf where X' >= 255: one unsigned range test on
  // Xr' − (1 − adj) for the latter two.
  const __mmask32 odd =
      _mm512_cmpgt_epu16_mask(_mm512_sub_epi16(Xn, pc.one), c.c253) | _mm512_cmplt_epi16_mask(e, c.zero_e);
  if (__builtin_expect(odd != 0, 0)) FixRareColumns(Xn, e_lo, e_hi, odd, pc, c, s);
}

template <int kRows, bool kFp32Dst, bool kWormhole, bool kOnePhase>
__attribute__((target("avx512f,avx512bw"))) void RunAvx512T(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0,
                                                            int64_t k1, int64_t o0, int64_t o1, int p0, int p1,
                                                            uint32_t* dst) {
  constexpr int64_t kStride = 64 * kRows, kBlk = kMvmulColumnBlock;
  const int64_t K = a.K, K8 = K / 8;
  const StepConsts cc = MakeStepConsts();
  GroupPrep g[4];
  for (int64_t cb = o0 / kBlk; cb * kBlk < o1; ++cb) {
    const int64_t base = cb * kBlk, c_lo = std::max(o0, base), c_hi = std::min(o1, base + kBlk);
    alignas(64) uint32_t tmp[kBlk] = {};
    std::copy(dst + (c_lo - o0), dst + (c_hi - o0), tmp + (c_lo - base));
    DstBlock st;
    st.lo = Decode(_mm512_load_si512(tmp));
    st.hi = Decode(_mm512_load_si512(tmp + 16));
    int adj = PhaseAdjust(p0);  // st.Xr = X − adj
    st.Xr = _mm512_sub_epi16(_mm512_packs_epi32(st.lo.X, st.hi.X), _mm512_set1_epi16(static_cast<int16_t>(adj)));
    PhaseConsts pc = MakePhaseConsts(adj);
    auto to_phase = [&](int p) KILN_AVX512_LAMBDA {
      const int a_p = PhaseAdjust(p);
      if (a_p == adj) return;
      st.Xr = _mm512_add_epi16(st.Xr, _mm512_set1_epi16(static_cast<int16_t>(adj - a_p)));
      adj = a_p;
      pc = MakePhaseConsts(adj);
    };
    const int8_t* ablk = &a.lanes[static_cast<size_t>(cb * K * kStride)];
    const uint8_t* wnz = &a.group_nz[static_cast<size_t>(cb * K8)];
    bool fixed = false;  // st holds MVMUL results (fixed points of the zero-MVMUL mapping)
    // An MVMUL of two zero groups is skipped; before the first computed one it applies §5.5's
    // mapping once (mvmul_kernel.h), which is the combine of two zero terms.
    auto mvmul = [&](bool zero, const Term& t0, const Term& t1) KILN_AVX512_LAMBDA {
      if (!zero || !fixed) MvmulStep<kFp32Dst, kWormhole>(t0, t1, &st, pc, cc);
      fixed = true;
    };
    // An MVMUL one of whose groups has no live lane: the other group's term alone.
    auto mvmul1 = [&](const Term& t) KILN_AVX512_LAMBDA {
      MvmulStep<kFp32Dst, kWormhole, false>(t, t, &st, pc, cc);
      fixed = true;
    };
    if constexpr (kOnePhase) {
      // One phase (no multipliers kept across phases), software-pipelined by one MVMUL: the group
      // terms of MVMUL i + 1 come before MVMUL i's combine in program order, so that the combine's
      // dependent chain issues beside independent lane work (c64 LoFi, one thread: 21.0 -> 21.4
      // GMAC/s; the same for the phase loop below was slower). The combines run in the same order,
      // so nothing changes in the result. Pending kinds: 0 two zero groups, 1 one group's term
      // (ta), 2 both groups (ta, tb), −1 none.
      int pending = -1;
      Term ta{}, tb{};
      auto flush = [&]() KILN_AVX512_LAMBDA {
        if (pending == 0) mvmul(true, Term{}, Term{});
        else if (pending == 1) mvmul1(ta);
        else if (pending == 2) mvmul(false, ta, tb);
      };
      for (int64_t q = k0 / 8; q < k1 / 8; q += 2) {
        const unsigned live0 = wnz[q] & b.nz_mask[static_cast<size_t>(q)];
        const unsigned live1 = wnz[q + 1] & b.nz_mask[static_cast<size_t>(q + 1)];
        Term na{}, nb{};
        int kind = 0;
        if (live0 != 0 && live1 != 0) {
          na = SinglePhaseTerm<kRows>(ablk, b, q, live0, p0, pc.nadj);
          nb = SinglePhaseTerm<kRows>(ablk, b, q + 1, live1, p0, pc.nadj);
          kind = 2;
        } else if ((live0 | live1) != 0) {
          na = SinglePhaseTerm<kRows>(ablk, b, live0 == 0 ? q + 1 : q, live0 | live1, p0, pc.nadj);
          kind = 1;
        }
        flush();
        pending = kind;
        ta = na;
        tb = nb;
      }
      flush();
    } else {  // several phases
      for (int64_t t0 = k0; t0 < k1; t0 += 32) {
        for (int i = 0; i < 4; ++i) {
          const int64_t q = t0 / 8 + i;
          const unsigned live = wnz[q] & b.nz_mask[static_cast<size_t>(q)];
          g[i].n = 0;
          if (live != 0) PrepGroup<kRows>(ablk, b, q, live, &g[i]);
        }
        for (int p = p0; p < p1; ++p) {
          to_phase(p);
          for (int h = 0; h < 4; h += 2) {
            if (g[h].n == 0 && g[h + 1].n == 0) {
              mvmul(true, Term{}, Term{});
              continue;
            }
            if (g[h].n == 0 || g[h + 1].n == 0) {
              const int i = g[h].n == 0 ? h + 1 : h;
              mvmul1(PhaseTerm<kRows>(ablk, b, t0 / 8 + i, p, g[i], pc.nadj));
              continue;
            }
            const Term ta = PhaseTerm<kRows>(ablk, b, t0 / 8 + h, p, g[h], pc.nadj);
            const Term tb = PhaseTerm<kRows>(ablk, b, t0 / 8 + h + 1, p, g[h + 1], pc.nadj);
            mvmul(false, ta, tb);
          }
        }
      }
    }
    if (!fixed) continue;  // no MVMUL ran: Dst unchanged
    // X = Xr + adj, in [0, 255]: zero-extended per half.
    const __m512i X = _mm512_add_epi16(st.Xr, _mm512_set1_epi16(static_cast<int16_t>(adj)));
    st.lo.X = _mm512_unpacklo_epi16(X, _mm512_setzero_si512());
    st.hi.X = _mm512_unpackhi_epi16(X, _mm512_setzero_si512());
    _mm512_store_si512(tmp, Encode(st.lo));
    _mm512_store_si512(tmp + 16, Encode(st.hi));
    std::copy(tmp + (c_lo - base), tmp + (c_hi - base), dst + (c_lo - o0));
  }
}

}  // namespace

KILN_AVX512 __m512i Twice(__m512i v) { return _mm512_or_si512(_mm512_slli_epi32(v, 16), v); }  // the low word twice

__attribute__((target("avx512f,avx512bw"))) void PrepareSrcBRowAvx512(const uint32_t* b, SrcFormat fmt, PreparedSrcB* out) {
  PreparedSrcB& p = *out;
  const int64_t K = p.K;  // a multiple of 32
  const __m512i keep = _mm512_set1_epi32(static_cast<int>(fmt == SrcFormat::kTf32 ? 0xFFFFE000u : 0xFFFF0000u));
  const __m512i ff = _mm512_set1_epi32(0xFF), zero = _mm512_setzero_si512(), one00 = _mm512_set1_epi32(0x100);
  for (int64_t k = 0; k < K; k += 16) {
    const __m512i x = _mm512_and_si512(_mm512_loadu_si512(b + k), keep);
    const __m512i e = _mm512_and_si512(_mm512_srli_epi32(x, 23), ff);
    const __mmask16 nz = _mm512_test_epi32_mask(e, e);
    const __m512i sig = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(x, 13), _mm512_set1_epi32(0x3FF)),
                                        _mm512_set1_epi32(1024));  // §5.2's significand
    _mm512_storeu_si512(p.exp.data() + k, Twice(_mm512_mask_mov_epi32(_mm512_set1_epi32(kZeroExpB & 0xFFFF), nz, e)));
    const __mmask16 neg = nz & _mm512_cmplt_epi32_mask(x, zero);
    _mm512_storeu_si512(p.mult.data() + k, _mm512_mask_mov_epi32(_mm512_set1_epi32(0x20002000), neg,
                                                                _mm512_set1_epi32(static_cast<int>(0xE000E000u))));
    // SrcB slices (SliceB): phase 0 the top 7 significand bits, phase 2 the low 4 placed high.
    _mm512_storeu_si512(p.pair.data() + k, Twice(_mm512_mask_or_epi32(one00, nz, one00, _mm512_srli_epi32(sig, 4))));
    if (p.variants == 2) {
      const __m512i lo4 = _mm512_slli_epi32(_mm512_and_si512(sig, _mm512_set1_epi32(15)), 3);
      _mm512_storeu_si512(p.pair.data() + K + k, Twice(_mm512_mask_or_epi32(one00, nz, one00, lo4)));
    }
    const uint16_t m = nz;
    std::memcpy(p.nz_mask.data() + k / 8, &m, sizeof m);  // groups k/8 and k/8 + 1, lane l = bit l
  }
}

__attribute__((target("avx512f,avx512bw"))) void FillSrcABlocksAvx512(const uint32_t* a, SrcFormat fmt, int64_t cb0,
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
__attribute__((target("avx512f,avx512bw"))) void ElwaddRowAvx512T(const uint32_t* a, const uint32_t* b, int64_t n,
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

__attribute__((target("avx512f,avx512bw"))) void AddIntoDstRowAvx512(const float* s, int64_t n, bool fp32_dst,
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
      {{RunAvx512T<2, false, false, true>, RunAvx512T<2, false, true, true>},
       {RunAvx512T<2, true, false, true>, RunAvx512T<2, true, true, true>}},
      {{RunAvx512T<3, false, false, true>, RunAvx512T<3, false, true, true>},
       {RunAvx512T<3, true, false, true>, RunAvx512T<3, true, true, true>}},
      {{RunAvx512T<3, false, false, false>, RunAvx512T<3, false, true, false>},
       {RunAvx512T<3, true, false, false>, RunAvx512T<3, true, true, false>}}};
  const int layout = a.rows == 2 ? 0 : p1 - p0 == 1 ? 1 : 2;
  kFns[layout][fp32_dst][arch == Arch::kWormholeB0](a, b, k0, k1, o0, o1, p0, p1, dst);
}

}  // namespace kiln::numerics::mvmul_detail

#endif  // defined(__x86_64__)
