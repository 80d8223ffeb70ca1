// The pass manager of compiler/convplan (used by BuildConvPlan, plan.h): the pipeline — the rewrite
// rules in the order they run, declared once, in pass_manager.cc — disabling passes by name, and
// the fixed-point driver.
//
// Driver semantics
// * RunPass sweeps the ops in slot order and evaluates the pass only at alive ops of its target
//   types (RewritePass::TargetOpTypes, IsTarget); wherever the condition holds the rewrite is
//   applied from the condition's match. Sweeps repeat until one applies nothing.
// * RunPasses runs every pass (RunPass) once per round, in order, and stops after the first round in which
//   no pass rewrote anything. A plan that has not converged after `max_rounds` rounds is INTERNAL
//   ("rewrite passes did not converge after N rounds; still firing: FuseRelu, ...", naming the
//   passes that rewrote in the last round) — a rule pair that undoes each other is a bug, not a
//   plan. Likewise a single pass whose sweeps still rewrite after kMaxPassRounds sweeps.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "compiler/convplan/passes/rewrite_pass.h"
#include "compiler/convplan/plan.h"

namespace kiln::convplan {

/// One entry of the pipeline.
struct PipelinePass {
  const char* name;  ///< RewritePass::name() of what `make` returns
  std::unique_ptr<RewritePass> (*make)();
};

/// The pipeline, in the order the passes run.
const std::vector<PipelinePass>& Pipeline();

/// The pipeline's passes, in order, without those named in `disabled`. INVALID_ARGUMENT naming an
/// entry of `disabled` that is not a pipeline pass (listing the pipeline).
Result<std::vector<std::unique_ptr<RewritePass>>> PipelinePasses(const std::vector<std::string>& disabled = {});

/// Applies `pass` wherever its condition holds, sweeping until nothing changes (see the header
/// comment). Returns the number of rewrites; INTERNAL when still rewriting after `max_sweeps`.
Result<int> RunPass(PlanGraph& graph, const RewritePass& pass, int max_sweeps = kMaxPassRounds);

/// Runs `passes` in order, round after round, to a fixed point (see the header comment); returns
/// the compacted plan. `max_rounds` < 1 is INVALID_ARGUMENT.
Result<ConvPlan> RunPasses(ConvPlan plan, const std::vector<std::unique_ptr<RewritePass>>& passes,
                           int max_rounds = kMaxPassRounds);

}  // namespace kiln::convplan
