// The precision advisor's search (api/advisor/advise.h has the algorithm).
#include "api/advisor/advise.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <sstream>

#include "api/run_conv.h"
#include "common/sha256.h"
#include "device/backends/builtin.h"
#include "runtime/accuracy.h"
#include "runtime/executor.h"
#include "runtime/prepared_convs.h"

namespace kiln::api::advisor {
namespace {

using Clock = std::chrono::steady_clock;
using device::DeviceDType;
using device::MathFidelity;

bool IsConv(const convplan::PlanOp& op) {
  return op.on_device() && (op.op == "conv2d" || op.op == "conv_transpose2d");
}

std::string InputHash(const std::vector<std::pair<std::string, device::Tensor>>& values) {
  Sha256 h;
  for (const auto& [name, t] : values) {
    h.Update(name);
    h.Update("|");
    for (int64_t d : t.shape()) h.Update(std::to_string(d) + "x");
    h.Update("|");
    auto f = t.ToFloat32();
    if (f.ok()) {
      auto raw = f->ToLayout(device::Layout::kNCHW);
      if (raw.ok()) h.Update(raw->raw().data(), raw->raw().size());
    }
  }
  return h.HexDigest();
}

// An assignment: one config index per conv layer (plan order).
using Assignment = std::vector<int>;

class Search {
 public:
  Search(std::shared_ptr<const convplan::ConvPlan> plan, std::string model_hash, const AdviseOptions& options,
         AdviseCache* cache)
      : plan_(std::move(plan)), model_(std::move(model_hash)), opt_(options), cache_(cache), start_(Clock::now()) {}

  Result<AdviseResult> Run(const std::vector<runtime::RunInputs>& given);

 private:
  struct Stop {};  // thrown internally when the budget runs out (never leaves Run)

  void Progress(const std::string& line) const {
    if (opt_.progress) opt_.progress(line);
  }
  void CheckBudget(const char* phase) {
    if (opt_.budget_seconds <= 0) return;
    if (std::chrono::duration<double>(Clock::now() - start_).count() >= opt_.budget_seconds) {
      result_.partial = true;
      result_.stopped_in = phase;
      throw Stop{};
    }
  }
  std::map<std::string, device::PrecisionConfig> LayerMap(const Assignment& a) const {
    std::map<std::string, device::PrecisionConfig> m;
    for (size_t l = 0; l < convs_.size(); ++l) m[convs_[l]] = configs_[a[l]].Apply(opt_.base);
    return m;
  }
  std::string AssignmentHash(const Assignment& a) const {
    Sha256 h;
    for (size_t l = 0; l < convs_.size(); ++l) h.Update(convs_[l] + "=" + configs_[a[l]].Key() + ";");
    return h.HexDigest().substr(0, 16);
  }
  std::string LayerKey(size_t l, size_t c, size_t input) const {
    return model_.substr(0, 16) + "|" + convs_[l] + "|" + configs_[c].Key() + "|" + inputs_hash_[input].substr(0, 16);
  }
  std::string ChainedKey(const Assignment& a, size_t input) const {
    return model_.substr(0, 16) + (opt_.per_layer_threshold ? "|chained+layers:" : "|chained:") + AssignmentHash(a) + "|" +
           inputs_hash_[input].substr(0, 16);
  }
  double Cost(const Assignment& a) const {
    double s = 0;
    for (size_t l = 0; l < a.size(); ++l) s += cost_[l][a[l]];
    return s / baseline_total_;
  }

  Result<runtime::RunResult> RunNetwork(runtime::RunMode mode, const std::map<std::string, device::PrecisionConfig>& layers,
                                        size_t input, bool compare) {
    runtime::RunOptions o;
    o.mode = mode;
    o.compare_to_reference = compare;
    o.precision = opt_.base;
    o.layer_precision = layers;
    o.input_seed = opt_.seed;
    o.reference = ref_;
    o.reference_threads = 0;
    o.prepared = prepared_ref_.get();
    auto r = runtime::RunConvPlan(*plan_, inputs_[input], *ttemu_, o, opt_.cancel);
    if (r.ok()) {
      ++result_.network_runs;
      result_.layer_runs += static_cast<int64_t>(convs_.size());
    }
    return r;
  }

