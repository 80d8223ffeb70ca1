// Throughput of the exact MVMUL kernel (device/numerics/mvmul_kernel.h) on the K blocks of a 64→64
// 3×3 conv (56×56-like: K = 9·64 = 576 in three 192-deep blocks, the height-sharded default
// act_block_w = Cin_pad·kw), 64 output columns, one im2col row at a time as tt-emu's exact level
// runs it: per row, PrepareSrcBRow and three RunKBlock calls (the SrcA operands are prepared once).
// Cases: the scalar, AVX2, AVX-512 and AVX-512 FP16 paths, LoFi and HiFi4, fp32 Dst with activations
// dense (N(0,1) bf16) or post-ReLU (about half exact zeros), bf16 Dst (TT-NN's default) with dense
// activations, plus "loop": a copy of the per-column loop of device/backends/tt_emu/tt_conv.cc at
// the time of writing (MvmulTerms + CombineWithDst per 16-lane MVMUL), as the before-figure. One
// thread. After the runs it prints GMAC/s (real MACs: 64·576 per row) and the ratios avx2/scalar,
// avx2/loop, avx512/avx2 and avx512fp16/avx512 (the last is 1 for an fp32 Dst, which the FP16 path
// leaves to the AVX-512 one), all from this one process. On a machine whose clock drifts, repeat the
// cases interleaved; the table then takes each case's best repetition:
//   ./kiln_mvmul_kernel_bench [--benchmark_min_time=0.1 --benchmark_repetitions=10
//                              --benchmark_enable_random_interleaving=true]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "device/numerics/formats.h"
#include "device/numerics/fpu.h"
#include "device/numerics/mvmul_kernel.h"

