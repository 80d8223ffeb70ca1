// Kiln's immutable graph IR, produced by the ONNX front end (compiler/onnx/loader.h).
//
// Everything downstream of the loader (compiler/ai8x, compiler/convplan) reads models through
// these types and never touches onnx::ModelProto. A Model is built once by LoadModel() and is
// immutable afterwards: it is handed around as std::shared_ptr<const Model> and is safe to read
// from any number of threads. Passes that transform a graph build new structures of their own.
//
// What the loader guarantees about a Graph (see loader.h for the full pipeline):
//  * nodes() is a topological order: every node input is a graph input, a constant, an outer-scope
//    value (subgraphs only), or an output of an earlier node.
//  * Node names are unique within the model (main graph and subgraphs): the first node with a
//    given name keeps it; later duplicates become "<name>_<n>" and empty names "<op_type>_<n>"
//    (never colliding with any name in the model). The model's name is kept in
//    Node::original_name. Tensor names are never changed.
//  * Every attribute that the op's schema (onnx OpSchemaRegistry, for the model's opset) declares
//    with a default value is present in Node::attributes, so a missing attribute reads as the
//    schema default, never as protobuf's zero.
//  * Constant nodes (value, value_float(s), value_int(s)) have become constant tensors; Identity
//    and inference-mode Dropout nodes have been removed, and their consumers read the source
//    tensor directly (Graph::ResolveAlias maps a removed name to the tensor that carries it).
//  * Every tensor referenced by a node or by the graph has an entry in tensors().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "common/status.h"

namespace kiln::onnx_fe {

/// Element types. Numeric values equal onnx TensorProto.DataType (onnx.proto, "DataType").
enum class DataType : int32_t {
  kUndefined = 0,
  kFloat = 1,
  kUint8 = 2,
  kInt8 = 3,
  kUint16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kDouble = 11,
  kUint32 = 12,
  kUint64 = 13,
  kComplex64 = 14,
  kComplex128 = 15,
  kBFloat16 = 16,
};

/// ONNX spelling of a type ("FLOAT", "FLOAT16", ...); "UNDEFINED" for unknown values.
const char* DataTypeName(DataType type);

/// Size of one element in bytes (FLOAT16/BFLOAT16: 2, BOOL: 1); 0 for STRING/UNDEFINED.
size_t DataTypeSize(DataType type);

/// One dimension of a tensor shape: a known size (>= 0), a named symbol ("batch", "N"), or unknown.
/// Symbols come from the model's dim_param and are preserved by shape inference; bind them with
/// LoadOptions::bind_symbols (before shape inference) or Model::BindSymbols (after).
class Dim {
 public:
  /// Unknown dimension (neither a value nor a symbol).
  Dim() = default;
  static Dim Known(int64_t value) { Dim d; d.value_ = value; return d; }
  static Dim Symbol(std::string name) { Dim d; d.symbol_ = std::move(name); return d; }

  bool is_known() const { return value_ >= 0; }
  bool is_symbol() const { return value_ < 0 && !symbol_.empty(); }
  bool is_unknown() const { return value_ < 0 && symbol_.empty(); }
  /// The size; -1 unless is_known().
  int64_t value() const { return value_; }
  /// The symbol name; empty unless is_symbol().
  const std::string& symbol() const { return symbol_; }

  /// "3", "batch" or "?".
  std::string ToString() const;
  bool operator==(const Dim& other) const = default;

 private:
  int64_t value_ = -1;
  std::string symbol_;
};

/// A tensor shape. has_rank() is false when not even the rank is known.
class Shape {
 public:
  /// Unknown rank.
  Shape() = default;
  explicit Shape(std::vector<Dim> dims) : has_rank_(true), dims_(std::move(dims)) {}
  /// All dims known.
  static Shape FromValues(std::span<const int64_t> values);

  bool has_rank() const { return has_rank_; }
  /// Number of dims; 0 for scalars and for unknown rank (check has_rank()).
  size_t rank() const { return dims_.size(); }
  const std::vector<Dim>& dims() const { return dims_; }
  const Dim& dim(size_t i) const { return dims_.at(i); }
  /// True when the rank and every dim are known.
  bool is_static() const;
  /// The dims as integers when is_static(); std::nullopt otherwise.
  std::optional<std::vector<int64_t>> values() const;
  /// Product of the dims when is_static() (1 for a scalar); std::nullopt otherwise.
  std::optional<int64_t> num_elements() const;
  /// "[1,3,batch,?]" or "[?rank]".
  std::string ToString() const;
  bool operator==(const Shape& other) const = default;

