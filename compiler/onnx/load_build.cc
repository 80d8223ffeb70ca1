// Stage BuildModel (compiler/onnx/load_stages.h): the validated, sorted and inferred
// onnx::ModelProto becomes Kiln's immutable IR (compiler/onnx/ir.h, whose header lists what the
// IR guarantees). Identity and inference-mode Dropout nodes become aliases of their input;
// attributes are completed with the schema defaults of the model's opset; Constant nodes and
// initializers become constant tensors whose payloads are moved out of the protobuf, not copied
// (compiler/onnx/tensor_decode.h).
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <optional>
#include <unordered_set>
#include <utility>
#include <vector>

#include "compiler/onnx/load_stages.h"
#include "compiler/onnx/tensor_decode.h"

namespace kiln::onnx_fe {

// Builds IR objects; friend of Graph and Model (compiler/onnx/ir.h).
class GraphBuilder {
 public:
  static std::shared_ptr<Graph> NewGraph() { return std::shared_ptr<Graph>(new Graph()); }
  static std::string& name(Graph& g) { return g.name_; }
  static std::vector<Node>& nodes(Graph& g) { return g.nodes_; }
  static std::vector<std::string>& inputs(Graph& g) { return g.inputs_; }
  static std::vector<GraphOutput>& outputs(Graph& g) { return g.outputs_; }
  static StringMap<Tensor>& tensors(Graph& g) { return g.tensors_; }
  static std::vector<std::string>& initializer_order(Graph& g) { return g.initializer_order_; }
  static StringMap<std::string>& aliases(Graph& g) { return g.aliases_; }
  static void Index(Graph& g) { g.Reindex(); }
  static std::vector<std::string>& captured(Graph& g) { return g.captured_; }

