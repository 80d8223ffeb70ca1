// Benchmark: whole-network forward of torchvision CNNs on Kiln's fp32 `reference` backend against
// PyTorch on the same machine, in the same run. Target: Kiln <= 0.8x PyTorch's time on each model.
//
// Kiln side, in process: the ONNX export of scripts/torchvision_models.py (torch.manual_seed(0),
// weights=None) is loaded and planned once (api/run_conv.cc's PlanModel does the same), then
// runtime::RunConvPlan runs it on one reference backend with compare_to_reference = false (what
// `kiln run --local --backend reference --skip-reference` does) and a runtime::PreparedConvs
// cache that lives as long as the plan (runtime/prepared_convs.h); best of 10 runs after 3
// warm-ups. PyTorch side: bench/torchvision/torch_forward.py (eval(), torch.no_grad(), the same
// thread count, best of 10 after 3 warm-ups, NCHW and channels_last, the faster kept).
//
//   kiln_torchvision_bench [--threads N] [--models DIR] [--only NAME] [--no-torch]
//     --threads N  OpenMP threads for both sides (default: every core, as the reference backend)
//     --models DIR read DIR/NAME_SIZE.onnx instead of exporting into the build tree
//     --only NAME  one model (e.g. resnet50)
//     --no-torch   Kiln only (no ratio, no gate)
//     --unprepared no PreparedConvs cache (every conv prepared per call: the cost it removes)
// Prints per model the Kiln time, where it went (device ops, device-op host glue — layout
// conversions, K-split sums, host residual adds —, host ops by op type, executor overhead, which
// includes converting device-layout values for host ops), PyTorch's time and the ratio. The first
// run is checked against PyTorch's output for the exported input (KEY.input.npy / KEY.output0.npy):
// max |kiln - torch| <= 1e-4 * max |torch|. Exits 1 when a ratio exceeds 0.8, 2 when a model
// cannot be produced, run, or is wrong. Wall times: on a shared machine read the ratios, not the
// absolute figures (both sides are timed in the same run, interleaved per model).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "compiler/convplan/plan.h"
#include "compiler/onnx/loader.h"
#include "device/backends/builtin.h"
#include "device/backends/reference/reference_backend.h"
#include "device/npy.h"
#include "runtime/executor.h"
#include "runtime/host_kernels/registry.h"
#include "runtime/inputs.h"
#include "runtime/prepared_convs.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace rt = kiln::runtime;

constexpr int kWarmups = 3;
constexpr int kRuns = 10;
constexpr double kTargetRatio = 0.8;

struct ModelSpec {
  std::string name;
  int size;
};
const std::vector<ModelSpec> kModels = {
    {"resnet50", 224}, {"mobilenet_v2", 224}, {"densenet121", 224}, {"efficientnet_b0", 224}};

std::string Spec(const ModelSpec& m) { return m.name + ":" + std::to_string(m.size); }
std::string Key(const ModelSpec& m) { return m.name + "_" + std::to_string(m.size); }

// Runs `cmd` and returns its stdout; nullopt-like empty + rc on failure.
int RunCommand(const std::string& cmd, std::string* out) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  return pclose(p);
}

struct KilnTiming {
  double best = 0.0;
  // Breakdown of the best run (seconds).
  double device = 0.0, glue = 0.0, overhead = 0.0;
  std::map<std::string, double> host;  // host op type → seconds
  int device_ops = 0, host_ops = 0;
  double rel_err = -1.0;  // max |kiln - torch| / max |torch| on PyTorch's input; < 0: not checked
};

