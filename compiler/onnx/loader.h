// The ONNX front end: untrusted model bytes in, immutable graph IR (compiler/onnx/ir.h) out.
//
// This is the only module in Kiln that touches onnx::ModelProto. LoadModel() runs these stages,
// in this order (the kStages table of compiler/onnx/loader.cc; one file each, over one
// LoadContext, compiler/onnx/load_context.h); the LoadStage a failure reports is given in brackets:
//   1. limits [kLimits] (load_parse.cc) — size (<= LoaderLimits::max_model_bytes and kMaxModelBytes,
//      protobuf's hard limit);
//   2. parse [kParse] (load_parse.cc) — an iterative pre-scan of the protobuf wire format that
//      counts nodes and subgraph nesting depth before anything is allocated for them, then
//      onnx::ModelProto from the bytes, with a protobuf recursion limit derived from
//      LoaderLimits::max_graph_depth;
//   3. structure [kStructure] — Kiln's own validation (iterative, never recursive), done *before*
//      onnx's library code sees the graph, because onnx 1.12's shape inference, checker and IR
//      import crash (not throw) on some malformed graphs:
//      a. model level (load_validate.cc): ir_version (1..8), opset imports (default domain
//         6..17), no model-local functions, LoadOptions::bind_symbols values >= 0;
//      b. constants (load_constants.cc): Constant nodes in the plain `value` form become
//         initializers of the main graph (IR >= 4, never under a name a graph input or
//         initializer already has; their payload is checked as the node's), which spares them
//         per-node validation, inference and checks;
//      c. graphs (load_validate.cc): no sparse tensors, known ops and their arity/attribute types
//         against the op schema (OpSchema::Verify), required inputs present, single assignment
//         and no shadowing of enclosing names, nodes with >= 1 output, positive
//         strides/dilations/kernel_shape/blocksize/group, external-data tensors (rejected, no path
//         is ever opened), tensor payload sizes (element count x element size == bytes), caps on
//         total tensor bytes;
//      d. scopes (load_scopes.cc): every input defined (graph input, initializer, node output, or
//         outer scope for subgraphs), graph outputs produced, value_info naming existing tensors;
//         and nodes ordered topologically (a cycle is an error naming a node on it);
//   4. shape inference [kShapeInference] (load_infer.cc) — onnx::shape_inference::InferShapes
//      (strict), with every schema's inference function wrapped (compiler/onnx/schema_patch.h)
//      so that untyped required inputs and conv/pool rank mismatches fail inference instead of
//      reaching onnx 1.12 code that dereferences or indexes out of bounds, and MaxPool/AveragePool
//      output shapes for ceil_mode=1 computed by the corrected rule of onnx PR #5741 (see below);
//   5. checker [kChecker] (load_infer.cc) — onnx::checker::check_model;
//   6. IR build [kBuild] (load_build.cc) — Identity / inference Dropout removed (a Dropout whose
//      mask is used, or whose training_mode is not a constant false, is rejected), attributes
//      completed with schema defaults from onnx::OpSchemaRegistry for the model's opset,
//      Constant nodes folded to constant tensors, initializer payloads decoded (moved out of the
//      protobuf, not copied).
// An exceeded LoaderLimits cap is RESOURCE_EXHAUSTED and kLimits whichever stage finds it.
// No exception escapes: everything onnx throws becomes a Status. Isolation choice: all of this runs
// in-process; instead of a child process per load, the known crash classes of onnx 1.12 are
// rejected up front (stages 1-3) or turned into inference errors (stage 4), and the libFuzzer
// target tests/fuzz/onnx_loader_fuzzer.cc keeps looking for new ones (scripts/fuzz-onnx.sh).
//
// Pooling ceil_mode (onnx PR #5741, agreed by PyTorch and ONNX Runtime): with ceil_mode=1 the last
// pooling window must start inside the input plus the begin padding, i.e.
//   out = ceil((in + pad_begin + pad_end - ((k - 1) * dilation + 1)) / stride) + 1,
//   and if (out - 1) * stride >= in + pad_begin then out -= 1.
// onnx 1.12 lacks the correction; Kiln applies it during shape inference, and declared shapes
// of tensors downstream of such a pool never fail the model (inference replaces them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/limits.h"
#include "common/status.h"
#include "compiler/onnx/ir.h"