 private:
  bool has_rank_ = false;
  std::vector<Dim> dims_;
};

/// Constant payload of a tensor (initializer or former Constant node).
///
/// The data is always available as fp32 (`floats()`), converted from the original type:
/// FLOAT is served without conversion (zero-copy: it aliases the bytes moved out of the parsed
/// protobuf), FLOAT16/BFLOAT16/DOUBLE are converted to the nearest fp32 (IEEE round-to-nearest-even
/// for DOUBLE), integer types are converted exactly up to 2^24 and rounded above. Integer types are
/// also available exactly as int64 (`ints()`), which is what shape-like inputs (Reshape shape,
/// Clip-11 min/max in integer models, Pad pads) should read. BOOL is stored as 0/1.
/// STRING tensors are rejected by the loader.
class ConstantData {
 public:
  ConstantData(DataType original_type, std::shared_ptr<const void> owner, std::span<const float> floats,
               std::vector<int64_t> ints, std::vector<double> doubles = {})
      : original_type_(original_type),
        owner_(std::move(owner)),
        floats_(floats),
        ints_(std::move(ints)),
        doubles_(std::move(doubles)) {}

  /// Element type the model stored (before conversion to fp32).
  DataType original_type() const { return original_type_; }
  /// Number of elements.
  size_t size() const { return floats_.size(); }
  /// All elements as fp32, row-major (C order) like ONNX. Valid as long as this object lives.
  std::span<const float> floats() const { return floats_; }
  /// True when original_type() is an integer or BOOL type; ints() then holds exact values.
  bool is_integer() const;
  /// Exact integer values for integer/BOOL types; empty for floating types.
  const std::vector<int64_t>& ints() const { return ints_; }
  /// Exact values for DOUBLE (floats() holds them rounded to fp32); empty for other types.
  const std::vector<double>& doubles() const { return doubles_; }

 private:
  DataType original_type_;
  std::shared_ptr<const void> owner_;  // keeps the storage behind floats_ alive
  std::span<const float> floats_;
  std::vector<int64_t> ints_;
  std::vector<double> doubles_;
};

/// A value in the graph: graph input, constant (initializer / Constant node) or node output.
struct Tensor {
  /// Name as in the model (never rewritten).
  std::string name;
  /// Element type; kUndefined when neither declared nor inferred.
  DataType dtype = DataType::kUndefined;
  /// Shape after shape inference (declared shape where inference had nothing better).
  Shape shape;
  /// Set for constants (initializers and former Constant nodes); null for everything else.
  std::shared_ptr<const ConstantData> constant;

  bool is_constant() const { return constant != nullptr; }
};

class Graph;

/// Attribute kinds. Numeric values equal onnx AttributeProto.AttributeType.
enum class AttributeType : int32_t {
  kUndefined = 0,
  kFloat = 1,
  kInt = 2,
  kString = 3,
  kTensor = 4,
  kGraph = 5,
  kFloats = 6,
  kInts = 7,
  kStrings = 8,
  kTensors = 9,
  kGraphs = 10,
};

/// A node attribute. Exactly the member matching `type` is meaningful.
struct Attribute {
  std::string name;
  AttributeType type = AttributeType::kUndefined;
  /// True when the model did not set it and the value is the schema default.
  bool from_default = false;

  int64_t i = 0;
  float f = 0.0f;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  /// kTensor: the decoded tensor (name may be empty); kTensors: `tensors`.
  std::shared_ptr<const Tensor> t;
  std::vector<std::shared_ptr<const Tensor>> tensors;
  /// kGraph (If then/else, Loop/Scan body) and kGraphs.
  std::shared_ptr<const Graph> g;
  std::vector<std::shared_ptr<const Graph>> graphs;
};

/// Index of a node in Graph::nodes() (topological position).
using NodeIndex = size_t;

/// One operator application.
struct Node {
  /// Unique name within the model (generated when the model's was empty or duplicate).
  std::string name;
  /// The name as written in the model (may be empty or shared with other nodes).
  std::string original_name;
  std::string op_type;
  /// Operator domain; "" is the default ai.onnx domain.
  std::string domain;
  /// Opset version of `domain` imported by the model (e.g. 13).
  int64_t opset_version = 0;
  /// Input tensor names in schema order; "" marks an omitted optional input.
  std::vector<std::string> inputs;
  /// Output tensor names; "" marks an omitted optional output.
  std::vector<std::string> outputs;
  /// Attributes by name: those the model set, plus every schema default it did not set.
  std::map<std::string, Attribute, std::less<>> attributes;