bool TimeKiln(const std::string& path, int threads, bool use_prepared, KilnTiming* t) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return false;
  }
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto model = kiln::onnx_fe::LoadModel(bytes);
  if (!model.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), model.status().ToString().c_str());
    return false;
  }
  auto built = kiln::convplan::BuildConvPlan(*model, rt::HostKernels());
  if (!built.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), built.status().ToString().c_str());
    return false;
  }
  auto plan = std::make_shared<const kiln::convplan::ConvPlan>(std::move(built).value());
  kiln::device::BackendOptions bo;
  bo.settings[kiln::device::kReferenceThreadsSetting] = std::to_string(threads);
  auto backend = kiln::device::MakeReferenceBackend(bo);
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
    return false;
  }
  // PyTorch's input and output as the export script wrote them (KEY.input.npy, KEY.output0.npy).
  const std::string stem = path.substr(0, path.size() - std::string(".onnx").size());
  auto given = kiln::device::ReadNpy(stem + ".input.npy");
  auto expected = kiln::device::ReadNpy(stem + ".output0.npy");
  rt::RunInputs inputs;
  if (given.ok() && plan->inputs.size() == 1) inputs.emplace(plan->inputs[0].name, std::move(*given));
  for (const auto& in : plan->inputs) {
    if (inputs.count(in.name) != 0) continue;
    auto x = rt::GenerateInput(in, 1);
    if (!x.ok()) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), x.status().ToString().c_str());
      return false;
    }
    inputs.emplace(in.name, std::move(*x));
  }
  rt::PreparedConvs prepared(plan, **backend);
  rt::RunOptions options;
  options.compare_to_reference = false;
  options.reference = backend->get();
  options.prepared = use_prepared ? &prepared : nullptr;
  t->best = 1e30;
  for (int i = 0; i < kWarmups + kRuns; ++i) {
    const auto t0 = Clock::now();
    auto r = rt::RunConvPlan(*plan, inputs, **backend, options);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!r.ok()) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), r.status().ToString().c_str());
      return false;
    }
    if (i == 0 && expected.ok() && !r->outputs.empty()) {
      // The fast path must still compute the model: max |kiln - torch| <= 1e-4 * max |torch|.
      const auto& y = r->outputs[0].second;
      if (y.num_elements() != expected->num_elements() || y.dtype() != kiln::device::DataType::kFloat32 ||
          expected->dtype() != kiln::device::DataType::kFloat32) {
        std::fprintf(stderr, "%s: output %s, PyTorch's %s\n", path.c_str(), y.DebugString().c_str(),
                     expected->DebugString().c_str());
        return false;
      }
      double err = 0.0, ref = 0.0;
      for (int64_t e = 0; e < y.num_elements(); ++e) {
        err = std::max(err, std::fabs(double(y.data<float>()[e]) - double(expected->data<float>()[e])));
        ref = std::max(ref, std::fabs(double(expected->data<float>()[e])));
      }
      t->rel_err = ref > 0.0 ? err / ref : err;
      if (!(t->rel_err <= 1e-4)) {
        std::fprintf(stderr, "%s: max |kiln - torch| = %g, %g x max |torch| (> 1e-4)\n", path.c_str(), err,
                     t->rel_err);
        return false;
      }
    }
    if (i < kWarmups || s >= t->best) continue;
    t->best = s;
    t->device = t->glue = 0.0;
    t->host.clear();
    t->device_ops = t->host_ops = 0;
    for (const auto& l : r->layers) {
      if (l.on_device) {
        t->device += l.seconds;
        t->glue += l.host_seconds;
        ++t->device_ops;
      } else {
        t->host[l.op] += l.seconds;
        ++t->host_ops;
      }
    }
    double host = 0.0;
    for (const auto& [op, sec] : t->host) host += sec;
    t->overhead = s - t->device - t->glue - host;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string dir, only;
  bool torch = true, use_prepared = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--models" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--no-torch") {
      torch = false;
    } else if (a == "--unprepared") {
      use_prepared = false;
    } else {
      std::fprintf(stderr, "usage: %s [--threads N] [--models DIR] [--only NAME] [--no-torch] [--unprepared]\n", argv[0]);
      return 2;
    }
  }
  std::vector<ModelSpec> models;
  for (const auto& m : kModels) {
    if (only.empty() || m.name == only) models.push_back(m);
  }
  if (models.empty()) {
    std::fprintf(stderr, "unknown model '%s'\n", only.c_str());
    return 2;
  }
  if (dir.empty()) {
    dir = KILN_BENCH_MODEL_DIR;
    std::string cmd = "/usr/bin/python3 " KILN_SOURCE_ROOT_DIR "/scripts/torchvision_models.py " + dir + " --models";
    for (const auto& m : models) cmd += " " + Spec(m);
    std::string out;
    if (RunCommand(cmd + " 2>&1", &out) != 0) {
      std::fprintf(stderr, "%s failed:\n%s\n", cmd.c_str(), out.c_str());
      return 2;
    }
  }
  std::printf("threads %d; Kiln: plan built once, reference backend, no fp32 comparison; best of %d after %d "
              "warm-ups (both sides)\n",
              threads, kRuns, kWarmups);
  std::printf("%-16s %10s %10s %8s   %s\n", "model", "kiln_ms", "torch_ms", "ratio", "kiln breakdown (ms)");
  bool over = false;
  for (const auto& m : models) {
    KilnTiming k;
    if (!TimeKiln(dir + "/" + Key(m) + ".onnx", threads, use_prepared, &k)) return 2;
    double torch_s = 0.0;
    std::string detail;
    if (torch) {
      std::string out;
      const std::string cmd = "/usr/bin/python3 " KILN_SOURCE_ROOT_DIR "/bench/torchvision/torch_forward.py " +
                              std::to_string(threads) + " " + Spec(m);
      if (RunCommand(cmd, &out) != 0) {
        std::fprintf(stderr, "%s failed:\n%s\n", cmd.c_str(), out.c_str());
        return 2;
      }
      std::istringstream is(out);
      std::string spec;
      double nchw = 0.0, cl = 0.0;
      is >> spec >> torch_s >> nchw >> cl;
      if (!is || torch_s <= 0.0) {
        std::fprintf(stderr, "unexpected output of %s: %s\n", cmd.c_str(), out.c_str());
        return 2;
      }
      std::ostringstream d;
      d.precision(1);
      d << std::fixed << " [torch nchw " << nchw * 1e3 << ", channels_last " << cl * 1e3 << "]";
      detail = d.str();
    }
    std::ostringstream b;
    b.precision(1);
    b << std::fixed << "device " << k.device * 1e3 << " (" << k.device_ops << " ops), glue " << k.glue * 1e3
      << ", host";
    for (const auto& [op, s] : k.host) b << " " << op << " " << s * 1e3;
    b << ", overhead " << k.overhead * 1e3;
    if (k.rel_err >= 0.0) b << "; err " << std::scientific << std::setprecision(1) << k.rel_err << " x max|torch|";
    const double ratio = torch ? k.best / torch_s : 0.0;
    if (torch && ratio > kTargetRatio) over = true;
    std::printf("%-16s %10.1f %10.1f %8.2f   %s%s\n", Key(m).c_str(), k.best * 1e3, torch_s * 1e3, ratio,
                b.str().c_str(), detail.c_str());
    std::fflush(stdout);
  }
  if (torch) std::printf("target: every ratio <= %.2f: %s\n", kTargetRatio, over ? "MISSED" : "met");
  return over ? 1 : 0;
}
