// The rewrite passes of compiler/convplan (plan.h), each usable and testable on its own.
//
// Style of ONNX Runtime's RewriteRule (onnxruntime/core/optimizer/rewrite_rule.h): a pass has a
// name, a SatisfyCondition(graph, op) check that never modifies anything, and an Apply(graph, op)
// that performs one rewrite anchored at that op. RunPass() sweeps the ops in order and applies the
// pass wherever its condition holds, until nothing changes.
//
// Common rules of every fusion
// * An intermediate tensor (one that disappears from the plan) must have exactly the consumers the
//   pattern names and must not be a graph output; otherwise the pass does not apply.
// * The fused op takes the slot of the LAST op it absorbs (its inputs are all available there,
//   and nothing between read the absorbed intermediates), so the op list stays topologically
//   ordered; absorbed ops are removed.
// * A device op's activation slot is filled at most once: FuseXxx sets DeviceOp::activation when
//   the op has no residual, else DeviceOp::residual_activation (activation after the residual Add).
//
// Passes (rules and sources)
//   FoldBatchNorm    BatchNormalization (inference: training_mode 0, one output) reading a device
//                    op's only output, scale / B / mean / var constant (initializers or Constant
//                    nodes): with f = scale / sqrt(var + epsilon) (epsilon from the node, schema
//                    default 1e-5): W'[o] = W[o]·f[o], b'[o] = (b[o] − mean[o])·f[o] + B[o]
//                    (b = 0 without bias). ConvTranspose: output channel o of IOHW weight
//                    (c, j) is g·(O/group) + j with g = c / (C/group). The device op must have no
//                    activation, residual or merged outputs yet.
//   FuseRelu         Relu reading the tail output.
//   FuseRelu6        Clip with min == 0 and max == 6 exactly: opset < 11 from the min/max
//                    attributes; opset >= 11 from inputs 1 and 2, both present and constant with
//                    one element (scalar or shape [1]). Clip(x, "", 6) or Clip(x, 0) is not relu6.
//   FuseSigmoid      Sigmoid reading the tail output.
//   FuseSilu         s = Sigmoid(y), z = Mul(y, s) or Mul(s, y): y's consumers are exactly that
//                    Sigmoid and that Mul, s's only consumer is the Mul (x·Sigmoid(w) with w ≠ x
//                    is not SiLU).
//   FuseGelu         the erf form exported by PyTorch, 0.5·y·(1 + Erf(y/√2)):
//                    d = Div(y, √2) or Mul(y, 1/√2); e = Erf(d); a = Add(e, 1) (either order);
//                    then either m = Mul(y, a), z = Mul(m, 0.5), or h = Mul(y, 0.5), z = Mul(h, a)
//                    (operands in either order); constants are one-element and match within 1e-4
//                    relative. y's consumers are exactly the pattern's two readers.
//   FuseResidualAdd  Add(t, r) where t is a device op's only output (one OutputSlice, no residual
//                    yet), r is any other non-constant tensor with the same static shape (no
//                    broadcasting), and t has no other consumer.
//   KSplitConcat     Concat(axis 1, after normalising negative axes) whose output is read only by
//                    one device op (group 1, one input, not a graph output), with every Concat
//                    input's channel count known: the device op reads the Concat inputs as K parts
//                    with its weights split along the input-channel dim (OIHW dim 1 / IOHW dim 0).
//   MergeSiblingConvs two or more kConv2d device ops reading the same single input, group 1, equal
//                    spatial rank, kernel, strides, pads, dilations and activation, no residual,
//                    no K-split: weights concatenated along O (bias zero-filled where one is
//                    missing), output slices keep the original tensors.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "compiler/convplan/plan.h"

namespace kiln::convplan {

/// A ConvPlan under rewriting: ops keep their slots; removed ops are tombstoned until Compact().
class PlanGraph {
 public:
  explicit PlanGraph(ConvPlan plan);

  size_t size() const { return plan_.ops.size(); }
  bool alive(size_t i) const { return alive_.at(i); }
  PlanOp& op(size_t i) { return plan_.ops.at(i); }
  const PlanOp& op(size_t i) const { return plan_.ops.at(i); }
  const ConvPlan& plan() const { return plan_; }