  Status Reference();
  Status Sweep();
  struct Eval {
    double pcc = 0;          // chained network PCC, worst input
    bool layers_pass = true; // every compared device layer passed its tt-metal threshold (when asked)
    bool meets = false;      // pcc >= target (and layers_pass with per_layer_threshold)
  };
  // Chained evaluation of `a` over every input (cached); updates the best feasible answer.
  Result<Eval> Chained(const Assignment& a, const char* phase, const char* source);
  void BuildFronts();

  std::shared_ptr<const convplan::ConvPlan> plan_;
  std::string model_;
  AdviseOptions opt_;
  AdviseCache* cache_;
  Clock::time_point start_;
  AdviseResult result_;
  std::unique_ptr<device::Backend> ttemu_, own_reference_;
  device::Backend* ref_ = nullptr;  // opt_.reference or own_reference_
  std::unique_ptr<runtime::PreparedConvs> prepared_ref_;
  std::vector<runtime::RunInputs> inputs_;
  std::vector<std::string> inputs_hash_;
  std::vector<std::string> convs_, conv_ops_;
  std::vector<const convplan::DeviceOp*> conv_devices_;  // in plan_, per conv
  std::vector<LayerGeometry> geometry_;
  std::vector<LayerConfig> configs_;
  std::vector<std::vector<double>> pcc_, cost_;  // [layer][config]
  std::vector<std::vector<int>> front_;          // [layer]: config indices, cheapest first
  double baseline_total_ = 1;
  bool swept_ = false;
  // The cheapest verified assignment meeting the target, and the most accurate one seen.
  std::optional<Assignment> best_;
  double best_cost_ = 0, best_pcc_ = 0;
  std::string best_source_;
  std::optional<Assignment> most_accurate_;
  double most_accurate_pcc_ = -2;
};

Status Search::Reference() {
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const std::string key = model_.substr(0, 16) + "|" + inputs_hash_[i].substr(0, 16);
    if (cache_->reference.count(key)) continue;
    CheckBudget("reference");
    runtime::RunOptions o;
    o.compare_to_reference = false;
    o.input_seed = opt_.seed;
    o.reference_threads = 0;
    auto r = runtime::RunConvPlan(*plan_, inputs_[i], *ref_, o, opt_.cancel);
    if (!r.ok()) return r.status();
    cache_->reference[key] = std::move(r->outputs);
  }
  return Status::Ok();
}

Status Search::Sweep() {
  pcc_.assign(convs_.size(), std::vector<double>(configs_.size(), 2.0));
  cost_.assign(convs_.size(), std::vector<double>(configs_.size(), 0.0));
  std::vector<std::vector<std::optional<device::ProgramReport>>> programs(
      convs_.size(), std::vector<std::optional<device::ProgramReport>>(configs_.size()));
  for (size_t c = 0; c < configs_.size(); ++c) {
    for (size_t i = 0; i < inputs_.size(); ++i) {
      bool cached = true;
      for (size_t l = 0; l < convs_.size() && cached; ++l) cached = cache_->layers.count(LayerKey(l, c, i)) > 0;
      if (cached) {
        ++result_.cache_hits;
      } else {
        CheckBudget("sweep");
        Progress("sweep " + std::to_string(c + 1) + "/" + std::to_string(configs_.size()) + " " + configs_[c].Key());
        std::map<std::string, device::PrecisionConfig> all;
        for (const auto& n : convs_) all[n] = configs_[c].Apply(opt_.base);
        auto r = RunNetwork(runtime::RunMode::kPerLayer, all, i, true);
        if (!r.ok() && r.status().code() == StatusCode::kFailedPrecondition) {
          // A program TT-NN would refuse (api/run_conv.h): the configuration is out of the
          // space for this model (PCC -1 on every layer: never on a front above a runnable one).
          Progress("sweep " + configs_[c].Key() + " skipped: " + r.status().message());
          for (size_t l = 0; l < convs_.size(); ++l) cache_->layers[LayerKey(l, c, i)] = {-1.0, std::nullopt, {}, {}};
        } else if (!r.ok()) {
          return r.status().WithContext("per-layer sweep at " + configs_[c].Key());
        }
        for (const auto& row : r.ok() ? r->layers : std::vector<runtime::LayerReport>{}) {
          auto it = std::find(convs_.begin(), convs_.end(), row.name);
          if (it == convs_.end()) continue;
          const size_t l = static_cast<size_t>(it - convs_.begin());
          AdviseCache::LayerRun run{row.pcc, row.program, {}, {}};
          if (!row.input_shapes.empty()) run.input_shape = row.input_shapes[0];
          if (!row.output_shapes.empty()) run.output_shape = row.output_shapes[0];
          cache_->layers[LayerKey(l, c, i)] = std::move(run);
        }
      }
      for (size_t l = 0; l < convs_.size(); ++l) {
        const auto& run = cache_->layers[LayerKey(l, c, i)];
        pcc_[l][c] = std::min(pcc_[l][c], run.pcc);
        if (i == 0) {
          programs[l][c] = run.program;
          if (run.input_shape.size() == 4) {
            geometry_[l].batch = run.input_shape[0];
            geometry_[l].in_h = run.input_shape[2];
            geometry_[l].in_w = run.input_shape[3];
          }
          if (run.output_shape.size() == 4) {
            geometry_[l].out_h = run.output_shape[2];
            geometry_[l].out_w = run.output_shape[3];
          }
        }
      }
    }
  }
  // Priced from the first input's shapes and programs.
  for (size_t l = 0; l < convs_.size(); ++l) {
    for (size_t c = 0; c < configs_.size(); ++c) {
      cost_[l][c] = EstimateLayerCost(geometry_[l], programs[l][c], configs_[c].Apply(opt_.base)).cycles;
    }
  }
  baseline_total_ = 0;
  for (size_t l = 0; l < convs_.size(); ++l) baseline_total_ += cost_[l][0];
  if (baseline_total_ <= 0) baseline_total_ = 1;
  swept_ = true;
  return Status::Ok();
}

Result<Search::Eval> Search::Chained(const Assignment& a, const char* phase, const char* source) {
  double worst = 2.0;
  bool layers_pass = true;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const std::string key = ChainedKey(a, i);
    auto it = cache_->chained.find(key);
    AdviseCache::ChainedRun run;
    if (it != cache_->chained.end()) {
      ++result_.cache_hits;
      run = it->second;
    } else {
      CheckBudget(phase);
      // With per_layer_threshold the reference chain runs alongside, for each layer's verdict.
      auto r = RunNetwork(runtime::RunMode::kChained, LayerMap(a), i, opt_.per_layer_threshold);
      if (!r.ok() && r.status().code() == StatusCode::kFailedPrecondition) {
        cache_->chained[key] = {-1.0, true, false};  // refused by TT-NN's rules: never an answer
        worst = -1.0;
        layers_pass = false;
        continue;
      }
      if (!r.ok()) return r.status().WithContext(std::string("chained run (") + phase + ")");
      const auto& ref = cache_->reference[model_.substr(0, 16) + "|" + inputs_hash_[i].substr(0, 16)];
      std::vector<device::Tensor> dev, gold;
      for (size_t k = 0; k < r->outputs.size() && k < ref.size(); ++k) {
        auto d = r->outputs[k].second.ToFloat32();
        auto g = ref[k].second.ToFloat32();
        if (!d.ok()) return d.status();
        if (!g.ok()) return g.status();
        dev.push_back(std::move(*d));
        gold.push_back(std::move(*g));
      }
      auto cmp = runtime::CompareOutputs(dev, gold, 0.0, "graph outputs");
      if (!cmp.ok()) return cmp.status();
      run.pcc = std::isfinite(cmp->pcc) ? cmp->pcc : -1.0;
      run.layers_compared = r->compared;
      run.layers_pass = r->all_pass;
      cache_->chained[key] = run;
    }
    worst = std::min(worst, run.pcc);
    // A cached run without the reference chain says nothing about the layers: counted as failing
    // when asked (a search with per_layer_threshold stores its own, compared, entries).
    if (opt_.per_layer_threshold) layers_pass = layers_pass && run.layers_compared && run.layers_pass;
  }
  Eval ev{worst, layers_pass, worst >= opt_.target_pcc && (!opt_.per_layer_threshold || layers_pass)};
  const double cost = Cost(a);
  char line[160];
  std::snprintf(line, sizeof line, "chained %s: pcc %.6f cost %.4f%s", phase, worst, cost, ev.meets ? " meets" : "");
  Progress(line);
  if (ev.meets && (!best_ || cost < best_cost_ - 1e-12)) {
    best_ = a;
    best_cost_ = cost;
    best_pcc_ = worst;
    best_source_ = source;
  }
  if (worst > most_accurate_pcc_) {
    most_accurate_ = a;
    most_accurate_pcc_ = worst;
  }
  return ev;
}

