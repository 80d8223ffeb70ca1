// The rewrite-rule interface of compiler/convplan's passes, in the style of ONNX Runtime's
// RewriteRule (onnxruntime/core/optimizer/rewrite_rule.h): a rule has a name, the op types it is
// anchored at (TargetOpTypes), a SatisfyCondition(graph, op) that never modifies anything and
// returns the match it found, and an Apply(graph, op, match) that performs one rewrite anchored at
// that op from that match (the matcher runs once per rewrite). The pass manager
// (compiler/convplan/passes/pass_manager.h) sweeps the ops, calls a rule only on ops of its target
// types, and runs the pipeline to a fixed point.
//
// Common rules of every fusion (compiler/convplan/passes/fusion_util.h implements them)
// * An intermediate tensor (one that disappears from the plan) must have exactly the consumers the
//   pattern names and must not be a graph output; otherwise the pass does not apply.
// * The fused op takes the slot of the LAST op it absorbs (its inputs are all available there,
//   and nothing between read the absorbed intermediates), so the op list stays topologically
//   ordered; absorbed ops are removed.
// * A device op's activation slot is filled at most once: FuseXxx sets DeviceOp::activation when
//   the op has no residual, else DeviceOp::residual_activation (activation after the residual Add).
//
// Each rule lives in its own file under compiler/convplan/passes/ with its conditions documented
// there; compiler/convplan/passes/rules.h lists the factories.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "compiler/convplan/passes/plan_graph.h"

namespace kiln::convplan {

/// PlanOp::op of the device ops (DeviceOpKindName), for TargetOpTypes.
inline constexpr std::string_view kConv2dOp = "conv2d";
inline constexpr std::string_view kConvTranspose2dOp = "conv_transpose2d";
inline constexpr std::string_view kAddOp = "add";
/// TargetOpTypes entry that matches every host op, whatever its ONNX op type.
inline constexpr std::string_view kAnyHostOp = "<any host op>";

/// One rewrite, type-erased for the pass manager.
class RewritePass {
 public:
  virtual ~RewritePass() = default;
  virtual const char* name() const = 0;
  /// PlanOp::op values the rule is anchored at ("conv2d" / "conv_transpose2d" for device ops, the
  /// ONNX op type for host ops, kAnyHostOp for every host op). The pass manager never evaluates the
  /// rule at an op of another type (IsTarget).
  virtual std::vector<std::string_view> TargetOpTypes() const = 0;
  /// True when a rewrite anchored at op `i` applies; never modifies the graph.
  virtual bool SatisfiesCondition(const PlanGraph& graph, size_t i) const = 0;
  /// Evaluates the condition at op `i` and, when it holds, applies the rewrite from the match the
  /// condition found. Returns whether it rewrote. Errors only for inconsistent data (e.g. a
  /// BatchNormalization parameter of the wrong size): INVALID_ARGUMENT.
  virtual Result<bool> TryApply(PlanGraph& graph, size_t i) const = 0;
};

/// True when `op` is of one of `types` (RewritePass::TargetOpTypes). Device and host op names
/// cannot collide: host ops carry ONNX op types, which are capitalised.
inline bool IsTarget(const std::vector<std::string_view>& types, const PlanOp& op) {
  for (std::string_view t : types) {
    if (t == kAnyHostOp ? !op.on_device() : t == op.op) return true;
  }
  return false;
}

/// A rule whose condition produces a `Match` (the ops and values of the pattern) that Apply reuses.
template <typename Match>
class RewriteRule : public RewritePass {
 public:
  bool SatisfiesCondition(const PlanGraph& graph, size_t i) const final {
    return SatisfyCondition(graph, i).has_value();
  }
  Result<bool> TryApply(PlanGraph& graph, size_t i) const final {
    std::optional<Match> m = SatisfyCondition(graph, i);
    if (!m) return false;
    KILN_RETURN_IF_ERROR(Apply(graph, i, *m));
    return true;
  }

 protected:
  /// The match anchored at op `i`, or nullopt; never modifies the graph.
  virtual std::optional<Match> SatisfyCondition(const PlanGraph& graph, size_t i) const = 0;
  /// Performs the rewrite from `match` (found by SatisfyCondition on the unchanged graph).
  virtual Status Apply(PlanGraph& graph, size_t i, const Match& match) const = 0;
};

}  // namespace kiln::convplan
