// Internal to device/numerics/mvmul_kernel_avx512*.cc: the AVX-512 exact MVMUL kernel's lanes, group
// terms, int32 Dst combine and block loop (RunAvx512T), shared by the AVX-512 path
// (mvmul_kernel_avx512.cc, which derives the arithmetic) and the AVX-512 FP16 one
// (mvmul_kernel_avx512fp16.cc, which holds a bf16 Dst in int16). Everything here is in an
// anonymous namespace, compiled for the target string KILN_AVX512_TARGET that each of those files
// defines before including this header (at least "avx512f,avx512bw"): each compiles its own copy
// for its own instruction set, so the plain AVX-512 path never holds an instruction its CPUs may
// lack. Target attributes, not `#pragma GCC target`, which clang (the fuzz builds') ignores.
// Section numbers (§) cite docs/specs/tt-numerics.md.
#pragma once

#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "device/numerics/fpu.h"
#include "device/numerics/mvmul_kernel_impl.h"

#ifndef KILN_AVX512_TARGET
#error "define KILN_AVX512_TARGET before including mvmul_kernel_avx512_core.h"
#endif
#define KILN_AVX512 __attribute__((target(KILN_AVX512_TARGET), always_inline)) inline
#define KILN_AVX512_LAMBDA __attribute__((target(KILN_AVX512_TARGET), always_inline))

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

// The live lanes of a group (SrcA lanes at `ag`, SrcB words at `bg`, mvmul_kernel.h; `live`: bit l
// for lane l) at their offsets lane[0 .. n) (lane[j] = j when all 8 are live), and raw[j] =
// exponent(a) + exponent(b) of lane lane[j] per position; returns n and sets *mr to the maximum of
// the raw values.
template <int kRows>
KILN_AVX512 int RawExponents(const int8_t* ag, const uint32_t* bg, unsigned live, __m512i* raw, int* lane,
                             __m512i* mr) {
  constexpr int64_t kStride = 64 * kRows;
  __m512i m = _mm512_set1_epi16(INT16_MIN);
  int n = 0;
  if (live == 0xFFu) {  // dense: lane j at offset j, unrolled (raw[] stays in registers), a max tree
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      lane[j] = j;
      raw[j] = _mm512_add_epi16(Load(ag + j * kStride), Bcast(bg[kSrcBExpWord + j]));
    }
    m = _mm512_max_epi16(_mm512_max_epi16(_mm512_max_epi16(raw[0], raw[1]), _mm512_max_epi16(raw[2], raw[3])),
                         _mm512_max_epi16(_mm512_max_epi16(raw[4], raw[5]), _mm512_max_epi16(raw[6], raw[7])));
    n = 8;
  } else {
    for (; live != 0; live &= live - 1, ++n) {
      const int l = __builtin_ctz(live);
      lane[n] = l;
      raw[n] = _mm512_add_epi16(Load(ag + l * kStride), Bcast(bg[kSrcBExpWord + l]));
      m = _mm512_max_epi16(m, raw[n]);
    }
  }
  *mr = m;
  return n;
}

// The rounding multiplier of lane l of the group at `bg`: s_b·2^(13−d), d = mr − raw (0 <= d < 2^15
// per position).
KILN_AVX512 __m512i Multiplier(const uint32_t* bg, int l, __m512i mr, __m512i raw) {
  return _mm512_srav_epi16(Bcast(bg[kSrcBMultWord + l]), _mm512_sub_epi16(mr, raw));
}

