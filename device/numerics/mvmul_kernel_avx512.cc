// The AVX-512 path of the exact MVMUL kernel (device/numerics/mvmul_kernel.h), AVX-512F + BW: the
// AVX2 path's arithmetic (mvmul_kernel_avx2.cc, whose header derives every identity used here) on
// twice the width. Two 16-column blocks of PreparedSrcA at once in 32 int16 lanes for docs/specs/tt-numerics.md §5.3–§5.4
// (lanes, group sums), one 16 × int32 vector per block for §5.5 (the combine with Dst), and mask
// registers where the AVX2 path builds compare vectors and sign words:
//  * the rounding multiplier 2^(14−d) is one 16-bit variable shift (counts of 16 or more give 0);
//  * the product sign is a mask (the sign bit of SrcA's 0x0001 / 0x8001 word xor SrcB's 0 / 0x8000,
//    never 0, so AVX2's psign and a masked negation agree);
//  * a lane of the union of the two blocks' live lanes that is zero in one block has SrcA exponent
//    kZeroExp there: it gives R = 0 and never wins the maximum in that block's columns, so a block
//    computes what it computes alone; and a block whose lanes are all zero in a computed group
//    gets G < 0, a zero term, i.e. CombineWithDst with two zero terms, which is the zero-MVMUL
//    mapping the AVX2 and scalar paths apply when they skip it (idempotent once applied).
// Results are bit-identical to the scalar and AVX2 paths (tests/device/numerics/mvmul_kernel_test.cc
// runs all three on every vector file and the randomized cases). Compiled for AVX-512 by target
// attributes only; RunKBlockPhases calls it only where the CPU has AVX-512F and AVX-512BW.
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>

#include "device/numerics/fpu.h"
#include "device/numerics/mvmul_kernel_impl.h"

#define KILN_AVX512 __attribute__((target("avx512f,avx512bw"), always_inline)) inline

namespace kiln::numerics::mvmul_detail {

namespace {

// Columns 0..15 of block cb (`lo`) in the low 16 lanes, of block cb + 1 (`hi`) in the high 16.
KILN_AVX512 __m512i Load2(const int16_t* lo, const int16_t* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi)), 1);
}

// As mvmul_kernel_avx2.cc's GroupPrep, for the 32 columns of a block pair.
struct GroupPrep {
  int n = 0;  // live lanes (of either block); 0 = the group term is zero in every column
  __m512i maxraw;
  __m512i mult[8];
  __mmask32 neg[8];
  int lane[8];
  int16_t b2[2][8];
};

template <int W>
KILN_AVX512 void PrepGroup(const int16_t* ablk0, const int16_t* ablk1, const PreparedSrcB& b, int64_t q, unsigned live,
                           GroupPrep* g) {
  const int64_t kq = q * 8;
  const int16_t* ag0 = ablk0 + kq * W * 16;
  const int16_t* ag1 = ablk1 + kq * W * 16;
  __m512i raw[8];
  __m512i mr = _mm512_set1_epi16(INT16_MIN);
  int n = 0;
  for (; live != 0; live &= live - 1, ++n) {
    const int l = __builtin_ctz(live);
    g->lane[n] = l;
    for (int v = 0; v < b.variants; ++v) g->b2[v][n] = b.slice2[static_cast<size_t>(v * b.K + kq + l)];
    raw[n] = _mm512_add_epi16(Load2(ag0 + l * W * 16, ag1 + l * W * 16), _mm512_set1_epi16(b.exp[static_cast<size_t>(kq + l)]));
    mr = _mm512_max_epi16(mr, raw[n]);
  }
  g->n = n;
  g->maxraw = mr;
  const __m512i c = _mm512_set1_epi16(0x4000);
  for (int j = 0; j < n; ++j) {
    // 0 <= d < 2^15 per lane (mr is the maximum of the raw values).
    g->mult[j] = _mm512_srlv_epi16(c, _mm512_sub_epi16(mr, raw[j]));
    const int l = g->lane[j];
    const __m512i s = _mm512_xor_si512(Load2(ag0 + l * W * 16 + 16, ag1 + l * W * 16 + 16),
                                       _mm512_set1_epi16(b.sign[static_cast<size_t>(kq + l)]));
    g->neg[j] = _mm512_movepi16_mask(s);
  }
}

