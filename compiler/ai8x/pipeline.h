// The ai8x pass pipeline: the one list of passes, in order, that CompileAi8x runs.
//
// Each pass reads and rewrites the PassContext's Network (compiler/ai8x/passes.h documents what
// each one does). compiler/ai8x/README.md's pass table is PipelineMarkdownTable() (a test diffs
// them; `ai8x_compile_tool --print-pipeline` prints it), and tests run the pipeline up to a named
// pass with RunPasses.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "compiler/ai8x/compile.h"
#include "compiler/ai8x/network.h"
#include "compiler/onnx/ir.h"

namespace kiln::ai8x {

/// `options` with arch (default_arch, else "unknown") and dataset ("unknown") defaulted.
Ai8xOptions ResolveOptions(const Ai8xOptions& options);

/// What the passes of one compile share.
struct PassContext {
  PassContext(Network& n, const Ai8xOptions& o) : net(n), options(o), resolved(ResolveOptions(o)) {}

  Network& net;
  const Ai8xOptions& options;  ///< as requested
  /// Options after defaulting: arch (options.default_arch, else "unknown"), dataset ("unknown");
  /// input_format and use_fifos as planned (set by the Report pass).
  Ai8xOptions resolved;
  /// BuildLayers' input; null when the network was built elsewhere (CompileAi8xNetwork).
  const onnx_fe::Graph* graph = nullptr;
  /// An error from building the layers (or no layer at all): CheckRules is then skipped (its
  /// findings would be about a half-built network). Decided once, when the first pass after
  /// BuildLayers starts.
  bool build_failed = false;
  bool build_checked = false;
  /// Filled by EmitYaml and Report.
  Ai8xCompileResult result;
};

/// A pass: its name, the file that implements it, what it does (one line, the README table), and
/// whether it runs on an empty layer list.
struct Pass {
  std::string_view name;
  std::string_view file;
  std::string_view what;
  bool needs_layers;
  Status (*run)(PassContext&);
};

/// The passes in the order CompileAi8x runs them.
std::span<const Pass> Ai8xPipeline();

/// Runs the passes from `from` through `until` (both by name; empty: the first / the last).
/// Errors: INVALID_ARGUMENT for an unknown pass name or `from` after `until`; otherwise the first
/// pass error (malformed overrides), which stops the run.
Status RunPipeline(PassContext& ctx, std::string_view from = {}, std::string_view until = {});

/// RunPipeline on `net` with its own context, for tests and benches: e.g.
/// RunPasses(net, o, "ChooseInputFormatAndStreaming", "PlanDataMemory") plans a hand-built list.
Status RunPasses(Network& net, const Ai8xOptions& options, std::string_view from, std::string_view until);

/// The README table: "| pass | file | what |" and one row per pass.
std::string PipelineMarkdownTable();

}  // namespace kiln::ai8x
