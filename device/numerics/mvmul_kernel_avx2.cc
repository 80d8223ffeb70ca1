// The AVX2 path of the exact MVMUL kernel (device/numerics/mvmul_kernel.h): each 32-column block of
// PreparedSrcA as two 256-bit halves of 16 positions (MvmulPositionOfColumn), one int16 lane per
// column for §5.3–§5.4 (lanes, group sums), two 8 × int32 vectors per half for §5.5 (the combine with
// Dst). Same results as the scalar path in mvmul_kernel.cc and as numerics::GroupTerm /
// CombineWithDst (device/numerics/fpu.h), from these identities (§ = docs/specs/tt-numerics.md;
// P = slice product, |P| <= 31 · 127 < 2^12):
//  * the lane's R is mulhrs(maddubs((b, 1), (4·a·s_a, s_a)), s_b·2^(13−d)) (mvmul_kernel_avx512.cc
//    derives it); AVX2 has no 16-bit variable shift, so the multiplier 8192 >> d comes from two
//    32-bit arithmetic shifts, one per word of each 32-bit lane;
//  * |S| <= 8 · 3937 < 2^15 fits int16; T = S·2^13 < 2^28 and every aligned value, Dst included,
//    stays below 2^31 in int32;
//  * a group term aligned with "ties toward +inf for the signed value" is an arithmetic shift of
//    the signed T + 2^(d−1), and its bf16 pre-rounding is (V + 2^12) & ~0x1FFF on the signed value.
// Compiled for AVX2 by target attributes only; RunKBlockPhases calls it only where the CPU has AVX2.
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>

#include "device/numerics/fpu.h"
#include "device/numerics/mvmul_kernel_impl.h"

#define KILN_AVX2 __attribute__((target("avx2"), always_inline)) inline