  /// Alive ops that read `tensor` (each op once), ascending.
  std::vector<size_t> Consumers(std::string_view tensor) const;
  /// The alive op that writes `tensor`, or nullopt (graph input / constant).
  std::optional<size_t> Producer(std::string_view tensor) const;
  bool IsGraphOutput(std::string_view tensor) const;
  /// Constant data of `tensor`, or nullptr.
  const onnx_fe::ConstantData* Constant(std::string_view tensor) const;
  /// The IR tensor (shape, dtype), or nullptr.
  const onnx_fe::Tensor* FindTensor(std::string_view tensor) const;
  /// True when `tensor` is produced by exactly one alive op, read only by `reader` and is not a
  /// graph output: the condition for letting it disappear in a fusion.
  bool OnlyReadBy(std::string_view tensor, size_t reader) const;

  /// Removes op `i` (tombstone).
  void Remove(size_t i);
  /// Moves op `from` into slot `to` (which must be a removed op's slot or `from` itself); `from`
  /// becomes a tombstone.
  void MoveTo(size_t from, size_t to);
  /// The consumer / producer index is kept up to date incrementally. A pass that changes an op's
  /// inputs or outputs calls BeginEdit(i) before and EndEdit(i) after the change (MoveTo also
  /// ends an edit). Both are idempotent.
  void BeginEdit(size_t i);
  void EndEdit(size_t i);
  /// Records a rewrite in ConvPlan::rewrites.
  void Log(std::string line) { plan_.rewrites.push_back(std::move(line)); }

  /// The plan without tombstones.
  ConvPlan Compact() &&;

 private:
  ConvPlan plan_;
  std::vector<bool> alive_;
  std::unordered_map<std::string, std::vector<size_t>> readers_;  // ascending
  std::unordered_map<std::string, size_t> writer_;
  std::unordered_set<std::string> graph_outputs_;
};

/// One rewrite (see the header comment for the rules of each).
class RewritePass {
 public:
  virtual ~RewritePass() = default;
  virtual const char* name() const = 0;
  /// True when Apply(graph, i) would rewrite something; never modifies the graph.
  virtual bool SatisfyCondition(const PlanGraph& graph, size_t i) const = 0;
  /// Performs the rewrite anchored at op `i` (precondition: SatisfyCondition). Errors only for
  /// inconsistent data (e.g. a BatchNormalization parameter of the wrong size): INVALID_ARGUMENT.
  virtual Status Apply(PlanGraph& graph, size_t i) const = 0;
};

std::unique_ptr<RewritePass> MakeFoldBatchNorm();
std::unique_ptr<RewritePass> MakeFuseRelu();
std::unique_ptr<RewritePass> MakeFuseRelu6();
std::unique_ptr<RewritePass> MakeFuseSigmoid();
std::unique_ptr<RewritePass> MakeFuseSilu();
std::unique_ptr<RewritePass> MakeFuseGelu();
std::unique_ptr<RewritePass> MakeFuseResidualAdd();
std::unique_ptr<RewritePass> MakeKSplitConcat();
std::unique_ptr<RewritePass> MakeMergeSiblingConvs();
/// RemoveDeadHostOps: a host op none of whose outputs is read by any op or is a graph output is
/// removed (e.g. the Cast that turned FLOAT16 weights into FLOAT once the conv holds the weights).
/// Always part of the pipeline.
std::unique_ptr<RewritePass> MakeRemoveDeadHostOps();

/// Applies `pass` at every op where its condition holds, sweeping until nothing changes.
/// Returns the number of rewrites.
Result<int> RunPass(PlanGraph& graph, const RewritePass& pass);

/// The passes PlanOptions enables, in pipeline order.
std::vector<std::unique_ptr<RewritePass>> PassesFor(const PlanOptions& options);

/// Steps 1–2 of BuildConvPlan (check + lowering), no rewrites: one PlanOp per IR node.
Result<ConvPlan> LowerModel(std::shared_ptr<const onnx_fe::Model> model);

/// Runs `passes` in order, repeatedly, until a whole round applies nothing; returns the compacted
/// plan.
Result<ConvPlan> RunPasses(ConvPlan plan, const std::vector<std::unique_ptr<RewritePass>>& passes);

/// "Clip" node bounds as relu6 requires: true iff min == 0 and max == 6 per the opset rules above.
bool IsRelu6Clip(const onnx_fe::Node& node, const onnx_fe::Graph& graph);

}  // namespace kiln::convplan
