// Stage ResolveScopes (compiler/onnx/load_stages.h): which value every name a graph reads refers
// to, and the nodes in topological order.
#include <algorithm>
#include <functional>
#include <queue>
#include <unordered_set>
#include <utility>
#include <vector>

#include "compiler/onnx/load_stages.h"

namespace kiln::onnx_fe::internal {
namespace {

// Every input read in graphs[gidx] must be defined there or (subgraphs) in an enclosing graph;
// the latter become the graph's free_vars, which its parent then counts as read by the owning
// node. Graph outputs and value_info must name defined values. Then the nodes are reordered
// topologically (protobuf pointer moves only).
Status ResolveGraphScope(LoadContext& ctx, int gidx) {
  const std::vector<GraphInfo>& graphs = ctx.graphs;
  GraphInfo& info = ctx.graphs[gidx];
  onnx::GraphProto& g = *info.proto;
  const int n = g.node_size();

  // Names this graph reads but does not define (captured from enclosing graphs).
  std::unordered_set<std::string_view> free;
  for (int ni = 0; ni < n; ++ni) {
    const onnx::NodeProto& node = g.node(ni);
    for (const auto& in : node.input()) {
      if (in.empty() || info.defined.count(in)) continue;
      if (gidx == 0 || !ctx.IsDefinedInAncestors(gidx, in)) {
        return ctx.Fail(StatusCode::kInvalidArgument,
                        "input '" + in + "' is not produced by any node and is not a graph input or initializer" +
                            (gidx == 0 ? std::string() : " (nor a value of an enclosing graph)") + " [" + info.where +
                            "]",
                        At(node, {}, in));
      }
      free.insert(in);
    }
    for (int child : info.node_children[ni]) {
      for (std::string_view fv : graphs[child].free_vars) {
        if (!info.defined.count(fv)) free.insert(fv);
      }
    }
  }
  for (const auto& vi : g.output()) {
    if (info.defined.count(vi.name())) continue;
    if (gidx != 0 && ctx.IsDefinedInAncestors(gidx, vi.name())) {
      free.insert(vi.name());
      continue;
    }
    return ctx.Fail(StatusCode::kInvalidArgument,
                    "graph output is not produced by any node and is not a graph input or initializer [" +
                        info.where + "]",
                    AtTensor(vi.name()));
  }
  for (const auto& vi : g.value_info()) {
    if (!info.defined.count(vi.name())) {
      return ctx.Fail(StatusCode::kInvalidArgument,
                      "value_info describes a tensor that no node, graph input or initializer defines [" +
                          info.where + "]",
                      AtTensor(vi.name()));
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
      for (std::string_view fv : graphs[child].free_vars) {
        if (!before(fv, ni)) sorted = false;
      }
    }
  }
  if (sorted) {
    info.producer.clear();  // not needed any more
    return Status::Ok();
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
      for (std::string_view fv : graphs[child].free_vars) add_dep(fv, ni);
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
      const onnx::NodeProto& node = g.node(v);
      std::vector<std::string_view> deps(node.input().begin(), node.input().end());
      for (int child : info.node_children[v]) {
        deps.insert(deps.end(), graphs[child].free_vars.begin(), graphs[child].free_vars.end());
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
    return ctx.Fail(StatusCode::kInvalidArgument, "the graph has a cycle through this node (" + info.where + ")",
                    At(g.node(v)));
  }
  // Reorder the protobuf nodes (pointer moves only) and the per-node child lists.
  auto* rep = g.mutable_node();
  std::vector<onnx::NodeProto*> ptrs(n);
  // Unsafe*: the nodes stay on the model's arena (the safe variants would copy them off it).
  if (n > 0) rep->UnsafeArenaExtractSubrange(0, n, ptrs.data());
  std::vector<std::vector<int>> children(n);
  for (int i = 0; i < n; ++i) {
    rep->UnsafeArenaAddAllocated(ptrs[order[i]]);
    children[i] = std::move(info.node_children[order[i]]);
  }
  info.node_children = std::move(children);
  info.producer.clear();  // indices changed; not needed any more
  return Status::Ok();
}
}  // namespace

Status ResolveScopes(LoadContext& ctx) {
  // Children first: a graph's free_vars are known before its parent orders its nodes.
  for (int gi = static_cast<int>(ctx.graphs.size()) - 1; gi >= 0; --gi) KILN_RETURN_IF_ERROR(ResolveGraphScope(ctx, gi));
  return Status::Ok();
}

}  // namespace kiln::onnx_fe::internal
