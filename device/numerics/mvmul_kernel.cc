// Operand preparation, argument checks, path dispatch and the scalar path of the exact MVMUL kernel
// (device/numerics/mvmul_kernel.h). The AVX2 path is in mvmul_kernel_avx2.cc, the AVX-512 one in
// mvmul_kernel_avx512.cc. Section numbers (§) cite docs/specs/tt-numerics.md.
#include "device/numerics/mvmul_kernel.h"

#include <algorithm>
#include <array>
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

// §5.4 group term of lanes 8q .. 8q+7 for phase p of one column: `acol` is its lane in k row 0 of
// its block (PreparedSrcA: `stride` bytes per k, exponent at int16 position, the byte pair of
// variant v at 64·(1 + v) bytes), from the group's non-zero SrcB lanes only: a zero SrcB lane
// counts as exponent 0 and product 0, which the model's maximum start value 0 (the G <= 0 test
// below) and the sum's start value 0 already account for. The alignment shift of a lane,
// G − ep = max(raw) − raw with raw = exponent(a) + exponent(b), does not depend on the phase.
FpuTerm GroupScalar(const int8_t* acol, int pos, int64_t stride, const PreparedSrcB& b, int64_t q, int p) {
  int lanes[8], n = 0;
  for (unsigned m = b.nz_mask[static_cast<size_t>(q)]; m != 0; m &= m - 1) lanes[n++] = __builtin_ctz(m);
  const uint32_t* bg = b.group[static_cast<size_t>(q)];
  const uint32_t* bpair = bg + kSrcBPairWord + 8 * ((p >> 1) & 1);
  auto aexp = [&](int64_t k) {
    int16_t e;
    std::memcpy(&e, acol + k * stride + 2 * pos, sizeof e);
    return int32_t{e};
  };
  // Lane l (0..7) of the group: K index 8q + l.
  auto raw = [&](int l) { return aexp(q * 8 + l) + static_cast<int16_t>(bg[kSrcBExpWord + l]); };
  int32_t maxraw = INT32_MIN;
  for (int j = 0; j < n; ++j) maxraw = std::max(maxraw, raw(lanes[j]));
  FpuTerm t;
  const int32_t G = maxraw + PhaseAdjust(p);
  if (n == 0 || G <= 0) return t;
  int32_t S = 0;
  for (int j = 0; j < n; ++j) {
    const int l = lanes[j];
    const int64_t k = q * 8 + l;
    const int32_t d = std::min(maxraw - raw(l), kMaxAlign);
    const int8_t* ab = acol + k * stride + 64 * (1 + (p & 1)) + 2 * pos;  // (4·slice·s, s)
    const int32_t P2 = (ab[0] < 0 ? -ab[0] : ab[0]) / 2 * int32_t{static_cast<uint8_t>(bpair[l] & 0xFFu)};  // 2·|P|
    const int32_t R = (P2 + (1 << d)) >> (d + 1);  // §5.4: (2P + 2^d) >> (d+1)
    const bool neg = (ab[1] < 0) != (static_cast<int16_t>(bg[kSrcBMultWord + l]) < 0);
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
    for (auto p : {MvmulKernelPath::kScalar, MvmulKernelPath::kAvx2, MvmulKernelPath::kAvx512,
                   MvmulKernelPath::kAvx512Fp16}) {
      if (env != nullptr && std::strcmp(env, MvmulKernelPathName(p)) == 0) from_env = static_cast<int>(p);
    }
    int expected = -2;
    g_forced.compare_exchange_strong(expected, from_env, std::memory_order_relaxed);
    v = g_forced.load(std::memory_order_relaxed);
  }
  return v;
}

// Whether the active path is one of the AVX-512 ones, which share the operand preparation and the
// row functions (mvmul_kernel_avx512.cc).
bool Avx512Active() {
  const MvmulKernelPath p = ActiveMvmulKernel();
  return p == MvmulKernelPath::kAvx512 || p == MvmulKernelPath::kAvx512Fp16;
}

}  // namespace

namespace mvmul_detail {

void RunScalar(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0, int64_t k1, int64_t o0, int64_t o1, int p0,
               int p1, bool fp32_dst, Arch arch, uint32_t* dst) {
  const int64_t K = a.K, K8 = K / 8, stride = int64_t{64} * a.rows;
  for (int64_t o = o0; o < o1; ++o) {
    const int64_t cb = o / kMvmulColumnBlock;
    const int pos = MvmulPositionOfColumn(static_cast<int>(o % kMvmulColumnBlock));
    const uint8_t* wnz = &a.group_nz[static_cast<size_t>(cb * K8)];
    const int8_t* acol = &a.lanes[static_cast<size_t>(cb * K * stride)];
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
          const FpuTerm g0 = z0 ? FpuTerm{} : GroupScalar(acol, pos, stride, b, q0, p);
          const FpuTerm g1 = z1 ? FpuTerm{} : GroupScalar(acol, pos, stride, b, q1, p);
          d = CombineWithDst(g0, g1, d, fp32_dst, arch);
          fixed = true;
        }
      }
    }
    dst[o - o0] = d;
  }
}

}  // namespace mvmul_detail