  static std::shared_ptr<Model> NewModel() { return std::shared_ptr<Model>(new Model()); }
  static int64_t& ir_version(Model& m) { return m.ir_version_; }
  static int64_t& opset(Model& m) { return m.opset_; }
  static std::vector<OpsetImport>& opset_imports(Model& m) { return m.opset_imports_; }
  static std::string& producer_name(Model& m) { return m.producer_name_; }
  static std::string& producer_version(Model& m) { return m.producer_version_; }
  static std::shared_ptr<const Graph>& graph(Model& m) { return m.graph_; }
  static size_t& total_node_count(Model& m) { return m.total_node_count_; }
  static std::vector<std::string>& warnings(Model& m) { return m.warnings_; }
};

namespace internal {
namespace {

using onnx::AttributeProto;
using onnx::GraphProto;
using onnx::NodeProto;
using onnx::TensorProto;
using onnx::TypeProto;
using onnx::ValueInfoProto;
using B = GraphBuilder;

Shape ShapeFromType(const TypeProto* type) {
  if (type == nullptr || !type->has_tensor_type() || !type->tensor_type().has_shape()) return Shape();
  std::vector<Dim> dims;
  const auto& sp = type->tensor_type().shape();
  dims.reserve(sp.dim_size());
  for (const auto& d : sp.dim()) {
    if (d.has_dim_value() && d.dim_value() >= 0) {
      dims.push_back(Dim::Known(d.dim_value()));
    } else if (d.has_dim_param() && !d.dim_param().empty()) {
      dims.push_back(Dim::Symbol(d.dim_param()));
    } else {
      dims.push_back(Dim());
    }
  }
  return Shape(std::move(dims));
}

DataType DTypeFromType(const TypeProto* type) {
  if (type == nullptr || !type->has_tensor_type()) return DataType::kUndefined;
  return static_cast<DataType>(type->tensor_type().elem_type());
}

const TensorProto* FindConstantTensor(const LoadContext& ctx, int gi, const std::string& name) {
  for (int g = gi; g >= 0; g = ctx.graphs[g].parent) {
    for (const auto& t : ctx.graphs[g].proto->initializer()) {
      if (t.name() == name) return &t;
    }
    for (const auto& node : ctx.graphs[g].proto->node()) {
      if (node.op_type() == "Constant" && IsDefaultDomain(node.domain()) && node.output_size() == 1 &&
          node.output(0) == name) {
        for (const auto& a : node.attribute()) {
          if (a.name() == "value" && a.has_t()) return &a.t();
        }
      }
    }
  }
  return nullptr;
}

// Identity and inference-mode Dropout become aliases (processed in topological order).
Status ComputeAliases(LoadContext& ctx, int gidx) {
  GraphInfo& info = ctx.graphs[gidx];
  const GraphProto& g = *info.proto;
  // Every name the graph reads; built on first use (only Dropout nodes with a mask output need it).
  std::unordered_set<std::string_view> used;
  bool used_built = false;
  auto is_used = [&](std::string_view name) {
    if (!used_built) {
      used_built = true;
      for (const auto& node : g.node()) {
        for (const auto& in : node.input()) used.insert(in);
      }
      for (size_t ni = 0; ni < info.node_children.size(); ++ni) {
        for (int child : info.node_children[ni]) {
          for (auto fv : ctx.graphs[child].free_vars) used.insert(fv);
        }
      }
    }
    return used.count(name) > 0;
  };
  std::unordered_set<std::string_view> outputs;
  for (const auto& vi : g.output()) outputs.insert(vi.name());

  for (const auto& node : g.node()) {
    if (!IsDefaultDomain(node.domain())) continue;
    const bool identity = node.op_type() == "Identity";
    const bool dropout = node.op_type() == "Dropout";
    if (!identity && !dropout) continue;
    if (node.input_size() < 1 || node.input(0).empty() || node.output(0).empty()) continue;
    if (dropout) {
      // A constant scalar input of the node (ratio, training_mode), or `fallback` when absent;
      // nullopt when it is given but not a constant.
      auto constant_scalar = [&](int i, float fallback) -> std::optional<float> {
        if (node.input_size() <= i || node.input(i).empty()) return fallback;
        const TensorProto* t = FindConstantTensor(ctx, gidx, ctx.Resolve(gidx, node.input(i)));
        if (t == nullptr) return std::nullopt;
        TensorProto copy = *t;
        auto data = DecodeTensor(copy);
        if (data->size() != 1) return std::nullopt;
        return data->floats()[0];
      };
      const std::optional<float> training = constant_scalar(2, 0.0f);  // Dropout-12+: training_mode
      const std::optional<float> ratio = constant_scalar(1, 0.5f);     // Dropout-12+: ratio
      const bool train = !training || *training != 0.0f;  // a run-time training_mode may be true
      if (training && *training != 0.0f && ratio && *ratio != 0.0f) {
        return ctx.Fail(StatusCode::kFailedPrecondition,
                        "training_mode must be absent or a constant false (or the ratio a constant 0): a "
                        "training-mode Dropout draws a random mask; Kiln compiles for inference only",
                        At(node, {}, node.input_size() > 2 ? node.input(2) : node.input(0)));
      }
      // Deterministic (inference, or ratio 0): output = input, mask all true. A node whose mask
      // is read, or whose training_mode may be true, stays a node: its host kernel
      // (runtime/host_kernels/unary.cc) writes the mask and refuses a random form at run time.
      // Otherwise it is an alias of its input.
      const bool mask_read = node.output_size() > 1 && !node.output(1).empty() &&
                             (outputs.count(node.output(1)) > 0 || is_used(node.output(1)));
      if (mask_read || train) continue;
    }
    info.aliases[node.output(0)] = ctx.Resolve(gidx, node.input(0));
    info.transparent_outputs.insert(node.output(0));
  }
  return Status::Ok();
}

// The IR of one load: graphs built innermost first, each node's attributes converted (schema
// defaults once per schema).
class IrBuilder {
 public:
  explicit IrBuilder(LoadContext& ctx) : ctx_(ctx) {}
  /// Builds every graph and stores the model in LoadContext::result.
  Status Build();

 private:
  void AssignNodeNames();
  Result<std::shared_ptr<Graph>> BuildGraph(int gidx);
  Status ConvertAttribute(AttributeProto& a, bool from_default, const NodeProto& node, Attribute* out);
  /// The schema's optional attributes that have a default value, converted (from_default = true).
  Status DefaultAttributes(const onnx::OpSchema* schema, const NodeProto& node, const std::vector<Attribute>** out);

