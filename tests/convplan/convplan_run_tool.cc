// convplan_run_tool: plans an ONNX model and runs it with the executor, printing the plan and the
// per-layer report (a developer tool for measurements; `kiln run --local` is the product path).
//   convplan_run_tool MODEL.onnx [--backend reference|tt-emu] [--level exact|fast]
//       [--mode chained|per_layer] [--input NAME=FILE.npy]... [--fidelity HiFi2]
//       [--weights-dtype bfloat8_b] [--fp32-acc 0|1] [--no-compare] [--threads N] [--plan]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "compiler/onnx/loader.h"
#include "device/backends/builtin.h"
#include "device/npy.h"
#include "runtime/executor.h"
#include "runtime/host_kernels/registry.h"
#include "runtime/report_table.h"

using namespace kiln;  // NOLINT

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.onnx [options]\n", argv[0]);
    return 2;
  }
  std::string backend = "reference", level, threads;
  bool print_plan = false;
  runtime::RunOptions o;
  runtime::RunInputs inputs;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--backend") backend = next();
    else if (a == "--level") level = next();
    else if (a == "--threads") threads = next();
    else if (a == "--plan") print_plan = true;
    else if (a == "--no-compare") o.compare_to_reference = false;
    else if (a == "--mode") {
      auto m = runtime::ParseRunMode(next());
      if (!m.ok()) return std::fprintf(stderr, "%s\n", m.status().ToString().c_str()), 2;
      o.mode = *m;
    } else if (a == "--fidelity") {
      auto f = device::ParseMathFidelity(next());
      if (!f.ok()) return std::fprintf(stderr, "%s\n", f.status().ToString().c_str()), 2;
      o.precision.math_fidelity = *f;
    } else if (a == "--weights-dtype") {
      auto d = device::ParseDeviceDType(next());
      if (!d.ok()) return std::fprintf(stderr, "%s\n", d.status().ToString().c_str()), 2;
      o.precision.weights_dtype = *d;
    } else if (a == "--host-add") {
      o.precision.host_add = true;
    } else if (a == "--fp32-acc") {
      o.precision.fp32_dest_acc_en = next() == "1";
    } else if (a == "--input") {
      std::string v = next();
      auto eq = v.find('=');
      auto t = device::ReadNpy(v.substr(eq + 1));
      if (eq == std::string::npos || !t.ok()) return std::fprintf(stderr, "bad --input %s\n", v.c_str()), 2;
      inputs[v.substr(0, eq)] = std::move(*t);
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  std::ifstream f(argv[1], std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const auto t0 = std::chrono::steady_clock::now();
  auto model = onnx_fe::LoadModel(ss.str());
  if (!model.ok()) return std::fprintf(stderr, "%s\n", model.status().ToString().c_str()), 1;
  auto plan = convplan::BuildConvPlan(*model, runtime::HostKernels());
  if (!plan.ok()) return std::fprintf(stderr, "%s\n", plan.status().ToString().c_str()), 1;
  const double plan_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (print_plan) std::printf("%s\n", plan->ToString().c_str());
  device::BackendOptions bo;
  if (!level.empty()) bo.settings["level"] = level;
  if (!threads.empty()) bo.settings["threads"] = threads;
  auto dev = device::DefaultBackendRegistry().Create(backend, bo);
  if (!dev.ok()) return std::fprintf(stderr, "%s\n", dev.status().ToString().c_str()), 1;
  auto r = runtime::RunConvPlan(*plan, inputs, **dev, o);
  if (!r.ok()) return std::fprintf(stderr, "%s\n", r.status().ToString().c_str()), 1;
  std::printf("%s", runtime::FormatReportTable(*r).c_str());
  std::printf("load+plan %.3f s, %zu ops (%zu device), run %.3f s\n", plan_s, plan->ops.size(),
              plan->num_device_ops(), r->total_seconds);
  for (const auto& [name, t] : r->outputs) std::printf("output %s %s\n", name.c_str(), t.DebugString().c_str());
  return 0;
}
