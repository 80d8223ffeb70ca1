// Worker-pool throughput: the same batch of conv jobs through a pool of 1 device and of
// 2 devices of one backend, submitted by 4 client threads. For "reference" the 1-device pool uses
// all cores per op and each of 2 devices gets threads=1. tt-emu devices are created with
// level=fast (override with --level).
//
// Usage: kiln_pool_bench [--backend reference|tt-emu] [--jobs N] [--level exact|fast]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sched/scheduler.h"

using namespace kiln::device;
using namespace kiln::sched;

namespace {

Tensor RandomTensor(std::vector<int64_t> shape, std::mt19937& rng) {
  auto t = Tensor::Zeros(std::move(shape));
  std::normal_distribution<float> d(0.f, 1.f);
  for (float& v : t->span<float>()) v = d(rng);
  return std::move(*t);
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend = "reference", level = "fast";
  int jobs = 48;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
    else if (!std::strcmp(argv[i], "--jobs") && i + 1 < argc) jobs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--level") && i + 1 < argc) level = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--backend NAME] [--jobs N] [--level exact|fast]\n", argv[0]);
      return 2;
    }
  }
  std::mt19937 rng(3);
  const Tensor x = RandomTensor({1, 64, 56, 56}, rng);
  const Tensor w = RandomTensor({64, 64, 3, 3}, rng);
  const Tensor b = RandomTensor({64}, rng);
  Conv2dParams p;
  p.pads = {1, 1, 1, 1};
  const double flops = 2.0 * 64 * 56 * 56 * 64 * 9;
  const unsigned cores = std::thread::hardware_concurrency();
  double base = 0;
  for (int devices : {1, 2}) {
    SchedulerOptions o;
    o.devices = {{backend, devices}};
    o.queue_capacity = jobs;
    o.max_queued_per_client = jobs;
    if (backend == "reference") {
      o.backend_settings["reference"] = {{"threads", std::to_string(std::max(1u, cores / devices))}};
    } else if (backend == "tt-emu") {
      o.backend_settings["tt-emu"] = {{"level", level}};
    }
    auto pool = Scheduler::Create(o);
    if (!pool.ok()) {
      std::fprintf(stderr, "pool: %s\n", pool.status().ToString().c_str());
      return 1;
    }
    auto run_batch = [&](int n) {
      std::vector<std::shared_ptr<JobHandle>> handles;
      std::mutex mu;
      std::vector<std::thread> clients;
      for (int c = 0; c < 4; ++c) {
        clients.emplace_back([&, c] {
          for (int j = c; j < n; j += 4) {
            JobRequest r;
            r.lane = backend;
            r.client_id = "client-" + std::to_string(c);
            r.work = [&](Backend& be, JobContext& ctx) -> kiln::Status {
              ExecContext e;
              e.cancel = ctx.cancel;
              return be.Conv2d(x, w, &b, p, e).status();
            };
            auto h = (*pool)->Submit(r);
            if (!h.ok()) {
              std::fprintf(stderr, "submit: %s\n", h.status().ToString().c_str());
              continue;
            }
            std::lock_guard<std::mutex> l(mu);
            handles.push_back(*h);
          }
        });
      }
      for (auto& t : clients) t.join();
      int failed = 0;
      for (auto& h : handles) failed += !h->Wait().ok();
      return failed;
    };
    run_batch(2 * devices);  // warm-up
    const auto t0 = std::chrono::steady_clock::now();
    const int failed = run_batch(jobs);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double jps = jobs / s;
    if (devices == 1) base = jps;
    std::printf("%-9s x%d device(s): %6.1f jobs/s (%6.1f GFLOP/s), %d failed%s\n", backend.c_str(), devices, jps,
                jps * flops / 1e9, failed,
                devices == 2 ? (" — " + std::to_string(jps / base).substr(0, 4) + "x the 1-device pool").c_str() : "");
  }
  return 0;
}