  LoadContext& ctx_;
  std::unordered_map<const GraphProto*, std::shared_ptr<const Graph>> built_;
  std::vector<std::vector<std::string>> node_names_;  // [graph][node], unique names
  // Schema defaults already converted to IR attributes (same for every node of an op).
  std::unordered_map<const onnx::OpSchema*, std::vector<Attribute>> default_attrs_;
};

AttributeType ToAttrType(int t) { return static_cast<AttributeType>(t); }

Status IrBuilder::ConvertAttribute(AttributeProto& a, bool from_default, const NodeProto& node, Attribute* out) {
  out->name = a.name();
  out->from_default = from_default;
  out->type = ToAttrType(a.type());
  switch (a.type()) {
    case AttributeProto::FLOAT: out->f = a.f(); break;
    case AttributeProto::INT: out->i = a.i(); break;
    case AttributeProto::STRING: out->s = a.s(); break;
    case AttributeProto::FLOATS: out->floats.assign(a.floats().begin(), a.floats().end()); break;
    case AttributeProto::INTS: out->ints.assign(a.ints().begin(), a.ints().end()); break;
    case AttributeProto::STRINGS: out->strings.assign(a.strings().begin(), a.strings().end()); break;
    case AttributeProto::TENSOR: {
      auto t = std::make_shared<Tensor>();
      t->name = a.t().name();
      t->dtype = static_cast<DataType>(a.t().data_type());
      t->shape = Shape::FromValues(std::vector<int64_t>(a.t().dims().begin(), a.t().dims().end()));
      t->constant = DecodeTensor(*a.mutable_t());
      out->t = std::move(t);
      break;
    }
    case AttributeProto::TENSORS:
      for (auto& tp : *a.mutable_tensors()) {
        auto t = std::make_shared<Tensor>();
        t->name = tp.name();
        t->dtype = static_cast<DataType>(tp.data_type());
        t->shape = Shape::FromValues(std::vector<int64_t>(tp.dims().begin(), tp.dims().end()));
        t->constant = DecodeTensor(tp);
        out->tensors.push_back(std::move(t));
      }
      break;
    case AttributeProto::GRAPH: {
      auto it = built_.find(&a.g());
      if (it == built_.end()) return ctx_.Fail(StatusCode::kInternal, "subgraph was not built", At(node));
      out->g = it->second;
      break;
    }
    case AttributeProto::GRAPHS:
      for (const auto& sg : a.graphs()) {
        auto it = built_.find(&sg);
        if (it == built_.end()) return ctx_.Fail(StatusCode::kInternal, "subgraph was not built", At(node));
        out->graphs.push_back(it->second);
      }
      break;
    default:
      return ctx_.Fail(StatusCode::kFailedPrecondition, "unsupported attribute type", At(node, a.name()));
  }
  return Status::Ok();
}

Status IrBuilder::DefaultAttributes(const onnx::OpSchema* schema, const NodeProto& node,
                                    const std::vector<Attribute>** out) {
  auto it = default_attrs_.find(schema);
  if (it == default_attrs_.end()) {
    std::vector<Attribute> defaults;
    for (const auto& [aname, sattr] : schema->attributes()) {
      if (sattr.required) continue;
      if (sattr.default_value.type() == AttributeProto::UNDEFINED) continue;  // optional, no default
      AttributeProto def = sattr.default_value;
      def.set_name(aname);
      Attribute attr;
      KILN_RETURN_IF_ERROR(ConvertAttribute(def, true, node, &attr));
      defaults.push_back(std::move(attr));
    }
    it = default_attrs_.emplace(schema, std::move(defaults)).first;
  }
  *out = &it->second;
  return Status::Ok();
}

Result<std::shared_ptr<Graph>> IrBuilder::BuildGraph(int gidx) {
  GraphInfo& info = ctx_.graphs[gidx];
  GraphProto& g = *info.proto;
  auto graph = B::NewGraph();
  B::name(*graph) = info.original_name;
  auto& tensors = B::tensors(*graph);

  tensors.reserve(static_cast<size_t>(g.initializer_size()) + g.input_size() + g.node_size() + g.node_size() / 2);

  B::initializer_order(*graph).reserve(std::min(info.hoisted_from, g.initializer_size()));
  for (int ii = 0; ii < g.initializer_size(); ++ii) {
    TensorProto& init = *g.mutable_initializer(ii);
    if (ii < info.hoisted_from) B::initializer_order(*graph).push_back(init.name());
    Tensor t;
    t.name = init.name();
    t.dtype = static_cast<DataType>(init.data_type());
    t.shape = Shape::FromValues(std::vector<int64_t>(init.dims().begin(), init.dims().end()));
    t.constant = DecodeTensor(init);
    tensors[t.name] = std::move(t);
  }
  std::vector<const Tensor*> input_tensors;  // sorted after the loop
  for (const auto& vi : g.input()) {
    if (info.initializers.count(vi.name())) continue;
    B::inputs(*graph).push_back(vi.name());
    Tensor t;
    t.name = vi.name();
    t.dtype = DTypeFromType(&vi.type());
    t.shape = ShapeFromType(vi.has_type() ? &vi.type() : nullptr);
    Tensor& stored = tensors[vi.name()];
    stored = std::move(t);
    input_tensors.push_back(&stored);
  }
  std::sort(input_tensors.begin(), input_tensors.end(), std::less<const Tensor*>());

  auto& nodes = B::nodes(*graph);
  nodes.reserve(g.node_size());
  for (int ni = 0; ni < g.node_size(); ++ni) {
    NodeProto& np = *g.mutable_node(ni);
    const bool default_domain = IsDefaultDomain(np.domain());
    if (default_domain && np.output_size() >= 1 && !info.transparent_outputs.empty() &&
        info.transparent_outputs.count(np.output(0))) {
      continue;
    }
    if (default_domain && np.op_type() == "Constant") {
      // value | value_float(s) | value_int(s) become a constant tensor (Constant-1..13 forms).
      Tensor t;
      t.name = np.output(0);
      bool found = false;
      for (auto& a : *np.mutable_attribute()) {
        if (a.name() == "value" && a.has_t()) {
          t.dtype = static_cast<DataType>(a.t().data_type());
          t.shape = Shape::FromValues(std::vector<int64_t>(a.t().dims().begin(), a.t().dims().end()));
          t.constant = DecodeTensor(*a.mutable_t());
          found = true;
        } else if (a.name() == "value_float" || a.name() == "value_floats" || a.name() == "value_int" ||
                   a.name() == "value_ints") {
          TensorProto tp;
          const bool is_float = a.name().rfind("value_float", 0) == 0;
          tp.set_data_type(is_float ? TensorProto::FLOAT : TensorProto::INT64);
          if (a.name() == "value_float") tp.add_float_data(a.f());
          if (a.name() == "value_int") tp.add_int64_data(a.i());
          if (a.name() == "value_floats") {
            tp.mutable_float_data()->Add(a.floats().begin(), a.floats().end());
            tp.add_dims(a.floats_size());
          }
          if (a.name() == "value_ints") {
            tp.mutable_int64_data()->Add(a.ints().begin(), a.ints().end());
            tp.add_dims(a.ints_size());
          }
          t.dtype = static_cast<DataType>(tp.data_type());
          t.shape = Shape::FromValues(std::vector<int64_t>(tp.dims().begin(), tp.dims().end()));
          t.constant = DecodeTensor(tp);
          found = true;
        } else {
          return ctx_.Fail(StatusCode::kFailedPrecondition,
                           "Constant with attribute '" + a.name() + "' is not supported (only value, value_float(s), "
                           "value_int(s))",
                           At(np, a.name()));
        }
      }
      if (!found) return ctx_.Fail(StatusCode::kInvalidArgument, "Constant has no value", At(np));
      tensors[t.name] = std::move(t);
      continue;
    }

    Node n;
    n.name = std::move(node_names_[gidx][ni]);
    n.original_name = np.name();
    n.op_type = np.op_type();
    n.domain = default_domain ? "" : np.domain();
    n.opset_version = ctx_.imports.at(n.domain);
    n.inputs.reserve(np.input_size());
    for (const auto& in : np.input()) n.inputs.push_back(in.empty() ? std::string() : ctx_.Resolve(gidx, in));
    n.outputs.assign(np.output().begin(), np.output().end());
    for (auto& a : *np.mutable_attribute()) {
      Attribute attr;
      KILN_RETURN_IF_ERROR(ConvertAttribute(a, false, np, &attr));
      n.attributes.emplace(attr.name, std::move(attr));
    }
    const onnx::OpSchema* schema = ctx_.FindSchema(np.op_type(), n.opset_version, n.domain);
    if (schema != nullptr) {
      const std::vector<Attribute>* defaults = nullptr;
      KILN_RETURN_IF_ERROR(DefaultAttributes(schema, np, &defaults));
      for (const Attribute& attr : *defaults) {
        if (n.attributes.count(attr.name)) continue;
        n.attributes.emplace(attr.name, attr);
      }
    }
    for (const auto& o : n.outputs) {
      if (o.empty()) continue;
      Tensor t;  // typed below from value_info / graph outputs
      t.name = o;
      tensors[o] = std::move(t);
    }
    nodes.push_back(std::move(n));
  }
  // Types of node outputs: the last of value_info, then typed graph outputs, naming the value wins
  // (graph inputs are typed by their own declaration above; constants by their payload).
  auto set_type = [&](const ValueInfoProto& vi) {
    auto it = tensors.find(vi.name());
    if (it == tensors.end()) return;
    Tensor& t = it->second;
    if (t.constant != nullptr ||
        std::binary_search(input_tensors.begin(), input_tensors.end(), &t, std::less<const Tensor*>())) {
      return;
    }
    t.dtype = DTypeFromType(&vi.type());
    t.shape = ShapeFromType(&vi.type());
  };
  for (const auto& vi : g.value_info()) set_type(vi);
  for (const auto& vi : g.output()) {
    if (vi.has_type()) set_type(vi);
  }
  for (const auto& vi : g.output()) B::outputs(*graph).push_back({vi.name(), ctx_.Resolve(gidx, vi.name())});
  auto& aliases = B::aliases(*graph);
  for (const auto& name : info.transparent_outputs) aliases[name] = ctx_.Resolve(gidx, name);
  for (auto fv : info.free_vars) B::captured(*graph).push_back(ctx_.Resolve(gidx, std::string(fv)));
  B::Index(*graph);
  return graph;
}

// Unique node names: keep the first use of a non-empty name, generate the rest.
void IrBuilder::AssignNodeNames() {
  const std::vector<GraphInfo>& graphs = ctx_.graphs;
  // Views into the protos' names and into node_names_ (sized up front, never reallocated here).
  size_t node_count = 0;
  for (const auto& gi : graphs) node_count += gi.proto->node_size();
  // Every non-empty node name; only needed (and built) when a name has to be generated.
  std::unordered_set<std::string_view> taken;
  bool taken_built = false;
  std::unordered_set<std::string_view> assigned;
  assigned.reserve(node_count);
  std::unordered_map<std::string_view, size_t> next_suffix;
  node_names_.resize(graphs.size());
  for (size_t gidx = 0; gidx < graphs.size(); ++gidx) {
    const GraphProto& g = *graphs[gidx].proto;
    std::vector<std::string>& names = node_names_[gidx];
    names.resize(g.node_size());
    for (int ni = 0; ni < g.node_size(); ++ni) {
      const NodeProto& np = g.node(ni);
      if (!np.name().empty() && assigned.insert(np.name()).second) {
        names[ni] = np.name();
        continue;
      }
      const std::string& base = np.name().empty() ? np.op_type() : np.name();
      if (!taken_built) {
        taken_built = true;
        taken.reserve(node_count);
        for (const auto& gi : graphs) {
          for (const auto& other : gi.proto->node()) {
            if (!other.name().empty()) taken.insert(other.name());
          }
          for (std::string_view hoisted : gi.hoisted_node_names) {
            if (!hoisted.empty()) taken.insert(hoisted);
          }
        }
      }
      size_t& k = next_suffix[base];
      std::string candidate;
      do {
        candidate = base + "_" + std::to_string(k++);
      } while (taken.count(candidate) || assigned.count(candidate));
      names[ni] = std::move(candidate);
      assigned.insert(names[ni]);
    }
  }
}

Status IrBuilder::Build() {
  AssignNodeNames();
  const std::vector<GraphInfo>& graphs = ctx_.graphs;
  size_t total_nodes = 0;
  // Children first: a node's subgraph attributes point at graphs already built.
  for (int gi = static_cast<int>(graphs.size()) - 1; gi >= 0; --gi) {
    Result<std::shared_ptr<Graph>> g = BuildGraph(gi);
    if (!g.ok()) return g.status();
    total_nodes += (*g)->nodes().size();
    built_[graphs[gi].proto] = std::move(g).value();
  }
  const onnx::ModelProto& proto = ctx_.model;
  auto model = B::NewModel();
  B::ir_version(*model) = proto.ir_version();
  B::opset(*model) = ctx_.imports.at("");
  for (const auto& imp : proto.opset_import()) B::opset_imports(*model).push_back({imp.domain(), imp.version()});
  B::producer_name(*model) = proto.producer_name();
  B::producer_version(*model) = proto.producer_version();
  B::graph(*model) = built_.at(graphs[0].proto);
  B::total_node_count(*model) = total_nodes;
  B::warnings(*model) = std::move(ctx_.warnings);
  built_.clear();
  ctx_.result = std::move(model);
  return Status::Ok();
}

}  // namespace

Status BuildModel(LoadContext& ctx) {
  // Parents first: an alias in a subgraph may resolve through its enclosing graphs' aliases.
  for (int gi = 0; gi < static_cast<int>(ctx.graphs.size()); ++gi) KILN_RETURN_IF_ERROR(ComputeAliases(ctx, gi));
  return IrBuilder(ctx).Build();
}

}  // namespace internal
}  // namespace kiln::onnx_fe