Result<PreparedSrcA> AllocateSrcA(int64_t cols, int64_t K, MathFidelity fid) {
  if (K <= 0 || K % 32 != 0) return InvalidArgument("PrepareSrcA: K = " + std::to_string(K) + " is not a positive multiple of 32");
  if (cols < 1) return InvalidArgument("PrepareSrcA: cols = " + std::to_string(cols) + " (need at least 1)");
  PreparedSrcA p;
  p.cols = cols;
  p.K = K;
  p.phases = NumPhases(fid);
  p.variants = p.phases >= 2 ? 2 : 1;
  p.rows = 1 + p.variants;
  const int64_t nb = (cols + kMvmulColumnBlock - 1) / kMvmulColumnBlock;
  p.lanes.resize(static_cast<size_t>(nb * K * 64 * p.rows));
  p.group_nz.resize(static_cast<size_t>(nb * K / 8));
  return p;
}

void FillSrcABlocks(const uint32_t* a, SrcFormat fmt, int64_t cb0, int64_t cb1, PreparedSrcA* out) {
#if defined(__x86_64__)
  if (Avx512Active() && kMvmulColumnBlock * out->K < (int64_t{1} << 31)) {
    mvmul_detail::FillSrcABlocksAvx512(a, fmt, cb0, cb1, out);
    return;
  }
#endif
  PreparedSrcA& p = *out;
  const int64_t K = p.K, K8 = K / 8, stride = int64_t{64} * p.rows;
  for (int64_t cb = cb0; cb < cb1; ++cb) {
    int8_t* blk = &p.lanes[static_cast<size_t>(cb * K * stride)];
    uint8_t* nz = &p.group_nz[static_cast<size_t>(cb * K8)];
    std::fill(nz, nz + K8, uint8_t{0});  // every byte of the block's rows is written below
    // Column by column (contiguous reads of its K weights), each into its position of every k row.
    for (int pos = 0; pos < kMvmulColumnBlock; ++pos) {
      const int64_t o = cb * kMvmulColumnBlock + MvmulColumnOfPosition(pos);
      for (int64_t k = 0; k < K; ++k) {
        int8_t* row = blk + k * stride;
        int16_t e = static_cast<int16_t>(kZeroExp);
        for (int v = 0; v < p.variants; ++v) {  // zero operand: (0, 1)
          row[64 * (1 + v) + 2 * pos] = 0;
          row[64 * (1 + v) + 2 * pos + 1] = 1;
        }
        const uint32_t x = o < p.cols ? MaskSrcOperand(a[o * K + k], fmt) : 0u;
        if (((x >> 23) & 0xFFu) != 0) {  // §5.3: else a zero lane
          nz[k / 8] |= static_cast<uint8_t>(1u << (k % 8));
          const FpuSlice s0 = SliceA(x, 0);
          e = static_cast<int16_t>(s0.exp);
          const int s = s0.sign ? -1 : 1;
          for (int v = 0; v < p.variants; ++v) {
            row[64 * (1 + v) + 2 * pos] = static_cast<int8_t>(4 * static_cast<int>(SliceA(x, v).slice) * s);
            row[64 * (1 + v) + 2 * pos + 1] = static_cast<int8_t>(s);
          }
        }
        std::memcpy(row + 2 * pos, &e, sizeof e);
      }
    }
  }
}

Result<PreparedSrcA> PrepareSrcA(const uint32_t* a, int64_t cols, int64_t K, MathFidelity fid, SrcFormat fmt) {
  auto p = AllocateSrcA(cols, K, fid);
  if (!p.ok()) return p.status();
  FillSrcABlocks(a, fmt, 0, (cols + kMvmulColumnBlock - 1) / kMvmulColumnBlock, &*p);
  return p;
}

Status ShapeSrcBRow(int64_t K, MathFidelity fid, PreparedSrcB* out) {
  if (K <= 0 || K % 32 != 0) return InvalidArgument("SrcB row: K = " + std::to_string(K) + " is not a positive multiple of 32");
  PreparedSrcB& p = *out;
  p.K = K;
  p.phases = NumPhases(fid);
  p.variants = SrcBVariants(fid);
  p.group.resize(static_cast<size_t>(K / 8));
  p.nz_mask.resize(static_cast<size_t>(K / 8));
  return Status::Ok();
}

