// The layer builder of BuildLayers (compiler/ai8x/passes.h), internal to compiler/ai8x: the node
// walk (build_layers.cc), one handler per accelerator operation (build_ops.cc) and the graph
// queries for weights, shapes and names (build_weights.cc).
#pragma once

#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "compiler/ai8x/network.h"
#include "compiler/onnx/ir.h"

namespace kiln::ai8x::build {

using onnx_fe::Graph;
using onnx_fe::Node;

// What a tensor on the data path carries.
struct Value {
  enum Kind { kData, kHost } kind = kData;
  std::vector<int> refs;  // producing layer ids (kNetworkInput for the input); >1 = concat
  bool neg = false;       // Neg(x) of data x (for Sub as Neg+Add)
};

/// The izer layer name of an ONNX node scope: "/feature_stage.1/feature_stage.1.1/conv1/Conv" ->
/// "feature_stage.1.1.conv1"; "/base/fire3/Conv" -> "base.fire3"; "" when the name has no scope.
std::string ScopeName(const std::string& node_name);

/// Product of `v`, saturating at INT64_MAX instead of overflowing.
int64_t Product(const std::vector<int64_t>& v);

// Every integer taken from an ONNX shape or attribute is range-checked (rules::DimensionProblem,
// the *AttributeInRange checks of compiler/ai8x/rules/rules.h) before it is narrowed to the Layer's
// `int` fields; out of range is an error diagnostic, never a wrapped value.
class Builder {
 public:
  Builder(const Graph& g, Network& net) : g_(g), net_(net) {
    for (size_t i = 0; i < g.initializer_order().size(); ++i) {
      init_pos_.emplace(g.initializer_order()[i], static_cast<int>(i));
    }
  }

  /// Builds net's layers from the graph (passes.h BuildLayers).
  void Run();

 private:
  // build_layers.cc: the node walk.
  bool SetUpInput();
  void Visit(const Node& n);
  void HandleNeg(const Node& n);
  void HandleElementwise(const Node& n, const std::vector<size_t>& data_inputs);
  void HandleClamp(const Node& n, const std::vector<size_t>& data_inputs);
  void HandlePad(const Node& n, const std::vector<size_t>& data_inputs);
  void HandleConcat(const Node& n, const std::vector<size_t>& data_inputs);
  void Finish();

  // build_weights.cc: what the graph says about tensors, weights and names.
  bool IsData(const std::string& t) const { return !t.empty() && values_.count(g_.ResolveAlias(t)) > 0; }
  const Value* Get(const std::string& t) const {
    auto it = values_.find(g_.ResolveAlias(t));
    return it == values_.end() ? nullptr : &it->second;
  }
  void Set(const std::string& t, Value v) { values_[t] = std::move(v); }

  /// Static (C, H, W) of `t`; nullopt when unknown or, with `*bad` set, when a dimension is
  /// outside 1..rules::kMaxDimension.
  std::optional<Shape3> TensorShape(const std::string& t, bool* one_d, std::string* bad = nullptr) const;
  Shape3 RefsShape(const std::vector<int>& refs) const;
  std::string LayerName(const Node& n, const std::string& fallback_kind);
  /// Breadth-first walk up `n`'s weight input (input 1), the one walk of the three weight
  /// queries below: each alias-resolved tensor is offered once to `visit` (at most 64 offers,
  /// repeats included), which answers kStop, kSkip (do not look further up) or kExpand (queue the
  /// non-empty inputs of its producer that `follow` accepts).
  enum class Walk { kStop, kSkip, kExpand };
  template <typename VisitFn, typename FollowFn>
  void WalkWeightPath(const Node& n, VisitFn visit, FollowFn follow) const;
  /// Weight initializer name "<layer>.op.weight" / "<layer>.weight" upstream of input 1, or "".
  std::string WeightName(const Node& n) const;
  /// QAT weight bits: the weight path holds Mul(x, 2^(bits-1)) -> Round
  /// (docs/specs/ai8x-izer-rules.md §2.3 (b)).
  std::optional<int> WeightBits(const Node& n) const;
  /// The initializer holding `n`'s weights: the nearest with l.weight_count elements, failing
  /// that the nearest named `*.weight`; sets l.weight_initializer and l.weight_position.
  void SetWeightInitializer(Layer& l, const Node& n) const;
  /// Weight initializer and bit width of conv/linear layer `l`, and its output as data.
  void FinishWeightLayer(Layer& l, const Node& n);
  std::optional<float> ScalarConst(const std::string& t) const;
  bool AllConstZero(const std::string& t) const;

  // build_ops.cc: one handler per accelerator operation.
  Layer& NewLayer(const Node& n, const std::vector<int>& refs, const std::string& name);
  void Reshaped(Layer& l, const Node& n, bool may_flatten = false);
  void MakeHost(const Node& n, const std::string& why);
  void MarkOutput(const std::vector<int>& refs);

  void HandleConv(const Node& n);
  void HandleLinear(const Node& n);
  void HandlePool(const Node& n);
  void HandleActivation(const Node& n);
  void HandleEltwise(const Node& n, EltwiseOp op);
  void HandleTransparent(const Node& n, size_t data_input);

  const Graph& g_;
  Network& net_;
  onnx_fe::StringMap<Value> values_;
  onnx_fe::StringMap<int> init_pos_;  // initializer name -> model position
  std::unordered_set<std::string> used_names_;
  std::vector<std::string> host_ops_;
  std::vector<std::string> dropped_hw_ops_;
  bool saw_clamp_ = false;
};

}  // namespace kiln::ai8x::build
