// Device benchmark: FMA peak of this machine, the fp32 reference backend on a 3x3,
// 64→64, 56x56, batch 8 conv (GFLOP/s and ratio to peak), and — when a "tt-emu" backend is
// registered — tt-emu `fast` at HiFi4 and LoFi (ratio to the reference) and tt-emu `exact` MAC/s.
//
// The reference figure is measured through a PreparedConv on an NHWC input: primitive creation,
// weight reorder and the NCHW→NHWC conversion happen outside the timed loop (the one-shot
// Conv2d on NCHW, which reorders inside every call, is printed for comparison).
//
// Usage: kiln_conv_bench [--reps N] [--threads T] [--no-fma] [--no-tt-emu]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "device/backends/builtin.h"

namespace kiln::bench {
double FmaPeakGflops(int threads, const char** isa);
}

namespace {

using namespace kiln::device;

struct Timing {
  double best = 0, median = 0;
};

Timing TimeIt(int reps, const std::function<bool()>& fn) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!fn()) return {};
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return {t.front(), t[t.size() / 2]};
}

Tensor RandomTensor(std::vector<int64_t> shape, std::mt19937& rng) {
  auto t = Tensor::Zeros(std::move(shape));
  std::normal_distribution<float> d(0.f, 1.f);
  for (float& v : t->span<float>()) v = d(rng);
  return std::move(*t);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 30;
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  bool fma = true, tt_emu = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--no-fma")) fma = false;
    else if (!std::strcmp(argv[i], "--no-tt-emu")) tt_emu = false;
    else {
      std::fprintf(stderr, "usage: %s [--reps N] [--threads T] [--no-fma] [--no-tt-emu]\n", argv[0]);
      return 2;
    }
  }
  double peak = 0;
  if (fma) {
    const char* isa = "";
    peak = kiln::bench::FmaPeakGflops(threads, &isa);
    std::printf("FMA peak            : %8.1f GFLOP/s fp32 (%d threads, %s)\n", peak, threads, isa);
  }

  const int64_t N = 8, C = 64, O = 64, H = 56, W = 56, K = 3;
  const double flops = 2.0 * N * O * H * W * C * K * K;
  std::mt19937 rng(7);
  Tensor x = RandomTensor({N, C, H, W}, rng);
  Tensor w = RandomTensor({O, C, K, K}, rng);
  Tensor b = RandomTensor({O}, rng);
  Conv2dParams p;
  p.pads = {1, 1, 1, 1};
  std::printf("conv                : N=%lld %lld->%lld %lldx%lld k3 s1 p1, %.2f GFLOP per run, %d reps\n",
              static_cast<long long>(N), static_cast<long long>(C), static_cast<long long>(O),
              static_cast<long long>(H), static_cast<long long>(W), flops / 1e9, reps);

  auto ref = DefaultBackendRegistry().Create("reference");
  if (!ref.ok()) {
    std::fprintf(stderr, "reference backend: %s\n", ref.status().ToString().c_str());
    return 1;
  }
  auto x_nhwc = x.ToLayout(Layout::kNHWC);
  auto prepared = (*ref)->PrepareConv2d(x.shape(), Layout::kNHWC, w, &b, p, PrecisionConfig{});
  if (!prepared.ok()) {
    std::fprintf(stderr, "prepare: %s\n", prepared.status().ToString().c_str());
    return 1;
  }
  OpReport report;
  ExecContext ctx;
  ctx.report = &report;
  (void)(*prepared)->Run(*x_nhwc, ctx);  // warm-up (page faults, OpenMP pool)
  const Timing tp = TimeIt(reps, [&] { return (*prepared)->Run(*x_nhwc, {}).ok(); });
  const double ref_gflops = flops / tp.best / 1e9;
  std::printf("reference prepared  : %8.1f GFLOP/s best, %8.1f median (%.2f ms best)  impl %s",
              ref_gflops, flops / tp.median / 1e9, tp.best * 1e3, report.implementation.c_str());
  if (peak > 0) std::printf("  ratio to peak %.2f (target >= 0.70)", ref_gflops / peak);
  std::printf("\n");
  (void)(*ref)->Conv2d(x, w, &b, p, ctx);
  const Timing t1 = TimeIt(std::max(3, reps / 2), [&] { return (*ref)->Conv2d(x, w, &b, p, {}).ok(); });
  std::printf("reference one-shot  : %8.1f GFLOP/s best (NCHW in/out, primitive+reorders per call)\n",
              flops / t1.best / 1e9);

  if (tt_emu && DefaultBackendRegistry().Contains("tt-emu")) {
    for (const char* fid : {"HiFi4", "LoFi"}) {
      BackendOptions opt;
      opt.settings["level"] = "fast";
      auto emu = DefaultBackendRegistry().Create("tt-emu", opt);
      if (!emu.ok()) {
        std::printf("tt-emu fast %-6s  : unavailable: %s\n", fid, emu.status().ToString().c_str());
        continue;
      }
      ExecContext ectx;
      ectx.precision.math_fidelity = *ParseMathFidelity(fid);
      auto first = (*emu)->Conv2d(x, w, &b, p, ectx);
      if (!first.ok()) {
        std::printf("tt-emu fast %-6s  : failed: %s\n", fid, first.status().ToString().c_str());
        continue;
      }
      const Timing te = TimeIt(std::max(3, reps / 2), [&] { return (*emu)->Conv2d(x, w, &b, p, ectx).ok(); });
      std::printf("tt-emu fast %-6s  : %8.1f GFLOP/s best, ratio to reference %.2f (target >= 1.0)\n", fid,
                  flops / te.best / 1e9, tp.best / te.best);
    }
    BackendOptions opt;
    opt.settings["level"] = "exact";
    auto emu = DefaultBackendRegistry().Create("tt-emu", opt);
    if (emu.ok()) {
      // A smaller conv for the bit-level model: N=1, 64->64, 28x28.
      Tensor xs = RandomTensor({1, C, 28, 28}, rng);
      const double macs = 1.0 * O * 28 * 28 * C * K * K;
      ExecContext ectx;
      auto first = (*emu)->Conv2d(xs, w, &b, p, ectx);
      if (first.ok()) {
        const Timing te = TimeIt(3, [&] { return (*emu)->Conv2d(xs, w, &b, p, ectx).ok(); });
        std::printf("tt-emu exact HiFi4  : %8.3f GMAC/s (N=1 64->64 28x28)\n", macs / te.best / 1e9);
      } else {
        std::printf("tt-emu exact        : failed: %s\n", first.status().ToString().c_str());
      }
    }
  } else if (tt_emu) {
    std::printf("tt-emu              : not built into this binary\n");
  }
  return 0;
}
