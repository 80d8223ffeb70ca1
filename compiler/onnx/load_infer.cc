// Stages RunShapeInference and RunChecker (compiler/onnx/load_stages.h): onnx's own shape
// inference and checker, on a model that ValidateGraphs and ResolveScopes have made safe for
// onnx 1.12's code (compiler/onnx/loader.h). Everything they throw becomes a Status naming the
// node when onnx's message does.
#include <string>
#include <unordered_set>
#include <vector>

#include "compiler/onnx/load_stages.h"
#include "compiler/onnx/schema_patch.h"
#include "onnx/checker.h"
#include "onnx/shape_inference/implementation.h"

namespace kiln::onnx_fe::internal {
namespace {

using onnx::GraphProto;
using onnx::ValueInfoProto;

// Declared shapes downstream of a ceil_mode pool were probably computed with onnx's old rule;
// Kiln's inference recomputes them (onnx PR #5741), so the declarations are dropped, not merged.
void DropStaleDeclaredShapes(LoadContext& ctx, int gidx) {
  GraphProto& g = *ctx.graphs[gidx].proto;
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
    ctx.warnings.push_back("declared shape of '" + vi.name() +
                           "' was dropped and re-inferred (it follows a ceil_mode pool; onnx PR #5741 rule)");
  };
  for (auto& vi : *g.mutable_value_info()) drop(vi);
  for (auto& vi : *g.mutable_output()) drop(vi);
}

// LoadOptions::bind_symbols: symbolic dims of the main graph's declarations become values, so
// that inference works with them.
void BindSymbols(LoadContext& ctx) {
  const auto& symbols = ctx.options.bind_symbols;
  if (symbols.empty()) return;
  GraphProto& g = *ctx.model.mutable_graph();
  auto bind = [&](ValueInfoProto& vi) {
    if (!vi.has_type() || !vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) return;
    for (auto& d : *vi.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
      if (!d.has_dim_param()) continue;
      auto it = symbols.find(d.dim_param());
      if (it != symbols.end()) d.set_dim_value(it->second);
    }
  };
  for (auto& vi : *g.mutable_input()) bind(vi);
  for (auto& vi : *g.mutable_output()) bind(vi);
  for (auto& vi : *g.mutable_value_info()) bind(vi);
}

// onnx: "(op_type:Conv, node name: conv1): [ShapeInferenceError] ..."
Site ParseNodeInfo(const std::string& what) {
  Site site;
  const auto p = what.find("(op_type:");
  if (p == std::string::npos) return site;
  const auto end = what.find("): ", p);
  if (end == std::string::npos) return site;
  std::string inner = what.substr(p + 9, end - p - 9);
  const auto comma = inner.find(", node name: ");
  if (comma == std::string::npos) {
    site.op_type = inner;
  } else {
    site.op_type = inner.substr(0, comma);
    site.node = inner.substr(comma + 13);
  }
  return site;
}

}  // namespace

Status RunShapeInference(LoadContext& ctx) {
  for (int gi = 0; gi < static_cast<int>(ctx.graphs.size()); ++gi) DropStaleDeclaredShapes(ctx, gi);
  BindSymbols(ctx);
  InstallSchemaPatches();
  try {
    onnx::ShapeInferenceOptions options(/*check_type=*/false, /*strict_mode=*/1, /*data_prop=*/false);
    onnx::shape_inference::InferShapes(ctx.model, onnx::OpSchemaRegistry::Instance(), options);
  } catch (const std::exception& e) {
    std::string what = e.what();
    Site site = ParseNodeInfo(what);
    // "[ShapeInferenceError] Shape inference error(s): (op_type:X, node name: n): [..] msg": the
    // node goes into the structured fields; keep the message.
    for (const std::string prefix : {"[ShapeInferenceError] ", "[TypeInferenceError] ", "Shape inference error(s): "}) {
      if (what.rfind(prefix, 0) == 0) what = what.substr(prefix.size());
    }
    if (what.rfind("(op_type:", 0) == 0) {
      const auto end = what.find("): ");
      if (end != std::string::npos) what = what.substr(end + 3);
    }
    return ctx.Fail(StatusCode::kInvalidArgument, "shape inference failed: " + FirstLines(what), std::move(site));
  }
  return Status::Ok();
}

Status RunChecker(LoadContext& ctx) {
  // The checker insists on a graph name and on a shape for graph inputs/outputs; neither matters
  // to Kiln, so fill them in for the check and restore them afterwards.
  std::vector<ValueInfoProto*> shapeless_io;  // graph inputs/outputs given an empty shape
  for (size_t gi = 0; gi < ctx.graphs.size(); ++gi) {
    GraphProto& g = *ctx.graphs[gi].proto;
    if (g.name().empty()) g.set_name("kiln_graph_" + std::to_string(gi));
    for (auto* list : {g.mutable_input(), g.mutable_output()}) {
      for (auto& vi : *list) {
        if (vi.has_type() && vi.type().has_tensor_type() && !vi.type().tensor_type().has_shape()) {
          vi.mutable_type()->mutable_tensor_type()->mutable_shape();
          shapeless_io.push_back(&vi);
        }
      }
    }
  }
  try {
    onnx::checker::check_model(ctx.model);
  } catch (const std::exception& e) {
    std::string what = e.what();
    Site site;
    const auto context = what.find("==> Context: Bad node spec for node. Name: ");
    if (context != std::string::npos) {
      std::string rest = what.substr(context + 43);
      const auto op = rest.find(" OpType: ");
      if (op != std::string::npos) {
        site.node = rest.substr(0, op);
        site.op_type = rest.substr(op + 9);
        while (!site.op_type.empty() && (site.op_type.back() == '\n' || site.op_type.back() == ' ')) {
          site.op_type.pop_back();
        }
      }
      what = what.substr(0, context);
    }
    return ctx.Fail(StatusCode::kInvalidArgument, "the ONNX checker rejected the model: " + FirstLines(what),
                    std::move(site));
  }
  for (ValueInfoProto* vi : shapeless_io) vi->mutable_type()->mutable_tensor_type()->clear_shape();
  for (GraphInfo& info : ctx.graphs) info.proto->set_name(info.original_name);
  return Status::Ok();
}

}  // namespace kiln::onnx_fe::internal
