// The AVX2 path of the exact MVMUL kernel (device/numerics/mvmul_kernel.h): 8 output columns per
// 256-bit vector, one int32 lane per column. Same integer arithmetic as the scalar path in
// mvmul_kernel.cc and as numerics::GroupTerm / CombineWithDst (device/numerics/fpu.h); every range
// below fits int32 (§ = docs/specs/tt-numerics.md):
//   lane exponent ep <= 255 + 255 − 127; |P| < 2^12; |S| <= 8 · 31 · 127 < 2^15, T = |S| << 13 < 2^28;
//   aligned terms and Dst < 2^31 before their shift; |total| < 2^24 + 2^29.
// Compiled for AVX2 by target attributes only; RunKBlockPhases calls it only where the CPU has AVX2.
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>

#include "device/numerics/mvmul_kernel_impl.h"

#define KILN_AVX2 __attribute__((target("avx2"), always_inline)) inline

namespace kiln::numerics::mvmul_detail {

namespace {

// §5.4 for 8 columns: G = max(0, lane exponents) and S = Σ signed aligned products over the group's
// non-zero SrcB lanes (`lanes`, `n` of them, offsets from k = 8q). `a` points at the block's
// [K][8] lanes of the phase's variant. A term is valid where G > 0 (CombineVec masks it).
KILN_AVX2 void GroupVec(const int32_t* a, const int32_t* eterm, const int32_t* bslice, int64_t kq, const uint8_t* lanes,
                        int n, __m256i* G_out, __m256i* S_out) {
  const __m256i one = _mm256_set1_epi32(1), cap = _mm256_set1_epi32(kMaxAlign);
  __m256i G = _mm256_setzero_si256();
  for (int j = 0; j < n; ++j) {
    const int64_t k = kq + lanes[j];
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + k * 8));
    G = _mm256_max_epi32(G, _mm256_add_epi32(_mm256_srai_epi32(x, 16), _mm256_set1_epi32(eterm[k])));
  }
  __m256i S = _mm256_setzero_si256();
  for (int j = 0; j < n; ++j) {
    const int64_t k = kq + lanes[j];
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + k * 8));
    const __m256i ep = _mm256_add_epi32(_mm256_srai_epi32(x, 16), _mm256_set1_epi32(eterm[k]));
    const __m256i d = _mm256_min_epi32(_mm256_sub_epi32(G, ep), cap);
    // Signed slice product: the low 16 bits of x times bslice (whose high half is 0).
    const __m256i P = _mm256_madd_epi16(x, _mm256_set1_epi32(bslice[k]));
    // (2P + 2^d − [P < 0]) >> (d + 1), arithmetic: §5.4's half-up R with P's sign (mvmul_kernel.cc).
    __m256i t = _mm256_add_epi32(_mm256_add_epi32(P, P), _mm256_sllv_epi32(one, d));
    t = _mm256_add_epi32(t, _mm256_srai_epi32(P, 31));
    S = _mm256_add_epi32(S, _mm256_srav_epi32(t, _mm256_add_epi32(d, one)));
  }
  *G_out = G;
  *S_out = S;
}

// 2^(n−1) where n > 0, else 0 (AVX2 variable shifts give 0 for counts above 31).
KILN_AVX2 __m256i HalfOf(__m256i n) { return _mm256_sllv_epi32(_mm256_set1_epi32(1), _mm256_sub_epi32(n, _mm256_set1_epi32(1))); }

// §5.5 steps 2–3 for a group term (magnitude m, exponent e, sign mask s): aligned to X (counts of
// 32 or more shift everything out, as the spec's "else 0"; a count of 31 leaves 0 too since every
// magnitude is below 2^30), pre-rounded for a bf16 Dst, returned as a signed value.
KILN_AVX2 __m256i AlignTerm(__m256i m, __m256i e, __m256i s, __m256i X, bool fp32_dst) {
  const __m256i d = _mm256_sub_epi32(X, e);
  const __m256i tie = _mm256_and_si256(s, _mm256_cmpgt_epi32(d, _mm256_setzero_si256()));  // −1: negative, d > 0
  m = _mm256_srlv_epi32(_mm256_add_epi32(_mm256_add_epi32(m, HalfOf(d)), tie), d);
  if (!fp32_dst)
    m = _mm256_and_si256(_mm256_add_epi32(m, _mm256_add_epi32(_mm256_set1_epi32(4096), s)), _mm256_set1_epi32(~0x1FFF));
  return _mm256_sub_epi32(_mm256_xor_si256(m, s), s);
}

