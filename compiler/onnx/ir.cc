#include "compiler/onnx/ir.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <unordered_map>

namespace kiln::onnx_fe {

const char* DataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat: return "FLOAT";
    case DataType::kUint8: return "UINT8";
    case DataType::kInt8: return "INT8";
    case DataType::kUint16: return "UINT16";
    case DataType::kInt16: return "INT16";
    case DataType::kInt32: return "INT32";
    case DataType::kInt64: return "INT64";
    case DataType::kString: return "STRING";
    case DataType::kBool: return "BOOL";
    case DataType::kFloat16: return "FLOAT16";
    case DataType::kDouble: return "DOUBLE";
    case DataType::kUint32: return "UINT32";
    case DataType::kUint64: return "UINT64";
    case DataType::kComplex64: return "COMPLEX64";
    case DataType::kComplex128: return "COMPLEX128";
    case DataType::kBFloat16: return "BFLOAT16";
    case DataType::kUndefined: break;
  }
  return "UNDEFINED";
}

size_t DataTypeSize(DataType type) {
  switch (type) {
    case DataType::kFloat: return 4;
    case DataType::kUint8: return 1;
    case DataType::kInt8: return 1;
    case DataType::kUint16: return 2;
    case DataType::kInt16: return 2;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kBool: return 1;
    case DataType::kFloat16: return 2;
    case DataType::kDouble: return 8;
    case DataType::kUint32: return 4;
    case DataType::kUint64: return 8;
    case DataType::kComplex64: return 8;
    case DataType::kComplex128: return 16;
    case DataType::kBFloat16: return 2;
    case DataType::kString:
    case DataType::kUndefined: break;
  }
  return 0;
}

std::string Dim::ToString() const {
  if (is_known()) return std::to_string(value_);
  if (is_symbol()) return symbol_;
  return "?";
}

Shape Shape::FromValues(std::span<const int64_t> values) {
  std::vector<Dim> dims;
  dims.reserve(values.size());
  for (int64_t v : values) dims.push_back(Dim::Known(v));
  return Shape(std::move(dims));
}

bool Shape::is_static() const {
  if (!has_rank_) return false;
  return std::all_of(dims_.begin(), dims_.end(), [](const Dim& d) { return d.is_known(); });
}

std::optional<std::vector<int64_t>> Shape::values() const {
  if (!is_static()) return std::nullopt;
  std::vector<int64_t> out;
  out.reserve(dims_.size());
  for (const Dim& d : dims_) out.push_back(d.value());
  return out;
}

std::optional<int64_t> Shape::num_elements() const {
  if (!is_static()) return std::nullopt;
  int64_t n = 1;
  for (const Dim& d : dims_) {
    if (d.value() != 0 && n > INT64_MAX / d.value()) return std::nullopt;
    n *= d.value();
  }
  return n;
}

std::string Shape::ToString() const {
  if (!has_rank_) return "[?rank]";
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ",";
    s += dims_[i].ToString();
  }
  return s + "]";
}

bool ConstantData::is_integer() const {
  switch (original_type_) {
    case DataType::kUint8:
    case DataType::kInt8:
    case DataType::kUint16:
    case DataType::kInt16:
    case DataType::kInt32:
    case DataType::kInt64:
    case DataType::kBool:
    case DataType::kUint32:
    case DataType::kUint64:
      return true;
    default:
      return false;
  }
}

// ---------------------------------------------------------------------------------------------
// Node

const Attribute* Node::FindAttribute(std::string_view attr) const {
  auto it = attributes.find(attr);
  return it == attributes.end() ? nullptr : &it->second;
}

std::string Node::Describe() const { return op_type + " '" + name + "'"; }