namespace kiln::numerics::mvmul_detail {

namespace {

KILN_AVX2 __m256i Load(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Per K tile and 8-lane group q of one 16-position half `ahalf` of a block (its k row 0, 32 bytes
// into the 64-byte rows for the second half), over the group's `n` live lanes (non-zero SrcB and
// SrcA non-zero in some column of the block; the others give R = 0 and never win the maximum,
// mvmul_kernel.h): the maximum raw exponent, and per live lane j its offset and rounding multiplier
// s_b·2^(13−d) (0 or −1 for d >= 14). Branch-free per lane: a column whose SrcA lane is zero has
// exponent kZeroExp there, so it never wins the maximum.
struct GroupPrep {
  int n = 0;  // live lanes; 0 = the group term is zero in every column
  __m256i maxraw;
  __m256i mult[8];
  int lane[8];
};

template <int kRows>
KILN_AVX2 void PrepGroup(const int8_t* ahalf, const PreparedSrcB& b, int64_t q, unsigned live, GroupPrep* g) {
  constexpr int64_t kStride = 64 * kRows;
  const int8_t* ag = ahalf + q * 8 * kStride;
  const uint32_t* bg = b.group[static_cast<size_t>(q)];
  __m256i raw[8];
  __m256i mr = _mm256_set1_epi16(INT16_MIN);
  int n = 0;
  if (live == 0xFFu) {  // dense: lane j at offset j, unrolled
    for (int j = 0; j < 8; ++j) {
      g->lane[j] = j;
      raw[j] = _mm256_add_epi16(Load(ag + j * kStride), _mm256_set1_epi32(static_cast<int>(bg[kSrcBExpWord + j])));
      mr = _mm256_max_epi16(mr, raw[j]);
    }
    n = 8;
  } else {
    for (; live != 0; live &= live - 1, ++n) {
      const int l = __builtin_ctz(live);
      g->lane[n] = l;
      raw[n] = _mm256_add_epi16(Load(ag + l * kStride), _mm256_set1_epi32(static_cast<int>(bg[kSrcBExpWord + l])));
      mr = _mm256_max_epi16(mr, raw[n]);
    }
  }
  g->n = n;
  g->maxraw = mr;
  const __m256i lo_word = _mm256_set1_epi32(0xFFFF);
  for (int j = 0; j < n; ++j) {
    // 0 <= d < 2^15 per int16 lane; (±8192) >> d in each word via two 32-bit arithmetic shifts
    // (counts of 32 or more give the sign): the even word from the sign-extended base, the odd one
    // from the base in the high word, whose spill into the even word the blend drops.
    const uint32_t m = bg[kSrcBMultWord + g->lane[j]];
    const __m256i d = _mm256_sub_epi16(mr, raw[j]);
    const __m256i even = _mm256_srav_epi32(_mm256_set1_epi32(static_cast<int16_t>(m & 0xFFFFu)), _mm256_and_si256(d, lo_word));
    const __m256i odd = _mm256_srav_epi32(_mm256_set1_epi32(static_cast<int>(m << 16)), _mm256_srli_epi32(d, 16));
    g->mult[j] = _mm256_blend_epi16(even, odd, 0xAA);
  }
}

// Live lane j's signed R for a phase: SrcA byte pairs of row `a_row` (1 + v), SrcB pairs `bpair`.
template <int kRows>
KILN_AVX2 __m256i LaneR(const int8_t* ag, const uint32_t* bpair, const GroupPrep& g, int j, int a_row) {
  const int l = g.lane[j];
  const __m256i x = _mm256_maddubs_epi16(_mm256_set1_epi32(static_cast<int>(bpair[l])), Load(ag + l * 64 * kRows + 64 * a_row));
  return _mm256_mulhrs_epi16(x, g.mult[j]);
}

// §5.4 step 3 for one phase: S over the live lanes of group q, two independent chains (int16 sums
// are exact in any order: |S| < 2^15, see the header).
template <int kRows>
KILN_AVX2 __m256i GroupSum(const int8_t* ahalf, const PreparedSrcB& b, int64_t q, int v, int vb, const GroupPrep& g) {
  const int8_t* ag = ahalf + q * 8 * 64 * kRows;
  const uint32_t* bpair = b.group[static_cast<size_t>(q)] + kSrcBPairWord + 8 * vb;
  const int ar = 1 + v;
  __m256i s0 = LaneR<kRows>(ag, bpair, g, 0, ar), s1 = _mm256_setzero_si256();
  int j = 1;
  for (; j + 1 < g.n; j += 2) {
    s1 = _mm256_add_epi16(s1, LaneR<kRows>(ag, bpair, g, j, ar));
    s0 = _mm256_add_epi16(s0, LaneR<kRows>(ag, bpair, g, j + 1, ar));
  }
  if (j < g.n) s1 = _mm256_add_epi16(s1, LaneR<kRows>(ag, bpair, g, j, ar));
  return _mm256_add_epi16(s0, s1);
}

// 2^(n−1) where n > 0, else 0 (AVX2 variable shifts give 0 for counts above 31).
KILN_AVX2 __m256i HalfOf(__m256i n) { return _mm256_sllv_epi32(_mm256_set1_epi32(1), _mm256_sub_epi32(n, _mm256_set1_epi32(1))); }

// §5.5 steps 2–3 for a group term (exponent e, signed sum S; both 0 for a zero term): aligned to X
// with ties toward +inf of the signed value (d clamped to 31, where everything shifts out),
// pre-rounded for a bf16 Dst.
template <bool kFp32Dst>
KILN_AVX2 __m256i AlignTerm(__m256i e, __m256i S, __m256i X) {
  const __m256i d = _mm256_min_epi32(_mm256_sub_epi32(X, e), _mm256_set1_epi32(31));
  __m256i v = _mm256_srav_epi32(_mm256_add_epi32(_mm256_slli_epi32(S, 13), HalfOf(d)), d);
  if (!kFp32Dst) v = _mm256_and_si256(_mm256_add_epi32(v, _mm256_set1_epi32(4096)), _mm256_set1_epi32(~0x1FFF));
  return v;
}

// §5.5 for 8 columns (CombineWithDst, device/numerics/fpu.h): two group terms combined with the
// Dst patterns `dst`.
template <bool kFp32Dst, bool kWormhole>
KILN_AVX2 __m256i CombineVec(__m256i e0, __m256i S0, __m256i e1, __m256i S1, __m256i dst) {
  const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi32(1);
  // Dst term: magnitude aligned with ties away from zero (step 2), bf16 pre-rounding (step 3), sign.
  const __m256i ed = _mm256_and_si256(_mm256_srli_epi32(dst, 23), _mm256_set1_epi32(0xFF));
  __m256i D = _mm256_or_si256(_mm256_and_si256(dst, _mm256_set1_epi32(0x7FFFFF)), _mm256_set1_epi32(0x800000));
  D = _mm256_andnot_si256(_mm256_cmpeq_epi32(ed, zero), D);
  __m256i X = _mm256_max_epi32(_mm256_max_epi32(e0, e1), ed);
  const __m256i dd = _mm256_sub_epi32(X, ed);
  D = _mm256_srlv_epi32(_mm256_add_epi32(D, HalfOf(dd)), dd);
  if (!kFp32Dst) D = _mm256_and_si256(_mm256_add_epi32(D, _mm256_set1_epi32(4096)), _mm256_set1_epi32(~0x1FFF));
  const __m256i sd = _mm256_srai_epi32(dst, 31);
  // Step 4.
  const __m256i total = _mm256_add_epi32(_mm256_add_epi32(_mm256_sub_epi32(_mm256_xor_si256(D, sd), sd), AlignTerm<kFp32Dst>(e0, S0, X)),
                                         AlignTerm<kFp32Dst>(e1, S1, X));
  const __m256i is_zero = _mm256_cmpeq_epi32(total, zero);
  const __m256i neg = _mm256_srai_epi32(total, 31);
  const __m256i v = _mm256_abs_epi32(total);
  // Step 5 by the int → float conversion (round to nearest even), whose exponent gives z and the
  // rounding carry together, so X_final = X − z + carry = X + E − 150 − [2v + 1 was converted]:
  //  * fp32 Dst: v < 2^24 converts exactly. From 2^24 on, 2v + 1 (< 2^31) converts with at least
  //    two bits dropped, the lowest of them 1, so a tie of v becomes "above half" and RNE rounds
  //    half up as step 5 does, and nothing else changes.
  //  * bf16 Dst: v is a multiple of 2^13 below 2^31 (every term was pre-rounded), so it converts
  //    exactly; adding 0x8000 to the float pattern and clearing the low 16 bits rounds it half up
  //    to 8 significant bits, the carry going into the exponent.
  //  * Wormhole, sign negative, v = 1 (fp32 Dst only: with a bf16 Dst v is never 1): z = −4, i.e.
  //    mantissa 0 and X + 4, where the conversion of 1 gave X − 23.
  __m256i f;
  if (kFp32Dst) {
    const __m256i big = _mm256_cmpgt_epi32(v, _mm256_set1_epi32(0xFFFFFF));
    const __m256i x = _mm256_blendv_epi8(v, _mm256_or_si256(_mm256_add_epi32(v, v), one), big);
    f = _mm256_castps_si256(_mm256_cvtepi32_ps(x));
    X = _mm256_add_epi32(X, big);
  } else {
    f = _mm256_castps_si256(_mm256_cvtepi32_ps(v));
    f = _mm256_and_si256(_mm256_add_epi32(f, _mm256_set1_epi32(0x8000)), _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)));
  }
  X = _mm256_add_epi32(X, _mm256_sub_epi32(_mm256_srli_epi32(f, 23), _mm256_set1_epi32(150)));
  __m256i w = f;
  if (kWormhole && kFp32Dst) {
    const __m256i quirk = _mm256_and_si256(neg, _mm256_cmpeq_epi32(v, one));
    X = _mm256_add_epi32(X, _mm256_and_si256(quirk, _mm256_set1_epi32(27)));
  }
  // Step 6.
  const __m256i s32 = _mm256_slli_epi32(neg, 31);
  __m256i r = _mm256_or_si256(_mm256_or_si256(s32, _mm256_slli_epi32(X, 23)), _mm256_and_si256(w, _mm256_set1_epi32(0x7FFFFF)));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(s32, _mm256_set1_epi32(0x7F800000)), _mm256_cmpgt_epi32(X, _mm256_set1_epi32(254)));
  return _mm256_andnot_si256(_mm256_or_si256(_mm256_cmpgt_epi32(one, X), is_zero), r);
}

// Low and high 8 int16 lanes of v as int32 (columns 0..7 and 8..15 of the block).
KILN_AVX2 __m256i Lo32(__m256i v) { return _mm256_cvtepi16_epi32(_mm256_castsi256_si128(v)); }
KILN_AVX2 __m256i Hi32(__m256i v) { return _mm256_cvtepi16_epi32(_mm256_extracti128_si256(v, 1)); }

}  // namespace

