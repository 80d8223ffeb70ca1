// Internal to compiler/onnx: the state one LoadModel() call shares between its stages.
//
// The stages (declared in compiler/onnx/load_stages.h, run in the order listed in
// compiler/onnx/loader.cc) each read and extend one LoadContext: the parsed onnx::ModelProto on
// the context's arena, the tree of (sub)graphs with what each defines, and the running totals
// that LoaderLimits caps. A stage fails by returning LoadContext::Fail / FailLimit, the only way
// a stage makes an error: it records the structured LoadError (compiler/onnx/loader.h) that
// LoadModel hands out and returns that error's Status, which the driver returns unchanged.
#pragma once

#include <google/protobuf/arena.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/status.h"
#include "compiler/onnx/ir.h"
#include "compiler/onnx/loader.h"
#include "onnx/defs/schema.h"
#include "onnx/onnx_pb.h"

namespace kiln::onnx_fe::internal {

/// True for the default ONNX domain, which models spell "" or "ai.onnx".
inline bool IsDefaultDomain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

/// `s` cut to `max_chars` with onnx's multi-line messages collapsed onto one line ("..." when cut).
std::string FirstLines(const std::string& s, size_t max_chars = 600);

/// One graph of the model (the main graph or a subgraph) and what the stages learn about it.
/// Names are views into the protos on the context's arena, which outlive every stage.
struct GraphInfo {
  onnx::GraphProto* proto = nullptr;
  // Set by ValidateModel when it collects the graphs.
  int parent = -1;  ///< index into LoadContext::graphs; -1 for the main graph
  size_t depth = 0;
  std::string original_name;
  std::string where;  ///< "main graph" or "subgraph 'x' (attribute 'then_branch' of node 'if1' (If))"
  /// Per node (in the proto's current order; HoistConstants and ResolveScopes keep it in step):
  /// the indices of the node's subgraphs in LoadContext::graphs.
  std::vector<std::vector<int>> node_children;
  // Filled by ValidateGraphs: graph inputs, initializers and node outputs; the producer of each
  // node output (by node index; cleared by ResolveScopes once the nodes are sorted).
  std::unordered_set<std::string_view> defined;
  std::unordered_set<std::string_view> initializers;
  std::unordered_map<std::string_view, int> producer;
  std::vector<std::string_view> free_vars;      ///< names read from enclosing graphs (ResolveScopes), sorted
  std::unordered_map<std::string, std::string> aliases;  ///< removed Identity/Dropout outputs (BuildModel)
  std::unordered_set<std::string> transparent_outputs;   ///< the keys of `aliases`
  /// Initializers from index hoisted_from on were Constant nodes (HoistConstants), in node order.
  int hoisted_from = INT_MAX;
  std::vector<std::string_view> hoisted_node_names;  ///< their (arena-owned) node names
};

/// Where a failure is: the structured fields of LoadError. Empty fields do not apply.
struct Site {
  std::string node;
  std::string op_type;
  std::string attribute;
  std::string tensor;
  std::string node_output;  // the node's first output (names an unnamed node)
};
/// The site of a node (its name and op type), optionally of one of its attributes or tensors.
Site At(const onnx::NodeProto& node, std::string attribute = {}, std::string tensor = {});
/// The site of a tensor that no node owns (graph input, initializer, graph output, value_info).
inline Site AtTensor(std::string tensor) { return Site{{}, {}, {}, std::move(tensor), {}}; }

/// The state of one load, shared by its stages; lives for one LoadModel() call.
struct LoadContext {
  LoadContext(std::string_view bytes, const LoadOptions& options);
  LoadContext(const LoadContext&) = delete;
  LoadContext& operator=(const LoadContext&) = delete;

  /// Records the failure of the running stage (`stage`) and returns its Status
  /// (LoadError::ToStatus()).
  Status Fail(StatusCode code, std::string message, Site site = {});
  /// A LoaderLimits cap (or protobuf's 2 GiB limit) was exceeded: RESOURCE_EXHAUSTED, reported
  /// as LoadStage::kLimits whichever stage finds it.
  Status FailLimit(std::string message, Site site = {});

  /// Checks a tensor payload (compiler/onnx/tensor_decode.h) of the tensor `name` (of attribute
  /// `attr` of `node` when `node` is non-null) and adds its bytes to the total capped by
  /// LoaderLimits::max_total_tensor_bytes.
  Status CheckPayload(const onnx::TensorProto& t, const std::string& name, const onnx::NodeProto* node,
                      const std::string& attr);
  /// The schema of `op_type` in `domain` ("" = default) at the model's opset `version`, or nullptr.
  const onnx::OpSchema* FindSchema(const std::string& op_type, int64_t version, const std::string& domain);
  /// True when a graph enclosing graphs[gi] defines `name` (filled by ValidateGraphs).
  bool IsDefinedInAncestors(int gi, std::string_view name) const {
    for (int p = graphs[gi].parent; p >= 0; p = graphs[p].parent) {
      if (graphs[p].defined.count(name)) return true;
    }
    return false;
  }
  /// `name` as read in graphs[gi], with the aliases of removed Identity/Dropout outputs (of this
  /// graph and its ancestors) followed to the tensor that carries it.
  std::string Resolve(int gi, const std::string& name) const;

  const std::string_view bytes;  ///< the serialized model; only read during the load
  const LoadOptions& options;
  LoadStage stage = LoadStage::kLimits;  ///< the running stage (set by the driver)
  LoadError error;                       ///< the failure, once Fail or FailLimit was called

  // The parsed model and everything onnx's inference/checker add to it live on an arena: a model
  // has thousands of small messages and strings, and arena allocation (and one bulk free) is far
  // cheaper than a malloc/free each. Payload strings (raw_data) still use the heap, so
  // DecodeTensor can take them over. Declared before `model`, which lives on it.
  google::protobuf::Arena arena;
  onnx::ModelProto& model;

  std::unordered_map<std::string, int64_t> imports;  ///< domain ("" for default) -> version (ValidateModel)
  /// The main graph and its subgraphs, breadth-first: parents always precede children (ValidateModel).
  std::vector<GraphInfo> graphs;
  uint64_t total_tensor_bytes = 0;      ///< payload bytes checked so far (CheckPayload)
  std::vector<std::string> warnings;    ///< non-fatal findings, handed to Model::warnings()
  std::shared_ptr<const Model> result;  ///< the built model (BuildModel)
  // onnx's registry lookup hashes op type, domain and version through nested maps; the model's
  // opset per domain is fixed, so (domain, op_type) -> schema is cached (FindSchema).
  std::unordered_map<std::string, const onnx::OpSchema*> schema_cache;

 private:
  Status Record(StatusCode code, LoadStage at, std::string message, Site site);
};

}  // namespace kiln::onnx_fe::internal