namespace {

const char* AttributeTypeName(AttributeType t) {
  switch (t) {
    case AttributeType::kFloat: return "FLOAT";
    case AttributeType::kInt: return "INT";
    case AttributeType::kString: return "STRING";
    case AttributeType::kTensor: return "TENSOR";
    case AttributeType::kGraph: return "GRAPH";
    case AttributeType::kFloats: return "FLOATS";
    case AttributeType::kInts: return "INTS";
    case AttributeType::kStrings: return "STRINGS";
    case AttributeType::kTensors: return "TENSORS";
    case AttributeType::kGraphs: return "GRAPHS";
    case AttributeType::kUndefined: break;
  }
  return "UNDEFINED";
}

// Looks up `attr` with the expected type. Returns nullptr + ok status when absent.
Result<const Attribute*> Lookup(const Node& node, std::string_view attr, AttributeType want) {
  const Attribute* a = node.FindAttribute(attr);
  if (a == nullptr) return static_cast<const Attribute*>(nullptr);
  if (a->type != want) {
    return InvalidArgument("node '" + node.name + "' (" + node.op_type + "): attribute '" + std::string(attr) +
                           "' has type " + AttributeTypeName(a->type) + ", expected " + AttributeTypeName(want));
  }
  return a;
}

Status Missing(const Node& node, std::string_view attr) {
  return InvalidArgument("node '" + node.name + "' (" + node.op_type + "): attribute '" + std::string(attr) +
                         "' is required but not set (and the op schema has no default)");
}

}  // namespace

Result<int64_t> Node::GetInt(std::string_view attr) const {
  auto a = Lookup(*this, attr, AttributeType::kInt);
  if (!a.ok()) return a.status();
  if (*a == nullptr) return Missing(*this, attr);
  return (*a)->i;
}
Result<std::vector<int64_t>> Node::GetInts(std::string_view attr) const {
  auto a = Lookup(*this, attr, AttributeType::kInts);
  if (!a.ok()) return a.status();
  if (*a == nullptr) return Missing(*this, attr);
  return (*a)->ints;
}
Result<float> Node::GetFloat(std::string_view attr) const {
  auto a = Lookup(*this, attr, AttributeType::kFloat);
  if (!a.ok()) return a.status();
  if (*a == nullptr) return Missing(*this, attr);
  return (*a)->f;
}
Result<std::vector<float>> Node::GetFloats(std::string_view attr) const {
  auto a = Lookup(*this, attr, AttributeType::kFloats);
  if (!a.ok()) return a.status();
  if (*a == nullptr) return Missing(*this, attr);
  return (*a)->floats;
}
Result<std::string> Node::GetString(std::string_view attr) const {
  auto a = Lookup(*this, attr, AttributeType::kString);
  if (!a.ok()) return a.status();
  if (*a == nullptr) return Missing(*this, attr);
  return (*a)->s;
}
Result<int64_t> Node::GetInt(std::string_view attr, int64_t fallback) const {
  auto a = Lookup(*this, attr, AttributeType::kInt);
  if (!a.ok()) return a.status();
  return *a == nullptr ? fallback : (*a)->i;
}
Result<std::vector<int64_t>> Node::GetInts(std::string_view attr, std::vector<int64_t> fallback) const {
  auto a = Lookup(*this, attr, AttributeType::kInts);
  if (!a.ok()) return a.status();
  if (*a == nullptr) return fallback;
  return (*a)->ints;
}
Result<float> Node::GetFloat(std::string_view attr, float fallback) const {
  auto a = Lookup(*this, attr, AttributeType::kFloat);
  if (!a.ok()) return a.status();
  return *a == nullptr ? fallback : (*a)->f;
}
Result<std::string> Node::GetString(std::string_view attr, std::string fallback) const {
  auto a = Lookup(*this, attr, AttributeType::kString);
  if (!a.ok()) return a.status();
  if (*a == nullptr) return fallback;
  return (*a)->s;
}

// ---------------------------------------------------------------------------------------------
// Graph

Graph::Graph(const Graph& other)
    : name_(other.name_),
      nodes_(other.nodes_),
      inputs_(other.inputs_),
      outputs_(other.outputs_),
      tensors_(other.tensors_),
      initializer_order_(other.initializer_order_),
      aliases_(other.aliases_),
      captured_(other.captured_) {
  Reindex();
}

Graph& Graph::operator=(const Graph& other) {
  if (this != &other) {
    Graph copy(other);
    *this = std::move(copy);
  }
  return *this;
}