  /// True when input `i` exists and is not "".
  bool has_input(size_t i) const { return i < inputs.size() && !inputs[i].empty(); }
  /// The attribute, or nullptr when neither set nor defaulted.
  const Attribute* FindAttribute(std::string_view attr) const;

  // Typed attribute readers. Errors (INVALID_ARGUMENT, message naming node, op type and
  // attribute): attribute absent and no fallback given, or of a different type.
  Result<int64_t> GetInt(std::string_view attr) const;
  Result<std::vector<int64_t>> GetInts(std::string_view attr) const;
  Result<float> GetFloat(std::string_view attr) const;
  Result<std::vector<float>> GetFloats(std::string_view attr) const;
  Result<std::string> GetString(std::string_view attr) const;
  // Variants with a fallback for attributes that have no schema default (e.g. Conv `pads`);
  // a present attribute of the wrong type is still an error.
  Result<int64_t> GetInt(std::string_view attr, int64_t fallback) const;
  Result<std::vector<int64_t>> GetInts(std::string_view attr, std::vector<int64_t> fallback) const;
  Result<float> GetFloat(std::string_view attr, float fallback) const;
  Result<std::string> GetString(std::string_view attr, std::string fallback) const;

  /// "Conv 'conv1'" for messages.
  std::string Describe() const;
};

/// A graph output: the name the model declares, and the tensor that carries it (differs from
/// `name` only when the declared output was produced by a removed Identity/Dropout).
struct GraphOutput {
  std::string name;
  std::string tensor;
};

/// Hash for string-keyed maps that accept std::string_view lookups without building a
/// std::string (C++20 heterogeneous lookup; use with std::equal_to<>).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

/// String-keyed map with heterogeneous (std::string_view) lookup.
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

/// A (sub)graph in topological order with producer/consumer maps.
class Graph {
 public:
  Graph() = default;
  /// Copies re-index: the producer/consumer maps hold views into the graph's own node strings.
  Graph(const Graph& other);
  Graph& operator=(const Graph& other);
  /// Moves keep the node storage, so the views stay valid.
  Graph(Graph&&) noexcept = default;
  Graph& operator=(Graph&&) noexcept = default;

  /// Graph name from the model (may be empty).
  const std::string& name() const { return name_; }
  /// Nodes in topological order.
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(NodeIndex i) const { return nodes_.at(i); }
  /// Runtime inputs (graph.input minus initializers), in model order.
  const std::vector<std::string>& inputs() const { return inputs_; }
  /// Declared outputs, in model order.
  const std::vector<GraphOutput>& outputs() const { return outputs_; }
  /// Every tensor in this graph (inputs, constants, node outputs) by name. Names captured from an
  /// enclosing graph (subgraphs) are looked up in the parent by the caller.
  const StringMap<Tensor>& tensors() const { return tensors_; }
  /// Names of this graph's initializers in model order (GraphProto.initializer order), which
  /// tensors() does not keep. Exporters list them in their own order, independent of the node
  /// order: torch.onnx, for example, lists parameters in state_dict (module definition) order,
  /// which back ends that match weights by position (ai8x: the izer) must compare with the node
  /// order. Each name has a constant entry in tensors(); former Constant nodes are not listed.
  const std::vector<std::string>& initializer_order() const { return initializer_order_; }

  /// The tensor, or nullptr. Aliases of removed Identity/Dropout outputs are resolved first.
  const Tensor* FindTensor(std::string_view name) const;
  /// The tensor that carries `name`: `name` itself unless it was the output of a removed
  /// Identity/Dropout, in which case the (transitively) forwarded source tensor.
  std::string_view ResolveAlias(std::string_view name) const;
  /// Index of the node that produces `name`, or nullopt for graph inputs, constants, outer-scope
  /// values and unknown names.
  std::optional<NodeIndex> Producer(std::string_view name) const;
  /// Indices of the nodes that read `name` (ascending, one entry per consuming node); empty
  /// when none.
  std::span<const NodeIndex> Consumers(std::string_view name) const;
  /// True when `name` is a declared graph output (after alias resolution).
  bool IsGraphOutput(std::string_view name) const;
  /// Names this (sub)graph reads from enclosing graphs (outer-scope captures), sorted; empty for
  /// the main graph. The owning node counts as a consumer of each in the parent's Consumers().
  const std::vector<std::string>& captured() const { return captured_; }

