// Operand preparation, argument checks, path dispatch and the scalar path of the exact MVMUL kernel
// (device/numerics/mvmul_kernel.h). The AVX2 path is in mvmul_kernel_avx2.cc, the AVX-512 one in
// mvmul_kernel_avx512.cc. Section numbers (§) cite docs/specs/tt-numerics.md.
#include "device/numerics/mvmul_kernel.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>

#include "device/numerics/fpu.h"
#include "device/numerics/mvmul_kernel_impl.h"

namespace kiln::numerics {

namespace {

using mvmul_detail::kMaxAlign;
using mvmul_detail::kZeroExp;
using mvmul_detail::kZeroExpB;

// §5.4 group term of lanes 8q .. 8q+7 for phase p of the column at `acol` (its lane l of block
// [K][words][16], see PreparedSrcA), from the group's non-zero SrcB lanes only: a zero SrcB lane
// counts as exponent 0 and product 0, which the model's maximum start value 0 (the G <= 0 test
// below) and the sum's start value 0 already account for. The alignment shift of a lane,
// G − ep = max(raw) − raw with raw = exponent(a) + exponent(b), does not depend on the phase.
FpuTerm GroupScalar(const int16_t* acol, int words, const PreparedSrcB& b, int64_t q, int p) {
  const int n = b.nz_count[static_cast<size_t>(q)];
  const uint8_t* lanes = &b.nz_lane[static_cast<size_t>(q * 8)];
  const int16_t* bsl = &b.slice2[static_cast<size_t>(((p >> 1) & 1) * b.K)];
  auto raw = [&](int64_t k) { return int32_t{acol[k * words * 16]} + b.exp[static_cast<size_t>(k)]; };
  int32_t maxraw = INT32_MIN;
  for (int j = 0; j < n; ++j) maxraw = std::max(maxraw, raw(q * 8 + lanes[j]));
  FpuTerm t;
  const int32_t G = maxraw + PhaseAdjust(p);
  if (n == 0 || G <= 0) return t;
  int32_t S = 0;
  for (int j = 0; j < n; ++j) {
    const int64_t k = q * 8 + lanes[j];
    const int32_t d = std::min(maxraw - raw(k), kMaxAlign);
    const int32_t P2 = int32_t{acol[(k * words + 2 + (p & 1)) * 16]} * bsl[k];  // 2·|P|
    const int32_t R = (P2 + (1 << d)) >> (d + 1);                                // §5.4: (2P + 2^d) >> (d+1)
    const bool neg = (acol[(k * words + 1) * 16] < 0) != (b.sign[static_cast<size_t>(k)] < 0);
    S += neg ? -R : R;
  }
  t.sign = S < 0 ? 1 : 0;
  t.exp = G;
  t.mag = static_cast<uint64_t>(S < 0 ? -S : S) << 13;
  return t;
}

// The forced path: -2 not yet read from KILN_MVMUL_KERNEL, -1 automatic, else a MvmulKernelPath.
std::atomic<int> g_forced{-2};

int Forced() {
  int v = g_forced.load(std::memory_order_relaxed);
  if (v == -2) {
    const char* env = std::getenv("KILN_MVMUL_KERNEL");
    int from_env = -1;
    for (auto p : {MvmulKernelPath::kScalar, MvmulKernelPath::kAvx2, MvmulKernelPath::kAvx512}) {
      if (env != nullptr && std::strcmp(env, MvmulKernelPathName(p)) == 0) from_env = static_cast<int>(p);
    }
    int expected = -2;
    g_forced.compare_exchange_strong(expected, from_env, std::memory_order_relaxed);
    v = g_forced.load(std::memory_order_relaxed);
  }
  return v;
}

}  // namespace

namespace mvmul_detail {

void RunScalar(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0, int64_t k1, int64_t o0, int64_t o1, int p0,
               int p1, bool fp32_dst, Arch arch, uint32_t* dst) {
  const int64_t K = a.K, K8 = K / 8;
  for (int64_t o = o0; o < o1; ++o) {
    const int64_t cb = o / 16;
    const uint8_t* wnz = &a.group_nz[static_cast<size_t>(cb * K8)];
    const int16_t* acol = &a.lanes[static_cast<size_t>(cb * K * a.words * 16 + o % 16)];
    uint32_t d = dst[o - o0];
    bool fixed = false;  // d is an MVMUL result (a fixed point of the zero-MVMUL mapping)
    for (int64_t t0 = k0; t0 < k1; t0 += 32) {
      for (int p = p0; p < p1; ++p) {
        for (int64_t h = t0; h < t0 + 32; h += 16) {
          const int64_t q0 = h / 8, q1 = q0 + 1;
          // A group is zero in every column of the block when no lane is non-zero on both sides.
          const bool z0 = (b.nz_mask[static_cast<size_t>(q0)] & wnz[q0]) == 0;
          const bool z1 = (b.nz_mask[static_cast<size_t>(q1)] & wnz[q1]) == 0;
          if (z0 && z1) {
            if (!fixed) d = CombineWithDst(FpuTerm{}, FpuTerm{}, d, fp32_dst, arch);
            fixed = true;
            continue;
          }
          const FpuTerm g0 = z0 ? FpuTerm{} : GroupScalar(acol, a.words, b, q0, p);
          const FpuTerm g1 = z1 ? FpuTerm{} : GroupScalar(acol, a.words, b, q1, p);
          d = CombineWithDst(g0, g1, d, fp32_dst, arch);
          fixed = true;
        }
      }
    }
    dst[o - o0] = d;
  }
}

}  // namespace mvmul_detail

Result<PreparedSrcA> PrepareSrcA(const uint32_t* a, int64_t cols, int64_t K, MathFidelity fid, SrcFormat fmt) {
  if (K <= 0 || K % 32 != 0) return InvalidArgument("PrepareSrcA: K = " + std::to_string(K) + " is not a positive multiple of 32");
  if (cols < 1) return InvalidArgument("PrepareSrcA: cols = " + std::to_string(cols) + " (need at least 1)");
  PreparedSrcA p;
  p.cols = cols;
  p.K = K;
  p.phases = NumPhases(fid);
  p.variants = p.phases >= 2 ? 2 : 1;
  p.words = 2 + p.variants;
  const int64_t nb = (cols + 15) / 16, K8 = K / 8, W = p.words;
  p.lanes.assign(static_cast<size_t>(nb * K * W * 16), 0);
  p.group_nz.assign(static_cast<size_t>(nb * K8), 0);
  for (int64_t cb = 0; cb < nb; ++cb)
    for (int64_t k = 0; k < K; ++k)
      for (int l = 0; l < 16; ++l) {
        int16_t* w = &p.lanes[static_cast<size_t>((cb * K + k) * W * 16 + l)];
        w[0] = static_cast<int16_t>(kZeroExp);
        w[16] = 1;
        const int64_t o = cb * 16 + l;
        if (o >= cols) continue;
        const uint32_t x = MaskSrcOperand(a[o * K + k], fmt);
        if (((x >> 23) & 0xFFu) == 0) continue;  // §5.3: a zero lane
        p.group_nz[static_cast<size_t>(cb * K8 + k / 8)] |= static_cast<uint8_t>(1u << (k % 8));
        const FpuSlice s0 = SliceA(x, 0);
        w[0] = static_cast<int16_t>(s0.exp);
        w[16] = static_cast<int16_t>(s0.sign ? 0x8001 - 0x10000 : 1);
        for (int v = 0; v < p.variants; ++v) w[16 * (2 + v)] = static_cast<int16_t>(SliceA(x, v).slice);
      }
  return p;
}

Status PrepareSrcBRow(const uint32_t* b, int64_t K, MathFidelity fid, SrcFormat fmt, PreparedSrcB* out) {
  if (K <= 0 || K % 32 != 0) return InvalidArgument("PrepareSrcBRow: K = " + std::to_string(K) + " is not a positive multiple of 32");
  PreparedSrcB& p = *out;
  p.K = K;
  p.phases = NumPhases(fid);
  p.variants = p.phases >= 3 ? 2 : 1;
  p.exp.resize(static_cast<size_t>(K));
  p.sign.resize(static_cast<size_t>(K));
  p.slice2.resize(static_cast<size_t>(p.variants * K));
  p.nz_count.resize(static_cast<size_t>(K / 8));
  p.nz_lane.resize(static_cast<size_t>(K));
  p.nz_mask.resize(static_cast<size_t>(K / 8));
  for (int64_t q = 0; q < K / 8; ++q) {
    int n = 0;
    unsigned mask = 0;
    for (int l = 0; l < 8; ++l) {
      const int64_t k = q * 8 + l;
      const uint32_t x = MaskSrcOperand(b[k], fmt);
      const int e = static_cast<int>((x >> 23) & 0xFFu);
      p.exp[static_cast<size_t>(k)] = static_cast<int16_t>(e != 0 ? e : kZeroExpB);
      p.sign[static_cast<size_t>(k)] = static_cast<int16_t>(e != 0 && (x >> 31) ? -32768 : 0);
      for (int v = 0; v < p.variants; ++v)
        p.slice2[static_cast<size_t>(v * K + k)] = static_cast<int16_t>(e != 0 ? 2 * SliceB(x, 2 * v).slice : 0);
      if (e != 0) p.nz_lane[static_cast<size_t>(q * 8 + n++)] = static_cast<uint8_t>(l);
      if (e != 0) mask |= 1u << l;
    }
    p.nz_mask[static_cast<size_t>(q)] = static_cast<uint8_t>(mask);
    p.nz_count[static_cast<size_t>(q)] = static_cast<uint8_t>(n);
  }
  return Status::Ok();
}

Status RunKBlockPhases(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0, int64_t k1, int64_t o0, int64_t o1,
                       int phase_begin, int phase_end, bool fp32_dst, Arch arch, uint32_t* dst) {
  if (a.K != b.K) return InvalidArgument("RunKBlock: SrcA K = " + std::to_string(a.K) + ", SrcB K = " + std::to_string(b.K));
  if (k0 < 0 || k0 > k1 || k1 > a.K || k0 % 32 != 0 || k1 % 32 != 0)
    return InvalidArgument("RunKBlock: K range [" + std::to_string(k0) + ", " + std::to_string(k1) +
                           ") is not 32-aligned within [0, " + std::to_string(a.K) + ")");
  if (o0 < 0 || o0 > o1 || o1 > a.cols)
    return InvalidArgument("RunKBlock: column range [" + std::to_string(o0) + ", " + std::to_string(o1) +
                           ") outside [0, " + std::to_string(a.cols) + ")");
  if (phase_begin < 0 || phase_begin > phase_end || phase_end > a.phases || phase_end > b.phases)
    return InvalidArgument("RunKBlock: phases [" + std::to_string(phase_begin) + ", " + std::to_string(phase_end) +
                           ") but operands prepared for " + std::to_string(std::min(a.phases, b.phases)));
  if (k0 == k1 || o0 == o1 || phase_begin == phase_end) return Status::Ok();
#if defined(__x86_64__)
  switch (ActiveMvmulKernel()) {
    case MvmulKernelPath::kAvx512:
      mvmul_detail::RunAvx512(a, b, k0, k1, o0, o1, phase_begin, phase_end, fp32_dst, arch, dst);
      return Status::Ok();
    case MvmulKernelPath::kAvx2:
      mvmul_detail::RunAvx2(a, b, k0, k1, o0, o1, phase_begin, phase_end, fp32_dst, arch, dst);
      return Status::Ok();
    case MvmulKernelPath::kScalar:
      break;
  }
#endif
  mvmul_detail::RunScalar(a, b, k0, k1, o0, o1, phase_begin, phase_end, fp32_dst, arch, dst);
  return Status::Ok();
}

Status RunKBlock(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0, int64_t k1, int64_t o0, int64_t o1,
                 MathFidelity fid, bool fp32_dst, Arch arch, uint32_t* dst) {
  return RunKBlockPhases(a, b, k0, k1, o0, o1, 0, NumPhases(fid), fp32_dst, arch, dst);
}

const char* MvmulKernelPathName(MvmulKernelPath p) {
  switch (p) {
    case MvmulKernelPath::kAvx512:
      return "avx512";
    case MvmulKernelPath::kAvx2:
      return "avx2";
    case MvmulKernelPath::kScalar:
      break;
  }
  return "scalar";
}

bool MvmulKernelSupported(MvmulKernelPath p) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  switch (p) {
    case MvmulKernelPath::kAvx512:
      return avx512;
    case MvmulKernelPath::kAvx2:
      return avx2;
    case MvmulKernelPath::kScalar:
      break;
  }
  return true;
#else
  return p == MvmulKernelPath::kScalar;
#endif
}

MvmulKernelPath BestMvmulKernel() {
  if (MvmulKernelSupported(MvmulKernelPath::kAvx512)) return MvmulKernelPath::kAvx512;
  if (MvmulKernelSupported(MvmulKernelPath::kAvx2)) return MvmulKernelPath::kAvx2;
  return MvmulKernelPath::kScalar;
}

MvmulKernelPath ActiveMvmulKernel() {
  const int f = Forced();
  if (f >= 0 && MvmulKernelSupported(static_cast<MvmulKernelPath>(f))) return static_cast<MvmulKernelPath>(f);
  return BestMvmulKernel();
}

void SetMvmulKernel(MvmulKernelPath p) { g_forced.store(static_cast<int>(p), std::memory_order_relaxed); }

void ResetMvmulKernel() { g_forced.store(-1, std::memory_order_relaxed); }

}  // namespace kiln::numerics
