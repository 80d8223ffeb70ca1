#include "cli/run_command.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/job_commands.h"
#include "cli/model_commands.h"
#include "cli/options.h"
#include "cli/run_report.h"
#include "api/convert.h"
#include "api/jobs.h"
#include "api/run_conv.h"
#include "common/echo.h"
#include "device/backends/builtin.h"
#include "device/npy.h"
#include "kiln/v1/device.grpc.pb.h"

namespace kiln::cli {
namespace {

struct RunArgs {
  std::string model;
  std::vector<std::string> inputs;  // name=path.npy
  std::string backend = device::DefaultBackendName();
  api::PrecisionFlags precision;
  std::string mode = "chained";
  ReportOptions report;
  uint64_t seed = 0;
  bool skip_reference = false;
  bool local = false;
  std::string level;  // --tt-emu-level; "" = the server's (exact with --local)
  std::string name;  // upload name for a FILE (default: the file stem)
  bool detach = false;
  std::vector<std::string> sweep;   // FIELD=V1,V2 (repeatable)
  std::vector<std::string> layer_precision;  // LAYER:KEY=VALUE (repeatable)
  std::vector<std::string> labels;  // KEY=VALUE
  std::string idempotency_key;
};

Result<kiln::v1::RunConvLayersRequest> BuildRequest(const RunArgs& a) {
  kiln::v1::RunConvLayersRequest req;
  req.set_backend(a.backend);
  if (a.mode != "both") {
    auto mode = runtime::ParseRunMode(a.mode);
    if (!mode.ok()) return InvalidArgument("--mode: expected chained, per_layer or both, got '" + a.mode + "'");
    req.set_mode(*mode == runtime::RunMode::kPerLayer ? kiln::v1::PER_LAYER : kiln::v1::CHAINED);
  }
  req.set_seed(a.seed);
  req.set_skip_reference(a.skip_reference);
  req.set_tt_emu_level(a.level);
  // A level the tt-emu backend does not know (or one given with another backend) is a
  // command-line error here, as kilnd would refuse it (api/run_conv.h ResolveTtEmuLevel).
  if (!a.level.empty()) {
    auto level = api::ResolveTtEmuLevel(req, {});
    if (!level.ok()) return level.status();
  }
  auto precision = api::ParsePrecisionFlags(a.precision);
  if (!precision.ok()) return precision.status();
  *req.mutable_precision() = std::move(precision).value();
  auto layers = api::ParseLayerPrecisionFlags(a.layer_precision);
  if (!layers.ok()) return layers.status();
  *req.mutable_layer_precision() = std::move(layers).value();
  for (const auto& spec : a.inputs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgument("--input expects NAME=FILE.npy, got '" + spec + "'");
    }
    auto t = device::ReadNpy(spec.substr(eq + 1));
    if (!t.ok()) return t.status().WithContext("--input " + spec);
    auto f = t->ToFloat32();
    if (!f.ok()) return f.status().WithContext("--input " + spec);
    api::ToProto(spec.substr(0, eq), *f, req.add_inputs());
  }
  return req;
}

// The modes to run: --mode both = a chained and a per_layer run (the report puts them side by side).
std::vector<kiln::v1::RunMode> Modes(const RunArgs& a, const kiln::v1::RunConvLayersRequest& req) {
  if (a.mode == "both") return {kiln::v1::CHAINED, kiln::v1::PER_LAYER};
  return {req.mode()};
}

InputSource Inputs(const RunArgs& a) {
  InputSource in;
  in.known = true;
  in.seed = a.seed;
  for (const auto& spec : a.inputs) {
    auto eq = spec.find('=');
    in.files[spec.substr(0, eq)] = spec.substr(eq + 1);
  }
  return in;
}

int RunLocal(const RunArgs& a, const kiln::v1::RunConvLayersRequest& req) {
  std::ifstream in(a.model, std::ios::binary);
  if (!in) {
    std::cerr << "kiln: run --local: cannot open '" << a.model << "'\n";
    return 1;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string name = std::filesystem::path(a.model).stem().string();
  std::vector<RunConfiguration> runs;
  for (auto mode : Modes(a, req)) {
    kiln::v1::RunConvLayersRequest r = req;
    r.set_mode(mode);
    auto resp = api::RunConvLocal(ss.str(), name, r, {});  // the tt-emu level travels in the request
    if (!resp.ok()) {
      std::cerr << "kiln: run " << a.model << ": " << resp.status().ToString() << "\n";
      return 1;
    }
    runs.push_back({req.precision(), std::move(resp).value()});
  }
  return PrintRunReport(runs, a.report);
}

int RunRemote(const ClientOptions& options, const RunArgs& a, kiln::v1::RunConvLayersRequest req) {
  // The command line first (exit 2), then the upload: a typo in --sweep or --label costs no upload.
  kiln::v1::SubmitRunRequest submit;
  auto sweep = ParseSweep(a.sweep, a.precision);
  if (!sweep.ok()) {
    std::cerr << "kiln: run: " << sweep.status().message() << "\n";
    return 2;
  }
  for (auto& p : *sweep) *submit.add_sweep() = std::move(p);
  for (const auto& l : a.labels) {
    auto kv = ParseLabel(l);
    if (!kv.ok()) {
      std::cerr << "kiln: run: " << kv.status().message() << "\n";
      return 2;
    }
    if (submit.labels().count(kv->first)) {
      std::cerr << "kiln: run: --label " << EscapeControls(kv->first) << " is given twice\n";
      return 2;
    }
    (*submit.mutable_labels())[kv->first] = kv->second;
  }
  if (Status st = api::ValidateLabels(submit.labels()); !st.ok()) {
    std::cerr << "kiln: run: --label: " << st.message() << "\n";
    return 2;
  }
  // A file is stored (not re-sent when its bytes are), a missing one is "no such file".
  auto id = ModelRefForArg(options, a.model, a.name);
  if (!id.ok()) {
    std::cerr << "kiln: run: " << id.status().message() << "\n";
    return 1;
  }
  req.set_model_id(*id);
  *submit.mutable_run() = std::move(req);
  std::vector<kiln::v1::SubmitRunRequest> jobs;
  for (auto mode : Modes(a, submit.run())) {
    kiln::v1::SubmitRunRequest j = submit;
    j.mutable_run()->set_mode(mode);
    // One key per job: the same key would return the first job for the second mode.
    if (!a.idempotency_key.empty()) j.set_idempotency_key(a.idempotency_key + (jobs.empty() ? "" : "/per_layer"));
    jobs.push_back(std::move(j));
  }
  return SubmitAndWatch(options, std::move(jobs), a.detach, a.report);
}

int Devices(const ClientOptions& options, bool json) {
  kiln::v1::ListDevicesResponse resp;
  grpc::Status st = CallUnary(options, &kiln::v1::DeviceService::Stub::ListDevices,
                              kiln::v1::ListDevicesRequest(), &resp);
  if (!st.ok()) {
    std::cerr << "kiln: devices: " << Describe(st) << "\n";
    return 1;
  }
  if (json) {  // docs/cli-json.md kiln.devices/1
    nlohmann::ordered_json j;
    j["schema"] = "kiln.devices/1";
    j["devices"] = nlohmann::ordered_json::array();
    for (const auto& d : resp.devices()) {
      j["devices"].push_back({{"name", d.name()},
                              {"backend", d.backend()},
                              {"busy", d.busy()},
                              {"jobs_done", d.jobs_done()},
                              {"description", d.description()}});
    }
    j["queues"] = nlohmann::ordered_json::array();
    for (const auto& q : resp.queues()) {
      j["queues"].push_back({{"backend", q.backend()}, {"queued", q.queued()}, {"capacity", q.capacity()}});
    }
    j["workers"] = nlohmann::ordered_json::array();
    for (const auto& w : resp.workers()) {
      j["workers"].push_back({{"name", w.name()},
                              {"devices", w.devices()},
                              {"running", w.running()},
                              {"jobs_done", w.jobs_done()},
                              {"heartbeat_age_seconds", w.heartbeat_age_seconds()},
                              {"live", w.live()},
                              {"draining", w.draining()}});
    }
    j["farm_queues"] = nlohmann::ordered_json::array();
    for (const auto& q : resp.farm_queues()) {
      j["farm_queues"].push_back({{"backend", q.backend()}, {"queued", q.queued()}, {"claimed", q.claimed()}});
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("%-14s %-10s %-6s %10s  %s\n", "DEVICE", "BACKEND", "STATE", "JOBS_DONE", "DESCRIPTION");
  for (const auto& d : resp.devices()) {
    std::printf("%-14s %-10s %-6s %10llu  %s\n", d.name().c_str(), d.backend().c_str(),
                d.busy() ? "busy" : "idle", static_cast<unsigned long long>(d.jobs_done()),
                d.description().c_str());
  }
  for (const auto& q : resp.queues()) {
    std::printf("queue %-10s %d/%d\n", q.backend().c_str(), q.queued(), q.capacity());
  }
  if (resp.workers_size() > 0 || resp.farm_queues_size() > 0) {
    // A farm (a kilnd on a database): its workers by their last heartbeat, and its job queues.
    std::printf("\n%-32s %-24s %-8s %7s %9s %8s\n", "FARM WORKER", "DEVICES", "STATE", "RUNNING", "JOBS_DONE",
                "HEARTBEAT");
    for (const auto& w : resp.workers()) {
      const char* state = w.draining() ? "draining" : w.live() ? "live" : "lost";
      std::printf("%-32s %-24s %-8s %7d %9llu %7.1fs\n", w.name().c_str(), w.devices().c_str(), state, w.running(),
                  static_cast<unsigned long long>(w.jobs_done()), w.heartbeat_age_seconds());
    }
    for (const auto& q : resp.farm_queues()) {
      std::printf("farm queue %-10s queued %d, claimed %d\n", q.backend().c_str(), q.queued(), q.claimed());
    }
  }
  return 0;
}

}  // namespace

void AddRunCommands(CLI::App& app, ClientOptions& options, int* exit_code) {
  static RunArgs a;
  auto* cmd = app.add_subcommand("run", "run a model's conv layers on a device backend");
  cmd->add_option("MODEL", a.model, "ONNX file (uploaded first unless --local) or stored id/name")
      ->required();
  cmd->add_option("--input", a.inputs, "NAME=FILE.npy (repeatable); absent inputs are random");
  cmd->add_option("--backend", a.backend, "tt-emu or reference")->capture_default_str();
  auto& p = a.precision;
  cmd->add_option("--math-fidelity", p.math_fidelity, "LoFi, HiFi2, HiFi3, HiFi4 (default HiFi4)");
  cmd->add_option("--weights-dtype", p.weights_dtype, "float32, bfloat16, bfloat8_b, bfloat4_b");
  cmd->add_option("--input-dtype", p.input_dtype, "float32, bfloat16, bfloat8_b");
  cmd->add_option("--output-dtype", p.output_dtype, "float32, bfloat16, bfloat8_b");
  cmd->add_option("--fp32-dest-acc-en", p.fp32_dest_acc_en, "true|false (default: TT-NN's rule)");
  cmd->add_option("--packer-l1-acc", p.packer_l1_acc, "true|false (default false)");
  cmd->add_option("--math-approx-mode", p.math_approx_mode, "true|false (default true)");
  cmd->add_option("--arch", p.arch, "wormhole_b0 or blackhole");
  cmd->add_option("--act-block-w", p.act_block_w, "Kiln's in0_block_w override in tiles (0 = TT-NN's choice)");
  cmd->add_option("--shard-layout", p.shard_layout, "auto, height, block, width (default auto: TT-NN's rule)");
  cmd->add_option("--act-block-w-div", p.act_block_w_div, "TT-NN act_block_w_div (default 1)");
  cmd->add_option("--act-block-h-override", p.act_block_h_override, "TT-NN act_block_h_override, multiple of 32");
  cmd->add_option("--full-inner-dim", p.full_inner_dim, "true|false (default false)");
  cmd->add_option("--enable-activation-reuse", p.enable_activation_reuse, "true|false (default false)");
  cmd->add_option("--input-layout", p.input_layout, "row_major (ttnn.from_torch's default) or tile");
  cmd->add_option("--bfp8-pack-precise", p.bfp8_pack_precise, "true|false (default false)");
  cmd->add_option("--board", p.board, "n150, n300, p100, p150 (default: the arch's single-chip board)");
  cmd->add_option("--host-add", p.host_add, "true: residual/K-split adds in fp32 on the host (default: ttnn.add)");
  cmd->add_option("--depthwise-program", p.depthwise_program, "recorded, pool_multiply, dense_conv");
  cmd->add_option("--fp32-partial-reload", p.fp32_partial_reload, "recorded, tf32, lossless");
  cmd->add_option("--fused-hardswish", p.fused_hardswish, "recorded, dropped, applied");
  cmd->add_option("--layer-precision", a.layer_precision,
                  "LAYER:KEY=VALUE (repeatable): one layer's precision over the flags above, KEY as a "
                  "precision flag in snake case, e.g. conv1:math_fidelity=LoFi conv1:weights_dtype=bfloat4_b "
                  "(with --sweep: over each point)");
  cmd->add_option("--mode", a.mode, "chained, per_layer, or both (two runs, side by side in the report)")
      ->capture_default_str();
  AddReportOptions(*cmd, a.report);
  cmd->add_option("--seed", a.seed, "seed for generated inputs")->check(Uint64Decimal());
  cmd->add_flag("--skip-reference", a.skip_reference, "no fp32 reference, no PCC");
  cmd->add_flag("--local", a.local, "run in process, no server");
  cmd->add_option("--name", a.name, "name to store a FILE under (default: the file stem)")->check(ModelName());
  cmd->add_option("--tt-emu-level", a.level,
                  "tt-emu numerics: exact or fast (default: the server's --tt-emu-level; exact with --local)");
  cmd->add_flag("--detach", a.detach, "submit the job, print its id and return (see kiln watch/result)");
  cmd->add_option("--sweep", a.sweep,
                  "FIELD=V1,V2,... (repeatable): one job, one configuration per point of the cross product, "
                  "e.g. --sweep math_fidelity=LoFi,HiFi2,HiFi4 --sweep weights_dtype=bfloat16,bfloat8_b");
  cmd->add_option("--label", a.labels, "KEY=VALUE attached to the job (repeatable)");
  cmd->add_option("--idempotency-key", a.idempotency_key, "a resubmission with the same key returns the first job");
  cmd->callback([&options, exit_code] {
    auto req = BuildRequest(a);
    if (!req.ok()) {
      std::cerr << "kiln: run: " << req.status().message() << "\n";
      *exit_code = 2;
      return;
    }
    if (a.local && (a.detach || !a.sweep.empty() || !a.labels.empty() || !a.idempotency_key.empty())) {
      std::cerr << "kiln: run: --detach, --sweep, --label and --idempotency-key need a server (jobs), not --local\n";
      *exit_code = 2;
      return;
    }
    if (a.detach && (!a.report.out_dir.empty() || !a.report.report_file.empty() || a.report.report != "table")) {
      std::cerr << "kiln: run: --out, --report and --report-file shape the report, which --detach does not wait "
                   "for: give them to kiln result JOB_ID\n";
      *exit_code = 2;
      return;
    }
    // Before anything is uploaded or run: a typo in --out must not cost a run.
    Status dest = CheckReportDestinations(a.report);
    if (!dest.ok()) {
      std::cerr << "kiln: run: " << dest.message() << "\n";
      *exit_code = 2;
      return;
    }
    a.report.inputs = Inputs(a);
    *exit_code = a.local ? RunLocal(a, *req) : RunRemote(options, a, *req);
  });

  AddJobCommands(app, options, exit_code);

  static bool devices_json = false;
  auto* devices = app.add_subcommand("devices", "list the server's devices and queues");
  devices->add_flag("--json", devices_json, "print one JSON object instead (docs/cli-json.md kiln.devices/1)");
  devices->callback([&options, exit_code] { *exit_code = Devices(options, devices_json); });
}

}  // namespace kiln::cli
