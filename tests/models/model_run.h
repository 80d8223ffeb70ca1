// Helpers of the model tests: load + plan + run one ONNX file in process (onnx_fe::LoadModel →
// convplan::BuildConvPlan(model, runtime::HostKernels()) → runtime::RunConvPlan), each stage's
// failure summarised as a status-table cell (tests/models/status_table.h).
#pragma once

#include <memory>
#include <string>

#include "compiler/convplan/plan.h"
#include "device/backends/backend.h"
#include "device/tensor.h"
#include "runtime/executor.h"

namespace kiln::models {

/// The process-wide fp32 reference backend (all cores).
device::Backend& Reference();
/// A tt-emu backend at level "fast" (bit-identical to "exact": device/backends/tt_emu/tt_emu_backend.h).
device::Backend& TtEmu();

struct Planned {
  std::shared_ptr<const convplan::ConvPlan> plan;  ///< null when load or plan failed
  std::string status;                              ///< "" when planned, else a table cell
  std::string detail;                              ///< the full error, for failure messages
};

/// Loads and plans `path`. A plan refused for unsupported op types is summarised as
/// "not yet supported: unsupported ops A B" (distinct types, sorted, from the model's nodes and
/// the host-kernel registry: stable when the error's wording or node counts change); any other
/// failure as NotYetSupported(stage, error).
Planned LoadAndPlan(const std::string& path);

/// Max |a - b| and max |b| over two tensors of one shape (fp32).
struct Diff {
  bool same_shape = false;
  double max_abs_err = 0;
  double max_abs_ref = 0;
};
Diff Compare(const device::Tensor& got, const device::Tensor& want);

/// Wall seconds since `t0` (steady clock).
double SecondsSince(double t0);
double Now();

}  // namespace kiln::models