namespace {

template <int kRows, bool kFp32Dst, bool kWormhole>
__attribute__((target("avx2"))) void RunAvx2T(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0, int64_t k1,
                                              int64_t o0, int64_t o1, int p0, int p1, uint32_t* dst) {
  constexpr int64_t kStride = 64 * kRows, kBlk = kMvmulColumnBlock;
  const int64_t K = a.K, K8 = K / 8;
  const __m256i zero = _mm256_setzero_si256();
  GroupPrep g[4];
  for (int64_t cb = o0 / kBlk; cb * kBlk < o1; ++cb) {
    const int64_t base = cb * kBlk, c_lo = std::max(o0, base), c_hi = std::min(o1, base + kBlk);
    const uint8_t* wnz = &a.group_nz[static_cast<size_t>(cb * K8)];
    for (int hh = 0; hh < 2; ++hh) {  // positions 16·hh .. 16·hh + 15
      // Dst patterns in position order; positions of columns outside [o0, o1) are computed and dropped.
      alignas(32) uint32_t tmp[16] = {};
      bool any = false;
      for (int i = 0; i < 16; ++i) {
        const int64_t c = base + MvmulColumnOfPosition(16 * hh + i);
        if (c >= c_lo && c < c_hi) tmp[i] = dst[c - o0], any = true;
      }
      if (!any) continue;
      __m256i D0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(tmp));
      __m256i D1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(tmp + 8));
      const int8_t* ahalf = &a.lanes[static_cast<size_t>(cb * K * kStride + 32 * hh)];
      bool fixed = false;  // D0, D1 hold MVMUL results (fixed points of the zero-MVMUL mapping)
      for (int64_t t0 = k0; t0 < k1; t0 += 32) {
        for (int i = 0; i < 4; ++i) {
          const int64_t q = t0 / 8 + i;
          const unsigned live = wnz[q] & b.nz_mask[static_cast<size_t>(q)];
          g[i].n = 0;
          if (live != 0) PrepGroup<kRows>(ahalf, b, q, live, &g[i]);
        }
        for (int p = p0; p < p1; ++p) {
          const __m256i adj = _mm256_set1_epi16(static_cast<int16_t>(PhaseAdjust(p)));
          for (int h = 0; h < 4; h += 2) {
            if (g[h].n == 0 && g[h + 1].n == 0) {
              if (!fixed) {
                D0 = CombineVec<kFp32Dst, kWormhole>(zero, zero, zero, zero, D0);
                D1 = CombineVec<kFp32Dst, kWormhole>(zero, zero, zero, zero, D1);
              }
              fixed = true;
              continue;
            }
            __m256i E[2] = {zero, zero}, S[2] = {zero, zero};
            for (int i = 0; i < 2; ++i) {
              const GroupPrep& gp = g[h + i];
              if (gp.n == 0) continue;
              // §5.4 step 1: G = max(raw) + adj; the term is zero where G <= 0.
              const __m256i G = _mm256_add_epi16(gp.maxraw, adj);
              const __m256i valid = _mm256_cmpgt_epi16(G, zero);
              E[i] = _mm256_and_si256(G, valid);
              S[i] = _mm256_and_si256(GroupSum<kRows>(ahalf, b, t0 / 8 + h + i, p & 1, (p >> 1) & 1, gp), valid);
            }
            D0 = CombineVec<kFp32Dst, kWormhole>(Lo32(E[0]), Lo32(S[0]), Lo32(E[1]), Lo32(S[1]), D0);
            D1 = CombineVec<kFp32Dst, kWormhole>(Hi32(E[0]), Hi32(S[0]), Hi32(E[1]), Hi32(S[1]), D1);
            fixed = true;
          }
        }
      }
      _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), D0);
      _mm256_store_si256(reinterpret_cast<__m256i*>(tmp + 8), D1);
      for (int i = 0; i < 16; ++i) {
        const int64_t c = base + MvmulColumnOfPosition(16 * hh + i);
        if (c >= c_lo && c < c_hi) dst[c - o0] = tmp[i];
      }
    }
  }
}

}  // namespace

void RunAvx2(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0, int64_t k1, int64_t o0, int64_t o1, int p0,
             int p1, bool fp32_dst, Arch arch, uint32_t* dst) {
  // One instantiation per SrcA layout, Dst format and arch, so the inner loops carry no tests.
  using Fn = void (*)(const PreparedSrcA&, const PreparedSrcB&, int64_t, int64_t, int64_t, int64_t, int, int, uint32_t*);
  static constexpr Fn kFns[2][2][2] = {
      {{RunAvx2T<2, false, false>, RunAvx2T<2, false, true>}, {RunAvx2T<2, true, false>, RunAvx2T<2, true, true>}},
      {{RunAvx2T<3, false, false>, RunAvx2T<3, false, true>}, {RunAvx2T<3, true, false>, RunAvx2T<3, true, true>}}};
  kFns[a.rows == 3][fp32_dst][arch == Arch::kWormholeB0](a, b, k0, k1, o0, o1, p0, p1, dst);
}

}  // namespace kiln::numerics::mvmul_detail

#endif  // defined(__x86_64__)