void PrepareSrcBGroups(const uint32_t* x, int64_t groups, MathFidelity fid, SrcFormat fmt, uint32_t* words,
                       uint8_t* nz) {
  const int variants = SrcBVariants(fid);
#if defined(__x86_64__)
  if (Avx512Active()) {
    mvmul_detail::PrepareSrcBGroupsAvx512(x, groups, variants, fmt, words, nz);
    return;
  }
#endif
  auto twice = [](uint32_t v16) { return (v16 & 0xFFFFu) * 0x10001u; };
  const int64_t gw = SrcBGroupWords(variants);
  for (int64_t g = 0; g < groups; ++g) {
    uint32_t* w = words + g * gw;
    uint8_t m = 0;
    for (int l = 0; l < 8; ++l) {
      const uint32_t v = MaskSrcOperand(x[g * 8 + l], fmt);
      const FpuSlice s0 = SliceB(v, 0);  // a zero operand: exponent 0, slice 0
      const bool live = s0.exp != 0;
      w[kSrcBExpWord + l] = twice(live ? static_cast<uint32_t>(s0.exp) : static_cast<uint32_t>(kZeroExpB));
      w[kSrcBMultWord + l] = twice(s0.sign ? 0xE000u : 0x2000u);  // int16 −0x2000 or 0x2000
      for (int vi = 0; vi < variants; ++vi) w[kSrcBPairWord + 8 * vi + l] = twice(0x100u | SliceB(v, 2 * vi).slice);
      m = static_cast<uint8_t>(m | (live ? 1u << l : 0u));
    }
    nz[g] = m;
  }
}

const uint32_t* ZeroSrcBGroup() {
  static const std::array<uint32_t, SrcBGroupWords(2)> kZero = [] {
    std::array<uint32_t, SrcBGroupWords(2)> w{};
    uint8_t nz = 0;
    const uint32_t zeros[8] = {};
    PrepareSrcBGroups(zeros, 1, MathFidelity::kHiFi4, SrcFormat::kBf16, w.data(), &nz);
    return w;
  }();
  return kZero.data();
}

Status PrepareSrcBRow(const uint32_t* b, int64_t K, MathFidelity fid, SrcFormat fmt, PreparedSrcB* out) {
  KILN_RETURN_IF_ERROR(ShapeSrcBRow(K, fid, out));
  PreparedSrcB& p = *out;
  const int64_t gw = SrcBGroupWords(p.variants);
  p.words.resize(static_cast<size_t>(K / 8 * gw));
  PrepareSrcBGroups(b, K / 8, fid, fmt, p.words.data(), p.nz_mask.data());
  for (int64_t q = 0; q < K / 8; ++q) p.group[static_cast<size_t>(q)] = p.words.data() + q * gw;
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
    case MvmulKernelPath::kAvx512Fp16:
#if KILN_MVMUL_AVX512FP16
      mvmul_detail::RunAvx512Fp16(a, b, k0, k1, o0, o1, phase_begin, phase_end, fp32_dst, arch, dst);
      return Status::Ok();
#endif
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

void ElwaddRow(const uint32_t* a, const uint32_t* b, int64_t n, const FpuConfig& cfg, uint32_t* out) {
#if defined(__x86_64__)
  if (Avx512Active()) {
    mvmul_detail::ElwaddRowAvx512(a, b, n, cfg, out);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = Elwadd(a[i], b[i], 0, false, cfg);
}

void AddIntoDstRow(const float* s, int64_t n, bool fp32_dst, uint32_t* dst) {
#if defined(__x86_64__)
  if (Avx512Active()) {
    mvmul_detail::AddIntoDstRowAvx512(s, n, fp32_dst, dst);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u = FloatBits(BitsFloat(dst[i]) + s[i]);
    u = (u & 0x7FFFFFFFu) > 0x7F800000u ? ((u & 0x80000000u) | 0x7F800000u) : u;  // NaN → ±Inf
    u = fp32_dst ? u : ((u + 0x8000u) & 0xFFFF0000u);
    dst[i] = ((u >> 23) & 0xFFu) == 0 ? 0u : u;
  }
}

Status RunKBlock(const PreparedSrcA& a, const PreparedSrcB& b, int64_t k0, int64_t k1, int64_t o0, int64_t o1,
                 MathFidelity fid, bool fp32_dst, Arch arch, uint32_t* dst) {
  return RunKBlockPhases(a, b, k0, k1, o0, o1, 0, NumPhases(fid), fp32_dst, arch, dst);
}

const char* MvmulKernelPathName(MvmulKernelPath p) {
  switch (p) {
    case MvmulKernelPath::kAvx512Fp16:
      return "avx512fp16";
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
#if KILN_MVMUL_AVX512FP16
  static const bool fp16 = avx512 && __builtin_cpu_supports("avx512fp16") && __builtin_cpu_supports("avx512vbmi2");
#else
  static const bool fp16 = false;
#endif
  switch (p) {
    case MvmulKernelPath::kAvx512Fp16:
      return fp16;
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
  if (MvmulKernelSupported(MvmulKernelPath::kAvx512Fp16)) return MvmulKernelPath::kAvx512Fp16;
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