namespace kiln::onnx_fe {

/// Resource caps for one load. Exceeding any of them is RESOURCE_EXHAUSTED with a message naming
/// the cap and its value.
struct LoaderLimits {
  /// Largest accepted serialized model (bytes). The default is kMaxModelBytes (common/limits.h),
  /// the one number the store and the upload summary use too; larger values are clamped to it
  /// because protobuf cannot parse a larger message.
  size_t max_model_bytes = kMaxModelBytes;
  /// Largest number of nodes, counted over the main graph and all subgraphs.
  size_t max_nodes = 1'000'000;
  /// Deepest subgraph nesting (main graph = 0; an If inside the main graph has depth-1 branches).
  size_t max_graph_depth = 16;
  /// Largest total payload of all constant tensors (initializers, Constant nodes, tensor
  /// attributes), in bytes as stored in the model.
  size_t max_total_tensor_bytes = size_t{1} << 31;
};

/// Options for one load.
struct LoadOptions {
  LoaderLimits limits;
  /// Symbolic dims of graph inputs to fix before shape inference (e.g. {"batch", 1}); shapes are
  /// then inferred with the values. A symbol not present in the model is ignored.
  std::map<std::string, int64_t> bind_symbols;
  /// Name used in error messages (e.g. the upload's name or model_id); may be empty.
  std::string model_name;
};

/// Which stage rejected the model, in the order the stages run (see the top of this file; a
/// static_assert in compiler/onnx/loader.cc keeps its stage table in this order). A LoaderLimits
/// cap is kLimits whichever stage finds it; an exception that escapes the stages is kBuild.
enum class LoadStage {
  kLimits,
  kParse,
  kStructure,
  kShapeInference,
  kChecker,
  kBuild,
};
const char* LoadStageName(LoadStage stage);

/// Structured description of a load failure. `code` is one of
///   INVALID_ARGUMENT    — the bytes are not a valid ONNX model, or the graph is malformed;
///   FAILED_PRECONDITION — a valid model Kiln cannot represent (unsupported opset or domain,
///                         external data, STRING tensors, Dropout in training mode, ...);
///   RESOURCE_EXHAUSTED  — a LoaderLimits cap or kMaxModelBytes (protobuf's limit) was exceeded.
/// Fields that do not apply are empty.
struct LoadError {
  StatusCode code = StatusCode::kOk;
  LoadStage stage = LoadStage::kParse;
  std::string model;      ///< LoadOptions::model_name
  std::string node;       ///< node name as in the model ("" when the node is unnamed or n/a)
  std::string op_type;    ///< op type of that node
  std::string attribute;  ///< attribute name
  std::string tensor;     ///< tensor name
  std::string node_output;  ///< the node's first output: how the message names an unnamed node
  std::string message;    ///< what is wrong and what to do about it

  /// The Status the services return: `code` and a message that includes the non-empty fields,
  /// e.g. "model 'm': node 'conv1' (Conv): input 'W': ..."; an unnamed node by its op type and
  /// first output: "unnamed Relu node (output 'y'): ...".
  Status ToStatus() const;
};

/// Loads a model from its serialized bytes (one self-contained .onnx file).
/// `bytes` is only read during the call. Thread-safe: any number of concurrent loads.
/// On failure returns the Status from LoadError::ToStatus() and, when `error` is non-null, fills
/// it with the structured details.
Result<std::shared_ptr<const Model>> LoadModel(std::string_view bytes, const LoadOptions& options = {},
                                               LoadError* error = nullptr);

/// Convenience overload: default options with the given limits.
Result<std::shared_ptr<const Model>> LoadModel(std::string_view bytes, const LoaderLimits& limits,
                                               LoadError* error = nullptr);

}  // namespace kiln::onnx_fe