void Search::BuildFronts() {
  front_.assign(convs_.size(), {});
  for (size_t l = 0; l < convs_.size(); ++l) {
    std::vector<int> idx(configs_.size());
    for (size_t c = 0; c < configs_.size(); ++c) idx[c] = static_cast<int>(c);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) {
      if (cost_[l][a] != cost_[l][b]) return cost_[l][a] < cost_[l][b];
      return pcc_[l][a] > pcc_[l][b];
    });
    // Cheapest first; keep a config only when it is more accurate than every cheaper one.
    double best = -std::numeric_limits<double>::infinity();
    for (int c : idx) {
      if (pcc_[l][c] <= -1.0) continue;  // refused by TT-NN's rules (Sweep)
      if (pcc_[l][c] > best) {
        front_[l].push_back(c);
        best = pcc_[l][c];
      }
    }
    // Every configuration refused: the baseline stands in (its chained runs fail: never an answer).
    if (front_[l].empty()) front_[l].push_back(0);
  }
}

Result<AdviseResult> Search::Run(const std::vector<runtime::RunInputs>& given) {
  if (!(opt_.target_pcc > 0 && opt_.target_pcc <= 1)) {
    return InvalidArgument("target_pcc must be in (0, 1], got " + std::to_string(opt_.target_pcc));
  }
  AdviseCache local;
  if (!cache_) cache_ = &local;
  result_.seed = opt_.seed;
  result_.space = opt_.space;
  result_.target_pcc = opt_.target_pcc;
  result_.per_layer_threshold = opt_.per_layer_threshold;
  result_.tt_emu_level = opt_.tt_emu_level;
  result_.model_hash = model_;
  configs_ = EnumerateConfigs(opt_.space);

  for (const auto& op : plan_->ops) {
    if (!IsConv(op)) continue;
    convs_.push_back(op.name);
    conv_ops_.push_back(op.op);
    const auto& d = op.device();
    conv_devices_.push_back(&d);
    LayerGeometry g;
    g.in_channels = d.in_channels();
    g.out_channels = d.out_channels();
    auto [kh, kw] = d.kernel();
    g.kernel_h = std::max<int64_t>(kh, 1);
    g.kernel_w = std::max<int64_t>(kw, 1);
    g.groups = d.group();
    g.bias = d.bias.has_value();
    geometry_.push_back(g);
  }
  if (convs_.empty()) return InvalidArgument("the model has no conv layer to advise on");

  std::vector<runtime::RunInputs> sets = given;
  if (sets.empty()) sets.emplace_back();
  for (const auto& s : sets) {
    auto resolved = runtime::ResolveInputs(plan_->inputs, s, opt_.seed);
    if (!resolved.ok()) return resolved.status();
    inputs_hash_.push_back(InputHash(resolved->values));
    runtime::RunInputs in;
    for (auto& [name, t] : resolved->values) in[name] = std::move(t);
    inputs_.push_back(std::move(in));
  }
  result_.input_hashes = inputs_hash_;

  device::BackendOptions bo;
  bo.settings[device::kTtEmuLevelSetting] = opt_.tt_emu_level;
  auto emu = device::DefaultBackendRegistry().Create(device::kTtEmuBackend, bo);
  if (!emu.ok()) return emu.status();
  ttemu_ = std::move(*emu);
  ref_ = opt_.reference;
  if (ref_ == nullptr) {
    auto ref = device::DefaultBackendRegistry().Create(device::kReferenceBackend, {});
    if (!ref.ok()) return ref.status();
    own_reference_ = std::move(*ref);
    ref_ = own_reference_.get();
  }
  prepared_ref_ = std::make_unique<runtime::PreparedConvs>(plan_, *ref_);

  try {
    if (auto s = Reference(); !s.ok()) return s;
    if (auto s = Sweep(); !s.ok()) return s;
    BuildFronts();

    // Baseline, then uniform configurations in increasing cost until one meets the target.
    const Assignment baseline(convs_.size(), 0);
    auto base_pcc = Chained(baseline, "uniform", "baseline");
    if (!base_pcc.ok()) return base_pcc.status();
    result_.baseline_pcc = base_pcc->pcc;
    std::vector<int> order(configs_.size());
    for (size_t c = 0; c < configs_.size(); ++c) order[c] = static_cast<int>(c);
    std::vector<double> uniform_cost(configs_.size());
    for (size_t c = 0; c < configs_.size(); ++c) uniform_cost[c] = Cost(Assignment(convs_.size(), static_cast<int>(c)));
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return uniform_cost[a] < uniform_cost[b]; });
    for (int c : order) {
      const Assignment u(convs_.size(), c);
      auto p = Chained(u, "uniform", c == 0 ? "baseline" : "uniform");
      if (!p.ok()) return p.status();
      if (p->meets) {
        result_.best_uniform = configs_[c];
        result_.best_uniform_pcc = p->pcc;
        result_.best_uniform_cost = uniform_cost[c];
        break;
      }
    }

    // Greedy path over the fronts (most accurate first), by cost saved per unit of isolated error.
    std::vector<int> pos(convs_.size());
    for (size_t l = 0; l < convs_.size(); ++l) pos[l] = static_cast<int>(front_[l].size()) - 1;
    auto err = [&](size_t l, int c) { return std::max(1.0 - pcc_[l][c], 0.0); };
    auto efficiency = [&](size_t l, const std::vector<int>& at) {
      const int cur = front_[l][at[l]], next = front_[l][at[l] - 1];
      const double saved = cost_[l][cur] - cost_[l][next];
      const double added = std::max(err(l, next) - err(l, cur), 1e-12);
      return saved / added;
    };
    auto assign = [&](const std::vector<int>& at) {
      Assignment a(convs_.size());
      for (size_t l = 0; l < convs_.size(); ++l) a[l] = front_[l][at[l]];
      return a;
    };
    std::vector<std::vector<int>> path{pos};
    for (;;) {
      std::vector<int> at = path.back();
      int pick = -1;
      double best_eff = -1;
      for (size_t l = 0; l < convs_.size(); ++l) {
        if (at[l] <= 0) continue;
        const double e = efficiency(l, at);
        if (e > best_eff) {
          best_eff = e;
          pick = static_cast<int>(l);
        }
      }
      if (pick < 0) break;
      --at[pick];
      path.push_back(at);
    }
    auto start = Chained(assign(path.front()), "path", "search");
    if (!start.ok()) return start.status();
    if (start->meets) {
      size_t lo = 0, hi = path.size();  // lo meets the target; hi = first known not to (or end)
      auto last = Chained(assign(path.back()), "path", "search");
      if (!last.ok()) return last.status();
      if (last->meets) {
        lo = path.size() - 1;
      } else {
        hi = path.size() - 1;
        while (hi - lo > 1) {
          const size_t mid = lo + (hi - lo) / 2;
          auto p = Chained(assign(path[mid]), "path", "search");
          if (!p.ok()) return p.status();
          (p->meets ? lo : hi) = mid;
        }
      }
    }
    // Single moves from the cheapest assignment verified so far (the path's or the best uniform
    // one): each layer may step to the next cheaper configuration of its front, best cost saved
    // per unit of isolated error first; each move is re-evaluated chained, and a rejected move
    // freezes its layer.
    if (best_) {
      Assignment at = *best_;
      auto next_cheaper = [&](size_t l, int c) {
        int pick = -1;
        for (int f : front_[l]) {
          if (cost_[l][f] < cost_[l][c] - 1e-12) pick = f;  // fronts are cheapest first
        }
        return pick;
      };
      std::set<size_t> frozen;
      int tries = 0;
      while (tries < opt_.max_refine_runs) {
        int pick = -1, pick_to = -1;
        double best_eff = -std::numeric_limits<double>::infinity();
        for (size_t l = 0; l < convs_.size(); ++l) {
          if (frozen.count(l)) continue;
          const int to = next_cheaper(l, at[l]);
          if (to < 0) continue;
          const double saved = cost_[l][at[l]] - cost_[l][to];
          const double added = std::max(err(l, to) - err(l, at[l]), 1e-12);
          if (saved / added > best_eff) {
            best_eff = saved / added;
            pick = static_cast<int>(l);
            pick_to = to;
          }
        }
        if (pick < 0) break;
        Assignment next = at;
        next[pick] = pick_to;
        const int64_t runs_before = result_.network_runs;
        auto p = Chained(next, "refine", "search");
        if (!p.ok()) return p.status();
        if (result_.network_runs != runs_before) ++tries;
        if (p->meets) {
          at = next;
        } else {
          frozen.insert(static_cast<size_t>(pick));
        }
      }
    }
  } catch (const Stop&) {
    // partial: the best verified so far (below)
  }

  std::optional<Assignment> answer = best_ ? best_ : most_accurate_;
  if (!answer) {
    // The budget ran out before any chained run: report nothing chosen beyond the baseline.
    answer = Assignment(convs_.size(), 0);
    result_.source = "none";
  } else {
    result_.source = best_ ? best_source_ : "search";
  }
  result_.target_met = best_.has_value();
  result_.network_pcc =
      best_ ? best_pcc_ : (most_accurate_ ? most_accurate_pcc_ : std::numeric_limits<double>::quiet_NaN());
  result_.relative_cost = swept_ ? Cost(*answer) : 0.0;
  for (size_t l = 0; l < convs_.size(); ++l) {
    LayerAdvice la;
    la.name = convs_[l];
    la.op = conv_ops_[l];
    la.config = configs_[(*answer)[l]];
    la.pcc_threshold = runtime::PccThreshold(*conv_devices_[l], la.config.Apply(opt_.base), 0.0);
    if (swept_) {
      la.isolated_pcc = pcc_[l][(*answer)[l]];
      la.relative_cost = cost_[l][(*answer)[l]] / baseline_total_;
      la.baseline_relative_cost = cost_[l][0] / baseline_total_;
      la.pareto_size = static_cast<int>(front_.empty() ? 0 : front_[l].size());
      for (size_t i = 0; i < inputs_.size(); ++i) result_.cache_keys.push_back(LayerKey(l, (*answer)[l], i));
    }
    result_.layers.push_back(std::move(la));
  }
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (cache_->chained.count(ChainedKey(*answer, i))) result_.cache_keys.push_back(ChainedKey(*answer, i));
  }
  result_.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  return result_;
}

}  // namespace

