// Internal to compiler/onnx: the stages of LoadModel(), grouped by the file that implements them.
// The order they run in is written once, in the kStages table of compiler/onnx/loader.cc; each
// runs over the same LoadContext (compiler/onnx/load_context.h) and the first failing stage ends
// the load. A stage's failures report the LoadStage given beside it in kStages, except that an
// exceeded LoaderLimits cap is always LoadStage::kLimits.
#pragma once

#include "common/status.h"
#include "compiler/onnx/load_context.h"

namespace kiln::onnx_fe::internal {

// compiler/onnx/load_parse.cc
/// Size caps on the bytes: not empty, under LoaderLimits::max_model_bytes and kMaxModelBytes (common/limits.h).
Status CheckSize(LoadContext& ctx);
/// Wire pre-scan (node count, subgraph depth) and the protobuf parse into LoadContext::model.
Status Parse(LoadContext& ctx);

// compiler/onnx/load_validate.cc
/// Model-level checks (functions, ir_version, opset imports), LoadOptions::bind_symbols values,
/// and the tree of graphs (LoadContext::graphs).
Status ValidateModel(LoadContext& ctx);
/// Per graph: inputs, initializers and their payloads, every node against its schema, outputs;
/// fills GraphInfo::defined / initializers / producer.
Status ValidateGraphs(LoadContext& ctx);

// compiler/onnx/load_constants.cc
/// Constant nodes of the main graph in the plain `value` form become initializers.
Status HoistConstants(LoadContext& ctx);

// compiler/onnx/load_scopes.cc
/// Per graph, innermost first: every read name defined (here or in an enclosing graph), outer
/// captures (GraphInfo::free_vars), graph outputs and value_info defined; nodes sorted
/// topologically (a cycle is an error).
Status ResolveScopes(LoadContext& ctx);

// compiler/onnx/load_infer.cc
/// Drops declared shapes downstream of ceil_mode pools, binds LoadOptions::bind_symbols, runs
/// onnx's shape inference (with compiler/onnx/schema_patch.h installed).
Status RunShapeInference(LoadContext& ctx);
/// onnx::checker::check_model.
Status RunChecker(LoadContext& ctx);

// compiler/onnx/load_build.cc
/// Identity / inference-mode Dropout removal, unique node names, and the IR
/// (LoadContext::result).
Status BuildModel(LoadContext& ctx);

}  // namespace kiln::onnx_fe::internal
