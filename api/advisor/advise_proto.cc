// The advisor's messages <-> its types (api/advisor/advise_proto.h).
#include "api/advisor/advise_proto.h"

#include <cmath>
#include <limits>

#include "api/convert.h"
#include "api/run_conv.h"
#include "device/backends/builtin.h"

namespace kiln::api::advisor {

std::string SpaceSpec(const google::protobuf::RepeatedPtrField<std::string>& space) {
  if (space.empty()) return "fidelity,weights";
  std::string out;
  for (const auto& k : space) out += (out.empty() ? "" : ",") + k;
  return out;
}

Result<AdviseSpec> AdviseSpecFromProto(const kiln::v1::AdviseRequest& request,
                                       const std::map<std::string, std::string>& tt_emu_settings) {
  AdviseSpec spec;
  AdviseOptions& o = spec.options;
  o.target_pcc = request.target_pcc() == 0 ? 0.99 : request.target_pcc();
  if (!(o.target_pcc > 0 && o.target_pcc <= 1)) {
    return InvalidArgument("target_pcc must be in (0, 1], got " + std::to_string(request.target_pcc()));
  }
  auto space = ParseSearchSpace(SpaceSpec(request.space()));
  if (!space.ok()) return InvalidArgument("space: " + space.status().message());
  o.space = *space;
  if (!std::isfinite(request.budget_seconds()) || request.budget_seconds() < 0) {
    return InvalidArgument("budget_seconds must be a non-negative number of seconds");
  }
  o.budget_seconds = request.budget_seconds();
  o.seed = request.seed();
  if (request.has_max_refine_runs()) {
    if (request.max_refine_runs() < 0) return InvalidArgument("max_refine_runs must not be negative");
    o.max_refine_runs = request.max_refine_runs();
  }
  o.per_layer_threshold = request.per_layer_threshold();
  kiln::v1::RunConvLayersRequest probe;  // the level is resolved as a tt-emu run's
  probe.set_backend(device::kTtEmuBackend);
  probe.set_tt_emu_level(request.tt_emu_level());
  auto level = ResolveTtEmuLevel(probe, tt_emu_settings);
  if (!level.ok()) return level.status();
  o.tt_emu_level = level->empty() ? "exact" : *level;
  for (int s = 0; s < request.input_sets_size(); ++s) {
    const std::string where = "input_sets[" + std::to_string(s) + "]";
    runtime::RunInputs set;
    for (const auto& t : request.input_sets(s).inputs()) {
      auto v = FromProto(t);
      if (!v.ok()) return v.status().WithContext(where);
      auto f = v->ToFloat32();
      if (!f.ok()) return f.status().WithContext(where + " " + t.name());
      if (!set.emplace(t.name(), std::move(*f)).second) {
        return InvalidArgument(where + ": input '" + t.name() + "' given twice");
      }
    }
    spec.inputs.push_back(std::move(set));
  }
  return spec;
}

kiln::v1::Precision LayerConfigToProto(const LayerConfig& c) {
  kiln::v1::Precision p;
  p.set_math_fidelity(ToProto(c.math_fidelity));
  p.set_weights_dtype(ToProto(c.weights_dtype));
  if (c.fp32_dest_acc_en) p.set_fp32_dest_acc_en(*c.fp32_dest_acc_en);
  if (c.packer_l1_acc) p.set_packer_l1_acc(*c.packer_l1_acc);
  if (c.output_dtype) p.set_output_dtype(ToProto(*c.output_dtype));
  return p;
}

Result<LayerConfig> LayerConfigFromProto(const kiln::v1::Precision& p) {
  if (p.math_fidelity() == kiln::v1::MATH_FIDELITY_UNSPECIFIED || p.weights_dtype() == kiln::v1::DATA_TYPE_UNSPECIFIED) {
    return InvalidArgument("an advised configuration needs math_fidelity and weights_dtype");
  }
  auto resolved = FromProto(p);  // the device enums, and range checks
  if (!resolved.ok()) return resolved.status();
  LayerConfig c;
  c.math_fidelity = resolved->math_fidelity;
  c.weights_dtype = *resolved->weights_dtype;
  if (p.has_fp32_dest_acc_en()) c.fp32_dest_acc_en = p.fp32_dest_acc_en();
  if (p.has_packer_l1_acc()) c.packer_l1_acc = p.packer_l1_acc();
  if (p.output_dtype() != kiln::v1::DATA_TYPE_UNSPECIFIED) c.output_dtype = resolved->output_dtype;
  return c;
}

void AdviseResultToProto(const AdviseResult& r, double budget_seconds, kiln::v1::AdviseResult* out) {
  out->Clear();
  out->set_model_sha256(r.model_hash);
  for (const auto& h : r.input_hashes) out->add_input_sha256(h);
  for (const auto& l : r.layers) {
    auto* m = out->add_layers();
    m->set_name(l.name);
    m->set_op(l.op);
    *m->mutable_config() = LayerConfigToProto(l.config);
    m->set_isolated_pcc(l.isolated_pcc);
    m->set_pcc_threshold(l.pcc_threshold);
    m->set_relative_cost(l.relative_cost);
    m->set_baseline_relative_cost(l.baseline_relative_cost);
    m->set_pareto_size(l.pareto_size);
  }
  if (std::isfinite(r.network_pcc)) out->set_network_pcc(r.network_pcc);
  out->set_relative_cost(r.relative_cost);
  out->set_target_met(r.target_met);
  out->set_source(r.source);
  if (std::isfinite(r.baseline_pcc)) out->set_baseline_pcc(r.baseline_pcc);
  if (r.best_uniform) *out->mutable_best_uniform() = LayerConfigToProto(*r.best_uniform);
  out->set_best_uniform_pcc(r.best_uniform_pcc);
  out->set_best_uniform_cost(r.best_uniform_cost);
  out->set_partial(r.partial);
  out->set_stopped_in(r.stopped_in);
  out->set_layer_runs(r.layer_runs);
  out->set_network_runs(r.network_runs);
  out->set_cache_hits(r.cache_hits);
  out->set_seconds(r.seconds);
  for (const auto& k : r.cache_keys) out->add_cache_keys(k);
  out->set_seed(r.seed);
  const std::string space = SearchSpaceName(r.space);
  for (size_t pos = 0; pos < space.size();) {
    size_t comma = space.find(',', pos);
    if (comma == std::string::npos) comma = space.size();
    out->add_space(space.substr(pos, comma - pos));
    pos = comma + 1;
  }
  out->set_target_pcc(r.target_pcc);
  out->set_per_layer_threshold(r.per_layer_threshold);
  out->set_tt_emu_level(r.tt_emu_level);
  out->set_budget_seconds(budget_seconds);
}

Result<AdviseResult> AdviseResultFromProto(const kiln::v1::AdviseResult& m) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  AdviseResult r;
  r.model_hash = m.model_sha256();
  r.input_hashes.assign(m.input_sha256().begin(), m.input_sha256().end());
  for (const auto& l : m.layers()) {
    LayerAdvice a;
    a.name = l.name();
    a.op = l.op();
    auto c = LayerConfigFromProto(l.config());
    if (!c.ok()) return c.status().WithContext("layer " + l.name());
    a.config = *c;
    a.isolated_pcc = l.isolated_pcc();
    a.pcc_threshold = l.pcc_threshold();
    a.relative_cost = l.relative_cost();
    a.baseline_relative_cost = l.baseline_relative_cost();
    a.pareto_size = l.pareto_size();
    r.layers.push_back(std::move(a));
  }
  r.network_pcc = m.has_network_pcc() ? m.network_pcc() : kNaN;
  r.relative_cost = m.relative_cost();
  r.target_met = m.target_met();
  r.source = m.source();
  r.baseline_pcc = m.has_baseline_pcc() ? m.baseline_pcc() : kNaN;
  if (m.has_best_uniform()) {
    auto c = LayerConfigFromProto(m.best_uniform());
    if (!c.ok()) return c.status().WithContext("best_uniform");
    r.best_uniform = *c;
  }
  r.best_uniform_pcc = m.best_uniform_pcc();
  r.best_uniform_cost = m.best_uniform_cost();
  r.partial = m.partial();
  r.stopped_in = m.stopped_in();
  r.layer_runs = m.layer_runs();
  r.network_runs = m.network_runs();
  r.cache_hits = m.cache_hits();
  r.seconds = m.seconds();
  r.cache_keys.assign(m.cache_keys().begin(), m.cache_keys().end());
  r.seed = m.seed();
  auto space = ParseSearchSpace(SpaceSpec(m.space()));
  if (!space.ok()) return space.status();
  r.space = *space;
  r.target_pcc = m.target_pcc();
  r.per_layer_threshold = m.per_layer_threshold();
  r.tt_emu_level = m.tt_emu_level();
  return r;
}

}  // namespace kiln::api::advisor
