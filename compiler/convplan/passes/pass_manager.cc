#include "compiler/convplan/passes/pass_manager.h"

#include <algorithm>

#include "compiler/convplan/passes/rules.h"

namespace kiln::convplan {

const std::vector<PipelinePass>& Pipeline() {
  // The one declaration of the pass order. Plans and ConvPlan::rewrites depend on it: e.g. an
  // activation right after a conv becomes its fused activation, one after a device Add (a later
  // round) the add's activation; DeviceAdd before FuseResidualAdd, which fuses Adds into convs
  // only when DeviceAdd is disabled.
  static const std::vector<PipelinePass> kPipeline = {
      {"FoldBatchNorm", MakeFoldBatchNorm},
      {"FuseSilu", MakeFuseSilu},
      {"FuseGelu", MakeFuseGelu},
      {"FuseRelu", MakeFuseRelu},
      {"FuseRelu6", MakeFuseRelu6},
      {"FuseSigmoid", MakeFuseSigmoid},
      {"DeviceAdd", MakeDeviceAdd},
      {"FuseResidualAdd", MakeFuseResidualAdd},
      {"KSplitConcat", MakeKSplitConcat},
      {"MergeSiblingConvs", MakeMergeSiblingConvs},
      {"RemoveDeadHostOps", MakeRemoveDeadHostOps},
  };
  return kPipeline;
}

Result<std::vector<std::unique_ptr<RewritePass>>> PipelinePasses(const std::vector<std::string>& disabled) {
  const auto& pipeline = Pipeline();
  for (const std::string& name : disabled) {
    if (std::none_of(pipeline.begin(), pipeline.end(), [&](const PipelinePass& p) { return name == p.name; })) {
      std::string known;
      for (const PipelinePass& p : pipeline) known += (known.empty() ? "" : ", ") + std::string(p.name);
      return InvalidArgument("unknown rewrite pass '" + name + "' (passes: " + known + ")");
    }
  }
  std::vector<std::unique_ptr<RewritePass>> out;
  for (const PipelinePass& p : pipeline) {
    if (std::find(disabled.begin(), disabled.end(), p.name) == disabled.end()) out.push_back(p.make());
  }
  return out;
}

Result<int> RunPass(PlanGraph& graph, const RewritePass& pass, int max_sweeps) {
  const std::vector<std::string_view> targets = pass.TargetOpTypes();
  int count = 0;
  for (int sweep = 0; sweep < max_sweeps; ++sweep) {
    bool changed = false;
    for (size_t i = 0; i < graph.size(); ++i) {
      if (!graph.alive(i) || !IsTarget(targets, graph.op(i))) continue;
      auto applied = pass.TryApply(graph, i);
      if (!applied.ok()) return applied.status();
      if (*applied) {
        ++count;
        changed = true;
      }
    }
    if (!changed) return count;
  }
  return Internal("rewrite pass " + std::string(pass.name()) + " still rewrites after " + std::to_string(max_sweeps) +
                  " sweeps");
}

Result<ConvPlan> RunPasses(ConvPlan plan, const std::vector<std::unique_ptr<RewritePass>>& passes, int max_rounds) {
  if (max_rounds < 1) return InvalidArgument("RunPasses: max_rounds must be >= 1, got " + std::to_string(max_rounds));
  PlanGraph g(std::move(plan));
  std::vector<std::string> firing;
  for (int round = 0; round < max_rounds; ++round) {
    firing.clear();
    for (const auto& p : passes) {
      auto n = RunPass(g, *p);
      if (!n.ok()) return n.status();
      if (*n > 0) firing.push_back(p->name());
    }
    if (firing.empty()) return std::move(g).Compact();
  }
  std::string names;
  for (const std::string& f : firing) names += (names.empty() ? "" : ", ") + f;
  return Internal("rewrite passes did not converge after " + std::to_string(max_rounds) +
                  " rounds; still firing: " + names);
}

}  // namespace kiln::convplan
