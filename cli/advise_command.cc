// `kiln advise` (cli/advise_command.h).
#include "cli/advise_command.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "api/advisor/advise.h"
#include "api/advisor/advise_proto.h"
#include "api/convert.h"
#include "api/run_conv.h"
#include "cli/html_report.h"
#include "cli/job_commands.h"
#include "cli/run_report.h"
#include "cli/model_commands.h"
#include "cli/options.h"
#include "device/npy.h"
#include "kiln/v1/device.grpc.pb.h"
#include "kiln/v1/job.grpc.pb.h"

namespace kiln::cli {
namespace {

struct AdviseArgs {
  std::string model;
  bool local = false;
  bool detach = false;
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
                           {"pcc_threshold", l.pcc_threshold > 0 ? nlohmann::ordered_json(l.pcc_threshold)
                                                                  : nlohmann::ordered_json(nullptr)},
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
  std::printf("advise %s: chained PCC target %.10g%s over %zu input set(s), space %s, tt-emu %s, seed %llu\n",
              a.model.c_str(), r.target_pcc, r.per_layer_threshold ? " and every layer at its tt-metal threshold" : "",
              r.input_hashes.size(), api::advisor::SearchSpaceName(r.space).c_str(),
              r.tt_emu_level.c_str(), static_cast<unsigned long long>(r.seed));
  size_t w = 5;
  for (const auto& l : r.layers) w = std::max(w, l.name.size());
  std::printf("%-*s  %-16s  %-12s  %12s  %9s  %13s  %6s\n", static_cast<int>(w), "LAYER", "OP", "CONFIG",
              "ISOLATED_PCC", "THRESHOLD", "COST(BASE)", "FRONT");
  std::vector<std::string> below;  // advised below tt-metal's threshold in isolation
  for (const auto& l : r.layers) {
    const bool has = l.pcc_threshold > 0;
    // An isolated PCC of exactly 0 is a layer the search did not run (the budget ran out first).
    const bool under = has && std::isfinite(l.isolated_pcc) && l.isolated_pcc != 0 && l.isolated_pcc < l.pcc_threshold;
    if (under) below.push_back(l.name);
    const std::string threshold = has ? (under ? "<" : "") + Fmt("%.4f", l.pcc_threshold) : "-";
    std::printf("%-*s  %-16s  %-12s  %12.6f  %9s  %6.4f(%.4f)  %6d\n", static_cast<int>(w), l.name.c_str(),
                l.op.c_str(), l.config.Key().c_str(), l.isolated_pcc, threshold.c_str(), l.relative_cost,
                l.baseline_relative_cost, l.pareto_size);
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
  if (!below.empty()) {
    // The target is the network's chained PCC; `kiln run` also checks each layer (exit status 3).
    std::string names;
    for (size_t i = 0; i < below.size() && i < 5; ++i) names += (i ? ", " : "") + below[i];
    if (below.size() > 5) names += ", ...";
    std::printf("note: %zu advised layer(s) run below tt-metal's PCC threshold even in isolation (marked '<': %s); "
                "`kiln run` with these flags reports them below threshold (exit status 3). --per-layer-threshold "
                "asks for every layer to pass as well\n",
                below.size(), names.c_str());
  }
  std::printf("search: %.1f s, %lld tt-emu network runs, %lld emulated layer-runs, %lld cache hits\n", r.seconds,
              static_cast<long long>(r.network_runs), static_cast<long long>(r.layer_runs),
              static_cast<long long>(r.cache_hits));
  std::printf("costs are estimates (api/advisor/cost_model.h), not card measurements\n\n");
  std::printf("TT-NN (Python):\n%s\n", PythonSnippet(r, base).c_str());
  std::printf("kiln run:\n  kiln run %s%s%s", a.local ? "--local " : "", ShellQuote(a.model).c_str(),
              RunInputFlags(a).c_str());
  for (const auto& f : LayerPrecisionFlags(r)) std::printf(" \\\n    --layer-precision %s", ShellQuote(f).c_str());
  std::printf("\n");
}

// The advised assignment as a run request: chained, with the fp32 reference alongside, on the
// first input set (the run --report-html writes).
kiln::v1::RunConvLayersRequest AdvisedRunRequest(const AdviseArgs& a, const api::advisor::AdviseResult& r,
                                                 const std::vector<runtime::RunInputs>& sets) {
  kiln::v1::RunConvLayersRequest req;
  req.set_backend("tt-emu");
  req.set_tt_emu_level(a.level);
  req.set_seed(a.seed);
  req.set_omit_outputs(true);
  if (!sets.empty()) {
    for (const auto& [name, t] : sets[0]) api::ToProto(name, t, req.add_inputs());
  }
  for (const auto& l : r.layers) {
    (*req.mutable_layer_precision())[l.name] = api::advisor::LayerConfigToProto(l.config);  // the space's knobs only
  }
  return req;
}

// The search as an advise job on kilnd: submit (the model stored first when MODEL is a file),
// watch its steps, fetch its answer. Errors print here; nullopt then, with *rc set.
std::optional<api::advisor::AdviseResult> AdviseRemote(const ClientOptions& options, const AdviseArgs& a,
                                                       const std::vector<runtime::RunInputs>& sets,
                                                       std::string* model_id, int* rc) {
  *rc = 1;
  auto id = ModelRefForArg(options, a.model, "");
  if (!id.ok()) {
    std::cerr << "kiln: advise: " << id.status().message() << "\n";
    return std::nullopt;
  }
  kiln::v1::SubmitAdviseRequest submit;
  submit.set_idempotency_key(NewIdempotencyKey("kiln-cli-advise-"));  // a retried SubmitAdvise (client.cc) never makes a second job
  auto* req = submit.mutable_advise();
  req->set_model_id(*id);
  for (const auto& set : sets) {
    auto* s = req->add_input_sets();
    for (const auto& [name, t] : set) api::ToProto(name, t, s->add_inputs());
  }
  req->set_target_pcc(a.target_pcc);
  std::stringstream space(a.space);
  for (std::string k; std::getline(space, k, ',');) {
    if (!k.empty()) req->add_space(k);
  }
  req->set_budget_seconds(a.budget);
  req->set_seed(a.seed);
  req->set_tt_emu_level(a.level);
  req->set_per_layer_threshold(a.per_layer_threshold);
  req->set_max_refine_runs(a.max_refine);
  kiln::v1::Job job;
  grpc::Status st = CallUnary(options, &kiln::v1::JobService::Stub::SubmitAdvise, submit, &job);
  if (!st.ok()) {
    std::cerr << "kiln: advise " << a.model << ": " << Describe(st) << "\n";
    return std::nullopt;
  }
  *model_id = job.model_id();
  if (a.detach) {
    std::printf("%s\n", job.job_id().c_str());
    *rc = 0;
    return std::nullopt;
  }
  // The job id first: Ctrl-C ends this watch, not the job (kiln cancel JOB_ID).
  std::cerr << "kiln: advise: job " << job.job_id() << " submitted\n";
  auto channel = Connect(options);
  if (!channel.ok()) {
    std::cerr << "kiln: advise: " << channel.status().message() << "\n";
    return std::nullopt;
  }
  auto stub = kiln::v1::JobService::NewStub(*channel);
  {
    grpc::ClientContext ctx;
    ClientOptions no_deadline = options;
    no_deadline.timeout_seconds = 0;  // a watch lasts as long as the search
    Prepare(no_deadline, &ctx);
    kiln::v1::WatchJobRequest w;
    w.set_job_id(job.job_id());
    auto reader = stub->WatchJob(&ctx, w);
    kiln::v1::JobEvent ev;
    while (reader->Read(&ev)) {
      if (ev.has_state_change()) {
        job = ev.state_change();
        if (!a.quiet) {
          std::cerr << "kiln: advise: job " << job.job_id() << " " << kiln::v1::JobState_Name(job.state())
                    << (job.device().empty() ? "" : " on " + job.device()) << "\n";
        }
      } else if (ev.event_case() == kiln::v1::JobEvent::kAdviseStep && !a.quiet) {
        std::cerr << "kiln: advise: " << ev.advise_step() << "\n";
      }
    }
    st = reader->Finish();
  }
  if (!st.ok()) {
    std::cerr << "kiln: advise: watch " << job.job_id() << ": " << Describe(st) << "\n";
    return std::nullopt;
  }
  if (job.state() != kiln::v1::SUCCEEDED) {
    std::cerr << "kiln: advise: job " << job.job_id() << " " << JobEndText(job) << "\n";
    return std::nullopt;
  }
  grpc::ClientContext ctx;
  Prepare(options, &ctx);
  kiln::v1::GetJobResultRequest get;
  get.set_job_id(job.job_id());
  get.set_omit_outputs(true);
  auto reader = stub->GetJobResult(&ctx, get);
  kiln::v1::JobResultChunk chunk;
  std::optional<kiln::v1::AdviseResult> advice;
  while (reader->Read(&chunk)) {
    if (chunk.has_result() && chunk.result().has_advice()) advice = chunk.result().advice();
  }
  st = reader->Finish();
  if (!st.ok() || !advice) {
    std::cerr << "kiln: advise: result of job " << job.job_id() << ": "
              << (st.ok() ? std::string("no advice in it (not an advise job?)") : Describe(st)) << "\n";
    return std::nullopt;
  }
  auto r = api::advisor::AdviseResultFromProto(*advice);
  if (!r.ok()) {
    std::cerr << "kiln: advise: result of job " << job.job_id() << ": " << r.status().ToString() << "\n";
    return std::nullopt;
  }
  *rc = 0;
  return std::move(r).value();
}

int Advise(const ClientOptions& options, const AdviseArgs& a) {
  if (a.local && a.detach) {
    std::cerr << "kiln: advise: --detach needs a server (an advise job), not --local\n";
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
  api::advisor::AdviseOptions o;
  o.target_pcc = a.target_pcc;
  o.space = *space;
  o.budget_seconds = a.budget;
  o.seed = a.seed;
  o.tt_emu_level = a.level;
  o.max_refine_runs = a.max_refine;
  o.per_layer_threshold = a.per_layer_threshold;
  std::optional<api::advisor::AdviseResult> r;
  std::string bytes, model_id;
  if (a.local) {
    std::ifstream in(a.model, std::ios::binary);
    if (!in) {
      std::cerr << "kiln: advise: cannot open '" << a.model << "'\n";
      return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    bytes = ss.str();
    if (!a.quiet) o.progress = [](const std::string& line) { std::cerr << "kiln: advise: " << line << "\n"; };
    auto found = api::advisor::AdviseModel(bytes, std::filesystem::path(a.model).stem().string(), sets, o);
    if (!found.ok()) {
      std::cerr << "kiln: advise " << a.model << ": " << found.status().ToString() << "\n";
      return 1;
    }
    r = std::move(found).value();
  } else {
    int rc = 1;
    r = AdviseRemote(options, a, sets, &model_id, &rc);
    if (!r) return rc;
  }
  if (!a.report_html.empty()) {
    // The chosen assignment run once more through the request API — in process, or on kilnd — as
    // the HTML run report (cli/html_report.h).
    kiln::v1::RunConvLayersRequest req = AdvisedRunRequest(a, *r, sets);
    Result<kiln::v1::RunConvLayersResponse> run = Internal("not run");
    if (a.local) {
      run = api::RunConvLocal(bytes, std::filesystem::path(a.model).stem().string(), req, {});
    } else {
      req.set_model_id(model_id);
      kiln::v1::RunConvLayersResponse resp;
      grpc::Status st = CallUnary(options, &kiln::v1::DeviceService::Stub::RunConvLayers, req, &resp);
      run = st.ok() ? Result<kiln::v1::RunConvLayersResponse>(std::move(resp))
                    : Result<kiln::v1::RunConvLayersResponse>(Status(static_cast<StatusCode>(st.error_code()), st.error_message()));
    }
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

int PrintAdviceResult(const kiln::v1::AdviseResult& advice, bool json) {
  auto r = api::advisor::AdviseResultFromProto(advice);
  if (!r.ok()) {
    std::cerr << "kiln: result: " << r.status().ToString() << "\n";
    return 1;
  }
  AdviseArgs a;  // what the table and JSON need of the command line, from the answer
  a.model = advice.model_sha256();  // the stored model's id
  a.budget = advice.budget_seconds();
  a.level = advice.tt_emu_level();
  a.seed = advice.seed();
  const std::vector<std::map<std::string, std::string>> files(r->input_hashes.size());
  if (json) {
    PrintJson(a, *r, device::PrecisionConfig{}, files);
  } else {
    PrintTable(a, *r, device::PrecisionConfig{});
  }
  if (r->partial) return 4;
  return r->target_met ? 0 : 3;
}

void AddAdviseCommand(CLI::App& app, ClientOptions& options, int* exit_code) {
  static AdviseArgs a;
  auto* cmd = app.add_subcommand("advise", "the cheapest per-layer TT-NN precision that meets a PCC target");
  cmd->add_option("MODEL", a.model, "ONNX file")->required();
  cmd->add_flag("--local", a.local, "search in process on tt-emu (default: an advise job on kilnd)");
  cmd->add_flag("--detach", a.detach, "submit the advise job, print its id and return (see kiln watch/result)");
  cmd->add_option("--target-pcc", a.target_pcc, "chained end-to-end PCC to meet (worst input)")
      ->check(Between(1e-9, 1.0))
      ->capture_default_str();
  cmd->add_option("--space", a.space, "knobs to vary: fidelity,weights,dest,l1acc,output_dtype")->capture_default_str();
  cmd->add_option("--budget", a.budget, "seconds; when spent, the best answer so far (flagged partial); 0 = none")
      ->check(AtLeast(0));
  cmd->add_option("--seed", a.seed, "seed for generated inputs")->check(Uint64Decimal());
  cmd->add_option("--input", a.inputs,
                  "NAME=FILE.npy (repeatable); naming an input again starts another input set (worst set counts)");
  cmd->add_option("--tt-emu-level", a.level, "tt-emu numerics for the search: exact or fast")->capture_default_str();
  cmd->add_option("--max-refine", a.max_refine, "at most this many single-move chained runs after the path search")
      ->check(AtLeast(0, "a whole number"))
      ->capture_default_str();
  cmd->add_flag("--per-layer-threshold", a.per_layer_threshold,
                "also require every layer of the chained run to pass its tt-metal PCC threshold");
  cmd->add_option("--report-html", a.report_html,
                  "also run the advised assignment (chained, first input set) and write its HTML run report here");
  cmd->add_flag("--json", a.json, "JSON (docs/cli-json.md kiln.advise/1)");
  cmd->add_flag("--quiet", a.quiet, "no progress lines on stderr");
  cmd->callback([&options, exit_code] { *exit_code = Advise(options, a); });
}

}  // namespace kiln::cli