template <int kRows>
KILN_AVX512 void PrepGroup(const int8_t* ablk, const PreparedSrcB& b, int64_t q, unsigned live, GroupPrep* g) {
  const uint32_t* bg = b.group[static_cast<size_t>(q)];
  __m512i raw[8];
  g->n = RawExponents<kRows>(ablk + q * 8 * 64 * kRows, bg, live, raw, g->lane, &g->maxraw);
  if (g->n == 8) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) g->mult[j] = Multiplier(bg, j, g->maxraw, raw[j]);
  } else {
    for (int j = 0; j < g->n; ++j) g->mult[j] = Multiplier(bg, g->lane[j], g->maxraw, raw[j]);
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
  const uint32_t* bp = b.group[static_cast<size_t>(q)] + kSrcBPairWord + 8 * vb;
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
  const int8_t* ag = ablk + q * 8 * 64 * kRows;
  const uint32_t* bg = b.group[static_cast<size_t>(q)];
  const uint32_t* bp = bg + kSrcBPairWord + 8 * ((p >> 1) & 1);
  const int ar = 1 + (p & 1);
  __m512i raw[8], mr;
  int lane[8];
  const int n = RawExponents<kRows>(ag, bg, live, raw, lane, &mr);
  __m512i s0 = _mm512_setzero_si512(), s1 = s0;
  if (n == 8) {  // constant lane offsets
#pragma GCC unroll 4
    for (int j = 0; j < 8; j += 2) {
      s0 = _mm512_add_epi16(s0, LaneR<kRows>(ag, bp, j, Multiplier(bg, j, mr, raw[j]), ar));
      s1 = _mm512_add_epi16(s1, LaneR<kRows>(ag, bp, j + 1, Multiplier(bg, j + 1, mr, raw[j + 1]), ar));
    }
  } else {
    for (int j = 0; j < n; ++j) {
      const __m512i R = LaneR<kRows>(ag, bp, lane[j], Multiplier(bg, lane[j], mr, raw[j]), ar);
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

// A vector of int32 v hidden from the optimiser (an empty asm), so that loops keep their constants
// in registers or reload them from the stack instead of rebuilding each one (mov + broadcast) per
// MVMUL.
KILN_AVX512 __m512i Opaque(int v) {
  __m512i x = _mm512_set1_epi32(v);
  asm("" : "+v"(x));
  return x;
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

// RunAvx512T's policy for the int32 state (DstBlock, MvmulStep): either Dst format, every pattern.
template <bool kFp32Dst, bool kWormhole>
struct Dst32 {
  using State = DstBlock;
  using Consts = StepConsts;
  static KILN_AVX512 Consts MakeConsts() { return MakeStepConsts(); }
  static KILN_AVX512 State Load(const uint32_t* tmp, int adj) {
    State s;
    s.lo = Decode(_mm512_load_si512(tmp));
    s.hi = Decode(_mm512_load_si512(tmp + 16));
    s.Xr = _mm512_sub_epi16(_mm512_packs_epi32(s.lo.X, s.hi.X), _mm512_set1_epi16(static_cast<int16_t>(adj)));
    return s;
  }
  static KILN_AVX512 void Store(State& s, int adj, uint32_t* tmp) {
    // X = Xr + adj, in [0, 255]: zero-extended per half.
    const __m512i X = _mm512_add_epi16(s.Xr, _mm512_set1_epi16(static_cast<int16_t>(adj)));
    s.lo.X = _mm512_unpacklo_epi16(X, _mm512_setzero_si512());
    s.hi.X = _mm512_unpackhi_epi16(X, _mm512_setzero_si512());
    _mm512_store_si512(tmp, Encode(s.lo));
    _mm512_store_si512(tmp + 16, Encode(s.hi));
  }
  template <bool kTwo>
  static KILN_AVX512 void Step(const Term& t0, const Term& t1, State* s, const PhaseConsts& pc, const Consts& c) {
    MvmulStep<kFp32Dst, kWormhole, kTwo>(t0, t1, s, pc, c);
  }
};

// The exact kernel over columns [o0, o1) (RunKBlockPhases' contract), one 32-column block at a
// time, with the block's Dst held between MVMULs as the policy `Dst` holds it (Dst32 above, or the
// bf16 Dst in int16 of mvmul_kernel_avx512fp16.cc):
//   State                       the decoded block; its member Xr is X − adj per position (DstBlock)
//   Consts, MakeConsts()        the step's constants, made once per call
//   Load(tmp, adj), Store(s, adj, tmp)   decode / encode the block's 32 Dst patterns (column order)
//   Step<kTwo>(t0, t1, &s, pc, c)        one MVMUL (MvmulStep's contract)
template <int kRows, bool kOnePhase, class Dst>
__attribute__((target(KILN_AVX512_TARGET))) void RunAvx512T(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0, int64_t k1, int64_t o0, int64_t o1, int p0,
                int p1, uint32_t* dst) {
  constexpr int64_t kStride = 64 * kRows, kBlk = kMvmulColumnBlock;
  const int64_t K = a.K, K8 = K / 8;
  const typename Dst::Consts cc = Dst::MakeConsts();
  GroupPrep g[4];
  for (int64_t cb = o0 / kBlk; cb * kBlk < o1; ++cb) {
    const int64_t base = cb * kBlk, c_lo = std::max(o0, base), c_hi = std::min(o1, base + kBlk);
    alignas(64) uint32_t tmp[kBlk] = {};
    std::copy(dst + (c_lo - o0), dst + (c_hi - o0), tmp + (c_lo - base));
    int adj = PhaseAdjust(p0);  // st.Xr = X − adj
    typename Dst::State st = Dst::Load(tmp, adj);
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
      if (!zero || !fixed) Dst::template Step<true>(t0, t1, &st, pc, cc);
      fixed = true;
    };
    // An MVMUL one of whose groups has no live lane: the other group's term alone.
    auto mvmul1 = [&](const Term& t) KILN_AVX512_LAMBDA {
      Dst::template Step<false>(t, t, &st, pc, cc);
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
    Dst::Store(st, adj, tmp);
    std::copy(tmp + (c_lo - base), tmp + (c_hi - base), dst + (c_lo - o0));
  }
}

}  // namespace

}  // namespace kiln::numerics::mvmul_detail

#endif  // defined(__x86_64__)
