// FMA peak microbenchmark: independent accumulator chains with distinct start values (so the
// compiler cannot merge them), one thread per core. AVX-512 (16 zmm chains) when the CPU has it,
// else AVX2/FMA (12 ymm chains: 16 registers minus the operands).
#include <immintrin.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace kiln::bench {
namespace {

__attribute__((target("avx2,fma"), noinline)) float ChainsAvx2(int64_t iters, float seed) {
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-6f);
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(seed + static_cast<float>(i) * 0.01f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[7];
}

__attribute__((target("avx512f"), noinline)) float ChainsAvx512(int64_t iters, float seed) {
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-6f);
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(seed + static_cast<float>(i) * 0.01f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0] + out[15];
}

}  // namespace

// Returns GFLOP/s over `threads` threads (2 flops per FMA lane); *isa gets "avx512" / "avx2".
double FmaPeakGflops(int threads, const char** isa) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  *isa = avx512 ? "avx512f (16 zmm chains)" : "avx2+fma (12 ymm chains)";
  const int64_t iters = avx512 ? 4'000'000 : 8'000'000;  // ~10-20 ms per rep
  const double flops_per_iter = avx512 ? 16.0 * 16 * 2 : 12.0 * 8 * 2;
  std::atomic<float> sink{0};
  double best = 0;
  for (int rep = 0; rep < 15; ++rep) {  // best of 15: the machine is shared
    std::vector<std::thread> pool;
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const float r = avx512 ? ChainsAvx512(iters, 1.f + t) : ChainsAvx2(iters, 1.f + t);
        float cur = sink.load();
        while (!sink.compare_exchange_weak(cur, cur + r)) {
        }
      });
    }
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flops_per_iter * static_cast<double>(iters) * threads / s / 1e9);
  }
  return sink.load() == 12345.f ? 0 : best;
}

}  // namespace kiln::bench