Result<SearchSpace> ParseSearchSpace(const std::string& spec) {
  SearchSpace s{false, false, false, false, false};
  std::stringstream ss(spec);
  std::string item;
  bool any = false;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    any = true;
    if (item == "fidelity") s.fidelity = true;
    else if (item == "weights") s.weights = true;
    else if (item == "dest") s.dest = true;
    else if (item == "l1acc") s.l1acc = true;
    else if (item == "output_dtype") s.output_dtype = true;
    else return InvalidArgument("--space: unknown knob '" + item + "' (fidelity, weights, dest, l1acc, output_dtype)");
  }
  if (!any) return InvalidArgument("--space: empty (fidelity, weights, dest, l1acc, output_dtype)");
  return s;
}

std::string SearchSpaceName(const SearchSpace& s) {
  std::string out;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!out.empty()) out += ",";
    out += name;
  };
  add(s.fidelity, "fidelity");
  add(s.weights, "weights");
  add(s.dest, "dest");
  add(s.l1acc, "l1acc");
  add(s.output_dtype, "output_dtype");
  return out;
}

std::string LayerConfig::Key() const {
  std::string k = std::string(device::MathFidelityName(math_fidelity)) + "/" + device::DeviceDTypeName(weights_dtype);
  if (fp32_dest_acc_en) k += std::string("/fp32_acc=") + (*fp32_dest_acc_en ? "1" : "0");
  if (packer_l1_acc) k += std::string("/l1_acc=") + (*packer_l1_acc ? "1" : "0");
  if (output_dtype) k += std::string("/out=") + device::DeviceDTypeName(*output_dtype);
  return k;
}

