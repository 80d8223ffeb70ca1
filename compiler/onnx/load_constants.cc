// Stage HoistConstants (compiler/onnx/load_stages.h).
//
// Constant nodes in the plain `value` form become initializers of the main graph (in node order)
// before anything else looks at the nodes. Consumers see the same constant tensor (onnx's shape
// inference reads initializers as constant data just as it reads Constant outputs), but a third of
// a QAT export's nodes are such Constants and no longer pay for per-node validation, sorting,
// inference and schema checks: for the MobileNetV2-0.5 export ~1 ms of ~8
// (tests/ai8x/ai8x_bench.cc). Only what loads exactly as before is hoisted:
//  * nodes that ValidateGraphs (compiler/onnx/load_validate.cc) would accept unchanged: default
//    domain "", no inputs, one output, the single attribute `value` holding a tensor (its payload
//    is checked as the node's);
//  * names that no graph input or initializer has (a duplicate definition stays an error and
//    never turns into an input default), and that no graph output or value_info declares (onnx
//    lets a declared type override an initializer's own, where a Constant's inferred type is
//    merged with it; an untyped declared output would stay untyped);
//  * main graph only: a subgraph output read straight from an initializer gets no type from
//    onnx 1.12's inference, and shadowing errors would name an initializer the model lacks
//    (subgraphs keep GraphInfo::hoisted_from = INT_MAX: nothing hoisted);
//  * IR >= 4: before that every initializer must be a graph input.
// BuildModel (compiler/onnx/load_build.cc) keeps hoisted initializers out of
// initializer_order(), as it does for Constant nodes.
#include <unordered_set>
#include <utility>

#include "compiler/onnx/load_stages.h"

namespace kiln::onnx_fe::internal {

Status HoistConstants(LoadContext& ctx) {
  GraphInfo& info = ctx.graphs[0];
  onnx::GraphProto& g = *info.proto;
  info.hoisted_from = g.initializer_size();
  if (ctx.model.ir_version() < 4 || !ctx.imports.count("")) return Status::Ok();
  auto hoistable = [](const onnx::NodeProto& n) {
    if (!n.domain().empty() || n.op_type() != "Constant" || n.input_size() != 0 || n.output_size() != 1 ||
        n.output(0).empty() || n.attribute_size() != 1) {
      return false;
    }
    const onnx::AttributeProto& a = n.attribute(0);
    return a.name() == "value" && a.type() == onnx::AttributeProto::TENSOR && a.has_t() && a.ref_attr_name().empty();
  };
  auto* nodes = g.mutable_node();
  std::unordered_set<std::string_view> taken;  // built on the first Constant
  bool taken_built = false;
  int kept = 0;
  for (int i = 0; i < nodes->size(); ++i) {
    onnx::NodeProto& n = *nodes->Mutable(i);
    if (hoistable(n)) {
      if (!taken_built) {
        taken_built = true;
        for (const auto& vi : g.input()) taken.insert(vi.name());
        for (const auto& t : g.initializer()) taken.insert(t.name());
        for (const auto& vi : g.output()) taken.insert(vi.name());
        for (const auto& vi : g.value_info()) taken.insert(vi.name());
      }
      if (taken.insert(n.output(0)).second) {
        KILN_RETURN_IF_ERROR(ctx.CheckPayload(n.attribute(0).t(), n.output(0), &n, "value"));
        onnx::TensorProto* t = g.add_initializer();
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
  if (kept == nodes->size()) return Status::Ok();
  // The removed nodes stay allocated on the arena until the load ends: views into their names
  // (hoisted_node_names, and `taken` above) remain valid.
  std::vector<onnx::NodeProto*> removed(static_cast<size_t>(nodes->size() - kept));
  nodes->UnsafeArenaExtractSubrange(kept, static_cast<int>(removed.size()), removed.data());
  info.node_children.resize(static_cast<size_t>(kept));
  return Status::Ok();
}

}  // namespace kiln::onnx_fe::internal
