// Stages ValidateModel and ValidateGraphs (compiler/onnx/load_stages.h): Kiln's own structural
// validation, iterative and never recursive, done before onnx's library code sees the model
// (onnx 1.12's shape inference, checker and IR import crash, not throw, on some malformed graphs;
// compiler/onnx/loader.h lists what is checked).
#include <algorithm>
#include <utility>

#include "compiler/onnx/load_stages.h"

namespace kiln::onnx_fe::internal {
namespace {

using onnx::AttributeProto;
using onnx::GraphProto;
using onnx::NodeProto;
using onnx::TensorProto;

constexpr int64_t kMinOpset = 6;
constexpr int64_t kMaxOpset = 17;  // the newest default-domain opset onnx 1.12 knows

Status CheckModelLevel(LoadContext& ctx) {
  onnx::ModelProto& model = ctx.model;
  if (model.functions_size() > 0) {
    return ctx.Fail(StatusCode::kFailedPrecondition,
                    "the model defines " + std::to_string(model.functions_size()) +
                        " model-local function(s), which Kiln does not support; export with functions inlined");
  }
  model.clear_training_info();  // not used for inference
  if (model.ir_version() <= 0) return ctx.Fail(StatusCode::kInvalidArgument, "the model has no ir_version");
  if (model.ir_version() > onnx::IR_VERSION) {
    return ctx.Fail(StatusCode::kFailedPrecondition,
                    "IR version " + std::to_string(model.ir_version()) + " is newer than onnx 1.12 understands (" +
                        std::to_string(static_cast<int>(onnx::IR_VERSION)) +
                        "); export with an older onnx / opset <= 17");
  }
  for (const auto& imp : model.opset_import()) {
    std::string domain = IsDefaultDomain(imp.domain()) ? "" : imp.domain();
    if (!ctx.imports.emplace(domain, imp.version()).second) {
      return ctx.Fail(StatusCode::kInvalidArgument,
                      "opset_import lists domain '" + imp.domain() + "' more than once");
    }
  }
  auto it = ctx.imports.find("");
  if (it == ctx.imports.end()) {
    return ctx.Fail(StatusCode::kInvalidArgument,
                    "the model does not import the default ONNX domain (opset_import has no entry for '')");
  }
  if (it->second < kMinOpset || it->second > kMaxOpset) {
    return ctx.Fail(StatusCode::kFailedPrecondition,
                    "default-domain opset " + std::to_string(it->second) + " is not supported; Kiln accepts opsets " +
                        std::to_string(kMinOpset) + " through " + std::to_string(kMaxOpset) +
                        " (those onnx 1.12 knows); re-export with one of them");
  }
  const auto& ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  for (const auto& [domain, version] : ctx.imports) {
    if (domain.empty()) continue;
    auto r = ranges.find(domain);
    if (r != ranges.end() && (version < r->second.first || version > r->second.second)) {
      return ctx.Fail(StatusCode::kFailedPrecondition,
                      "opset " + std::to_string(version) + " of domain '" + domain +
                          "' is not known to onnx 1.12 (it knows " + std::to_string(r->second.first) + ".." +
                          std::to_string(r->second.second) + ")");
    }
  }
  return Status::Ok();
}

// Breadth-first over the graph and its subgraphs: parents always precede children in ctx.graphs.
Status CollectGraphs(LoadContext& ctx) {
  std::vector<GraphInfo>& graphs = ctx.graphs;
  graphs.push_back(GraphInfo{});
  graphs[0].proto = ctx.model.mutable_graph();
  graphs[0].where = "main graph";
  for (size_t gi = 0; gi < graphs.size(); ++gi) {
    GraphProto* g = graphs[gi].proto;
    graphs[gi].original_name = g->name();
    graphs[gi].node_children.resize(g->node_size());
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
          child.depth = graphs[gi].depth + 1;
          const std::string node_label =
              n->name().empty() ? "unnamed " + n->op_type() + " node" +
                                      (n->output_size() > 0 ? " (output '" + n->output(0) + "')" : std::string())
                                : "node '" + n->name() + "' (" + n->op_type() + ")";
          child.where = "subgraph '" + sg->name() + "' (attribute '" + a.name() + "' of " + node_label + ")";
          if (child.depth > ctx.options.limits.max_graph_depth) {  // the wire scan already bounds this
            return ctx.FailLimit("subgraphs are nested more than " +
                                     std::to_string(ctx.options.limits.max_graph_depth) +
                                     " levels deep (LoaderLimits::max_graph_depth)",
                                 At(*n));
          }
          graphs[gi].node_children[ni].push_back(static_cast<int>(graphs.size()));
          graphs.push_back(std::move(child));
        }
      }
    }
  }
  return Status::Ok();
}