// §5.5 for 8 columns (CombineWithDst, device/numerics/fpu.h): two group terms (G, S as from
// GroupVec; zero where G <= 0) combined with the Dst patterns `dst`.
KILN_AVX2 __m256i CombineVec(__m256i G0, __m256i S0, __m256i G1, __m256i S1, __m256i dst, bool fp32_dst, bool wormhole) {
  const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi32(1);
  const __m256i round13 = _mm256_set1_epi32(4096), clear13 = _mm256_set1_epi32(~0x1FFF);
  // Group terms: exponent G (0 when invalid), magnitude |S| << 13, sign mask (−1 for negative).
  const __m256i v0 = _mm256_cmpgt_epi32(G0, zero), v1 = _mm256_cmpgt_epi32(G1, zero);
  const __m256i e0 = _mm256_and_si256(G0, v0), e1 = _mm256_and_si256(G1, v1);
  const __m256i m0 = _mm256_and_si256(_mm256_slli_epi32(_mm256_abs_epi32(S0), 13), v0);
  const __m256i m1 = _mm256_and_si256(_mm256_slli_epi32(_mm256_abs_epi32(S1), 13), v1);
  const __m256i s0 = _mm256_and_si256(_mm256_srai_epi32(S0, 31), v0), s1 = _mm256_and_si256(_mm256_srai_epi32(S1, 31), v1);
  // Dst term.
  const __m256i sd = _mm256_srai_epi32(dst, 31);
  const __m256i ed = _mm256_and_si256(_mm256_srli_epi32(dst, 23), _mm256_set1_epi32(0xFF));
  __m256i D = _mm256_or_si256(_mm256_and_si256(dst, _mm256_set1_epi32(0x7FFFFF)), _mm256_set1_epi32(0x800000));
  D = _mm256_andnot_si256(_mm256_cmpeq_epi32(ed, zero), D);
  __m256i X = _mm256_max_epi32(_mm256_max_epi32(e0, e1), ed);
  // Steps 2–3 (Dst: ties away from zero, no sign term).
  const __m256i dd = _mm256_sub_epi32(X, ed);
  D = _mm256_srlv_epi32(_mm256_add_epi32(D, HalfOf(dd)), dd);
  if (!fp32_dst) D = _mm256_and_si256(_mm256_add_epi32(D, round13), clear13);
  // Step 4.
  const __m256i total =
      _mm256_add_epi32(_mm256_add_epi32(_mm256_sub_epi32(_mm256_xor_si256(D, sd), sd), AlignTerm(m0, e0, s0, X, fp32_dst)), AlignTerm(m1, e1, s1, X, fp32_dst));
  const __m256i is_zero = _mm256_cmpeq_epi32(total, zero);
  const __m256i neg = _mm256_srai_epi32(total, 31);
  const __m256i v = _mm256_abs_epi32(total);
  // Step 5: z = clz(v) − 8 = 23 − floor(log2 v). v & ~(v >> 1) keeps v's top bit and has no two
  // adjacent ones, so its int → float conversion cannot round up to the next power of two.
  const __m256i iso = _mm256_andnot_si256(_mm256_srli_epi32(v, 1), v);
  const __m256i lg = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(iso)), 23), _mm256_set1_epi32(127));
  __m256i z = _mm256_sub_epi32(_mm256_set1_epi32(23), lg);
  if (wormhole) z = _mm256_blendv_epi8(z, _mm256_set1_epi32(-4), _mm256_and_si256(neg, _mm256_cmpeq_epi32(v, one)));
  X = _mm256_sub_epi32(X, z);
  const __m256i zp = fp32_dst ? z : _mm256_sub_epi32(z, _mm256_set1_epi32(16));
  const __m256i left = _mm256_max_epi32(zp, zero), right = _mm256_max_epi32(_mm256_sub_epi32(zero, zp), zero);
  __m256i w = _mm256_sllv_epi32(_mm256_srlv_epi32(_mm256_add_epi32(v, HalfOf(right)), right), left);
  if (!fp32_dst) w = _mm256_slli_epi32(w, 16);
  X = _mm256_add_epi32(X, _mm256_and_si256(_mm256_srli_epi32(w, 24), one));
  // Step 6.
  const __m256i s32 = _mm256_slli_epi32(neg, 31);
  __m256i r = _mm256_or_si256(_mm256_or_si256(s32, _mm256_slli_epi32(X, 23)), _mm256_and_si256(w, _mm256_set1_epi32(0x7FFFFF)));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(s32, _mm256_set1_epi32(0x7F800000)), _mm256_cmpgt_epi32(X, _mm256_set1_epi32(254)));
  return _mm256_andnot_si256(_mm256_or_si256(_mm256_cmpgt_epi32(one, X), is_zero), r);
}

}  // namespace

