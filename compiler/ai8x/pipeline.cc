#include "compiler/ai8x/pipeline.h"

#include <algorithm>

#include "compiler/ai8x/passes.h"

namespace kiln::ai8x {
namespace {

bool HasError(const Network& net) {
  return std::any_of(net.diagnostics.begin(), net.diagnostics.end(),
                     [](const Diagnostic& d) { return d.severity == Severity::kError; });
}

Status RunBuildLayers(PassContext& c) {
  if (c.graph != nullptr) BuildLayers(*c.graph, c.net);
  return Status::Ok();
}
Status RunFlattenViews(PassContext& c) {
  FlattenViews(c.net);
  return Status::Ok();
}
Status RunCutHostTail(PassContext& c) {
  CutHostTail(c.net);
  return Status::Ok();
}
Status RunCheckWeightOrder(PassContext& c) {
  CheckWeightOrder(c.net);  // an error here still lets CheckRules report the rest
  return Status::Ok();
}
Status RunFuseActivation(PassContext& c) {
  FuseActivation(c.net);
  return Status::Ok();
}
Status RunFusePooling(PassContext& c) {
  FusePooling(c.net);
  return Status::Ok();
}
Status RunFuseEltwise(PassContext& c) {
  FuseEltwise(c.net);
  return Status::Ok();
}
Status RunInsertWriteGaps(PassContext& c) {
  InsertWriteGaps(c.net);
  return Status::Ok();
}
Status RunInsertConcatCopies(PassContext& c) {
  InsertConcatCopies(c.net);
  return Status::Ok();
}
Status RunStructureOverrides(PassContext& c) { return ApplyStructureOverrides(c.net, c.options.overrides); }
Status RunInputFormatAndStreaming(PassContext& c) {
  ChooseInputFormatAndStreaming(c.net, c.options);
  return Status::Ok();
}
Status RunAllocateProcessors(PassContext& c) {
  AllocateProcessors(c.net, c.options);
  return Status::Ok();
}
Status RunPlanDataMemory(PassContext& c) {
  PlanDataMemory(c.net);
  return Status::Ok();
}
Status RunPlacementOverrides(PassContext& c) { return ApplyPlacementOverrides(c.net, c.options.overrides); }
Status RunCheckRules(PassContext& c) {
  if (!c.build_failed) CheckRules(c.net);
  return Status::Ok();
}
Status RunEmitYaml(PassContext& c) {
  c.net.Reindex();
  c.result.yaml = EmitYaml(c.net, c.resolved);
  return Status::Ok();
}
Status RunReport(PassContext& c) {
  std::string why = OnnxCheckpointProblem(c.graph, c.net);  // before FillReport moves the node lists out
  FillReport(c.net, c.resolved, c.result);
  c.result.needs_quantized_checkpoint = !why.empty();
  c.result.quantized_checkpoint_reason = std::move(why);
  return Status::Ok();
}

constexpr Pass kPipeline[] = {
    {"BuildLayers", "build_layers.cc",
     "data path of the IR → primitive layers; QAT chains, clamps, reshapes transparent; host tail cut", false,
     RunBuildLayers},
    {"FlattenViews", "flatten.cc", "`flatten: true` for a 1x1 conv reading its input viewed as (C*H*W, 1, 1)", true,
     RunFlattenViews},
    {"CheckWeightOrder", "rules/model.cc",
     "conv/linear layers in weight-initializer (state_dict) order, else AI8X_WEIGHT_ORDER", true, RunCheckWeightOrder},
    {"FuseActivation", "fuse.cc", "Relu/Abs into the conv/linear that produces their input", true, RunFuseActivation},
    {"FusePooling", "fuse.cc", "a pooling layer into the conv that is its only reader", true, RunFusePooling},
    {"FuseEltwise", "fuse.cc", "an element-wise layer into the conv that is its only reader, as the chip allows", true,
     RunFuseEltwise},
    {"CutHostTail", "host_tail.cc", "trailing ai8x.SoftwareLinear layers left to the host (AI8X_HOST_TAIL)", true,
     RunCutHostTail},
    {"InsertWriteGaps", "fuse.cc", "`write_gap` on sole producers, `gap_*` passthrough copies otherwise", true,
     RunInsertWriteGaps},
    {"InsertConcatCopies", "concat_copy.cc",
     "`write_gap` on multi-pass concatenation parts, `copy_*` passthrough copies of parts also read elsewhere", true,
     RunInsertConcatCopies},
    {"ApplyStructureOverrides", "overrides.cc", "`--set LAYER.output_width/quantization/activate`", true,
     RunStructureOverrides},
    {"ChooseInputFormatAndStreaming", "input_format.cc", "`data_format`, streaming prefix, `--fifo`", true,
     RunInputFormatAndStreaming},
    {"AllocateProcessors", "allocate.cc",
     "shared maps, multipass counts, kernel-memory balancing, depthwise broadcast maps", true, RunAllocateProcessors},
    {"PlanDataMemory", "data_memory.cc",
     "per-instance liveness planning of `out_offset` / `in_offset`, interleaved operands, streaming buffers", true,
     RunPlanDataMemory},
    {"ApplyPlacementOverrides", "overrides.cc", "`--set LAYER.streaming/processors/output_processors/out_offset`", true,
     RunPlacementOverrides},
    {"CheckRules", "rules/registry.cc", "the rule registry (rules/rules.h), docs/specs/ai8x-izer-rules.md §1.3-§1.8", true,
     RunCheckRules},
    {"EmitYaml", "yaml_writer.cc", "seed key order and comments", true, RunEmitYaml},
    {"Report", "compile.cc", "diagnostic layer positions, per-layer rows, resources, izer flags; whether the .onnx can be the izer's checkpoint (onnx_checkpoint.cc)", false, RunReport},
};

int IndexOfPass(std::string_view name) {
  for (size_t i = 0; i < std::size(kPipeline); ++i) {
    if (kPipeline[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

Ai8xOptions ResolveOptions(const Ai8xOptions& options) {
  Ai8xOptions resolved = options;
  if (resolved.arch.empty()) resolved.arch = resolved.default_arch.empty() ? "unknown" : resolved.default_arch;
  if (resolved.dataset.empty()) resolved.dataset = "unknown";
  return resolved;
}

std::span<const Pass> Ai8xPipeline() { return kPipeline; }

Status RunPipeline(PassContext& ctx, std::string_view from, std::string_view until) {
  int first = from.empty() ? 0 : IndexOfPass(from);
  int last = until.empty() ? static_cast<int>(std::size(kPipeline)) - 1 : IndexOfPass(until);
  if (first < 0) return InvalidArgument("no ai8x pass named '" + std::string(from) + "'");
  if (last < 0) return InvalidArgument("no ai8x pass named '" + std::string(until) + "'");
  if (first > last) return InvalidArgument("ai8x pass " + std::string(from) + " runs after " + std::string(until));
  for (int k = first; k <= last; ++k) {
    const Pass& p = kPipeline[k];
    if (k > 0 && !ctx.build_checked) {
      ctx.build_failed = HasError(ctx.net) || ctx.net.layers.empty();
      ctx.build_checked = true;
    }
    if (p.needs_layers && ctx.net.layers.empty()) continue;
    KILN_RETURN_IF_ERROR(p.run(ctx));
  }
  return Status::Ok();
}

Status RunPasses(Network& net, const Ai8xOptions& options, std::string_view from, std::string_view until) {
  PassContext ctx(net, options);
  return RunPipeline(ctx, from, until);
}

std::string PipelineMarkdownTable() {
  std::string s = "| pass | file | what |\n|---|---|---|\n";
  for (const Pass& p : kPipeline) {
    s += "| " + std::string(p.name) + " | " + std::string(p.file) + " | " + std::string(p.what) + " |\n";
  }
  return s;
}

}  // namespace kiln::ai8x