Status ValidateNode(LoadContext& ctx, int gidx, int idx, NodeProto& node) {
  GraphInfo& info = ctx.graphs[gidx];
  if (node.op_type().empty()) return ctx.Fail(StatusCode::kInvalidArgument, "the node has no op_type", At(node));
  if (node.output_size() == 0) return ctx.Fail(StatusCode::kInvalidArgument, "the node has no outputs", At(node));
  if (std::all_of(node.output().begin(), node.output().end(), [](const std::string& s) { return s.empty(); })) {
    return ctx.Fail(StatusCode::kInvalidArgument, "all of the node's outputs are empty names", At(node));
  }
  const std::string domain = IsDefaultDomain(node.domain()) ? "" : node.domain();
  auto imp = ctx.imports.find(domain);
  if (imp == ctx.imports.end()) {
    return ctx.Fail(StatusCode::kInvalidArgument,
                    "domain '" + node.domain() + "' is not imported by the model (no opset_import entry)", At(node));
  }
  const onnx::OpSchema* schema = ctx.FindSchema(node.op_type(), imp->second, domain);
  if (schema == nullptr) {
    return ctx.Fail(StatusCode::kFailedPrecondition,
                    "operator '" + node.op_type() + "' (domain '" + domain + "', opset " +
                        std::to_string(imp->second) +
                        ") is not a standard ONNX operator known to onnx 1.12; Kiln cannot load custom operators",
                    At(node));
  }
  try {
    schema->Verify(node);
  } catch (const std::exception& e) {
    return ctx.Fail(StatusCode::kInvalidArgument,
                    "does not match the schema of " + node.op_type() + "-" + std::to_string(schema->SinceVersion()) +
                        ": " + FirstLines(e.what()),
                    At(node));
  }
  for (auto& a : *node.mutable_attribute()) {
    auto fail_attr = [&](StatusCode code, std::string msg) {
      return ctx.Fail(code, std::move(msg), At(node, a.name()));
    };
    if (a.name().empty()) return ctx.Fail(StatusCode::kInvalidArgument, "an attribute has no name", At(node));
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
        KILN_RETURN_IF_ERROR(ctx.CheckPayload(a.t(), a.t().name(), &node, a.name()));
        break;
      case AttributeProto::TENSORS:
        for (const auto& t : a.tensors()) KILN_RETURN_IF_ERROR(ctx.CheckPayload(t, t.name(), &node, a.name()));
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
      return ctx.Fail(StatusCode::kFailedPrecondition, "string constants are not supported", At(node, a.name()));
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
    if (info.defined.count(out) || ctx.IsDefinedInAncestors(gidx, out)) {
      return ctx.Fail(StatusCode::kInvalidArgument,
                      "output '" + out + "' is already defined (by another node, a graph input or an initializer); "
                      "ONNX graphs must be in single static assignment form",
                      At(node, {}, out));
    }
    info.defined.insert(out);
    info.producer.emplace(out, idx);
  }
  return Status::Ok();
}

