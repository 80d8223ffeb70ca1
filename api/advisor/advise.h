// The precision advisor, in process: the cheapest per-layer TT-NN precision (by the
// estimate of api/advisor/cost_model.h) whose CHAINED end-to-end PCC meets a target on the given
// inputs (several inputs: the worst one counts). Runs on tt-emu through runtime::RunConvPlan with
// RunOptions::layer_precision — the map RunConvLayersRequest.layer_precision becomes — so an
// advised assignment runs as is with `kiln run --layer-precision` or a request's layer_precision.
//
// Search (deterministic: the same model, inputs, options and seed give the same answer):
//  1. Reference: the fp32 graph outputs of every input (reference backend), once.
//  2. Per-layer sweeps: one PER_LAYER run per configuration of the space (each conv fed its
//     fp32 reference input, so its PCC is its own error) gives every conv's isolated PCC (worst
//     over the inputs) and the program tt-emu selected; the cost model prices each layer ×
//     configuration. The baseline (HiFi4, bfloat16 weights) is always swept.
//  3. Pareto front per layer: a configuration is dropped when another is no more expensive and
//     at least as accurate (ties broken by the space order).
//  4. Uniform assignments in increasing cost, chained, until the first that meets the target:
//     the best uniform configuration (the bar the answer must not exceed).
//  5. Greedy path: from every layer at its most accurate front configuration, repeatedly move the
//     layer whose next cheaper front configuration saves the most cost per unit of isolated error
//     (1 − PCC); a binary search over that path (chained runs) finds the furthest prefix that meets
//     the target.
//  6. Refinement (greedy with re-evaluation): from the cheapest assignment verified so far (the
//     path's or the best uniform one), single moves to a layer's next cheaper front configuration,
//     best cost saved per unit of isolated error first, each re-evaluated chained; a rejected move
//     freezes its layer; at most max_refine_runs new runs.
//  7. The answer is the cheapest assignment any chained run verified to meet the target (so never
//     dearer than the best uniform one); its network PCC is that chained tt-emu run's.
// Cache: every result is kept by (model, layer, config, input hash) — the isolated layer runs —
// and (model, assignment, input hash) — the chained runs — in an AdviseCache the caller may share
// across calls (e.g. several targets on one model).
// Budget: when budget_seconds > 0 runs out, the search stops at the next run boundary and returns
// the best assignment verified so far with `partial` set (and `stopped_in` naming the phase).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/advisor/cost_model.h"
#include "common/status.h"
#include "compiler/convplan/plan.h"
#include "device/backends/backend.h"
#include "device/backends/precision.h"
#include "runtime/inputs.h"