__attribute__((target("avx2"))) void RunAvx2(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0, int64_t k1,
                                             int64_t o0, int64_t o1, int p0, int p1, bool fp32_dst, Arch arch,
                                             uint32_t* dst) {
  const int64_t K = a.K, K8 = K / 8;
  const bool wh = arch == Arch::kWormholeB0;
  const __m256i zero = _mm256_setzero_si256();
  for (int64_t cb = o0 / 8; cb * 8 < o1; ++cb) {
    const int64_t c_lo = std::max(o0, cb * 8), c_hi = std::min(o1, cb * 8 + 8);
    alignas(32) uint32_t tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t c = c_lo; c < c_hi; ++c) tmp[c - cb * 8] = dst[c - o0];
    __m256i D = _mm256_load_si256(reinterpret_cast<const __m256i*>(tmp));
    const uint8_t* wnz = &a.group_nz[static_cast<size_t>(cb * K8)];
    bool fixed = false;  // D holds MVMUL results (fixed points of the zero-MVMUL mapping)
    for (int64_t t0 = k0; t0 < k1; t0 += 32) {
      for (int p = p0; p < p1; ++p) {
        const int32_t* ap = &a.lanes[static_cast<size_t>((cb * a.variants + (p & 1)) * K * 8)];
        const int32_t* eterm = &b.eterm[static_cast<size_t>(p * K)];
        const int32_t* bslice = &b.slice[static_cast<size_t>(((p >> 1) & 1) * K)];
        for (int64_t h = t0; h < t0 + 32; h += 16) {
          const int64_t q0 = h / 8, q1 = q0 + 1;
          const int n0 = wnz[q0] ? b.nz_count[static_cast<size_t>(q0)] : 0;
          const int n1 = wnz[q1] ? b.nz_count[static_cast<size_t>(q1)] : 0;
          if (n0 == 0 && n1 == 0) {
            if (!fixed) D = CombineVec(zero, zero, zero, zero, D, fp32_dst, wh);
            fixed = true;
            continue;
          }
          __m256i G0 = zero, S0 = zero, G1 = zero, S1 = zero;
          if (n0) GroupVec(ap, eterm, bslice, q0 * 8, &b.nz_lane[static_cast<size_t>(q0 * 8)], n0, &G0, &S0);
          if (n1) GroupVec(ap, eterm, bslice, q1 * 8, &b.nz_lane[static_cast<size_t>(q1 * 8)], n1, &G1, &S1);
          D = CombineVec(G0, S0, G1, S1, D, fp32_dst, wh);
          fixed = true;
        }
      }
    }
    _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), D);
    for (int64_t c = c_lo; c < c_hi; ++c) dst[c - o0] = tmp[c - cb * 8];
  }
}

}  // namespace kiln::numerics::mvmul_detail

#endif  // defined(__x86_64__)
