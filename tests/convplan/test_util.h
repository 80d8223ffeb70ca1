// Helpers shared by the convplan and runtime tests (tests/convplan, tests/runtime): small ONNX
// models built with OnnxModelBuilder, loading, planning (with the runtime's host-kernel registry)
// and running on the fp32 reference backend.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "compiler/convplan/passes/pass_manager.h"
#include "compiler/convplan/plan.h"
#include "compiler/onnx/loader.h"
#include "device/backends/reference/reference_backend.h"
#include "runtime/executor.h"
#include "runtime/host_kernels/registry.h"
#include "runtime/report_table.h"
#include "tests/support/onnx_model_builder.h"

namespace kiln::convplan::testutil {

using kiln::testing::OnnxModelBuilder;
using runtime::FormatReportTable;
using runtime::LayerReport;
using runtime::RunConvPlan;
using runtime::RunInputs;
using runtime::RunMode;
using runtime::RunOptions;
using runtime::RunResult;

inline std::shared_ptr<const onnx_fe::Model> Load(const OnnxModelBuilder& b) {
  auto m = onnx_fe::LoadModel(b.Serialize());
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

/// Adds Conv `name`: in (cin channels) -> out (cout), kernel k x k, pads k/2, optional bias,
/// seeded weights.
inline onnx::NodeProto& AddConv(OnnxModelBuilder& b, const std::string& in, const std::string& out,
                                const std::string& name, int64_t cin, int64_t cout, int64_t k, uint32_t seed,
                                bool bias = true, int64_t stride = 1) {
  std::vector<std::string> ins = {in, name + ".w"};
  b.FloatInitializer(name + ".w", {cout, cin, k, k}, kiln::testing::RandomFloats(cout * cin * k * k, seed));
  if (bias) {
    b.FloatInitializer(name + ".b", {cout}, kiln::testing::RandomFloats(cout, seed + 1000));
    ins.push_back(name + ".b");
  }
  auto& n = b.Node("Conv", ins, {out}, name);
  kiln::testing::SetInts(n, "pads", {k / 2, k / 2, k / 2, k / 2});
  kiln::testing::SetInts(n, "strides", {stride, stride});
  return n;
}

inline const PlanOp* FindOp(const ConvPlan& p, const std::string& name) {
  for (const PlanOp& op : p.ops) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

inline bool HasFusion(const PlanOp& op, const std::string& prefix) {
  return std::any_of(op.fusions.begin(), op.fusions.end(),
                     [&](const std::string& f) { return f.rfind(prefix, 0) == 0; });
}

inline size_t CountHost(const ConvPlan& p, const std::string& op_type) {
  return static_cast<size_t>(std::count_if(p.ops.begin(), p.ops.end(), [&](const PlanOp& o) {
    return !o.on_device() && o.op == op_type;
  }));
}

inline device::Backend& Reference() {
  static std::unique_ptr<device::Backend> ref = [] {
    auto r = device::MakeReferenceBackend();
    EXPECT_TRUE(r.ok());
    return std::move(*r);
  }();
  return *ref;
}

/// Runs `plan` on the reference backend (chained, no comparison) with generated inputs (seed 7).
inline RunResult RunRef(const ConvPlan& plan, const RunInputs& inputs = {}) {
  RunOptions o;
  o.compare_to_reference = false;
  o.input_seed = 7;
  auto r = RunConvPlan(plan, inputs, Reference(), o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(*r) : RunResult{};
}

/// Max |a - b| over two output lists (same names, same shapes expected).
inline double MaxDiff(const RunResult& a, const RunResult& b) {
  EXPECT_EQ(a.outputs.size(), b.outputs.size());
  double mx = 0;
  for (size_t i = 0; i < std::min(a.outputs.size(), b.outputs.size()); ++i) {
    EXPECT_EQ(a.outputs[i].first, b.outputs[i].first);
    const auto& x = a.outputs[i].second;
    const auto& y = b.outputs[i].second;
    EXPECT_EQ(x.shape(), y.shape());
    if (x.shape() != y.shape()) return INFINITY;
    for (int64_t e = 0; e < x.num_elements(); ++e) {
      mx = std::max(mx, static_cast<double>(std::fabs(x.data<float>()[e] - y.data<float>()[e])));
    }
  }
  return mx;
}

/// Plans `model` with all passes and with none, runs both on the reference backend and returns the
/// max difference of the outputs (the rewrites must not change the result beyond fp32 rounding).
inline double FusedVsUnfused(const std::shared_ptr<const onnx_fe::Model>& model) {
  auto fused = BuildConvPlan(model, runtime::HostKernels());
  PlanOptions none;  // every pass off but RemoveDeadHostOps
  for (const PipelinePass& p : Pipeline()) {
    if (std::string(p.name) != "RemoveDeadHostOps") none.disabled_passes.push_back(p.name);
  }
  auto plain = BuildConvPlan(model, runtime::HostKernels(), none);
  EXPECT_TRUE(fused.ok()) << fused.status().ToString();
  EXPECT_TRUE(plain.ok()) << plain.status().ToString();
  if (!fused.ok() || !plain.ok()) return INFINITY;
  return MaxDiff(RunRef(*fused), RunRef(*plain));
}

}  // namespace kiln::convplan::testutil