namespace {

namespace nx = kiln::numerics;

constexpr int64_t kCols = 64, kK = 576, kBlock = 192, kRows = 56;
constexpr double kMacsPerRow = static_cast<double>(kCols * kK);

uint32_t RandBf16(std::mt19937& rng) {
  std::normal_distribution<float> d;
  return static_cast<uint32_t>(nx::HostFp32ToBf16(nx::FloatBits(d(rng)))) << 16;
}

struct Data {
  std::vector<uint32_t> w;                       // [cols][K]
  std::vector<std::vector<uint32_t>> dense, relu;  // [rows][K]
};

const Data& GetData() {
  static const Data d = [] {
    Data r;
    std::mt19937 rng(1);
    r.w.resize(static_cast<size_t>(kCols * kK));
    for (auto& v : r.w) v = RandBf16(rng);
    r.dense.assign(kRows, std::vector<uint32_t>(kK));
    r.relu = r.dense;
    for (int64_t m = 0; m < kRows; ++m)
      for (int64_t k = 0; k < kK; ++k) {
        const uint32_t v = RandBf16(rng);
        r.dense[m][k] = v;
        r.relu[m][k] = (v & 0x80000000u) ? 0u : v;
      }
    return r;
  }();
  return d;
}

void BM_Kernel(benchmark::State& state, nx::MvmulKernelPath path, nx::MathFidelity fid, bool relu, bool fp32_dst) {
  if (!nx::MvmulKernelSupported(path)) {
    state.SkipWithError((std::string("no ") + nx::MvmulKernelPathName(path) + " on this CPU").c_str());
    return;
  }
  nx::SetMvmulKernel(path);
  const Data& d = GetData();
  auto a = nx::PrepareSrcA(d.w.data(), kCols, kK, fid, nx::SrcFormat::kBf16);
  nx::PreparedSrcB b;
  std::vector<uint32_t> dst(kCols);
  const auto& rows = relu ? d.relu : d.dense;
  for (auto _ : state) {
    for (int64_t m = 0; m < kRows; ++m) {
      (void)nx::PrepareSrcBRow(rows[m].data(), kK, fid, nx::SrcFormat::kBf16, &b);
      std::fill(dst.begin(), dst.end(), 0u);
      for (int64_t k0 = 0; k0 < kK; k0 += kBlock)
        (void)nx::RunKBlock(*a, b, k0, k0 + kBlock, 0, kCols, fid, fp32_dst, nx::Arch::kWormholeB0, dst.data());
      benchmark::DoNotOptimize(dst.data());
    }
  }
  nx::ResetMvmulKernel();
  state.counters["GMAC/s"] = benchmark::Counter(kMacsPerRow * kRows * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// --- the before-figure: tt_conv.cc's exact loop (PackLane, MvmulTerms, the skip rule), copied. ---
inline uint32_t PackLane(const nx::FpuSlice& s) {
  return s.exp == 0 ? 0u : (s.slice | (static_cast<uint32_t>(s.exp) << 8) | (static_cast<uint32_t>(s.sign) << 16));
}

__attribute__((target_clones("avx2", "default"))) void MvmulTerms(const uint32_t* a, const uint32_t* b, int adj,
                                                                 nx::FpuTerm* t0, nx::FpuTerm* t1) {
  int32_t ep[16], P[16], sg[16];
  for (int k = 0; k < 16; ++k) {
    const uint32_t x = a[k], y = b[k];
    const int32_t xe = static_cast<int32_t>((x >> 8) & 0xFFu), ye = static_cast<int32_t>((y >> 8) & 0xFFu);
    const int32_t nz = (xe != 0) & (ye != 0);
    ep[k] = nz ? xe + ye + adj : 0;
    P[k] = static_cast<int32_t>((x & 0xFFu) * (y & 0xFFu));
    sg[k] = static_cast<int32_t>(((x ^ y) >> 16) & 1u);
  }
  nx::FpuTerm* out[2] = {t0, t1};
  for (int h = 0; h < 2; ++h) {
    int32_t G = 0;
    for (int k = 0; k < 8; ++k) G = std::max(G, ep[h * 8 + k]);
    nx::FpuTerm t;
    if (G > 0) {
      int32_t S = 0;
      for (int k = 0; k < 8; ++k) {
        const int32_t dd = std::min(G - ep[h * 8 + k], 14);
        const int32_t R = (2 * P[h * 8 + k] + (1 << dd)) >> (dd + 1);
        S += sg[h * 8 + k] ? -R : R;
      }
      t.sign = S < 0 ? 1 : 0;
      t.exp = G;
      t.mag = static_cast<uint64_t>(S < 0 ? -S : S) << 13;
    }
    *out[h] = t;
  }
}

void BM_Loop(benchmark::State& state, nx::MathFidelity fid, bool relu, bool fp32_dst) {
  const Data& d = GetData();
  std::vector<uint32_t> wsl[2];
  for (int v = 0; v < 2; ++v) {
    wsl[v].resize(d.w.size());
    for (size_t i = 0; i < d.w.size(); ++i) wsl[v][i] = PackLane(nx::SliceA(d.w[i], v));
  }
  std::vector<uint8_t> wnz(static_cast<size_t>(kCols * (kK / 8)), 0);
  for (int64_t o = 0; o < kCols; ++o)
    for (int64_t q = 0; q < kK / 8; ++q)
      for (int t = 0; t < 8; ++t)
        if ((d.w[o * kK + q * 8 + t] >> 23) & 0xFFu) wnz[o * (kK / 8) + q] = 1;
  std::vector<uint32_t> xsl[2] = {std::vector<uint32_t>(kK), std::vector<uint32_t>(kK)};
  std::vector<uint8_t> xnz(kK / 8);
  std::vector<uint32_t> dst(kCols);
  const int nph = nx::NumPhases(fid);
  const auto& rows = relu ? d.relu : d.dense;
  for (auto _ : state) {
    for (int64_t m = 0; m < kRows; ++m) {
      const auto& xrow = rows[m];
      for (int64_t k = 0; k < kK; ++k) {
        xsl[0][k] = PackLane(nx::SliceB(xrow[k], 0));
        xsl[1][k] = PackLane(nx::SliceB(xrow[k], 2));
      }
      for (int64_t q = 0; q < kK / 8; ++q) {
        uint8_t nz = 0;
        for (int t = 0; t < 8; ++t) nz |= ((xrow[q * 8 + t] >> 23) & 0xFFu) != 0;
        xnz[q] = nz;
      }
      for (int64_t kb0 = 0; kb0 < kK; kb0 += kBlock) {
        for (int64_t o = 0; o < kCols; ++o) {
          uint32_t dv = kb0 == 0 ? 0u : dst[o];
          const uint8_t* wn = &wnz[o * (kK / 8)];
          for (int64_t t0 = kb0; t0 < kb0 + kBlock; t0 += 32)
            for (int ph = 0; ph < nph; ++ph) {
              const uint32_t* A = &wsl[ph & 1][o * kK];
              const uint32_t* B = xsl[(ph >> 1) & 1].data();
              for (int64_t k0 = t0; k0 < t0 + 32; k0 += 16) {
                const int64_t q0 = k0 / 8, q1 = q0 + 1;
                if (!(wn[q0] && xnz[q0]) && !(wn[q1] && xnz[q1])) continue;
                nx::FpuTerm g0, g1;
                MvmulTerms(A + k0, B + k0, nx::PhaseAdjust(ph), &g0, &g1);
                dv = nx::CombineWithDst(g0, g1, dv, fp32_dst, nx::Arch::kWormholeB0);
              }
            }
          dst[o] = dv;
        }
      }
      benchmark::DoNotOptimize(dst.data());
    }
  }
  state.counters["GMAC/s"] = benchmark::Counter(kMacsPerRow * kRows * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

using P = nx::MvmulKernelPath;
using F = nx::MathFidelity;
#define KILN_MVMUL_CASE(name, fid, relu, fp32)                                                                  \
  BENCHMARK_CAPTURE(BM_Loop, name, fid, relu, fp32)->Unit(benchmark::kMillisecond)->UseRealTime();                  \
  BENCHMARK_CAPTURE(BM_Kernel, scalar_##name, P::kScalar, fid, relu, fp32)->Unit(benchmark::kMillisecond)->UseRealTime(); \
  BENCHMARK_CAPTURE(BM_Kernel, avx2_##name, P::kAvx2, fid, relu, fp32)->Unit(benchmark::kMillisecond)->UseRealTime(); \
  BENCHMARK_CAPTURE(BM_Kernel, avx512_##name, P::kAvx512, fid, relu, fp32)->Unit(benchmark::kMillisecond)->UseRealTime(); \
  BENCHMARK_CAPTURE(BM_Kernel, avx512fp16_##name, P::kAvx512Fp16, fid, relu, fp32)->Unit(benchmark::kMillisecond)->UseRealTime();
KILN_MVMUL_CASE(LoFi_dense, F::kLoFi, false, true)
KILN_MVMUL_CASE(HiFi4_dense, F::kHiFi4, false, true)
KILN_MVMUL_CASE(HiFi4_relu, F::kHiFi4, true, true)
KILN_MVMUL_CASE(LoFi_bf16dst, F::kLoFi, false, false)
KILN_MVMUL_CASE(HiFi4_bf16dst, F::kHiFi4, false, false)

// Console output plus each benchmark's real time per iteration, for the ratios.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs)
      if (r.run_type == Run::RT_Iteration && r.iterations > 0 && !r.error_occurred) {
        // With --benchmark_repetitions, the best repetition (each reports under the same name).
        const double t = r.real_accumulated_time / static_cast<double>(r.iterations);
        auto [it, fresh] = seconds.emplace(r.benchmark_name(), t);
        if (!fresh) it->second = std::min(it->second, t);
      }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> seconds;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  RatioReporter rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  benchmark::Shutdown();
  auto find = [&](const std::string& prefix) {
    for (const auto& [name, s] : rep.seconds)
      if (name.rfind(prefix, 0) == 0) return s;
    return 0.0;
  };
  auto gmacs = [](double s) { return s > 0 ? kMacsPerRow * kRows / s / 1e9 : 0.0; };
  std::printf("\n64->64 3x3 K blocks (K=576 in 3x192, 64 columns, %lld rows), 1 thread, GMAC/s (real MACs):\n",
              static_cast<long long>(kRows));
  std::printf("%-14s %10s %10s %10s %10s %10s %12s %12s %12s %12s\n", "case", "loop", "scalar", "avx2", "avx512",
              "avx512fp16", "avx2/scalar", "avx2/loop", "avx512/avx2", "fp16/avx512");
  for (const char* c : {"LoFi_dense", "HiFi4_dense", "HiFi4_relu", "LoFi_bf16dst", "HiFi4_bf16dst"}) {
    const double l = find(std::string("BM_Loop/") + c), s = find(std::string("BM_Kernel/scalar_") + c),
                 v = find(std::string("BM_Kernel/avx2_") + c), w = find(std::string("BM_Kernel/avx512_") + c),
                 h = find(std::string("BM_Kernel/avx512fp16_") + c);
    std::printf("%-14s %10.3f %10.3f %10.3f %10.3f %10.3f %12.2f %12.2f %12.2f %12.2f\n", c, gmacs(l), gmacs(s),
                gmacs(v), gmacs(w), gmacs(h), v > 0 ? s / v : 0.0, v > 0 ? l / v : 0.0, w > 0 ? v / w : 0.0,
                h > 0 ? w / h : 0.0);
  }
  return 0;
}
