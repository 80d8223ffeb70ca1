#include "compiler/onnx/loader.h"

#include <google/protobuf/arena.h>
#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <climits>
#include <functional>
#include <new>
#include <optional>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "compiler/onnx/schema_patch.h"
#include "compiler/onnx/tensor_decode.h"
#include "compiler/onnx/wire_scan.h"
#include "onnx/checker.h"
#include "onnx/defs/schema.h"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"

namespace kiln::onnx_fe {

const char* LoadStageName(LoadStage stage) {
  switch (stage) {
    case LoadStage::kLimits: return "limits";
    case LoadStage::kParse: return "parse";
    case LoadStage::kStructure: return "structure";
    case LoadStage::kShapeInference: return "shape inference";
    case LoadStage::kChecker: return "checker";
    case LoadStage::kBuild: return "build";
  }
  return "?";
}

Status LoadError::ToStatus() const {
  std::string m;
  if (!model.empty()) m += "model '" + model + "': ";
  if (!node.empty() || !op_type.empty()) {
    m += "node '" + node + "'";
    if (!op_type.empty()) m += " (" + op_type + ")";
    m += ": ";
  }
  if (!attribute.empty()) m += "attribute '" + attribute + "': ";
  if (!tensor.empty()) m += "tensor '" + tensor + "': ";
  m += message;
  return Status(code == StatusCode::kOk ? StatusCode::kInternal : code, std::move(m));
}

// Builds IR objects; friend of Graph and Model.
class GraphBuilder {
 public:
  static std::shared_ptr<Graph> NewGraph() { return std::shared_ptr<Graph>(new Graph()); }
  static Graph& Mut(Graph& g) { return g; }
  static std::string& name(Graph& g) { return g.name_; }
  static std::vector<Node>& nodes(Graph& g) { return g.nodes_; }
  static std::vector<std::string>& inputs(Graph& g) { return g.inputs_; }
  static std::vector<GraphOutput>& outputs(Graph& g) { return g.outputs_; }
  static StringMap<Tensor>& tensors(Graph& g) { return g.tensors_; }
  static std::vector<std::string>& initializer_order(Graph& g) { return g.initializer_order_; }
  static StringMap<std::string>& aliases(Graph& g) { return g.aliases_; }
  static void Index(Graph& g) { g.Reindex(); }
  static std::vector<std::string>& captured(Graph& g) { return g.captured_; }