void Graph::Reindex() {
  producer_.clear();
  consumers_.clear();
  producer_.reserve(nodes_.size() + nodes_.size() / 2);
  consumers_.reserve(nodes_.size() + nodes_.size() / 2);
  for (NodeIndex i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    for (const auto& o : n.outputs) {
      if (!o.empty()) producer_[o] = i;
    }
    for (const auto& in : n.inputs) {
      if (in.empty()) continue;
      auto& v = consumers_[in];
      if (v.empty() || v.back() != i) v.push_back(i);
    }
    // Values captured by subgraphs count as consumed by the node that owns the subgraph.
    for (const auto& [_, a] : n.attributes) {
      auto add_captured = [&](const Graph& sg) {
        for (const std::string& fv : sg.captured_) {
          auto& v = consumers_[fv];
          if (v.empty() || v.back() != i) v.push_back(i);
        }
      };
      if (a.g) add_captured(*a.g);
      for (const auto& sg : a.graphs) add_captured(*sg);
    }
  }
}

std::string_view Graph::ResolveAlias(std::string_view name) const {
  // aliases_ is stored fully resolved by the builder (one hop). Most graphs have none: skip the hash.
  if (aliases_.empty()) return name;
  auto it = aliases_.find(name);
  if (it == aliases_.end()) return name;
  return it->second;
}

const Tensor* Graph::FindTensor(std::string_view name) const {
  auto it = tensors_.find(ResolveAlias(name));
  return it == tensors_.end() ? nullptr : &it->second;
}

std::optional<NodeIndex> Graph::Producer(std::string_view name) const {
  auto it = producer_.find(ResolveAlias(name));
  if (it == producer_.end()) return std::nullopt;
  return it->second;
}

std::span<const NodeIndex> Graph::Consumers(std::string_view name) const {
  auto it = consumers_.find(ResolveAlias(name));
  if (it == consumers_.end()) return {};
  return it->second;
}

bool Graph::IsGraphOutput(std::string_view name) const {
  std::string_view t = ResolveAlias(name);
  return std::any_of(outputs_.begin(), outputs_.end(), [&](const GraphOutput& o) { return o.tensor == t; });
}

const ConstantData* Graph::ConstantInput(const Node& node, size_t i) const {
  if (!node.has_input(i)) return nullptr;
  const Tensor* t = FindTensor(node.inputs[i]);
  return t && t->constant ? t->constant.get() : nullptr;
}

Result<std::shared_ptr<const ConstantData>> Graph::RequireConstantInput(const Node& node, size_t i) const {
  if (!node.has_input(i)) {
    return InvalidArgument("node '" + node.name + "' (" + node.op_type + "): input " + std::to_string(i) +
                           " is absent but must be a constant");
  }
  const Tensor* t = FindTensor(node.inputs[i]);
  if (t == nullptr || !t->constant) {
    return InvalidArgument("node '" + node.name + "' (" + node.op_type + "): input " + std::to_string(i) + " ('" +
                           node.inputs[i] + "') must be a constant (initializer or Constant node)");
  }
  return t->constant;
}

namespace {
Result<std::vector<int64_t>> StaticShapeOf(const Graph& g, const Node& node, const std::vector<std::string>& names,
                                           size_t i, const char* what) {
  if (i >= names.size() || names[i].empty()) {
    return InvalidArgument("node '" + node.name + "' (" + node.op_type + "): " + what + " " + std::to_string(i) +
                           " is absent");
  }
  const Tensor* t = g.FindTensor(names[i]);
  if (t == nullptr) {
    return InvalidArgument("node '" + node.name + "' (" + node.op_type + "): " + what + " '" + names[i] +
                           "' is not a tensor of this graph");
  }
  auto v = t->shape.values();
  if (!v) {
    return InvalidArgument("node '" + node.name + "' (" + node.op_type + "): " + what + " '" + names[i] +
                           "' has shape " + t->shape.ToString() +
                           ", which is not fully known (bind symbolic dims when loading)");
  }
  return *v;
}
}  // namespace

