// The memory a plan run needs, computed from the plan and the run's input shapes before anything
// is allocated (callers refuse or admit the run on it: api/run_conv.h, sched/scheduler.h).
//
// The run is walked in plan order with the executor's value lifetime (runtime/executor.h: a
// tensor is dropped after the last op that reads it, graph outputs are kept): before op i the live
// tensors are the run's inputs and every earlier output still read later; op i adds what it
// allocates — a host kernel's estimate_bytes (runtime/host_kernels/registry.h, its outputs and
// scratch) or DeviceOpBytes (runtime/device_op_runner.h). The run's peak is the largest
// live + allocated over the ops, times the chains that hold tensors at once (2 with the fp32
// reference chain, RunOptions::compare_to_reference or kPerLayer; else 1). Model constants are not
// counted: the plan holds them (api/run_conv.h PlanBytes).
//
// Shapes come from the plan's model (inferred by the loader; symbolic dims bound at plan time) and
// the given inputs; absent inputs are generated with symbolic dims = 1 (runtime/inputs.h). A tensor
// whose shape is unknown at plan time (a value-dependent Reshape, Pad from its pads input) counts
// as 0 bytes and clears MemoryEstimate::complete.
#pragma once

#include <cstdint>
#include <string>

#include "compiler/convplan/plan.h"
#include "runtime/executor.h"
#include "runtime/inputs.h"

namespace kiln::runtime {

struct MemoryEstimate {
  int64_t peak_bytes = 0;     ///< saturates at INT64_MAX
  std::string peak_op;        ///< the op at the peak: "conv1 (conv2d)"; "" for a plan without ops
  int64_t peak_op_bytes = 0;  ///< what that op itself allocates (one chain)
  /// Bytes of the graph outputs the run returns (shapes as inferred; 0 for an unknown one).
  int64_t output_bytes = 0;
  bool complete = true;       ///< false when some tensor's shape was unknown (counted as 0)
};

/// The estimate of running `plan` with `inputs` (given ones; absent ones as generated) and
/// `options` (see the header comment). Never fails.
MemoryEstimate EstimateRunMemory(const convplan::ConvPlan& plan, const RunInputs& inputs, const RunOptions& options);

}  // namespace kiln::runtime