  static Model& Mut(Model& m) { return m; }
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

namespace {

using onnx::AttributeProto;
using onnx::GraphProto;
using onnx::ModelProto;
using onnx::NodeProto;
using onnx::TensorProto;
using onnx::TypeProto;
using onnx::ValueInfoProto;
using B = GraphBuilder;

constexpr int64_t kMinOpset = 6;
constexpr int64_t kMaxOpset = 17;  // the newest default-domain opset onnx 1.12 knows
constexpr size_t kProtobufMaxBytes = static_cast<size_t>(INT_MAX);

std::string FirstLines(const std::string& s, size_t max_chars = 600) {
  std::string out = s.substr(0, max_chars);
  // Collapse onnx's multi-line messages.
  for (char& c : out) {
    if (c == '\n') c = ' ';
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (s.size() > max_chars) out += " ...";
  return out;
}

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

bool IsDefaultDomain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

struct GraphInfo {
  GraphProto* proto = nullptr;
  int parent = -1;
  size_t depth = 0;
  std::string original_name;
  std::string where;  // "main graph" or "subgraph 'x' (attribute 'then_branch' of node 'if1')"
  std::unordered_set<std::string_view> defined;
  std::unordered_set<std::string_view> initializers;
  std::unordered_map<std::string_view, int> producer;
  std::vector<std::vector<int>> node_children;  // per node (current proto order): child graph infos
  std::vector<std::string_view> free_vars;
  std::unordered_map<std::string, std::string> aliases;  // removed Identity/Dropout outputs
  std::unordered_set<std::string> transparent_outputs;
  // Initializers from index hoisted_from on were Constant nodes (HoistConstants), in node order.
  int hoisted_from = INT_MAX;
  std::vector<std::string_view> hoisted_node_names;  // their (arena-owned) node names
};

google::protobuf::ArenaOptions ArenaOptionsForModel() {
  google::protobuf::ArenaOptions o;
  o.start_block_size = 64 << 10;
  o.max_block_size = 1 << 20;
  return o;
}

class Loader {
 public:
  explicit Loader(const LoadOptions& options) : opt_(options) { err_.model = options.model_name; }

  bool Run(std::string_view bytes, std::shared_ptr<const Model>* out);
  LoadError& error() { return err_; }

 private:
  bool Fail(StatusCode code, LoadStage stage, std::string message) {
    err_.code = code;
    err_.stage = stage;
    err_.message = std::move(message);
    return false;
  }
  bool FailNode(StatusCode code, LoadStage stage, const NodeProto& n, std::string message) {
    err_.node = n.name();
    err_.op_type = n.op_type();
    return Fail(code, stage, std::move(message));
  }
  bool FailTensor(StatusCode code, LoadStage stage, const std::string& tensor, std::string message) {
    err_.tensor = tensor;
    return Fail(code, stage, std::move(message));
  }

  bool CheckLimitsAndParse(std::string_view bytes);
  bool CheckModelLevel();
  bool CollectGraphs();
  bool ValidateGraphDefinitions(int gi);
  bool CheckPayload(const TensorProto& t, const std::string& name, const NodeProto* node, const std::string& attr);
  bool ValidateNode(GraphInfo& gi, int idx, NodeProto& node);
  bool ResolveScopesAndSort(int gi);
  bool ComputeAliases(int gi);
  void BindSymbols();
  void DropStaleDeclaredShapes(int gi);
  bool HoistConstants(int gi);
  bool RunShapeInference();
  bool RunChecker();
  bool BuildIR(std::shared_ptr<const Model>* out);
  bool BuildGraph(int gi, std::shared_ptr<Graph>* out);
  bool ConvertAttribute(int gi, AttributeProto& a, bool from_default, const NodeProto& node, Attribute* out);
  std::string Resolve(int gi, const std::string& name) const;
  bool IsDefinedInAncestors(int gi, std::string_view name) const;
  const TensorProto* FindConstantTensor(int gi, const std::string& name) const;
  const onnx::OpSchema* FindSchema(const std::string& op_type, int64_t version, const std::string& domain);
  bool DefaultAttributes(const onnx::OpSchema* schema, int gi, const NodeProto& node,
                         const std::vector<Attribute>** out);

  const LoadOptions& opt_;
  LoadError err_;
  // The parsed model and everything onnx's inference/checker add to it live on an arena: a model
  // has thousands of small messages and strings, and arena allocation (and one bulk free) is far
  // cheaper than a malloc/free each. Payload strings (raw_data) still use the heap, so
  // DecodeTensor can take them over.
  google::protobuf::Arena arena_{ArenaOptionsForModel()};
  ModelProto& model_ = *google::protobuf::Arena::CreateMessage<ModelProto>(&arena_);
  std::unordered_map<std::string, int64_t> imports_;  // domain ("" for default) -> version
  std::vector<GraphInfo> graphs_;
  std::unordered_map<const GraphProto*, std::shared_ptr<const Graph>> built_;
  std::vector<std::vector<std::string>> node_names_;  // [graph][node], unique names
  // onnx's registry lookup hashes op type, domain and version through nested maps; the model's
  // opset per domain is fixed, so (domain, op_type) -> schema is cached.
  std::unordered_map<std::string, const onnx::OpSchema*> schema_cache_;
  // Schema defaults already converted to IR attributes (same for every node of an op).
  std::unordered_map<const onnx::OpSchema*, std::vector<Attribute>> default_attrs_;
  uint64_t total_tensor_bytes_ = 0;
  std::vector<std::string> warnings_;
  std::vector<ValueInfoProto*> shapeless_io_;  // graph inputs/outputs given an empty shape for the checker
};

bool Loader::CheckLimitsAndParse(std::string_view bytes) {
  const auto& lim = opt_.limits;
  if (bytes.empty()) return Fail(StatusCode::kInvalidArgument, LoadStage::kLimits, "the model is empty (0 bytes)");
  if (bytes.size() >= kProtobufMaxBytes) {
    return Fail(StatusCode::kResourceExhausted, LoadStage::kLimits,
                "the model is " + std::to_string(bytes.size()) +
                    " bytes; ONNX files of 2 GiB or more cannot be parsed (protobuf's limit) and external "
                    "data is not accepted");
  }
  if (bytes.size() > lim.max_model_bytes) {
    return Fail(StatusCode::kResourceExhausted, LoadStage::kLimits,
                "the model is " + std::to_string(bytes.size()) + " bytes, over the limit of " +
                    std::to_string(lim.max_model_bytes) + " bytes (LoaderLimits::max_model_bytes)");
  }
  const internal::WireScan scan = internal::ScanModelWire(bytes, lim.max_nodes, lim.max_graph_depth);
  switch (scan.outcome) {
    case internal::WireScan::Outcome::kOk: break;
    case internal::WireScan::Outcome::kMalformed:
      return Fail(StatusCode::kInvalidArgument, LoadStage::kParse,
                  "not a valid ONNX model (the protobuf data is truncated or corrupt: " + scan.detail + ")");
    case internal::WireScan::Outcome::kTooManyNodes:
      return Fail(StatusCode::kResourceExhausted, LoadStage::kLimits,
                  "the model has more than " + std::to_string(lim.max_nodes) +
                      " nodes (LoaderLimits::max_nodes, counting subgraphs)");
    case internal::WireScan::Outcome::kTooDeep:
      return Fail(StatusCode::kResourceExhausted, LoadStage::kLimits,
                  "subgraphs are nested more than " + std::to_string(lim.max_graph_depth) +
                      " levels deep (LoaderLimits::max_graph_depth)");
  }
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  // ModelProto > GraphProto > NodeProto > AttributeProto > GraphProto ...: 3 message levels per
  // subgraph level, plus value_info types, tensors and slack.
  const size_t depth_limit = std::max<size_t>(100, 3 * (lim.max_graph_depth + 1) + 32);
  in.SetRecursionLimit(static_cast<int>(std::min<size_t>(depth_limit, 10000)));
  in.SetTotalBytesLimit(INT_MAX);
  if (!model_.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage()) {
    return Fail(StatusCode::kInvalidArgument, LoadStage::kParse,
                "not a valid ONNX model (protobuf parsing failed: the file is truncated, corrupt, nested too "
                "deeply, or not an ONNX ModelProto)");
  }
  if (!model_.has_graph()) {
    return Fail(StatusCode::kInvalidArgument, LoadStage::kParse,
                "not a valid ONNX model (no graph; is this an ONNX file?)");
  }
  return true;
}

bool Loader::CheckModelLevel() {
  if (model_.functions_size() > 0) {
    return Fail(StatusCode::kFailedPrecondition, LoadStage::kStructure,
                "the model defines " + std::to_string(model_.functions_size()) +
                    " model-local function(s), which Kiln does not support; export with functions inlined");
  }
  model_.clear_training_info();  // not used for inference
  if (model_.ir_version() <= 0) {
    return Fail(StatusCode::kInvalidArgument, LoadStage::kStructure, "the model has no ir_version");
  }
  if (model_.ir_version() > onnx::IR_VERSION) {
    return Fail(StatusCode::kFailedPrecondition, LoadStage::kStructure,
                "IR version " + std::to_string(model_.ir_version()) + " is newer than onnx 1.12 understands (" +
                    std::to_string(static_cast<int>(onnx::IR_VERSION)) +
                    "); export with an older onnx / opset <= 17");
  }
  for (const auto& imp : model_.opset_import()) {
    std::string domain = IsDefaultDomain(imp.domain()) ? "" : imp.domain();
    if (!imports_.emplace(domain, imp.version()).second) {
      return Fail(StatusCode::kInvalidArgument, LoadStage::kStructure,
                  "opset_import lists domain '" + imp.domain() + "' more than once");
    }
  }
  auto it = imports_.find("");
  if (it == imports_.end()) {
    return Fail(StatusCode::kInvalidArgument, LoadStage::kStructure,
                "the model does not import the default ONNX domain (opset_import has no entry for '')");
  }
  if (it->second < kMinOpset || it->second > kMaxOpset) {
    return Fail(StatusCode::kFailedPrecondition, LoadStage::kStructure,
                "default-domain opset " + std::to_string(it->second) + " is not supported; Kiln accepts opsets " +
                    std::to_string(kMinOpset) + " through " + std::to_string(kMaxOpset) +
                    " (those onnx 1.12 knows); re-export with one of them");
  }
  const auto& ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  for (const auto& [domain, version] : imports_) {
    if (domain.empty()) continue;
    auto r = ranges.find(domain);
    if (r != ranges.end() && (version < r->second.first || version > r->second.second)) {
      return Fail(StatusCode::kFailedPrecondition, LoadStage::kStructure,
                  "opset " + std::to_string(version) + " of domain '" + domain + "' is not known to onnx 1.12 (it knows " +
                      std::to_string(r->second.first) + ".." + std::to_string(r->second.second) + ")");
    }
  }
  return true;
}

// Breadth-first over the graph and its subgraphs: parents always precede children in graphs_.
bool Loader::CollectGraphs() {
  graphs_.push_back(GraphInfo{});
  graphs_[0].proto = model_.mutable_graph();
  graphs_[0].where = "main graph";
  for (size_t gi = 0; gi < graphs_.size(); ++gi) {
    GraphProto* g = graphs_[gi].proto;
    graphs_[gi].original_name = g->name();
    graphs_[gi].node_children.resize(g->node_size());
    for (int ni = 0; ni < g->node_size(); ++ni) {
      NodeProto* n = g->mutable_node(ni);
      for (auto& a : *n->mutable_attribute()) {
        std::vector<GraphProto*> subs;
        if (a.has_g()) subs.push_back(a.mutable_g());
        for (auto& sg : *a.mutable_graphs()) subs.push_back(&sg);
        for (GraphProto* sg : subs) {
          GraphInfo child;
          child.proto = sg;
          child.parent = static_cast<int>(gi);
          child.depth = graphs_[gi].depth + 1;
          child.where = "subgraph '" + sg->name() + "' (attribute '" + a.name() + "' of node '" + n->name() + "' (" +
                        n->op_type() + "))";
          if (child.depth > opt_.limits.max_graph_depth) {  // the wire scan already bounds this
            return FailNode(StatusCode::kResourceExhausted, LoadStage::kLimits, *n,
                            "subgraphs are nested more than " + std::to_string(opt_.limits.max_graph_depth) +
                                " levels deep (LoaderLimits::max_graph_depth)");
          }
          graphs_[gi].node_children[ni].push_back(static_cast<int>(graphs_.size()));
          graphs_.push_back(std::move(child));
        }
      }
    }
  }
  return true;
}

const onnx::OpSchema* Loader::FindSchema(const std::string& op_type, int64_t version, const std::string& domain) {
  std::string key;
  key.reserve(domain.size() + 1 + op_type.size());
  key.append(domain).push_back('\0');
  key.append(op_type);
  auto it = schema_cache_.find(key);
  if (it != schema_cache_.end()) return it->second;
  const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(op_type, static_cast<int>(version), domain);
  schema_cache_.emplace(std::move(key), schema);
  return schema;
}

bool Loader::CheckPayload(const TensorProto& t, const std::string& name, const NodeProto* node,
                          const std::string& attr) {
  const internal::PayloadCheck c = internal::CheckTensorPayload(t);
  if (c.code != StatusCode::kOk) {
    if (node != nullptr) {
      err_.node = node->name();
      err_.op_type = node->op_type();
      err_.attribute = attr;
    }
    return FailTensor(c.code, LoadStage::kStructure, name, c.error);
  }
  total_tensor_bytes_ += c.payload_bytes;
  if (total_tensor_bytes_ > opt_.limits.max_total_tensor_bytes) {
    return Fail(StatusCode::kResourceExhausted, LoadStage::kLimits,
                "the model's constant tensors hold more than " + std::to_string(opt_.limits.max_total_tensor_bytes) +
                    " bytes (LoaderLimits::max_total_tensor_bytes)");
  }
  return true;
}

bool Loader::IsDefinedInAncestors(int gi, std::string_view name) const {
  for (int p = graphs_[gi].parent; p >= 0; p = graphs_[p].parent) {
    if (graphs_[p].defined.count(name)) return true;
  }
  return false;
}

bool Loader::ValidateNode(GraphInfo& info, int idx, NodeProto& node) {
  const LoadStage st = LoadStage::kStructure;
  if (node.op_type().empty()) return FailNode(StatusCode::kInvalidArgument, st, node, "the node has no op_type");
  if (node.output_size() == 0) {
    return FailNode(StatusCode::kInvalidArgument, st, node, "the node has no outputs");
  }
  if (std::all_of(node.output().begin(), node.output().end(), [](const std::string& s) { return s.empty(); })) {
    return FailNode(StatusCode::kInvalidArgument, st, node, "all of the node's outputs are empty names");
  }
  const std::string domain = IsDefaultDomain(node.domain()) ? "" : node.domain();
  auto imp = imports_.find(domain);
  if (imp == imports_.end()) {
    return FailNode(StatusCode::kInvalidArgument, st, node,
                    "domain '" + node.domain() + "' is not imported by the model (no opset_import entry)");
  }
  const onnx::OpSchema* schema = FindSchema(node.op_type(), imp->second, domain);
  if (schema == nullptr) {
    return FailNode(StatusCode::kFailedPrecondition, st, node,
                    "operator '" + node.op_type() + "' (domain '" + domain + "', opset " +
                        std::to_string(imp->second) +
                        ") is not a standard ONNX operator known to onnx 1.12; Kiln cannot load custom operators");
  }
  try {
    schema->Verify(node);
  } catch (const std::exception& e) {
    return FailNode(StatusCode::kInvalidArgument, st, node,
                    "does not match the schema of " + node.op_type() + "-" + std::to_string(schema->SinceVersion()) +
                        ": " + FirstLines(e.what()));
  }
  for (auto& a : *node.mutable_attribute()) {
    auto fail_attr = [&](StatusCode code, std::string msg) {
      err_.attribute = a.name();
      return FailNode(code, st, node, std::move(msg));
    };
    if (a.name().empty()) return FailNode(StatusCode::kInvalidArgument, st, node, "an attribute has no name");
    if (!a.ref_attr_name().empty()) {
      return fail_attr(StatusCode::kInvalidArgument, "ref_attr_name is only valid inside function bodies");
    }
    switch (a.type()) {
      case AttributeProto::SPARSE_TENSOR:
      case AttributeProto::SPARSE_TENSORS:
      case AttributeProto::TYPE_PROTO:
      case AttributeProto::TYPE_PROTOS:
        return fail_attr(StatusCode::kFailedPrecondition, "sparse-tensor and type attributes are not supported");
      case AttributeProto::TENSOR:
        if (!CheckPayload(a.t(), a.t().name(), &node, a.name())) return false;
        break;
      case AttributeProto::TENSORS:
        for (const auto& t : a.tensors()) {
          if (!CheckPayload(t, t.name(), &node, a.name())) return false;
        }
        break;
      default: break;
    }
    // Values that onnx 1.12's inference functions divide by or loop on (a zero stride is a
    // SIGFPE there): they must be positive.
    if (domain.empty()) {
      const std::string& an = a.name();
      if (a.type() == AttributeProto::INTS && (an == "strides" || an == "dilations" || an == "kernel_shape")) {
        for (int64_t v : a.ints()) {
          if (v <= 0) return fail_attr(StatusCode::kInvalidArgument, "values must be positive, got " + std::to_string(v));
        }
      }
      if (a.type() == AttributeProto::INT && (an == "blocksize" || an == "group")) {
        if (a.i() <= 0) return fail_attr(StatusCode::kInvalidArgument, "must be positive, got " + std::to_string(a.i()));
      }
    }
  }
  if (domain.empty() && node.op_type() == "Constant" && node.attribute_size() == 1) {
    // Constant-12+ forms value_float(s) / value_int(s) are rewritten to the `value` tensor form
    // before onnx's shape inference, which only reads `value` as constant data (so that e.g. a
    // Reshape fed by Constant(value_ints) gets a static output shape).
    AttributeProto& a = *node.mutable_attribute(0);
    TensorProto t;
    bool rewrite = true;
    if (a.name() == "value_float") {
      t.set_data_type(TensorProto::FLOAT);
      t.add_float_data(a.f());
    } else if (a.name() == "value_floats") {
      t.set_data_type(TensorProto::FLOAT);
      t.mutable_float_data()->Add(a.floats().begin(), a.floats().end());
      t.add_dims(a.floats_size());
    } else if (a.name() == "value_int") {
      t.set_data_type(TensorProto::INT64);
      t.add_int64_data(a.i());
    } else if (a.name() == "value_ints") {
      t.set_data_type(TensorProto::INT64);
      t.mutable_int64_data()->Add(a.ints().begin(), a.ints().end());
      t.add_dims(a.ints_size());
    } else if (a.name() == "value_string" || a.name() == "value_strings") {
      err_.attribute = a.name();
      return FailNode(StatusCode::kFailedPrecondition, st, node, "string constants are not supported");
    } else {
      rewrite = false;
    }
    if (rewrite) {
      a.Clear();
      a.set_name("value");
      a.set_type(AttributeProto::TENSOR);
      *a.mutable_t() = std::move(t);
    }
  }
  for (const auto& out : node.output()) {
    if (out.empty()) continue;
    if (info.defined.count(out) || IsDefinedInAncestors(static_cast<int>(&info - graphs_.data()), out)) {
      err_.tensor = out;
      return FailNode(StatusCode::kInvalidArgument, st, node,
                      "output '" + out + "' is already defined (by another node, a graph input or an initializer); "
                      "ONNX graphs must be in single static assignment form");
    }
    info.defined.insert(out);
    info.producer.emplace(out, idx);
  }
  return true;
}

bool Loader::ValidateGraphDefinitions(int gidx) {
  GraphInfo& info = graphs_[gidx];
  GraphProto& g = *info.proto;
  const LoadStage st = LoadStage::kStructure;
  if (g.sparse_initializer_size() > 0) {
    return Fail(StatusCode::kFailedPrecondition, st, info.where + " has sparse initializers, which Kiln does not support");
  }
  info.defined.reserve(static_cast<size_t>(g.input_size()) + g.initializer_size() + g.node_size() + g.node_size() / 4);
  info.initializers.reserve(g.initializer_size());
  info.producer.reserve(g.node_size() + g.node_size() / 4);
  for (const auto& vi : g.input()) {
    if (vi.name().empty()) return Fail(StatusCode::kInvalidArgument, st, info.where + " has an input with no name");
    if (!info.defined.insert(vi.name()).second) {
      return FailTensor(StatusCode::kInvalidArgument, st, vi.name(), info.where + " lists this input more than once");
    }
    if (IsDefinedInAncestors(gidx, vi.name())) {
      return FailTensor(StatusCode::kInvalidArgument, st, vi.name(),
                        info.where + " has an input that shadows a name of an enclosing graph");
    }
  }
  for (int ii = 0; ii < g.initializer_size(); ++ii) {
    const TensorProto& t = g.initializer(ii);
    if (t.name().empty()) return Fail(StatusCode::kInvalidArgument, st, info.where + " has an initializer with no name");
    if (!info.initializers.insert(t.name()).second) {
      return FailTensor(StatusCode::kInvalidArgument, st, t.name(), "initializer defined more than once");
    }
    // Hoisted Constant payloads were checked (and counted) by HoistConstants.
    if (ii < info.hoisted_from && !CheckPayload(t, t.name(), nullptr, "")) return false;
    if (IsDefinedInAncestors(gidx, t.name())) {
      return FailTensor(StatusCode::kInvalidArgument, st, t.name(),
                        "initializer shadows a name of an enclosing graph");
    }
    info.defined.insert(t.name());
  }
  // Runtime inputs (not initializers) of the main graph need a tensor type.
  for (const auto& vi : g.input()) {
    if (info.initializers.count(vi.name())) continue;
    if (gidx == 0 || vi.has_type()) {
      if (!vi.has_type() || !vi.type().has_tensor_type()) {
        return FailTensor(gidx == 0 && !vi.has_type() ? StatusCode::kInvalidArgument : StatusCode::kFailedPrecondition,
                          st, vi.name(),
                          vi.has_type() ? "graph input is not a tensor (sequence/map/optional inputs are not supported)"
                                        : "graph input has no type");
      }
      const int32_t et = vi.type().tensor_type().elem_type();
      if (et == TensorProto::UNDEFINED || DataTypeSize(static_cast<DataType>(et)) == 0 ||
          et == TensorProto::COMPLEX64 || et == TensorProto::COMPLEX128) {
        return FailTensor(et == TensorProto::UNDEFINED ? StatusCode::kInvalidArgument : StatusCode::kFailedPrecondition,
                          st, vi.name(),
                          std::string("graph input has element type ") + DataTypeName(static_cast<DataType>(et)) +
                              ", which Kiln does not support");
      }
    }
  }
  for (int ni = 0; ni < g.node_size(); ++ni) {
    if (!ValidateNode(info, ni, *g.mutable_node(ni))) return false;
  }
  for (const auto& vi : g.output()) {
    if (vi.name().empty()) return Fail(StatusCode::kInvalidArgument, st, info.where + " has an output with no name");
  }
  return true;
}

bool Loader::ResolveScopesAndSort(int gidx) {
  GraphInfo& info = graphs_[gidx];
  GraphProto& g = *info.proto;
  const LoadStage st = LoadStage::kStructure;
  const int n = g.node_size();

  // Names this graph reads but does not define (captured from enclosing graphs).
  std::unordered_set<std::string_view> free;
  for (int ni = 0; ni < n; ++ni) {
    const NodeProto& node = g.node(ni);
    for (const auto& in : node.input()) {
      if (in.empty() || info.defined.count(in)) continue;
      if (gidx == 0 || !IsDefinedInAncestors(gidx, in)) {
        err_.tensor = in;
        return FailNode(StatusCode::kInvalidArgument, st, node,
                        "input '" + in + "' is not produced by any node and is not a graph input or initializer" +
                            (gidx == 0 ? std::string() : " (nor a value of an enclosing graph)") + " [" + info.where + "]");
      }
      free.insert(in);
    }
    for (int child : info.node_children[ni]) {
      for (std::string_view fv : graphs_[child].free_vars) {
        if (!info.defined.count(fv)) free.insert(fv);
      }
    }
  }
  for (const auto& vi : g.output()) {
    if (info.defined.count(vi.name())) continue;
    if (gidx != 0 && IsDefinedInAncestors(gidx, vi.name())) {
      free.insert(vi.name());
      continue;
    }
    return FailTensor(StatusCode::kInvalidArgument, st, vi.name(),
                      "graph output is not produced by any node and is not a graph input or initializer [" +
                          info.where + "]");
  }
  for (const auto& vi : g.value_info()) {
    if (!info.defined.count(vi.name())) {
      return FailTensor(StatusCode::kInvalidArgument, st, vi.name(),
                        "value_info describes a tensor that no node, graph input or initializer defines [" +
                            info.where + "]");
    }
  }
  info.free_vars.assign(free.begin(), free.end());
  std::sort(info.free_vars.begin(), info.free_vars.end());

  // Already in topological order (the usual case: exporters emit nodes that way)? Then Kahn's
  // algorithm below would return the identity order, so it is skipped.
  bool sorted = true;
  auto before = [&](std::string_view name, int consumer) {
    auto it = info.producer.find(name);
    return it == info.producer.end() || it->second < consumer;
  };
  for (int ni = 0; ni < n && sorted; ++ni) {
    for (const auto& in : g.node(ni).input()) {
      if (!in.empty() && !before(in, ni)) {
        sorted = false;
        break;
      }
    }
    for (int child : info.node_children[ni]) {
      for (std::string_view fv : graphs_[child].free_vars) {
        if (!before(fv, ni)) sorted = false;
      }
    }
  }
  if (sorted) {
    info.producer.clear();  // not needed any more
    return true;
  }

  // Kahn's algorithm; ties broken by the model's own order so sorted graphs stay as they are.
  std::vector<int> indeg(n, 0);
  std::vector<std::vector<int>> succ(n);
  auto add_dep = [&](std::string_view name, int consumer) {
    auto it = info.producer.find(name);
    if (it == info.producer.end()) return;
    succ[it->second].push_back(consumer);
    ++indeg[consumer];
  };
  for (int ni = 0; ni < n; ++ni) {
    for (const auto& in : g.node(ni).input()) {
      if (!in.empty()) add_dep(in, ni);
    }
    for (int child : info.node_children[ni]) {
      for (std::string_view fv : graphs_[child].free_vars) add_dep(fv, ni);
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<>> ready;
  for (int ni = 0; ni < n; ++ni) {
    if (indeg[ni] == 0) ready.push(ni);
  }
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    const int u = ready.top();
    ready.pop();
    order.push_back(u);
    for (int v : succ[u]) {
      if (--indeg[v] == 0) ready.push(v);
    }
  }
  if (static_cast<int>(order.size()) != n) {
    // Walk backwards through unemitted predecessors until a node repeats: it lies on a cycle.
    int v = 0;
    while (indeg[v] == 0) ++v;
    std::vector<char> seen(n, 0);
    while (!seen[v]) {
      seen[v] = 1;
      int next = -1;
      const NodeProto& node = g.node(v);
      std::vector<std::string_view> deps(node.input().begin(), node.input().end());
      for (int child : info.node_children[v]) {
        deps.insert(deps.end(), graphs_[child].free_vars.begin(), graphs_[child].free_vars.end());
      }
      for (std::string_view in : deps) {
        auto it = info.producer.find(in);
        if (it != info.producer.end() && indeg[it->second] > 0) {
          next = it->second;
          break;
        }
      }
      if (next < 0) break;  // cannot happen: every unemitted node has an unemitted predecessor
      v = next;
    }
    return FailNode(StatusCode::kInvalidArgument, st, g.node(v),
                    "the graph has a cycle through this node (" + info.where + ")");
  }
  // Reorder the protobuf nodes (pointer moves only) and the per-node child lists.
  auto* rep = g.mutable_node();
  std::vector<NodeProto*> ptrs(n);
  // Unsafe*: the nodes stay on the model's arena (the safe variants would copy them off it).
  if (n > 0) rep->UnsafeArenaExtractSubrange(0, n, ptrs.data());
  std::vector<std::vector<int>> children(n);
  for (int i = 0; i < n; ++i) {
    rep->UnsafeArenaAddAllocated(ptrs[order[i]]);
    children[i] = std::move(info.node_children[order[i]]);
  }
  info.node_children = std::move(children);
  info.producer.clear();  // indices changed; not needed any more
  return true;
}

std::string Loader::Resolve(int gi, const std::string& name) const {
  const std::string* cur = &name;  // points into `name` or into an aliases map, never copied
  for (int guard = 0; guard < 1'000'000; ++guard) {
    bool moved = false;
    for (int g = gi; g >= 0; g = graphs_[g].parent) {
      const auto& aliases = graphs_[g].aliases;
      if (aliases.empty()) continue;
      auto it = aliases.find(*cur);
      if (it != aliases.end()) {
        cur = &it->second;
        moved = true;
        break;
      }
    }
    if (!moved) break;
  }
  return *cur;
}

const TensorProto* Loader::FindConstantTensor(int gi, const std::string& name) const {
  for (int g = gi; g >= 0; g = graphs_[g].parent) {
    for (const auto& t : graphs_[g].proto->initializer()) {
      if (t.name() == name) return &t;
    }
    for (const auto& node : graphs_[g].proto->node()) {
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
bool Loader::ComputeAliases(int gidx) {
  GraphInfo& info = graphs_[gidx];
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
          for (auto fv : graphs_[child].free_vars) used.insert(fv);
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
      if (node.output_size() > 1 && !node.output(1).empty()) {
        const std::string& mask = node.output(1);
        if (outputs.count(mask)) {
          err_.tensor = mask;
          return FailNode(StatusCode::kFailedPrecondition, LoadStage::kBuild, node,
                          "the Dropout mask is a graph output; Kiln compiles for inference, where Dropout is an "
                          "identity and has no mask. Remove the mask output and re-export");
        }
        if (is_used(mask)) {
          err_.tensor = mask;
          return FailNode(StatusCode::kFailedPrecondition, LoadStage::kBuild, node,
                          "the Dropout mask is used by another node; Kiln compiles for inference, where Dropout has "
                          "no mask");
        }
      }
      if (node.input_size() >= 3 && !node.input(2).empty()) {  // Dropout-12+: training_mode
        const TensorProto* tm = FindConstantTensor(gidx, Resolve(gidx, node.input(2)));
        bool training = true;
        if (tm != nullptr) {
          TensorProto copy = *tm;
          auto data = internal::DecodeTensor(copy);
          training = data->size() != 1 || data->floats()[0] != 0.0f;
        }
        if (training) {
          err_.tensor = node.input(2);
          return FailNode(StatusCode::kFailedPrecondition, LoadStage::kBuild, node,
                          "training_mode must be absent or a constant false; Kiln compiles for inference only");
        }
      }
    }
    info.aliases[node.output(0)] = Resolve(gidx, node.input(0));
    info.transparent_outputs.insert(node.output(0));
  }
  return true;
}

void Loader::BindSymbols() {
  if (opt_.bind_symbols.empty()) return;
  GraphProto& g = *model_.mutable_graph();
  auto bind = [&](ValueInfoProto& vi) {
    if (!vi.has_type() || !vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) return;
    for (auto& d : *vi.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
      if (!d.has_dim_param()) continue;
      auto it = opt_.bind_symbols.find(d.dim_param());
      if (it != opt_.bind_symbols.end()) d.set_dim_value(it->second);
    }
  };
  for (auto& vi : *g.mutable_input()) bind(vi);
  for (auto& vi : *g.mutable_output()) bind(vi);
  for (auto& vi : *g.mutable_value_info()) bind(vi);
}

// Declared shapes downstream of a ceil_mode pool were probably computed with onnx's old rule;
// Kiln's inference recomputes them (onnx PR #5741), so the declarations are dropped, not merged.
void Loader::DropStaleDeclaredShapes(int gidx) {
  GraphProto& g = *graphs_[gidx].proto;
  std::unordered_set<std::string_view> tainted;
  for (const auto& node : g.node()) {
    bool hit = false;
    if (IsDefaultDomain(node.domain()) && (node.op_type() == "MaxPool" || node.op_type() == "AveragePool")) {
      for (const auto& a : node.attribute()) {
        if (a.name() == "ceil_mode" && a.i() == 1) hit = true;
      }
    }
    for (const auto& in : node.input()) {
      if (!hit && !in.empty() && tainted.count(in)) hit = true;
    }
    if (hit) {
      for (const auto& o : node.output()) {
        if (!o.empty()) tainted.insert(o);
      }
    }
  }
  if (tainted.empty()) return;
  auto drop = [&](ValueInfoProto& vi) {
    if (!tainted.count(vi.name()) || !vi.has_type() || !vi.type().has_tensor_type() ||
        !vi.type().tensor_type().has_shape()) {
      return;
    }
    vi.mutable_type()->mutable_tensor_type()->clear_shape();
    warnings_.push_back("declared shape of '" + vi.name() +
                        "' was dropped and re-inferred (it follows a ceil_mode pool; onnx PR #5741 rule)");
  };
  for (auto& vi : *g.mutable_value_info()) drop(vi);
  for (auto& vi : *g.mutable_output()) drop(vi);
}

// Constant nodes in the plain `value` form become initializers of the main graph (in node order)
// before anything else looks at the nodes. Consumers see the same constant tensor (onnx's shape
// inference reads initializers as constant data just as it reads Constant outputs), but a third of
// a QAT export's nodes are such Constants and no longer pay for per-node validation, sorting,
// inference and schema checks. Only what loads exactly as before is hoisted:
//  * nodes that ValidateNode would accept unchanged: default domain "", no inputs, one output,
//    the single attribute `value` holding a tensor (its payload is checked as the node's);
//  * names that no graph input or initializer has (a duplicate definition stays an error and
//    never turns into an input default), and that no graph output or value_info declares (onnx
//    lets a declared type override an initializer's own, where a Constant's inferred type is
//    merged with it; an untyped declared output would stay untyped);
//  * main graph only: a subgraph output read straight from an initializer gets no type from
//    onnx 1.12's inference, and shadowing errors would name an initializer the model lacks;
//  * IR >= 4: before that every initializer must be a graph input.
// BuildGraph keeps hoisted initializers out of initializer_order(), as it did for Constant nodes.
bool Loader::HoistConstants(int gidx) {
  GraphInfo& info = graphs_[gidx];
  GraphProto& g = *info.proto;
  info.hoisted_from = g.initializer_size();
  if (gidx != 0 || model_.ir_version() < 4 || !imports_.count("")) return true;
  auto hoistable = [](const NodeProto& n) {
    if (!n.domain().empty() || n.op_type() != "Constant" || n.input_size() != 0 || n.output_size() != 1 ||
        n.output(0).empty() || n.attribute_size() != 1) {
      return false;
    }
    const AttributeProto& a = n.attribute(0);
    return a.name() == "value" && a.type() == AttributeProto::TENSOR && a.has_t() && a.ref_attr_name().empty();
  };
  auto* nodes = g.mutable_node();
  std::unordered_set<std::string_view> taken;  // built on the first Constant
  bool taken_built = false;
  int kept = 0;
  for (int i = 0; i < nodes->size(); ++i) {
    NodeProto& n = *nodes->Mutable(i);
    if (hoistable(n)) {
      if (!taken_built) {
        taken_built = true;
        for (const auto& vi : g.input()) taken.insert(vi.name());
        for (const auto& t : g.initializer()) taken.insert(t.name());
        for (const auto& vi : g.output()) taken.insert(vi.name());
        for (const auto& vi : g.value_info()) taken.insert(vi.name());
      }
      if (taken.insert(n.output(0)).second) {
        if (!CheckPayload(n.attribute(0).t(), n.output(0), &n, "value")) return false;
        TensorProto* t = g.add_initializer();
        t->Swap(n.mutable_attribute(0)->mutable_t());  // same arena: pointer swaps, no copy
        t->set_name(n.output(0));
        info.hoisted_node_names.push_back(n.name());
        continue;
      }
    }
    if (kept != i) {
      nodes->SwapElements(kept, i);
      std::swap(info.node_children[kept], info.node_children[i]);
    }
    ++kept;
  }
  if (kept == nodes->size()) return true;
  // The removed nodes stay allocated on the arena until the loader ends: views into their names
  // (hoisted_node_names, and `taken` above) remain valid.
  std::vector<NodeProto*> removed(static_cast<size_t>(nodes->size() - kept));
  nodes->UnsafeArenaExtractSubrange(kept, static_cast<int>(removed.size()), removed.data());
  info.node_children.resize(static_cast<size_t>(kept));
  return true;
}

void ParseNodeInfo(const std::string& what, LoadError& err) {
  // onnx: "(op_type:Conv, node name: conv1): [ShapeInferenceError] ..."
  const auto p = what.find("(op_type:");
  if (p == std::string::npos) return;
  const auto end = what.find("): ", p);
  if (end == std::string::npos) return;
  std::string inner = what.substr(p + 9, end - p - 9);
  const auto comma = inner.find(", node name: ");
  if (comma == std::string::npos) {
    err.op_type = inner;
  } else {
    err.op_type = inner.substr(0, comma);
    err.node = inner.substr(comma + 13);
  }
}

bool Loader::RunShapeInference() {
  internal::InstallSchemaPatches();
  try {
    onnx::ShapeInferenceOptions options(/*check_type=*/false, /*strict_mode=*/1, /*data_prop=*/false);
    onnx::shape_inference::InferShapes(model_, onnx::OpSchemaRegistry::Instance(), options);
  } catch (const std::exception& e) {
    std::string what = e.what();
    ParseNodeInfo(what, err_);
    // "[ShapeInferenceError] Shape inference error(s): (op_type:X, node name: n): [..] msg": the
    // node goes into the structured fields; keep the message.
    for (const std::string prefix : {"[ShapeInferenceError] ", "[TypeInferenceError] ", "Shape inference error(s): "}) {
      if (what.rfind(prefix, 0) == 0) what = what.substr(prefix.size());
    }
    if (what.rfind("(op_type:", 0) == 0) {
      const auto end = what.find("): ");
      if (end != std::string::npos) what = what.substr(end + 3);
    }
    return Fail(StatusCode::kInvalidArgument, LoadStage::kShapeInference,
                "shape inference failed: " + FirstLines(what));
  }
  return true;
}

bool Loader::RunChecker() {
  // The checker insists on a graph name and on a shape for graph inputs/outputs; neither matters
  // to Kiln, so fill them in for the check and restore them afterwards.
  for (size_t gi = 0; gi < graphs_.size(); ++gi) {
    GraphProto& g = *graphs_[gi].proto;
    if (g.name().empty()) g.set_name("kiln_graph_" + std::to_string(gi));
    for (auto* list : {g.mutable_input(), g.mutable_output()}) {
      for (auto& vi : *list) {
        if (vi.has_type() && vi.type().has_tensor_type() && !vi.type().tensor_type().has_shape()) {
          vi.mutable_type()->mutable_tensor_type()->mutable_shape();
          shapeless_io_.push_back(&vi);
        }
      }
    }
  }
  try {
    onnx::checker::check_model(model_);
  } catch (const std::exception& e) {
    std::string what = e.what();
    const auto ctx = what.find("==> Context: Bad node spec for node. Name: ");
    if (ctx != std::string::npos) {
      std::string rest = what.substr(ctx + 43);
      const auto op = rest.find(" OpType: ");
      if (op != std::string::npos) {
        err_.node = rest.substr(0, op);
        err_.op_type = rest.substr(op + 9);
        while (!err_.op_type.empty() && (err_.op_type.back() == '\n' || err_.op_type.back() == ' ')) {
          err_.op_type.pop_back();
        }
      }
      what = what.substr(0, ctx);
    }
    return Fail(StatusCode::kInvalidArgument, LoadStage::kChecker, "the ONNX checker rejected the model: " + FirstLines(what));
  }
  for (ValueInfoProto* vi : shapeless_io_) vi->mutable_type()->mutable_tensor_type()->clear_shape();
  for (size_t gi = 0; gi < graphs_.size(); ++gi) graphs_[gi].proto->set_name(graphs_[gi].original_name);
  return true;
}

AttributeType ToAttrType(int t) { return static_cast<AttributeType>(t); }

bool Loader::ConvertAttribute(int gi, AttributeProto& a, bool from_default, const NodeProto& node, Attribute* out) {
  (void)gi;
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
      t->constant = internal::DecodeTensor(*a.mutable_t());
      out->t = std::move(t);
      break;
    }
    case AttributeProto::TENSORS:
      for (auto& tp : *a.mutable_tensors()) {
        auto t = std::make_shared<Tensor>();
        t->name = tp.name();
        t->dtype = static_cast<DataType>(tp.data_type());
        t->shape = Shape::FromValues(std::vector<int64_t>(tp.dims().begin(), tp.dims().end()));
        t->constant = internal::DecodeTensor(tp);
        out->tensors.push_back(std::move(t));
      }
      break;
    case AttributeProto::GRAPH: {
      auto it = built_.find(&a.g());
      if (it == built_.end()) {
        return FailNode(StatusCode::kInternal, LoadStage::kBuild, node, "subgraph was not built");
      }
      out->g = it->second;
      break;
    }
    case AttributeProto::GRAPHS:
      for (const auto& sg : a.graphs()) {
        auto it = built_.find(&sg);
        if (it == built_.end()) {
          return FailNode(StatusCode::kInternal, LoadStage::kBuild, node, "subgraph was not built");
        }
        out->graphs.push_back(it->second);
      }
      break;
    default:
      err_.attribute = a.name();
      return FailNode(StatusCode::kFailedPrecondition, LoadStage::kBuild, node, "unsupported attribute type");
  }
  return true;
}

// The schema's optional attributes that have a default value, converted (from_default = true).
bool Loader::DefaultAttributes(const onnx::OpSchema* schema, int gi, const NodeProto& node,
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
      if (!ConvertAttribute(gi, def, true, node, &attr)) return false;
      defaults.push_back(std::move(attr));
    }
    it = default_attrs_.emplace(schema, std::move(defaults)).first;
  }
  *out = &it->second;
  return true;
}

bool Loader::BuildGraph(int gidx, std::shared_ptr<Graph>* result) {
  GraphInfo& info = graphs_[gidx];
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
    t.constant = internal::DecodeTensor(init);
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
          t.constant = internal::DecodeTensor(*a.mutable_t());
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
          t.constant = internal::DecodeTensor(tp);
          found = true;
        } else {
          err_.attribute = a.name();
          return FailNode(StatusCode::kFailedPrecondition, LoadStage::kBuild, np,
                          "Constant with attribute '" + a.name() + "' is not supported (only value, value_float(s), "
                          "value_int(s))");
        }
      }
      if (!found) return FailNode(StatusCode::kInvalidArgument, LoadStage::kBuild, np, "Constant has no value");
      tensors[t.name] = std::move(t);
      continue;
    }

    Node n;
    n.name = std::move(node_names_[gidx][ni]);
    n.original_name = np.name();
    n.op_type = np.op_type();
    n.domain = default_domain ? "" : np.domain();
    n.opset_version = imports_.at(n.domain);
    n.inputs.reserve(np.input_size());
    for (const auto& in : np.input()) n.inputs.push_back(in.empty() ? std::string() : Resolve(gidx, in));
    n.outputs.assign(np.output().begin(), np.output().end());
    for (auto& a : *np.mutable_attribute()) {
      Attribute attr;
      if (!ConvertAttribute(gidx, a, false, np, &attr)) return false;
      n.attributes.emplace(attr.name, std::move(attr));
    }
    const onnx::OpSchema* schema = FindSchema(np.op_type(), n.opset_version, n.domain);
    if (schema != nullptr) {
      const std::vector<Attribute>* defaults = nullptr;
      if (!DefaultAttributes(schema, gidx, np, &defaults)) return false;
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
  for (const auto& vi : g.output()) B::outputs(*graph).push_back({vi.name(), Resolve(gidx, vi.name())});
  auto& aliases = B::aliases(*graph);
  for (const auto& name : info.transparent_outputs) aliases[name] = Resolve(gidx, name);
  for (auto fv : info.free_vars) B::captured(*graph).push_back(Resolve(gidx, std::string(fv)));
  B::Index(*graph);
  *result = std::move(graph);
  return true;
}

