#include "tests/models/model_run.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "compiler/onnx/loader.h"
#include "device/backends/reference/reference_backend.h"
#include "device/backends/tt_emu/tt_emu_backend.h"
#include "runtime/host_kernels/registry.h"
#include "tests/models/status_table.h"

namespace kiln::models {

device::Backend& Reference() {
  static std::unique_ptr<device::Backend> ref = [] {
    auto r = device::MakeReferenceBackend();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::move(*r);
  }();
  return *ref;
}

device::Backend& TtEmu() {
  static std::unique_ptr<device::Backend> dev = [] {
    device::BackendOptions bo;
    bo.settings["level"] = "fast";
    auto r = device::MakeTtEmuBackend(bo);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::move(*r);
  }();
  return *dev;
}

Planned LoadAndPlan(const std::string& path) {
  Planned p;
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    p.status = "not yet supported: load: cannot read " + path;
    p.detail = p.status;
    return p;
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  onnx_fe::LoadOptions load;
  auto model = onnx_fe::LoadModel(ss.str(), load);
  if (!model.ok()) {
    p.status = NotYetSupported("load", model.status());
    p.detail = model.status().ToString();
    return p;
  }
  auto plan = convplan::BuildConvPlan(*model, runtime::HostKernels());
  if (!plan.ok()) {
    p.detail = plan.status().ToString();
    // The op types the planner refuses, read from its grouped message ("model has N unsupported
    // node(s): Resize x3: 'a', ...; Relu (int32) x1: 'r' (device ops: ...)", compiler/convplan/plan.h).
    const std::string& msg = plan.status().message();
    const std::string lead = "unsupported node(s): ";
    std::set<std::string> missing;
    if (auto at = msg.find(lead); at != std::string::npos) {
      size_t pos = at + lead.size();
      while (pos < msg.size()) {
        const size_t x = msg.find(" x", pos);
        if (x == std::string::npos) break;
        missing.insert(msg.substr(pos, x - pos));
        const size_t next = msg.find("; ", x);
        if (next == std::string::npos) break;
        pos = next + 2;
      }
    }
    if (!missing.empty()) {
      std::string s = "not yet supported: unsupported ops";
      for (const auto& m : missing) s += " " + m;
      p.status = CellText(s);
    } else {
      p.status = NotYetSupported("plan", plan.status());
    }
    return p;
  }
  p.plan = std::make_shared<const convplan::ConvPlan>(std::move(plan).value());
  return p;
}

Diff Compare(const device::Tensor& got, const device::Tensor& want) {
  Diff d;
  d.same_shape = got.shape() == want.shape() && got.dtype() == device::DataType::kFloat32 &&
                 want.dtype() == device::DataType::kFloat32;
  if (!d.same_shape) return d;
  const float* a = got.data<float>();
  const float* b = want.data<float>();
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    const double err = std::fabs(static_cast<double>(a[i]) - b[i]);
    d.max_abs_err = std::isnan(err) ? INFINITY : std::max(d.max_abs_err, err);
    d.max_abs_ref = std::max(d.max_abs_ref, std::fabs(static_cast<double>(b[i])));
  }
  return d;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double SecondsSince(double t0) { return Now() - t0; }

}  // namespace kiln::models
