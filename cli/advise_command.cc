// `kiln advise` (cli/advise_command.h).
#include "cli/advise_command.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "api/advisor/advise.h"
#include "api/convert.h"
#include "api/run_conv.h"
#include "cli/html_report.h"
#include "cli/run_report.h"
#include "device/npy.h"

namespace kiln::cli {
namespace {

struct AdviseArgs {
  std::string model;
  bool local = false;
  double target_pcc = 0.99;
  std::string space = "fidelity,weights";
  double budget = 0;
  uint64_t seed = 0;
  bool json = false;
  std::vector<std::string> inputs;
  std::string level = "exact";
  int max_refine = 48;
  bool quiet = false;
  bool per_layer_threshold = false;
  std::string report_html;
};

// TT-NN's Python spellings (ttnn.MathFidelity.LoFi, ttnn.bfloat8_b).
std::string TtnnDType(device::DeviceDType d) { return std::string("ttnn.") + device::DeviceDTypeName(d); }

device::PrecisionConfig ResolvedConfig(const api::advisor::LayerConfig& c, const device::PrecisionConfig& base) {
  return c.Apply(base).Resolved();
}

std::string PythonSnippet(const api::advisor::AdviseResult& r, const device::PrecisionConfig& base) {
  std::ostringstream s;
  s << "# kiln advise: per-layer precision (keys: ONNX conv node names as Kiln's report names them)\n";
  s << "compute_kernel_configs = {\n";
  for (const auto& l : r.layers) {
    const auto p = ResolvedConfig(l.config, base);
    s << "    \"" << l.name << "\": ttnn.WormholeComputeKernelConfig(math_fidelity=ttnn.MathFidelity."
      << device::MathFidelityName(p.math_fidelity) << ", math_approx_mode=" << (p.math_approx_mode ? "True" : "False")
      << ", fp32_dest_acc_en=" << (*p.fp32_dest_acc_en ? "True" : "False")
      << ", packer_l1_acc=" << (p.packer_l1_acc ? "True" : "False") << "),\n";
  }
  s << "}\nconv2d_configs = {\n";
  for (const auto& l : r.layers) {
    const auto p = ResolvedConfig(l.config, base);
    s << "    \"" << l.name << "\": ttnn.Conv2dConfig(weights_dtype=" << TtnnDType(*p.weights_dtype) << "),";
    if (l.config.output_dtype) s << "  # and ttnn.conv2d(..., dtype=" << TtnnDType(*l.config.output_dtype) << ")";
    s << "\n";
  }
  s << "}\n";
  return s.str();
}

std::vector<std::string> LayerPrecisionFlags(const api::advisor::AdviseResult& r) {
  std::vector<std::string> flags;
  for (const auto& l : r.layers) {
    flags.push_back(l.name + ":math_fidelity=" + device::MathFidelityName(l.config.math_fidelity));
    flags.push_back(l.name + ":weights_dtype=" + device::DeviceDTypeName(l.config.weights_dtype));
    if (l.config.fp32_dest_acc_en) {
      flags.push_back(l.name + ":fp32_dest_acc_en=" + (*l.config.fp32_dest_acc_en ? "true" : "false"));
    }
    if (l.config.packer_l1_acc) flags.push_back(l.name + ":packer_l1_acc=" + (*l.config.packer_l1_acc ? "true" : "false"));
    if (l.config.output_dtype) flags.push_back(l.name + ":output_dtype=" + device::DeviceDTypeName(*l.config.output_dtype));
  }
  return flags;
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

nlohmann::ordered_json Num(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(); }

nlohmann::ordered_json ConfigJson(const api::advisor::LayerConfig& c, const device::PrecisionConfig& base) {
  const auto p = ResolvedConfig(c, base);
  return {{"key", c.Key()},
          {"math_fidelity", device::MathFidelityName(p.math_fidelity)},
          {"weights_dtype", device::DeviceDTypeName(*p.weights_dtype)},
          {"fp32_dest_acc_en", *p.fp32_dest_acc_en},
          {"packer_l1_acc", p.packer_l1_acc},
          {"output_dtype", device::DeviceDTypeName(*p.output_dtype)}};
}

void PrintJson(const AdviseArgs& a, const api::advisor::AdviseResult& r, const device::PrecisionConfig& base,
               const std::vector<std::map<std::string, std::string>>& files) {
  nlohmann::ordered_json j;
  j["schema"] = "kiln.advise/1";
  j["model"] = {{"file", a.model}, {"sha256", r.model_hash}};
  j["target_pcc"] = r.target_pcc;
  j["per_layer_threshold"] = r.per_layer_threshold;
  nlohmann::ordered_json space = nlohmann::ordered_json::array();
  std::stringstream ss(api::advisor::SearchSpaceName(r.space));
  for (std::string k; std::getline(ss, k, ',');) space.push_back(k);
  j["space"] = space;
  j["tt_emu_level"] = r.tt_emu_level;
  j["seed"] = r.seed;
  j["budget_seconds"] = a.budget > 0 ? nlohmann::ordered_json(a.budget) : nlohmann::ordered_json();
  j["inputs"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < r.input_hashes.size(); ++i) {
    nlohmann::ordered_json f = nlohmann::ordered_json::object();
    if (i < files.size()) {
      for (const auto& [k, v] : files[i]) f[k] = v;
    }
    j["inputs"].push_back({{"sha256", r.input_hashes[i]}, {"files", f}});
  }
  j["partial"] = r.partial;
  j["stopped_in"] = r.partial ? nlohmann::ordered_json(r.stopped_in) : nlohmann::ordered_json();
  j["target_met"] = r.target_met;
  j["source"] = r.source;
  nlohmann::ordered_json uniform;
  if (r.best_uniform) {
    uniform = {{"config", ConfigJson(*r.best_uniform, base)},
               {"pcc", Num(r.best_uniform_pcc)},
               {"relative_cost", r.best_uniform_cost}};
  }
  j["network"] = {{"pcc", Num(r.network_pcc)},
                  {"relative_cost", r.relative_cost},
                  {"baseline", {{"config", ConfigJson(api::advisor::LayerConfig{}, base)},
                                {"pcc", Num(r.baseline_pcc)},
                                {"relative_cost", 1.0}}},
                  {"best_uniform", uniform}};
  j["layers"] = nlohmann::ordered_json::array();
  for (const auto& l : r.layers) {
    j["layers"].push_back({{"name", l.name},
                           {"op", l.op},
                           {"config", ConfigJson(l.config, base)},
                           {"isolated_pcc", Num(l.isolated_pcc)},
                           {"relative_cost", l.relative_cost},
                           {"baseline_relative_cost", l.baseline_relative_cost},
                           {"pareto_size", l.pareto_size}});
  }
  j["search"] = {{"seconds", r.seconds},
                 {"network_runs", r.network_runs},
                 {"layer_runs", r.layer_runs},
                 {"cache_hits", r.cache_hits}};
  j["cache_keys"] = r.cache_keys;
  j["cost_model"] = "estimate (api/advisor/cost_model.h), not a card measurement";
  j["snippet"] = {{"ttnn_python", PythonSnippet(r, base)}, {"kiln_run_layer_precision", LayerPrecisionFlags(r)}};
  std::cout << j.dump(2) << "\n";
}

// `--input NAME=FILE` of the first input set, for the `kiln run` line.
std::string RunInputFlags(const AdviseArgs& a) {
  std::string out;
  std::set<std::string> seen;
  for (const auto& spec : a.inputs) {
    const std::string name = spec.substr(0, spec.find('='));
    if (!seen.insert(name).second) break;
    out += " --input " + ShellQuote(spec);
  }
  return out;
}

void PrintTable(const AdviseArgs& a, const api::advisor::AdviseResult& r, const device::PrecisionConfig& base) {
  std::printf("advise %s: chained PCC target %.4g%s over %zu input set(s), space %s, tt-emu %s, seed %llu\n",
              a.model.c_str(), r.target_pcc, r.per_layer_threshold ? " and every layer at its tt-metal threshold" : "",
              r.input_hashes.size(), api::advisor::SearchSpaceName(r.space).c_str(),
              r.tt_emu_level.c_str(), static_cast<unsigned long long>(r.seed));
  size_t w = 5;
  for (const auto& l : r.layers) w = std::max(w, l.name.size());
  std::printf("%-*s  %-16s  %-12s  %12s  %13s  %6s\n", static_cast<int>(w), "LAYER", "OP", "CONFIG", "ISOLATED_PCC",
              "COST(BASE)", "FRONT");
  for (const auto& l : r.layers) {
    std::printf("%-*s  %-16s  %-12s  %12.6f  %6.4f(%.4f)  %6d\n", static_cast<int>(w), l.name.c_str(), l.op.c_str(),
                l.config.Key().c_str(), l.isolated_pcc, l.relative_cost, l.baseline_relative_cost, l.pareto_size);
  }
  auto pcc_text = [](double v) {
    char b[32];
    if (!std::isfinite(v)) return std::string("n/a (not run)");
    std::snprintf(b, sizeof b, "%.6f", v);
    return std::string(b);
  };
  std::printf("network: chained PCC %s, relative cost %.4f (all-HiFi4-bfloat16 baseline: 1.0000 at PCC %s)\n",
              pcc_text(r.network_pcc).c_str(), r.relative_cost, pcc_text(r.baseline_pcc).c_str());
  if (r.best_uniform) {
    std::printf("best uniform config meeting the target: %s, relative cost %.4f at PCC %.6f (advised: %.1f%% cheaper)\n",
                r.best_uniform->Key().c_str(), r.best_uniform_cost, r.best_uniform_pcc,
                100.0 * (1.0 - r.relative_cost / r.best_uniform_cost));
  } else {
    std::printf("best uniform config meeting the target: none%s\n", r.partial ? " found before the budget ran out" : "");
  }
  std::printf("%s; answer from: %s%s\n", r.target_met ? "target met" : "TARGET NOT MET", r.source.c_str(),
              r.partial ? ("; PARTIAL: the budget ran out in " + r.stopped_in).c_str() : "");
  std::printf("search: %.1f s, %lld tt-emu network runs, %lld emulated layer-runs, %lld cache hits\n", r.seconds,
              static_cast<long long>(r.network_runs), static_cast<long long>(r.layer_runs),
              static_cast<long long>(r.cache_hits));
  std::printf("costs are estimates (api/advisor/cost_model.h), not card measurements\n\n");
  std::printf("TT-NN (Python):\n%s\n", PythonSnippet(r, base).c_str());
  std::printf("kiln run:\n  kiln run --local %s%s", ShellQuote(a.model).c_str(), RunInputFlags(a).c_str());
  for (const auto& f : LayerPrecisionFlags(r)) std::printf(" \\\n    --layer-precision %s", ShellQuote(f).c_str());
  std::printf("\n");
}

int Advise(const AdviseArgs& a) {
  if (!a.local) {
    std::cerr << "kiln: advise: only --local is built (an AdviseJob on kilnd is not yet); add --local\n";
    return 2;
  }
  auto space = api::advisor::ParseSearchSpace(a.space);
  if (!space.ok()) {
    std::cerr << "kiln: advise: " << space.status().message() << "\n";
    return 2;
  }
  if (a.level != "exact" && a.level != "fast") {
    std::cerr << "kiln: advise: --tt-emu-level: expected exact or fast, got '" << a.level << "'\n";
    return 2;
  }
  if (!a.report_html.empty()) {
    // Before the search: a typo must not cost one.
    Status w = CheckWritableFile("--report-html", a.report_html);
    if (!w.ok()) {
      std::cerr << "kiln: advise: " << w.message() << "\n";
      return 2;
    }
  }
  std::vector<runtime::RunInputs> sets;
  std::vector<std::map<std::string, std::string>> files;
  for (const auto& spec : a.inputs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "kiln: advise: --input expects NAME=FILE.npy, got '" << spec << "'\n";
      return 2;
    }
    const std::string name = spec.substr(0, eq);
    if (sets.empty() || sets.back().count(name)) {
      sets.emplace_back();
      files.emplace_back();
    }
    auto t = device::ReadNpy(spec.substr(eq + 1));
    if (!t.ok()) {
      std::cerr << "kiln: advise: --input " << spec << ": " << t.status().ToString() << "\n";
      return 1;
    }
    auto f = t->ToFloat32();
    if (!f.ok()) {
      std::cerr << "kiln: advise: --input " << spec << ": " << f.status().ToString() << "\n";
      return 1;
    }
    sets.back()[name] = std::move(*f);
    files.back()[name] = spec.substr(eq + 1);
  }
  std::ifstream in(a.model, std::ios::binary);
  if (!in) {
    std::cerr << "kiln: advise: cannot open '" << a.model << "'\n";
    return 1;
  }
  std::stringstream bytes;
  bytes << in.rdbuf();
  api::advisor::AdviseOptions o;
  o.target_pcc = a.target_pcc;
  o.space = *space;
  o.budget_seconds = a.budget;
  o.seed = a.seed;
  o.tt_emu_level = a.level;
  o.max_refine_runs = a.max_refine;
  o.per_layer_threshold = a.per_layer_threshold;
  if (!a.quiet) o.progress = [](const std::string& line) { std::cerr << "kiln: advise: " << line << "\n"; };
  auto r = api::advisor::AdviseModel(bytes.str(), std::filesystem::path(a.model).stem().string(), sets, o);
  if (!r.ok()) {
    std::cerr << "kiln: advise " << a.model << ": " << r.status().ToString() << "\n";
    return 1;
  }
  if (!a.report_html.empty()) {
    // The chosen assignment run once more, chained with the fp32 reference alongside (first input
    // set), through the request API, as the HTML run report (cli/html_report.h).
    kiln::v1::RunConvLayersRequest req;
    req.set_backend("tt-emu");
    req.set_tt_emu_level(a.level);
    req.set_seed(a.seed);
    req.set_omit_outputs(true);
    if (!sets.empty()) {
      for (const auto& [name, t] : sets[0]) api::ToProto(name, t, req.add_inputs());
    }
    for (const auto& l : r->layers) {
      auto& p = (*req.mutable_layer_precision())[l.name];  // the knobs of the space only
      p.set_math_fidelity(api::ToProto(l.config.math_fidelity));
      p.set_weights_dtype(api::ToProto(l.config.weights_dtype));
      if (l.config.fp32_dest_acc_en) p.set_fp32_dest_acc_en(*l.config.fp32_dest_acc_en);
      if (l.config.packer_l1_acc) p.set_packer_l1_acc(*l.config.packer_l1_acc);
      if (l.config.output_dtype) p.set_output_dtype(api::ToProto(*l.config.output_dtype));
    }
    auto run = api::RunConvLocal(bytes.str(), std::filesystem::path(a.model).stem().string(), req, {});
    if (!run.ok()) {
      std::cerr << "kiln: advise: the run for --report-html: " << run.status().ToString() << "\n";
      return 1;
    }
    ReportOptions ro;
    ro.report = "html";
    ro.inputs.known = true;
    ro.inputs.seed = a.seed;
    if (!files.empty()) ro.inputs.files = files[0];
    std::ofstream html(a.report_html, std::ios::binary | std::ios::trunc);
    html << RunReportHtml({RunConfiguration{req.precision(), std::move(*run)}}, ro);
    if (!html.good()) {
      std::cerr << "kiln: advise: cannot write --report-html '" << a.report_html << "'\n";
      return 1;
    }
  }
  if (a.json) {
    PrintJson(a, *r, o.base, files);
  } else {
    PrintTable(a, *r, o.base);
  }
  if (r->partial) return 4;
  return r->target_met ? 0 : 3;
}

}  // namespace

void AddAdviseCommand(CLI::App& app, ClientOptions& /*options*/, int* exit_code) {
  static AdviseArgs a;
  auto* cmd = app.add_subcommand("advise", "the cheapest per-layer TT-NN precision that meets a PCC target");
  cmd->add_option("MODEL", a.model, "ONNX file")->required();
  cmd->add_flag("--local", a.local, "search in process on tt-emu (required: no AdviseJob on kilnd yet)");
  cmd->add_option("--target-pcc", a.target_pcc, "chained end-to-end PCC to meet (worst input)")
      ->check(CLI::Range(1e-9, 1.0))
      ->capture_default_str();
  cmd->add_option("--space", a.space, "knobs to vary: fidelity,weights,dest,l1acc,output_dtype")->capture_default_str();
  cmd->add_option("--budget", a.budget, "seconds; when spent, the best answer so far (flagged partial); 0 = none")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", a.seed, "seed for generated inputs");
  cmd->add_option("--input", a.inputs,
                  "NAME=FILE.npy (repeatable); naming an input again starts another input set (worst set counts)");
  cmd->add_option("--tt-emu-level", a.level, "tt-emu numerics for the search: exact or fast")->capture_default_str();
  cmd->add_option("--max-refine", a.max_refine, "at most this many single-move chained runs after the path search")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("--per-layer-threshold", a.per_layer_threshold,
                "also require every layer of the chained run to pass its tt-metal PCC threshold");
  cmd->add_option("--report-html", a.report_html,
                  "also run the advised assignment (chained, first input set) and write its HTML run report here");
  cmd->add_flag("--json", a.json, "JSON (docs/cli-json.md kiln.advise/1)");
  cmd->add_flag("--quiet", a.quiet, "no progress lines on stderr");
  cmd->callback([exit_code] { *exit_code = Advise(a); });
}

}  // namespace kiln::cli