namespace kiln::api::advisor {

/// The knobs a search may vary (`--space fidelity,weights,dest,l1acc,output_dtype`).
struct SearchSpace {
  bool fidelity = true;      ///< math_fidelity: LoFi, HiFi2, HiFi3, HiFi4
  bool weights = true;       ///< weights_dtype: bfloat16, bfloat8_b, bfloat4_b
  bool dest = false;         ///< fp32_dest_acc_en: false, true
  bool l1acc = false;        ///< packer_l1_acc: false, true
  bool output_dtype = false; ///< output_dtype: bfloat16, bfloat8_b
};
/// "fidelity,weights,..." (comma-separated, any order). INVALID_ARGUMENT naming an unknown name.
Result<SearchSpace> ParseSearchSpace(const std::string& spec);
std::string SearchSpaceName(const SearchSpace& space);

/// One point of the space: the knobs it sets over the run's base precision.
struct LayerConfig {
  device::MathFidelity math_fidelity = device::MathFidelity::kHiFi4;
  device::DeviceDType weights_dtype = device::DeviceDType::kBFloat16;
  std::optional<bool> fp32_dest_acc_en;            ///< set when the space has dest
  std::optional<bool> packer_l1_acc;               ///< set when the space has l1acc
  std::optional<device::DeviceDType> output_dtype; ///< set when the space has output_dtype
  /// "HiFi2/bfloat8_b[/fp32_acc=1][/l1_acc=1][/out=bfloat8_b]" (the cache key's config part).
  std::string Key() const;
  device::PrecisionConfig Apply(const device::PrecisionConfig& base) const;
  bool operator==(const LayerConfig&) const = default;
};
/// Every configuration of `space` in a fixed order, the baseline (HiFi4, bfloat16) first.
std::vector<LayerConfig> EnumerateConfigs(const SearchSpace& space);

struct AdviseOptions {
  double target_pcc = 0.99;
  SearchSpace space;
  double budget_seconds = 0;    ///< 0 = no budget
  uint64_t seed = 0;            ///< generated (absent) inputs
  std::string tt_emu_level = "exact";
  /// The knobs outside the space (arch, board, input dtype ...): TT-NN's defaults unless set.
  device::PrecisionConfig base;
  /// Also require every device layer of the chained run to pass its tt-metal PCC threshold
  /// (runtime/accuracy.h; the chained runs then compute the fp32 reference chain alongside).
  bool per_layer_threshold = false;
  /// At most this many single-move tries after the binary search (step 5); 0 = none.
  int max_refine_runs = 48;
  /// Progress lines ("sweep 3/12 HiFi2/bfloat8_b", "chained path 0.99103 cost 0.5607"); may be
  /// empty.
  std::function<void(const std::string&)> progress;
  /// Checked inside every run (runtime::RunConvPlan): CANCELLED / DEADLINE_EXCEEDED is the
  /// search's status (no partial answer: a budget is the way to get one). May be null.
  const device::CancelToken* cancel = nullptr;
  /// The fp32 reference backend; null = a fresh one in process. kilnd passes its scheduler's
  /// Reference(), so that an advise job's reference runs on the reference lane (sched/scheduler.h).
  device::Backend* reference = nullptr;
};

/// Results kept across calls (see the header comment). Not thread-safe: one search at a time.
struct AdviseCache {
  struct LayerRun {
    double pcc = 0;
    std::optional<device::ProgramReport> program;
    std::vector<int64_t> input_shape, output_shape;  ///< the conv's first input and output, NCHW
  };
  std::map<std::string, LayerRun> layers;    ///< "model|layer|config|input hash"
  struct ChainedRun {
    double pcc = 0;                ///< graph outputs vs the fp32 reference's
    bool layers_compared = false;  ///< ran with the reference chain (per_layer_threshold)
    bool layers_pass = false;      ///< then: every device layer passed its tt-metal threshold
  };
  std::map<std::string, ChainedRun> chained;  ///< "model|chained:assignment hash|input hash"
  std::map<std::string, std::vector<std::pair<std::string, device::Tensor>>> reference;  ///< "model|input hash"
};

struct LayerAdvice {
  std::string name;                 ///< LayerReport.name (the layer_precision key)
  std::string op;                   ///< conv2d / conv_transpose2d
  LayerConfig config;
  double isolated_pcc = 0;          ///< PER_LAYER PCC of this layer at `config` (worst input)
  /// tt-metal's PCC threshold of this layer at `config` (runtime/accuracy.h PccThreshold; 0 =
  /// none): what `kiln run` checks each layer against. Without per_layer_threshold the search
  /// does not require it, so a layer may be advised below it.
  double pcc_threshold = 0;
  double relative_cost = 0;         ///< this layer at `config` / the whole network's baseline
  double baseline_relative_cost = 0;  ///< this layer at the baseline / the network's baseline
  int pareto_size = 0;              ///< configurations on this layer's front
};

struct AdviseResult {
  std::string model_hash;           ///< SHA-256 of the model bytes
  std::vector<std::string> input_hashes;  ///< SHA-256 of each input set (names, shapes, fp32 values)
  std::vector<LayerAdvice> layers;  ///< the advised assignment, plan order (convs only)
  /// Chained PCC of the assignment, worst input; NaN when no chained run finished (partial).
  double network_pcc = std::numeric_limits<double>::quiet_NaN();
  double relative_cost = 0;         ///< Σ layer cost / Σ baseline cost
  bool target_met = false;
  std::string source;               ///< "search", "uniform" or "baseline"
  /// Chained PCC of the all-HiFi4-bfloat16 assignment; NaN when it did not run (partial).
  double baseline_pcc = std::numeric_limits<double>::quiet_NaN();
  /// The cheapest uniform configuration that meets the target (none: no uniform one does, or
  /// the budget ran out before one was found).
  std::optional<LayerConfig> best_uniform;
  double best_uniform_pcc = 0, best_uniform_cost = 0;
  bool partial = false;             ///< the budget ran out; the answer is the best so far
  std::string stopped_in;           ///< partial: "reference", "sweep", "uniform", "path", "refine"
  int64_t layer_runs = 0;           ///< emulated conv runs (device convs × tt-emu network runs)
  int64_t network_runs = 0;         ///< tt-emu network runs (sweeps + chained evaluations)
  int64_t cache_hits = 0;           ///< runs the cache answered
  double seconds = 0;
  std::vector<std::string> cache_keys;  ///< the keys of every result the answer rests on
  uint64_t seed = 0;
  SearchSpace space;
  double target_pcc = 0;
  bool per_layer_threshold = false;
  std::string tt_emu_level;
};

/// Runs the search (see the header comment) on `plan` (model_hash names it in cache keys) with
/// `inputs` (each a full or partial input set; absent graph inputs generated with
/// options.seed; empty = one generated set). Errors: the runtime's (INVALID_ARGUMENT for inputs,
/// FAILED_PRECONDITION for a program TT-NN would refuse), INVALID_ARGUMENT for a target outside
/// (0, 1] or a model without convs.
Result<AdviseResult> Advise(std::shared_ptr<const convplan::ConvPlan> plan, const std::string& model_hash,
                            const std::vector<runtime::RunInputs>& inputs, const AdviseOptions& options,
                            AdviseCache* cache = nullptr);

/// Plans `bytes` (api/run_conv.h PlanModel) and calls Advise with its SHA-256.
Result<AdviseResult> AdviseModel(std::string_view bytes, const std::string& model_name,
                                 const std::vector<runtime::RunInputs>& inputs, const AdviseOptions& options,
                                 AdviseCache* cache = nullptr);

}  // namespace kiln::api::advisor
