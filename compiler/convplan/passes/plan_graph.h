// PlanGraph: a ConvPlan (compiler/convplan/plan.h) under rewriting, with a consumer / producer
// index kept up to date incrementally, for the rewrite rules of compiler/convplan/passes/.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

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

}  // namespace kiln::convplan
