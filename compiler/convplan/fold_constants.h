// Plan-time constant folding (step 2 of BuildConvPlan, compiler/convplan/plan.h): every main-graph
// node whose value the model alone decides is evaluated once, when the plan is built, with the
// same host kernels a run uses (HostOpSupport::EvaluateHostOp, i.e. runtime/host_kernels/), and
// replaced by a constant — so it never runs at run time, and a Conv whose weights such a subgraph
// computes (QAT exports: weight * scale, Clip, Round) gets constant weights and can run on the
// device.
//
// Folded, in topological order:
//   * a node every input of which is a constant (initializer, Constant, or folded before) — the
//     QAT calc_out_shift / calc_out_scale subgraphs (ReduceMax, Pow, Log, Floor, Round, ...);
//   * Shape (and Size) of a tensor whose shape is static — the Shape → Gather → Concat → Reshape
//     chains of torch.onnx exports; with symbolic input dims this needs the dims bound when the
//     model is loaded (onnx_fe::LoadOptions::bind_symbols), which is why plans are cached per
//     bound input shape (api/run_conv.h).
// Not folded: Conv / ConvTranspose (device ops), nodes with subgraphs, nodes outside ai.onnx, ops
// the host cannot run, a node whose evaluation fails (it fails again at run time, with the run's
// error), and — decided before evaluating, since plan building has no memory budget and cannot be
// cancelled — a node whose outputs exceed kMaxFoldedBytes (their inferred shapes; where shape
// inference left them open, which it does for ops reading a folded Shape chain, a bound from the
// input values: ConstantOfShape, Expand, Tile, Range, broadcasting ops, ops that only reorder,
// select or reduce; Pad, Resize, Gather and the like stay unfolded then), whose work exceeds
// kMaxFoldWork (MatMul / Gemm: batch·M·K·N multiply-adds; pooling: output times kernel area;
// other ops: elements read and written), or that would take the model's folding past
// kMaxModelFoldWork. Those stay run-time values, computed under the run's memory budget and
// cancellation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "compiler/convplan/host_op_support.h"
#include "compiler/onnx/ir.h"

namespace kiln::convplan {

/// Largest single value folding keeps as a constant (bytes).
inline constexpr int64_t kMaxFoldedBytes = int64_t{256} << 20;
/// Most work one folded node may take: 2^28 multiply-adds or elements (about a second of one core;
/// one op of a 2048->2048 3x3 conv's QAT weight chain reads and writes 2^26.2 elements).
inline constexpr int64_t kMaxFoldWork = int64_t{1} << 28;
/// Most work the folds of one model may take together (the same units; 64 nodes at the limit).
inline constexpr int64_t kMaxModelFoldWork = int64_t{1} << 34;

struct FoldResult {
  /// The model with folded nodes removed and their outputs constants (the input model itself when
  /// nothing folded).
  std::shared_ptr<const onnx_fe::Model> model;
  /// Number of nodes removed.
  int64_t folded_nodes = 0;
};

/// Folds `model` (see the header comment). Errors: only INTERNAL / RESOURCE_EXHAUSTED from
/// building the new model; evaluation failures just leave the node in place.
Result<FoldResult> FoldConstants(std::shared_ptr<const onnx_fe::Model> model, const HostOpSupport& host_ops);

}  // namespace kiln::convplan