Status ValidateGraph(LoadContext& ctx, int gidx) {
  GraphInfo& info = ctx.graphs[gidx];
  GraphProto& g = *info.proto;
  if (g.sparse_initializer_size() > 0) {
    return ctx.Fail(StatusCode::kFailedPrecondition,
                    info.where + " has sparse initializers, which Kiln does not support");
  }
  info.defined.reserve(static_cast<size_t>(g.input_size()) + g.initializer_size() + g.node_size() + g.node_size() / 4);
  info.initializers.reserve(g.initializer_size());
  info.producer.reserve(g.node_size() + g.node_size() / 4);
  for (const auto& vi : g.input()) {
    if (vi.name().empty()) return ctx.Fail(StatusCode::kInvalidArgument, info.where + " has an input with no name");
    if (!info.defined.insert(vi.name()).second) {
      return ctx.Fail(StatusCode::kInvalidArgument, info.where + " lists this input more than once",
                      AtTensor(vi.name()));
    }
    if (ctx.IsDefinedInAncestors(gidx, vi.name())) {
      return ctx.Fail(StatusCode::kInvalidArgument, info.where + " has an input that shadows a name of an enclosing graph",
                      AtTensor(vi.name()));
    }
  }
  for (int ii = 0; ii < g.initializer_size(); ++ii) {
    const TensorProto& t = g.initializer(ii);
    if (t.name().empty()) {
      return ctx.Fail(StatusCode::kInvalidArgument, info.where + " has an initializer with no name");
    }
    if (!info.initializers.insert(t.name()).second) {
      return ctx.Fail(StatusCode::kInvalidArgument, "initializer defined more than once", AtTensor(t.name()));
    }
    // Hoisted Constant payloads were checked (and counted) by HoistConstants.
    if (ii < info.hoisted_from) KILN_RETURN_IF_ERROR(ctx.CheckPayload(t, t.name(), nullptr, ""));
    if (ctx.IsDefinedInAncestors(gidx, t.name())) {
      return ctx.Fail(StatusCode::kInvalidArgument, "initializer shadows a name of an enclosing graph",
                      AtTensor(t.name()));
    }
    info.defined.insert(t.name());
  }
  // Runtime inputs (not initializers) of the main graph need a tensor type.
  for (const auto& vi : g.input()) {
    if (info.initializers.count(vi.name())) continue;
    if (gidx == 0 || vi.has_type()) {
      if (!vi.has_type() || !vi.type().has_tensor_type()) {
        return ctx.Fail(gidx == 0 && !vi.has_type() ? StatusCode::kInvalidArgument : StatusCode::kFailedPrecondition,
                        vi.has_type() ? "graph input is not a tensor (sequence/map/optional inputs are not supported)"
                                      : "graph input has no type",
                        AtTensor(vi.name()));
      }
      const int32_t et = vi.type().tensor_type().elem_type();
      if (et == TensorProto::UNDEFINED || DataTypeSize(static_cast<DataType>(et)) == 0 ||
          et == TensorProto::COMPLEX64 || et == TensorProto::COMPLEX128) {
        return ctx.Fail(et == TensorProto::UNDEFINED ? StatusCode::kInvalidArgument : StatusCode::kFailedPrecondition,
                        std::string("graph input has element type ") + DataTypeName(static_cast<DataType>(et)) +
                            ", which Kiln does not support",
                        AtTensor(vi.name()));
      }
    }
  }
  for (int ni = 0; ni < g.node_size(); ++ni) KILN_RETURN_IF_ERROR(ValidateNode(ctx, gidx, ni, *g.mutable_node(ni)));
  for (const auto& vi : g.output()) {
    if (vi.name().empty()) return ctx.Fail(StatusCode::kInvalidArgument, info.where + " has an output with no name");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateModel(LoadContext& ctx) {
  KILN_RETURN_IF_ERROR(CheckModelLevel(ctx));
  for (const auto& [sym, value] : ctx.options.bind_symbols) {
    if (value < 0) {
      return ctx.Fail(StatusCode::kInvalidArgument,
                      "bind_symbols: symbol '" + sym + "' bound to negative value " + std::to_string(value));
    }
  }
  return CollectGraphs(ctx);
}

Status ValidateGraphs(LoadContext& ctx) {
  // Parents first: a graph's names are checked against those its enclosing graphs define.
  for (int gi = 0; gi < static_cast<int>(ctx.graphs.size()); ++gi) KILN_RETURN_IF_ERROR(ValidateGraph(ctx, gi));
  return Status::Ok();
}

}  // namespace kiln::onnx_fe::internal