Result<std::vector<int64_t>> Graph::StaticInputShape(const Node& node, size_t i) const {
  return StaticShapeOf(*this, node, node.inputs, i, "input");
}
Result<std::vector<int64_t>> Graph::StaticOutputShape(const Node& node, size_t i) const {
  return StaticShapeOf(*this, node, node.outputs, i, "output");
}

// ---------------------------------------------------------------------------------------------
// Model

std::vector<std::string> Model::Symbols() const {
  std::set<std::string> syms;
  for (const auto& [name, t] : graph_->tensors()) {
    for (const Dim& d : t.shape.dims()) {
      if (d.is_symbol()) syms.insert(d.symbol());
    }
  }
  return {syms.begin(), syms.end()};
}

// ---------------------------------------------------------------------------------------------
// Model::BindSymbols (iterative over nested subgraphs)

Result<std::shared_ptr<const Model>> Model::BindSymbols(const std::map<std::string, int64_t>& values) const {
  for (const auto& [sym, v] : values) {
    if (v < 0) return InvalidArgument("BindSymbols: symbol '" + sym + "' bound to negative value " + std::to_string(v));
  }
  // Pre-order list of every graph, then rebuild children before parents.
  std::vector<const Graph*> order{graph_.get()};
  for (size_t i = 0; i < order.size(); ++i) {
    for (const Node& n : order[i]->nodes()) {
      for (const auto& [_, a] : n.attributes) {
        if (a.g) order.push_back(a.g.get());
        for (const auto& sg : a.graphs) order.push_back(sg.get());
      }
    }
  }
  auto bind_shape = [&](Shape& s) {
    if (!s.has_rank()) return;
    std::vector<Dim> dims = s.dims();
    for (Dim& d : dims) {
      if (!d.is_symbol()) continue;
      auto it = values.find(d.symbol());
      if (it != values.end()) d = Dim::Known(it->second);
    }
    s = Shape(std::move(dims));
  };
  std::unordered_map<const Graph*, std::shared_ptr<const Graph>> rebuilt;
  for (size_t k = order.size(); k-- > 0;) {
    auto g = std::make_shared<Graph>(*order[k]);
    for (auto& [_, t] : g->tensors_) bind_shape(t.shape);
    for (Node& n : g->nodes_) {
      for (auto& [_, a] : n.attributes) {
        if (a.g) a.g = rebuilt.at(a.g.get());
        for (auto& sg : a.graphs) sg = rebuilt.at(sg.get());
      }
    }
    g->Reindex();  // consumers_ viewed the old subgraphs' captured names
    rebuilt[order[k]] = std::move(g);
  }
  auto m = std::make_shared<Model>(*this);
  m->graph_ = rebuilt.at(graph_.get());
  return std::shared_ptr<const Model>(std::move(m));
}

// ---------------------------------------------------------------------------------------------
// Model::WithConstants

Result<std::shared_ptr<const Model>> Model::WithConstants(const std::vector<NodeIndex>& removed,
                                                          const std::map<std::string, FoldedValue>& values) const {
  auto g = std::make_shared<Graph>(*graph_);
  std::vector<bool> drop(g->nodes_.size(), false);
  for (NodeIndex i : removed) {
    if (i >= drop.size()) return InvalidArgument("WithConstants: node index " + std::to_string(i) + " out of range");
    drop[i] = true;
  }
  for (const auto& [name, v] : values) {
    auto it = g->tensors_.find(name);
    if (it == g->tensors_.end()) return InvalidArgument("WithConstants: no tensor '" + name + "'");
    it->second.constant = v.data;
    it->second.dtype = v.dtype;
    it->second.shape = Shape::FromValues(v.shape);
  }
  std::vector<Node> kept;
  kept.reserve(g->nodes_.size() - removed.size());
  for (NodeIndex i = 0; i < g->nodes_.size(); ++i) {
    if (!drop[i]) kept.push_back(std::move(g->nodes_[i]));
  }
  g->nodes_ = std::move(kept);
  g->Reindex();
  auto m = std::make_shared<Model>(*this);
  m->graph_ = std::move(g);
  return std::shared_ptr<const Model>(std::move(m));
}

}  // namespace kiln::onnx_fe