device::PrecisionConfig LayerConfig::Apply(const device::PrecisionConfig& base) const {
  device::PrecisionConfig p = base;
  p.math_fidelity = math_fidelity;
  p.weights_dtype = weights_dtype;
  if (fp32_dest_acc_en) p.fp32_dest_acc_en = *fp32_dest_acc_en;
  if (packer_l1_acc) p.packer_l1_acc = *packer_l1_acc;
  if (output_dtype) p.output_dtype = *output_dtype;
  return p;
}

std::vector<LayerConfig> EnumerateConfigs(const SearchSpace& space) {
  const std::vector<MathFidelity> fids = space.fidelity
      ? std::vector<MathFidelity>{MathFidelity::kHiFi4, MathFidelity::kHiFi3, MathFidelity::kHiFi2, MathFidelity::kLoFi}
      : std::vector<MathFidelity>{MathFidelity::kHiFi4};
  const std::vector<DeviceDType> weights = space.weights
      ? std::vector<DeviceDType>{DeviceDType::kBFloat16, DeviceDType::kBFloat8B, DeviceDType::kBFloat4B}
      : std::vector<DeviceDType>{DeviceDType::kBFloat16};
  const std::vector<std::optional<bool>> dest = space.dest ? std::vector<std::optional<bool>>{false, true}
                                                           : std::vector<std::optional<bool>>{std::nullopt};
  const std::vector<std::optional<bool>> l1 = space.l1acc ? std::vector<std::optional<bool>>{false, true}
                                                          : std::vector<std::optional<bool>>{std::nullopt};
  const std::vector<std::optional<DeviceDType>> outs =
      space.output_dtype ? std::vector<std::optional<DeviceDType>>{DeviceDType::kBFloat16, DeviceDType::kBFloat8B}
                         : std::vector<std::optional<DeviceDType>>{std::nullopt};
  std::vector<LayerConfig> all;
  for (auto f : fids)
    for (auto w : weights)
      for (auto d : dest)
        for (auto a : l1)
          for (auto o : outs) all.push_back({f, w, d, a, o});
  return all;
}

Result<AdviseResult> Advise(std::shared_ptr<const convplan::ConvPlan> plan, const std::string& model_hash,
                            const std::vector<runtime::RunInputs>& inputs, const AdviseOptions& options,
                            AdviseCache* cache) {
  if (!plan) return InvalidArgument("no plan");
  try {
    Search s(std::move(plan), model_hash, options, cache);
    return s.Run(inputs);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("advise: out of memory");
  } catch (const std::exception& e) {
    return Internal(std::string("advise: ") + e.what());
  }
}

Result<AdviseResult> AdviseModel(std::string_view bytes, const std::string& model_name,
                                 const std::vector<runtime::RunInputs>& inputs, const AdviseOptions& options,
                                 AdviseCache* cache) {
  // Planned as a run request without concat_k_split is (api/run_conv.h PlanOptionsForRequest), so
  // the advised assignment is what `kiln run --layer-precision` runs.
  auto plan = PlanModel(bytes, model_name, {}, PlanOptionsForRequest(kiln::v1::RunConvLayersRequest()));
  if (!plan.ok()) return plan.status();
  return Advise(*plan, Sha256Hex(bytes), inputs, options, cache);
}

}  // namespace kiln::api::advisor