  /// Constant data of `node`'s input `i`, or nullptr when the input is absent or not constant.
  const ConstantData* ConstantInput(const Node& node, size_t i) const;
  /// Like ConstantInput but an error (INVALID_ARGUMENT naming node, op and input) when absent or
  /// not constant.
  Result<std::shared_ptr<const ConstantData>> RequireConstantInput(const Node& node, size_t i) const;
  /// Static shape of `node`'s input `i`; error when the input is absent or its shape is not
  /// fully known.
  Result<std::vector<int64_t>> StaticInputShape(const Node& node, size_t i) const;
  /// Static shape of `node`'s output `i`; error when not fully known.
  Result<std::vector<int64_t>> StaticOutputShape(const Node& node, size_t i) const;

 private:
  friend class GraphBuilder;  // the loader's builder (compiler/onnx/load_build.cc)
  friend class Model;         // Model::BindSymbols rebuilds graphs (compiler/onnx/ir.cc)
  /// Rebuilds producer_/consumers_ from nodes_ (after nodes_ or subgraph attributes change).
  void Reindex();
  std::string name_;
  std::vector<Node> nodes_;
  std::vector<std::string> inputs_;
  std::vector<GraphOutput> outputs_;
  StringMap<Tensor> tensors_;
  std::vector<std::string> initializer_order_;
  StringMap<std::string> aliases_;
  // Keys view nodes_' output/input strings and the subgraphs' captured_ names (kept alive by
  // the nodes' attributes); rebuilt by Reindex() whenever those change.
  std::unordered_map<std::string_view, NodeIndex> producer_;
  std::unordered_map<std::string_view, std::vector<NodeIndex>> consumers_;
  std::vector<std::string> captured_;
};

/// An opset import: domain ("" = ai.onnx) and version.
struct OpsetImport {
  std::string domain;
  int64_t version = 0;
};

/// A loaded model: metadata plus the main graph.
class Model {
 public:
  int64_t ir_version() const { return ir_version_; }
  /// Opset version of the default (ai.onnx) domain, 6..17.
  int64_t opset() const { return opset_; }
  const std::vector<OpsetImport>& opset_imports() const { return opset_imports_; }
  const std::string& producer_name() const { return producer_name_; }
  const std::string& producer_version() const { return producer_version_; }
  const Graph& graph() const { return *graph_; }
  std::shared_ptr<const Graph> graph_ptr() const { return graph_; }
  /// Total number of nodes, including nodes inside subgraphs.
  size_t total_node_count() const { return total_node_count_; }
  /// Non-fatal findings of the loader (e.g. "declared shape of 'x' replaced by inferred ...").
  const std::vector<std::string>& warnings() const { return warnings_; }
  /// Names of the symbolic dims that appear anywhere in the main graph, sorted.
  std::vector<std::string> Symbols() const;

  /// A copy of this model in which every dim whose symbol is in `values` becomes that value
  /// (main graph and subgraphs; constant data is shared, not copied). This substitutes symbols
  /// only: dims that shape inference left unknown stay unknown. To get fully re-inferred shapes,
  /// bind at load time with LoadOptions::bind_symbols instead.
  /// Errors: INVALID_ARGUMENT for a negative value.
  Result<std::shared_ptr<const Model>> BindSymbols(const std::map<std::string, int64_t>& values) const;

  /// A copy of this model in which the main-graph nodes `removed` (indices into graph().nodes())
  /// are gone and each tensor in `values` (by name; produced by a removed node) is a constant
  /// with that data, element type and static shape — what plan-time constant folding
  /// (compiler/convplan/fold_constants.h) builds. Subgraphs and other constants are shared.
  /// INVALID_ARGUMENT for an index out of range or a value that names no tensor of the graph.
  struct FoldedValue {
    std::shared_ptr<const ConstantData> data;
    DataType dtype = DataType::kUndefined;
    std::vector<int64_t> shape;
  };
  Result<std::shared_ptr<const Model>> WithConstants(const std::vector<NodeIndex>& removed,
                                                     const std::map<std::string, FoldedValue>& values) const;

 private:
  friend class GraphBuilder;
  friend class ModelBuilder;
  int64_t ir_version_ = 0;
  int64_t opset_ = 0;
  std::vector<OpsetImport> opset_imports_;
  std::string producer_name_;
  std::string producer_version_;
  std::shared_ptr<const Graph> graph_;
  size_t total_node_count_ = 0;
  std::vector<std::string> warnings_;
};

}  // namespace kiln::onnx_fe