// Live lane j's signed R for a phase: SrcA slice word a_word (2 + v), SrcB slice variant vb.
template <int W>
KILN_AVX512 __m512i LaneR(const int16_t* ag0, const int16_t* ag1, const GroupPrep& g, int j, int a_word, int vb) {
  const int64_t off = (g.lane[j] * W + a_word) * 16;
  const __m512i p2 = _mm512_mullo_epi16(Load2(ag0 + off, ag1 + off), _mm512_set1_epi16(g.b2[vb][j]));
  const __m512i r = _mm512_mulhrs_epi16(p2, g.mult[j]);
  return _mm512_mask_sub_epi16(r, g.neg[j], _mm512_setzero_si512(), r);
}

// §5.4 step 3 for one phase: S over the live lanes of group q, two independent chains.
template <int W>
KILN_AVX512 __m512i GroupSum(const int16_t* ablk0, const int16_t* ablk1, int64_t q, int v, int vb, const GroupPrep& g) {
  const int16_t* ag0 = ablk0 + q * 8 * W * 16;
  const int16_t* ag1 = ablk1 + q * 8 * W * 16;
  const int aw = 2 + v;
  __m512i s0 = LaneR<W>(ag0, ag1, g, 0, aw, vb), s1 = _mm512_setzero_si512();
  int j = 1;
  for (; j + 1 < g.n; j += 2) {
    s1 = _mm512_add_epi16(s1, LaneR<W>(ag0, ag1, g, j, aw, vb));
    s0 = _mm512_add_epi16(s0, LaneR<W>(ag0, ag1, g, j + 1, aw, vb));
  }
  if (j < g.n) s1 = _mm512_add_epi16(s1, LaneR<W>(ag0, ag1, g, j, aw, vb));
  return _mm512_add_epi16(s0, s1);
}

// 2^(n−1) where n > 0, else 0 (variable shifts give 0 for counts above 31).
KILN_AVX512 __m512i HalfOf(__m512i n) {
  return _mm512_sllv_epi32(_mm512_set1_epi32(1), _mm512_sub_epi32(n, _mm512_set1_epi32(1)));
}

// As mvmul_kernel_avx2.cc's AlignTerm.
template <bool kFp32Dst>
KILN_AVX512 __m512i AlignTerm(__m512i e, __m512i S, __m512i X) {
  const __m512i d = _mm512_min_epi32(_mm512_sub_epi32(X, e), _mm512_set1_epi32(31));
  __m512i v = _mm512_srav_epi32(_mm512_add_epi32(_mm512_slli_epi32(S, 13), HalfOf(d)), d);
  if (!kFp32Dst) v = _mm512_and_si512(_mm512_add_epi32(v, _mm512_set1_epi32(4096)), _mm512_set1_epi32(~0x1FFF));
  return v;
}