bool Loader::BuildIR(std::shared_ptr<const Model>* out) {
  // Unique node names: keep the first use of a non-empty name, generate the rest.
  {
    // Views into the protos' names and into node_names_ (sized up front, never reallocated here).
    size_t node_count = 0;
    for (const auto& gi : graphs_) node_count += gi.proto->node_size();
    // Every non-empty node name; only needed (and built) when a name has to be generated.
    std::unordered_set<std::string_view> taken;
    bool taken_built = false;
    std::unordered_set<std::string_view> assigned;
    assigned.reserve(node_count);
    std::unordered_map<std::string_view, size_t> next_suffix;
    node_names_.resize(graphs_.size());
    for (size_t gidx = 0; gidx < graphs_.size(); ++gidx) {
      const GraphProto& g = *graphs_[gidx].proto;
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
          for (const auto& gi : graphs_) {
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

  size_t total_nodes = 0;
  for (int gi = static_cast<int>(graphs_.size()) - 1; gi >= 0; --gi) {
    std::shared_ptr<Graph> g;
    if (!BuildGraph(gi, &g)) return false;
    total_nodes += g->nodes().size();
    built_[graphs_[gi].proto] = std::move(g);
  }
  auto model = B::NewModel();
  B::ir_version(*model) = model_.ir_version();
  B::opset(*model) = imports_.at("");
  for (const auto& imp : model_.opset_import()) B::opset_imports(*model).push_back({imp.domain(), imp.version()});
  B::producer_name(*model) = model_.producer_name();
  B::producer_version(*model) = model_.producer_version();
  B::graph(*model) = built_.at(graphs_[0].proto);
  B::total_node_count(*model) = total_nodes;
  B::warnings(*model) = std::move(warnings_);
  built_.clear();
  *out = std::move(model);
  return true;
}

bool Loader::Run(std::string_view bytes, std::shared_ptr<const Model>* out) {
  if (!CheckLimitsAndParse(bytes)) return false;
  if (!CheckModelLevel()) return false;
  for (const auto& [sym, value] : opt_.bind_symbols) {
    if (value < 0) {
      return Fail(StatusCode::kInvalidArgument, LoadStage::kStructure,
                  "bind_symbols: symbol '" + sym + "' bound to negative value " + std::to_string(value));
    }
  }
  if (!CollectGraphs()) return false;
  for (int gi = 0; gi < static_cast<int>(graphs_.size()); ++gi) {
    if (!HoistConstants(gi)) return false;
    if (!ValidateGraphDefinitions(gi)) return false;
  }
  for (int gi = static_cast<int>(graphs_.size()) - 1; gi >= 0; --gi) {
    if (!ResolveScopesAndSort(gi)) return false;
  }
  for (int gi = 0; gi < static_cast<int>(graphs_.size()); ++gi) {
    if (!ComputeAliases(gi)) return false;
    DropStaleDeclaredShapes(gi);
  }
  BindSymbols();
  if (!RunShapeInference()) return false;
  if (!RunChecker()) return false;
  return BuildIR(out);
}

}  // namespace

Result<std::shared_ptr<const Model>> LoadModel(std::string_view bytes, const LoadOptions& options, LoadError* error) {
  LoadError local;
  LoadError& err = error != nullptr ? *error : local;
  try {
    Loader loader(options);
    std::shared_ptr<const Model> model;
    if (loader.Run(bytes, &model)) return model;
    err = loader.error();
  } catch (const std::bad_alloc&) {
    err = LoadError{};
    err.model = options.model_name;
    err.code = StatusCode::kResourceExhausted;
    err.stage = LoadStage::kBuild;
    err.message = "out of memory while loading the model";
  } catch (const std::exception& e) {
    err = LoadError{};
    err.model = options.model_name;
    err.code = StatusCode::kInvalidArgument;
    err.stage = LoadStage::kBuild;
    err.message = std::string("the model could not be loaded: ") + FirstLines(e.what());
  }
  return err.ToStatus();
}

Result<std::shared_ptr<const Model>> LoadModel(std::string_view bytes, const LoaderLimits& limits, LoadError* error) {
  LoadOptions options;
  options.limits = limits;
  return LoadModel(bytes, options, error);
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
    for (auto& [_, t] : B::tensors(*g)) bind_shape(t.shape);
    for (Node& n : B::nodes(*g)) {
      for (auto& [_, a] : n.attributes) {
        if (a.g) a.g = rebuilt.at(a.g.get());
        for (auto& sg : a.graphs) sg = rebuilt.at(sg.get());
      }
    }
    B::Index(*g);  // consumers_ viewed the old subgraphs' captured names
    rebuilt[order[k]] = std::move(g);
  }
  auto m = std::make_shared<Model>(*this);
  m->graph_ = rebuilt.at(graph_.get());
  return std::shared_ptr<const Model>(std::move(m));
}

}  // namespace kiln::onnx_fe