// As mvmul_kernel_avx2.cc's CombineVec (§5.5, CombineWithDst in device/numerics/fpu.h), for 16
// columns, with masks for its compare vectors.
template <bool kFp32Dst, bool kWormhole>
KILN_AVX512 __m512i CombineVec(__m512i e0, __m512i S0, __m512i e1, __m512i S1, __m512i dst) {
  const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi32(1);
  const __m512i ed = _mm512_and_si512(_mm512_srli_epi32(dst, 23), _mm512_set1_epi32(0xFF));
  __m512i D = _mm512_or_si512(_mm512_and_si512(dst, _mm512_set1_epi32(0x7FFFFF)), _mm512_set1_epi32(0x800000));
  D = _mm512_maskz_mov_epi32(_mm512_cmpneq_epi32_mask(ed, zero), D);
  __m512i X = _mm512_max_epi32(_mm512_max_epi32(e0, e1), ed);
  const __m512i dd = _mm512_sub_epi32(X, ed);
  D = _mm512_srlv_epi32(_mm512_add_epi32(D, HalfOf(dd)), dd);
  if (!kFp32Dst) D = _mm512_and_si512(_mm512_add_epi32(D, _mm512_set1_epi32(4096)), _mm512_set1_epi32(~0x1FFF));
  const __m512i sd = _mm512_srai_epi32(dst, 31);
  const __m512i total =
      _mm512_add_epi32(_mm512_add_epi32(_mm512_sub_epi32(_mm512_xor_si512(D, sd), sd), AlignTerm<kFp32Dst>(e0, S0, X)),
                       AlignTerm<kFp32Dst>(e1, S1, X));
  const __mmask16 is_zero = _mm512_cmpeq_epi32_mask(total, zero);
  const __mmask16 neg = _mm512_cmplt_epi32_mask(total, zero);
  const __m512i v = _mm512_abs_epi32(total);
  // Step 5 by the int → float conversion: see mvmul_kernel_avx2.cc (same rounding, MXCSR's RNE).
  __m512i f;
  if (kFp32Dst) {
    const __mmask16 big = _mm512_cmpgt_epi32_mask(v, _mm512_set1_epi32(0xFFFFFF));
    const __m512i x = _mm512_mask_mov_epi32(v, big, _mm512_or_si512(_mm512_add_epi32(v, v), one));
    f = _mm512_castps_si512(_mm512_cvtepi32_ps(x));
    X = _mm512_mask_sub_epi32(X, big, X, one);
  } else {
    f = _mm512_castps_si512(_mm512_cvtepi32_ps(v));
    f = _mm512_and_si512(_mm512_add_epi32(f, _mm512_set1_epi32(0x8000)), _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
  }
  X = _mm512_add_epi32(X, _mm512_sub_epi32(_mm512_srli_epi32(f, 23), _mm512_set1_epi32(150)));
  if (kWormhole && kFp32Dst) {
    const __mmask16 quirk = neg & _mm512_cmpeq_epi32_mask(v, one);
    X = _mm512_mask_add_epi32(X, quirk, X, _mm512_set1_epi32(27));
  }
  // Step 6.
  const __m512i s32 = _mm512_maskz_mov_epi32(neg, _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  __m512i r = _mm512_or_si512(_mm512_or_si512(s32, _mm512_slli_epi32(X, 23)), _mm512_and_si512(f, _mm512_set1_epi32(0x7FFFFF)));
  r = _mm512_mask_mov_epi32(r, _mm512_cmpgt_epi32_mask(X, _mm512_set1_epi32(254)),
                            _mm512_or_si512(s32, _mm512_set1_epi32(0x7F800000)));
  const __mmask16 flush = static_cast<__mmask16>(_mm512_cmplt_epi32_mask(X, one) | is_zero);
  return _mm512_maskz_mov_epi32(static_cast<__mmask16>(~flush), r);
}

// The 16 int16 lanes of block cb (Lo) or cb + 1 (Hi) as int32.
KILN_AVX512 __m512i Lo32(__m512i v) { return _mm512_cvtepi16_epi32(_mm512_castsi512_si256(v)); }
KILN_AVX512 __m512i Hi32(__m512i v) { return _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(v, 1)); }

template <int W, bool kFp32Dst, bool kWormhole>
__attribute__((target("avx512f,avx512bw"))) void RunAvx512W(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0,
                                                            int64_t k1, int64_t o0, int64_t o1, int p0, int p1,
                                                            uint32_t* dst) {
  const int64_t K = a.K, K8 = K / 8;
  const __m512i zero = _mm512_setzero_si512();
  const int64_t cb_end = (o1 + 15) / 16;
  GroupPrep g[4];
  for (int64_t cb = o0 / 16; cb < cb_end; cb += 2) {
    // A lone last block is paired with itself; its second copy is neither combined nor stored.
    const bool pair = cb + 1 < cb_end;
    const int64_t cb1 = pair ? cb + 1 : cb;
    const int64_t base = cb * 16;
    const int64_t c_lo = std::max(o0, base), c_hi = std::min(o1, base + (pair ? 32 : 16));
    alignas(64) uint32_t tmp[32] = {};
    for (int64_t c = c_lo; c < c_hi; ++c) tmp[c - base] = dst[c - o0];
    __m512i D0 = _mm512_load_si512(tmp), D1 = _mm512_load_si512(tmp + 16);
    const int16_t* ablk0 = &a.lanes[static_cast<size_t>(cb * K * W * 16)];
    const int16_t* ablk1 = &a.lanes[static_cast<size_t>(cb1 * K * W * 16)];
    const uint8_t* wnz0 = &a.group_nz[static_cast<size_t>(cb * K8)];
    const uint8_t* wnz1 = &a.group_nz[static_cast<size_t>(cb1 * K8)];
    bool fixed = false;  // D0, D1 hold MVMUL results (fixed points of the zero-MVMUL mapping)
    for (int64_t t0 = k0; t0 < k1; t0 += 32) {
      for (int i = 0; i < 4; ++i) {
        const int64_t q = t0 / 8 + i;
        const unsigned live = (wnz0[q] | wnz1[q]) & b.nz_mask[static_cast<size_t>(q)];
        g[i].n = 0;
        if (live != 0) PrepGroup<W>(ablk0, ablk1, b, q, live, &g[i]);
      }
      for (int p = p0; p < p1; ++p) {
        const __m512i adj = _mm512_set1_epi16(static_cast<int16_t>(PhaseAdjust(p)));
        for (int h = 0; h < 4; h += 2) {
          if (g[h].n == 0 && g[h + 1].n == 0) {
            if (!fixed) {
              D0 = CombineVec<kFp32Dst, kWormhole>(zero, zero, zero, zero, D0);
              if (pair) D1 = CombineVec<kFp32Dst, kWormhole>(zero, zero, zero, zero, D1);
            }
            fixed = true;
            continue;
          }
          __m512i E[2] = {zero, zero}, S[2] = {zero, zero};
          for (int i = 0; i < 2; ++i) {
            const GroupPrep& gp = g[h + i];
            if (gp.n == 0) continue;
            // §5.4 step 1: G = max(raw) + adj; the term is zero where G <= 0.
            const __m512i G = _mm512_add_epi16(gp.maxraw, adj);
            const __mmask32 valid = _mm512_cmpgt_epi16_mask(G, zero);
            E[i] = _mm512_maskz_mov_epi16(valid, G);
            S[i] = _mm512_maskz_mov_epi16(valid, GroupSum<W>(ablk0, ablk1, t0 / 8 + h + i, p & 1, (p >> 1) & 1, gp));
          }
          D0 = CombineVec<kFp32Dst, kWormhole>(Lo32(E[0]), Lo32(S[0]), Lo32(E[1]), Lo32(S[1]), D0);
          if (pair) D1 = CombineVec<kFp32Dst, kWormhole>(Hi32(E[0]), Hi32(S[0]), Hi32(E[1]), Hi32(S[1]), D1);
          fixed = true;
        }
      }
    }
    _mm512_store_si512(tmp, D0);
    _mm512_store_si512(tmp + 16, D1);
    for (int64_t c = c_lo; c < c_hi; ++c) dst[c - o0] = tmp[c - base];
  }
}

}  // namespace

void RunAvx512(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0, int64_t k1, int64_t o0, int64_t o1, int p0,
               int p1, bool fp32_dst, Arch arch, uint32_t* dst) {
  // One instantiation per SrcA layout, Dst format and arch, so the inner loops carry no tests.
  using Fn = void (*)(const PreparedSrcA&, const PreparedSrcB&, int64_t, int64_t, int64_t, int64_t, int, int, uint32_t*);
  static constexpr Fn kFns[2][2][2] = {
      {{RunAvx512W<3, false, false>, RunAvx512W<3, false, true>}, {RunAvx512W<3, true, false>, RunAvx512W<3, true, true>}},
      {{RunAvx512W<4, false, false>, RunAvx512W<4, false, true>}, {RunAvx512W<4, true, false>, RunAvx512W<4, true, true>}}};
  kFns[a.words == 4][fp32_dst][arch == Arch::kWormholeB0](a, b, k0, k1, o0, o1, p0, p1, dst);
}

}  // namespace kiln::numerics::mvmul_detail

#endif  // defined(__x86_64__)
