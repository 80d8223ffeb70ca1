#include "cli/job_commands.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "api/convert.h"
#include "api/jobs.h"
#include "cli/advise_command.h"
#include "cli/options.h"
#include "common/echo.h"
#include "kiln/v1/job.grpc.pb.h"

namespace kiln::cli {
namespace {

std::atomic<bool> g_interrupted{false};

extern "C" void OnSigint(int) { g_interrupted.store(true); }

const char* StateName(kiln::v1::JobState s) {
  switch (s) {
    case kiln::v1::QUEUED: return "QUEUED";
    case kiln::v1::RUNNING: return "RUNNING";
    case kiln::v1::SUCCEEDED: return "SUCCEEDED";
    case kiln::v1::FAILED: return "FAILED";
    case kiln::v1::CANCELLED: return "CANCELLED";
    default: return "?";
  }
}

Result<kiln::v1::JobState> ParseState(const std::string& s) {
  std::string u;
  for (char c : s) u += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (int v = kiln::v1::QUEUED; v <= kiln::v1::CANCELLED; ++v) {
    if (u == StateName(static_cast<kiln::v1::JobState>(v))) return static_cast<kiln::v1::JobState>(v);
  }
  return InvalidArgument("--state: expected queued, running, succeeded, failed or cancelled, got '" + s + "'");
}

std::string Time(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0) return "-";
  std::time_t s = static_cast<std::time_t>(t.seconds());
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A point in time as RFC 3339 UTC, null when unset (docs/cli-json.md).
nlohmann::ordered_json TimeJson(const google::protobuf::Timestamp& t) {
  return t.seconds() == 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(Time(t));
}

// `kiln job --json` / one entry of `kiln jobs --json` (docs/cli-json.md kiln.job/1): the state as
// --state spells it.
nlohmann::ordered_json JobJson(const kiln::v1::Job& j) {
  using Json = nlohmann::ordered_json;
  Json o;
  std::string state = StateName(j.state());
  for (char& c : state) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  o["job_id"] = j.job_id();
  o["kind"] = j.kind() == kiln::v1::JOB_KIND_ADVISE ? "advise" : "run";
  o["state"] = state;
  o["model_id"] = j.model_id();
  o["backend"] = j.backend();
  o["device"] = j.device().empty() ? Json(nullptr) : Json(j.device());
  o["configurations"] = j.configurations();
  const auto& p = j.progress();
  o["progress"] = {{"configurations_done", p.configurations_done()},
                   {"configurations_total", p.configurations_total()},
                   {"layers_done", p.layers_done()},
                   {"layers_total", p.layers_total()},
                   {"current_layer", p.current_layer().empty() ? Json(nullptr) : Json(p.current_layer())},
                   {"step", p.step().empty() ? Json(nullptr) : Json(p.step())}};
  o["attempt"] = j.attempt();
  o["created"] = TimeJson(j.created());
  o["started"] = TimeJson(j.started());
  o["finished"] = TimeJson(j.finished());
  o["client"] = j.client();
  o["labels"] = Json::object();
  for (const auto& [k, v] : j.labels()) o["labels"][k] = v;
  o["idempotency_key"] = j.idempotency_key();
  o["layers_below_threshold"] = j.layers_below_threshold();
  o["results_expired"] = j.results_expired();
  o["error"] = j.has_error() ? Json({{"code", StatusCodeName(static_cast<StatusCode>(j.error().code()))},
                                     {"message", j.error().message()}})
                             : Json(nullptr);
  return o;
}

// One job as a kiln.job/1 document on stdout.
void PrintJobJson(const kiln::v1::Job& j) {
  nlohmann::ordered_json o;
  o["schema"] = "kiln.job/1";
  o.update(JobJson(j));
  std::cout << o.dump(2) << "\n";
}

void PrintJob(const kiln::v1::Job& j) {
  std::printf("job        %s%s\n", j.job_id().c_str(), j.kind() == kiln::v1::JOB_KIND_ADVISE ? " (advise)" : "");
  std::printf("state      %s%s\n", StateName(j.state()), j.results_expired() ? " (results expired)" : "");
  std::printf("model      %s\n", j.model_id().c_str());
  std::printf("backend    %s%s%s\n", j.backend().c_str(), j.device().empty() ? "" : " on ", j.device().c_str());
  const auto& p = j.progress();
  std::printf("progress   configuration %lld/%lld, layer %lld/%lld%s%s\n",
              static_cast<long long>(p.configurations_done()), static_cast<long long>(p.configurations_total()),
              static_cast<long long>(p.layers_done()), static_cast<long long>(p.layers_total()),
              p.current_layer().empty() ? "" : " ", EscapeControls(p.current_layer()).c_str());
  if (!p.step().empty()) std::printf("step       %s\n", EscapeControls(p.step()).c_str());
  std::printf("attempt    %d\n", j.attempt());
  std::printf("created    %s\nstarted    %s\nfinished   %s\n", Time(j.created()).c_str(), Time(j.started()).c_str(),
              Time(j.finished()).c_str());
  std::printf("client     %s\n", j.client().c_str());
  if (j.layers_below_threshold() > 0) {
    std::printf("below PCC  %lld layer(s)\n", static_cast<long long>(j.layers_below_threshold()));
  }
  // Model and client text on its way to a terminal (common/echo.h EscapeControls).
  for (const auto& [k, v] : j.labels()) {
    std::printf("label      %s=%s\n", EscapeControls(k).c_str(), EscapeControls(v).c_str());
  }
  if (j.has_error()) {
    std::printf("error      %s: %s\n", StatusCodeName(static_cast<StatusCode>(j.error().code())),
                EscapeControls(j.error().message()).c_str());
  }
}

// From construction to destruction Ctrl-C sets g_interrupted (instead of ending the process) and
// cancels the call set last (Set), so that a watch between two streams is interrupted too.
class InterruptWatch {
 public:
  InterruptWatch() {
    g_interrupted = false;
    previous_ = std::signal(SIGINT, OnSigint);
    thread_ = std::thread([this] {
      while (!done_.load()) {
        if (g_interrupted.load()) {
          std::lock_guard<std::mutex> lock(mu_);
          if (ctx_ != nullptr) ctx_->TryCancel();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  }
  ~InterruptWatch() {
    done_ = true;
    thread_.join();
    std::signal(SIGINT, previous_);
  }
  /// The call Ctrl-C cancels from now on (nullptr: none; set before the context goes).
  void Set(grpc::ClientContext* ctx) {
    std::lock_guard<std::mutex> lock(mu_);
    ctx_ = ctx;
  }

 private:
  std::atomic<bool> done_{false};
  std::mutex mu_;
  grpc::ClientContext* ctx_ = nullptr;
  std::thread thread_;
  void (*previous_)(int) = nullptr;
};

// A watched job's progress on stderr: a line per state change and advise step; per finished
// layer a bar redrawn in place on a terminal, else a line.
class ProgressLines {
 public:
  explicit ProgressLines(std::string job_id) : job_id_(std::move(job_id)), tty_(isatty(STDERR_FILENO) != 0) {}
  /// `job`: the job as of its last state change (the layers' configuration count).
  void Show(const kiln::v1::JobEvent& ev, const kiln::v1::Job& job) {
    if (ev.has_state_change()) {
      EndBar();
      std::fprintf(stderr, "job %s %s (attempt %d)%s%s\n", job_id_.c_str(), StateName(job.state()), job.attempt(),
                   job.device().empty() ? "" : " on ", job.device().c_str());
    } else if (ev.event_case() == kiln::v1::JobEvent::kAdviseStep) {
      EndBar();
      std::fprintf(stderr, "advise: %s\n", EscapeControls(ev.advise_step()).c_str());
    } else if (ev.has_layer()) {
      const auto& l = ev.layer();
      const int width = 30;
      const int filled = l.total() > 0 ? static_cast<int>(width * l.index() / l.total()) : 0;
      char pcc[32] = "";
      if (l.report().compared()) std::snprintf(pcc, sizeof pcc, " pcc=%.6f", l.report().pcc());
      const std::string conf =
          job.configurations() > 1 ? "config " + std::to_string(l.configuration()) + " " : std::string();
      if (tty_) {
        std::fprintf(stderr, "\r%s[%s%s] %lld/%lld %-28.28s%s\033[K", conf.c_str(), std::string(filled, '#').c_str(),
                     std::string(width - filled, '.').c_str(), static_cast<long long>(l.index()),
                     static_cast<long long>(l.total()), EscapeControls(l.report().name()).c_str(), pcc);
        bar_ = true;
      } else {
        std::fprintf(stderr, "%s[%lld/%lld] %s %s %.3f ms%s\n", conf.c_str(), static_cast<long long>(l.index()),
                     static_cast<long long>(l.total()), EscapeControls(l.report().name()).c_str(),
                     EscapeControls(l.report().op()).c_str(), l.report().device_seconds() * 1e3, pcc);
      }
    }
  }
  /// Ends a bar left on its line, before any other line.
  void EndBar() {
    if (bar_) std::fputs("\n", stderr);
    bar_ = false;
  }

 private:
  std::string job_id_;
  bool tty_;
  bool bar_ = false;
};

struct WatchOutcome {
  grpc::Status status;
  kiln::v1::Job job;   // the last state seen
  bool interrupted = false;
};

// Streams the job's events; progress on stderr when `progress`. A watch that ends UNAVAILABLE —
// kilnd restarting, a replica draining ("watch again"), a farm's database unreachable for longer
// than kilnd waits — is opened again (the job goes on) for up to kWatchAgainFor after the last
// stream that delivered anything, the events already shown skipped by their sequence. A first
// stream that never opened is an error at once.
WatchOutcome Watch(const ClientOptions& options, const std::string& job_id, bool progress) {
  constexpr auto kWatchAgainFor = std::chrono::seconds(60);
  WatchOutcome out;
  auto channel = Connect(options);
  if (!channel.ok()) {
    out.status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, channel.status().message());
    return out;
  }
  auto stub = kiln::v1::JobService::NewStub(*channel);
  ProgressLines lines(job_id);
  int64_t last_sequence = 0;
  bool opened = false;  // a stream delivered something: only then is an UNAVAILABLE end worth a retry
  std::optional<std::chrono::steady_clock::time_point> failing_since;
  InterruptWatch interrupt;
  for (;;) {
    grpc::ClientContext ctx;
    ClientOptions no_deadline = options;
    no_deadline.timeout_seconds = 0;  // a watch lasts as long as the job
    Prepare(no_deadline, &ctx);
    kiln::v1::WatchJobRequest req;
    req.set_job_id(job_id);
    interrupt.Set(&ctx);
    auto reader = stub->WatchJob(&ctx, req);
    kiln::v1::JobEvent ev;
    while (reader->Read(&ev)) {
      opened = true;
      failing_since.reset();  // this stream works: a later end gets a window of its own
      if (ev.sequence() > 0 && ev.sequence() <= last_sequence) continue;  // shown before a watch again
      last_sequence = ev.sequence();
      if (ev.has_state_change()) out.job = ev.state_change();
      if (progress) lines.Show(ev, out.job);
    }
    out.status = reader->Finish();
    interrupt.Set(nullptr);
    out.interrupted = g_interrupted.load();
    // Never opened (a wrong address, kilnd not running, a TLS mismatch): an error now, not in 60 s.
    if (out.status.error_code() != grpc::StatusCode::UNAVAILABLE || out.interrupted || !opened) break;
    const auto now = std::chrono::steady_clock::now();
    if (!failing_since) failing_since = now;
    if (now - *failing_since >= kWatchAgainFor) break;
    lines.EndBar();
    std::fprintf(stderr, "kiln: watch %s: %s; watching again\n", job_id.c_str(),
                 EscapeControls(out.status.error_message()).c_str());
    for (int i = 0; i < 10 && !g_interrupted.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (g_interrupted.load()) {
      out.interrupted = true;
      break;
    }
    // Up to 1 s for the channel to connect again: a call opened on a channel whose server went
    // away could otherwise wait for good (seen with grpcio 1.51, whose core this is).
    (*channel)->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }
  lines.EndBar();
  return out;
}

// The configurations of a run job; an advise job's answer goes to `*advice` instead.
Result<std::vector<RunConfiguration>> FetchResult(const ClientOptions& options, const std::string& job_id,
                                                      bool omit_outputs, std::optional<kiln::v1::AdviseResult>* advice) {
  auto channel = Connect(options);
  if (!channel.ok()) return channel.status();
  auto stub = kiln::v1::JobService::NewStub(*channel);
  grpc::ClientContext ctx;
  Prepare(options, &ctx);
  kiln::v1::GetJobResultRequest req;
  req.set_job_id(job_id);
  req.set_omit_outputs(omit_outputs);
  auto reader = stub->GetJobResult(&ctx, req);
  std::vector<RunConfiguration> out;
  kiln::v1::JobResultChunk chunk;
  while (reader->Read(&chunk)) {
    if (chunk.has_result() && chunk.result().has_advice()) {
      *advice = chunk.result().advice();
    } else if (chunk.has_result()) {
      out.push_back({chunk.result().precision(), chunk.result().response()});
    } else if (chunk.has_output()) {
      if (out.empty()) return DataLoss("result stream: output before its configuration");
      auto& resp = out.back().response;
      const auto& o = chunk.output();
      if (o.output() < 0 || o.output() >= resp.outputs_size()) return DataLoss("result stream: bad output index");
      std::string* data = resp.mutable_outputs(o.output())->mutable_raw_data();
      if (static_cast<int64_t>(data->size()) != o.offset()) return DataLoss("result stream: chunk out of order");
      data->append(o.data());
    }
  }
  grpc::Status st = reader->Finish();
  if (!st.ok()) return Status(static_cast<StatusCode>(st.error_code()), st.error_message());
  return out;
}

// The results of `job_ids`, in order, as one report (a chained and a per_layer job of the same
// configuration side by side in HTML).
int ResultCommand(const ClientOptions& options, const std::vector<std::string>& job_ids, ReportOptions report) {
  Status dest = CheckReportDestinations(report);
  if (!dest.ok()) {
    std::cerr << "kiln: result: " << dest.message() << "\n";
    return 2;
  }
  std::vector<RunConfiguration> all;
  for (const auto& id : job_ids) {
    // The job's end first: GetJobResult streams the finished configurations of a FAILED or
    // CANCELLED job too (proto/kiln/v1/job.proto), which the report must not pass off as the job's.
    kiln::v1::GetJobRequest jreq;
    jreq.set_job_id(id);
    kiln::v1::Job job;
    if (grpc::Status st = CallUnary(options, &kiln::v1::JobService::Stub::GetJob, jreq, &job); !st.ok()) {
      std::cerr << "kiln: result " << id << ": " << Describe(st) << "\n";
      return 1;
    }
    std::optional<kiln::v1::AdviseResult> advice;
    auto configs = FetchResult(options, id, false, &advice);
    if (!configs.ok()) {
      std::cerr << "kiln: result " << id << ": " << configs.status().ToString() << "\n";
      return 1;
    }
    if (job.state() == kiln::v1::FAILED || job.state() == kiln::v1::CANCELLED) {
      report.unfinished.push_back({job.job_id(), StateName(job.state()), job.error().message(),
                                   static_cast<int64_t>(configs->size()), job.configurations()});
    }
    if (advice) {
      if (job_ids.size() > 1 || report.report == "html" || !report.out_dir.empty() || !report.report_file.empty()) {
        std::cerr << "kiln: result " << id << ": an advise job's answer prints alone, as a table or --report json "
                     "(no --out, --report-file or html: kiln advise --report-html runs it)\n";
        return 2;
      }
      return PrintAdviceResult(*advice, report.report == "json");
    }
    for (auto& c : *configs) all.push_back(std::move(c));
  }
  report.job_ids = job_ids;
  return PrintRunReport(all, report);
}

// After Ctrl-C: cancel or detach (see the header comment).
int Interrupted(const ClientOptions& options, const std::string& job_id) {
  bool cancel = true;
  if (isatty(STDIN_FILENO) && isatty(STDERR_FILENO)) {
    std::fprintf(stderr, "\njob %s is still running: [c]ancel it or [d]etach? ", job_id.c_str());
    std::string answer;
    std::getline(std::cin, answer);
    cancel = !(answer.rfind("d", 0) == 0 || answer.rfind("D", 0) == 0);
  }
  if (!cancel) {
    std::fprintf(stderr, "detached; follow it with: kiln watch %s\n", job_id.c_str());
    std::printf("%s\n", job_id.c_str());
    return 130;
  }
  kiln::v1::CancelJobRequest req;
  req.set_job_id(job_id);
  kiln::v1::Job job;
  // kilnd may be away (restarting, a replica draining: the watch was waiting for it), so the
  // cancel is retried for up to 30 s: without a terminal, Ctrl-C must still cancel.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  grpc::Status st;
  for (bool said = false;; said = true) {
    st = CallUnary(options, &kiln::v1::JobService::Stub::CancelJob, req, &job);
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE || std::chrono::steady_clock::now() >= until) break;
    if (!said) std::cerr << "kiln: cancel " << job_id << ": " << Describe(st) << "; retrying for 30 s\n";
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  if (!st.ok()) {
    std::cerr << "kiln: cancel " << job_id << ": " << Describe(st) << "; the job was NOT cancelled (kiln cancel "
              << job_id << ")\n";
    return 1;
  }
  std::fprintf(stderr, "job %s cancel requested (now %s)\n", job_id.c_str(), StateName(job.state()));
  return 130;
}

// Watches each job (in order) to its end, then prints their results as one report.
int WatchAndReport(const ClientOptions& options, const std::vector<std::string>& job_ids, const ReportOptions& report) {
  for (const auto& job_id : job_ids) {
    WatchOutcome w = Watch(options, job_id, true);
    if (w.interrupted) return Interrupted(options, job_id);
    if (!w.status.ok()) {
      std::cerr << "kiln: watch " << job_id << ": " << Describe(w.status) << "\n";
      return 1;
    }
    if (w.job.state() != kiln::v1::SUCCEEDED) {
      std::cerr << "kiln: job " << job_id << " " << JobEndText(w.job) << "\n";
      // The configurations it finished, as `kiln result` reports them (INCOMPLETE; status 1).
      if (w.job.progress().configurations_done() > 0) (void)ResultCommand(options, {job_id}, report);
      return 1;
    }
  }
  return ResultCommand(options, job_ids, report);
}

int JobsCommand(const ClientOptions& options, const std::string& state, const std::string& model,
                const std::vector<std::string>& labels, int limit, bool json) {
  kiln::v1::ListJobsRequest req;
  if (!state.empty()) {
    auto s = ParseState(state);
    if (!s.ok()) {
      std::cerr << "kiln: jobs: " << s.status().message() << "\n";
      return 2;
    }
    req.set_state(*s);
  }
  req.set_model_id(model);
  for (const auto& l : labels) {
    auto kv = ParseLabel(l);
    if (!kv.ok()) {
      std::cerr << "kiln: jobs: " << kv.status().message() << "\n";
      return 2;
    }
    (*req.mutable_labels())[kv->first] = kv->second;
  }
  int shown = 0;
  nlohmann::ordered_json jobs = nlohmann::ordered_json::array();
  do {
    req.set_page_size(std::min(500, limit - shown));
    kiln::v1::ListJobsResponse resp;
    grpc::Status st = CallUnary(options, &kiln::v1::JobService::Stub::ListJobs, req, &resp);
    if (!st.ok()) {
      std::cerr << "kiln: jobs: " << Describe(st) << "\n";
      return 1;
    }
    if (!json && shown == 0 && req.page_token().empty()) {  // after the first answer: an error prints alone
      std::printf("%-28s %-10s %-12s %-10s %-14s %-7s %s\n", "JOB_ID", "STATE", "MODEL", "BACKEND", "PROGRESS",
                  "ATTEMPT", "CREATED");
    }
    for (const auto& j : resp.jobs()) {
      if (json) {
        jobs.push_back(JobJson(j));
        ++shown;
        continue;
      }
      const auto& p = j.progress();
      std::string prog = std::to_string(p.configurations_done()) + "/" + std::to_string(p.configurations_total());
      if (j.state() == kiln::v1::RUNNING) prog += " L" + std::to_string(p.layers_done()) + "/" + std::to_string(p.layers_total());
      std::printf("%-28s %-10s %-12.12s %-10s %-14s %-7d %s\n", j.job_id().c_str(), StateName(j.state()),
                  j.model_id().c_str(), j.backend().c_str(), prog.c_str(), j.attempt(), Time(j.created()).c_str());
      ++shown;
    }
    req.set_page_token(resp.next_page_token());
  } while (!req.page_token().empty() && shown < limit);
  if (json) {
    nlohmann::ordered_json o;
    o["schema"] = "kiln.jobs/1";
    o["jobs"] = std::move(jobs);
    std::cout << o.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

Result<std::pair<std::string, std::string>> ParseLabel(const std::string& spec) {
  auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0) {
    return InvalidArgument("--label expects KEY=VALUE, got '" + EscapeControls(spec) + "'");
  }
  return std::make_pair(spec.substr(0, eq), spec.substr(eq + 1));
}

Result<std::vector<kiln::v1::Precision>> ParseSweep(const std::vector<std::string>& specs,
                                                    const api::PrecisionFlags& base) {
  std::vector<api::PrecisionFlags> points{base};
  std::set<std::string> fields;
  for (const auto& spec : specs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      return InvalidArgument("--sweep expects FIELD=V1,V2,..., got '" + EscapeControls(spec) + "'");
    }
    const std::string field = spec.substr(0, eq);
    if (!fields.insert(field).second) {
      return InvalidArgument("--sweep: " + EscapeControls(field) + " is swept twice (list its values in one --sweep)");
    }
    std::vector<std::string> values;
    std::set<std::string> seen;
    std::string rest = spec.substr(eq + 1);
    for (size_t pos = 0; pos <= rest.size();) {
      size_t comma = rest.find(',', pos);
      if (comma == std::string::npos) comma = rest.size();
      if (comma == pos) {
        return InvalidArgument("--sweep: " + EscapeControls(field) + " lists an empty value ('" + EscapeControls(rest) +
                               "')");
      }
      std::string v = rest.substr(pos, comma - pos);
      if (!seen.insert(v).second) {
        return InvalidArgument("--sweep: " + EscapeControls(field) + "=" + EscapeControls(v) + " is listed twice");
      }
      values.push_back(std::move(v));
      pos = comma + 1;
    }
    // The points are the product of the value counts: bounded before they are built.
    if (values.size() > static_cast<size_t>(api::JobLimits::kMaxConfigurationsCeiling) / points.size()) {
      return InvalidArgument("--sweep: more than " + std::to_string(api::JobLimits::kMaxConfigurationsCeiling) +
                             " points (the product of the value counts), more than any kilnd takes"
                             " (--job-max-configurations)");
    }
    std::string api::PrecisionFlags::*member = nullptr;
    static const std::map<std::string, std::string api::PrecisionFlags::*> kFields = {
        {"math_fidelity", &api::PrecisionFlags::math_fidelity},
        {"weights_dtype", &api::PrecisionFlags::weights_dtype},
        {"input_dtype", &api::PrecisionFlags::input_dtype},
        {"output_dtype", &api::PrecisionFlags::output_dtype},
        {"fp32_dest_acc_en", &api::PrecisionFlags::fp32_dest_acc_en},
        {"packer_l1_acc", &api::PrecisionFlags::packer_l1_acc},
        {"math_approx_mode", &api::PrecisionFlags::math_approx_mode},
        {"arch", &api::PrecisionFlags::arch},
    };
    auto it = kFields.find(field);
    if (it == kFields.end()) {
      std::string names;
      for (const auto& [n, m] : kFields) names += (names.empty() ? "" : ", ") + n;
      return InvalidArgument("--sweep: unknown field '" + field + "' (one of " + names + ")");
    }
    member = it->second;
    std::vector<api::PrecisionFlags> next;
    for (const auto& p : points) {
      for (const auto& v : values) {
        api::PrecisionFlags q = p;
        q.*member = v;
        next.push_back(q);
      }
    }
    points = std::move(next);
  }
  std::vector<kiln::v1::Precision> out;
  if (specs.empty()) return out;
  std::map<std::string, size_t> parsed;  // spelled differently, the same precision (lofi, LoFi; true, 1)
  for (const auto& p : points) {
    auto m = api::ParsePrecisionFlags(p);
    if (!m.ok()) return m.status().WithContext("--sweep");
    auto [at, fresh] = parsed.emplace(m->SerializeAsString(), out.size());
    if (!fresh) {
      return InvalidArgument("--sweep: points " + std::to_string(at->second) + " and " + std::to_string(out.size()) +
                             " are the same precision (a value spelled two ways)");
    }
    out.push_back(std::move(m).value());
  }
  return out;
}

int SubmitAndWatch(const ClientOptions& options, std::vector<kiln::v1::SubmitRunRequest> requests, bool detach,
                   const ReportOptions& report) {
  std::vector<std::string> ids;
  for (auto& request : requests) {
    if (request.idempotency_key().empty()) request.set_idempotency_key(NewIdempotencyKey("kiln-cli-"));
    kiln::v1::Job job;
    grpc::Status st = CallUnary(options, &kiln::v1::JobService::Stub::SubmitRun, request, &job);
    if (!st.ok()) {
      std::cerr << "kiln: run " << request.run().model_id() << ": " << Describe(st) << "\n";
      return 1;
    }
    if (detach) {
      std::printf("%s\n", job.job_id().c_str());
    } else {
      std::fprintf(stderr, "job %s submitted (%d configuration%s, mode %s)\n", job.job_id().c_str(),
                   job.configurations(), job.configurations() == 1 ? "" : "s", ModeName(request.run().mode()));
    }
    ids.push_back(job.job_id());
  }
  if (detach) return 0;
  return WatchAndReport(options, ids, report);
}

std::string JobEndText(const kiln::v1::Job& job) {
  std::string out = StateName(job.state());
  if (!job.has_error()) return out;
  const std::string code = StatusCodeName(static_cast<StatusCode>(job.error().code()));
  if (code != out) out += ": " + code;
  return out + ": " + job.error().message();
}

void AddJobCommands(CLI::App& app, ClientOptions& options, int* exit_code) {
  static std::string state, model, job_id;
  static std::vector<std::string> job_ids;
  static std::vector<std::string> labels;
  static int limit = 50;
  static ReportOptions report;
  static bool json = false;

  auto* jobs = app.add_subcommand("jobs", "list jobs, newest first");
  jobs->add_option("--state", state, "queued, running, succeeded, failed or cancelled");
  jobs->add_option("--model", model, "a model id, name or id prefix (8+ hex digits)");
  jobs->add_option("--label", labels, "KEY=VALUE (repeatable; all must match)");
  jobs->add_option("--limit", limit, "at most this many")
      ->capture_default_str()
      ->check(AtLeast(1, "a whole number"));
  jobs->add_flag("--json", json, "print one JSON object instead (docs/cli-json.md kiln.jobs/1)");
  jobs->callback([&options, exit_code] { *exit_code = JobsCommand(options, state, model, labels, limit, json); });

  auto* one = app.add_subcommand("job", "one job: state, progress, error");
  one->add_option("JOB_ID", job_id, "job id")->required();
  one->add_flag("--json", json, "print one JSON object instead (docs/cli-json.md kiln.job/1)");
  one->callback([&options, exit_code] {
    kiln::v1::GetJobRequest req;
    req.set_job_id(job_id);
    kiln::v1::Job job;
    grpc::Status st = CallUnary(options, &kiln::v1::JobService::Stub::GetJob, req, &job);
    if (!st.ok()) {
      std::cerr << "kiln: job " << job_id << ": " << Describe(st) << "\n";
      *exit_code = 1;
      return;
    }
    if (json) {
      PrintJobJson(job);
    } else {
      PrintJob(job);
    }
    *exit_code = 0;
  });

  auto* watch = app.add_subcommand("watch", "follow a job's progress, then print its report");
  watch->add_option("JOB_ID", job_id, "job id")->required();
  AddReportOptions(*watch, report);
  watch->callback([&options, exit_code] {
    Status dest = CheckReportDestinations(report);
    if (!dest.ok()) {
      std::cerr << "kiln: watch: " << dest.message() << "\n";
      *exit_code = 2;
      return;
    }
    *exit_code = WatchAndReport(options, {job_id}, report);
  });

  auto* cancel = app.add_subcommand("cancel", "cancel a queued or running job");
  cancel->add_option("JOB_ID", job_id, "job id")->required();
  cancel->add_flag("--json", json, "print the job as JSON (docs/cli-json.md kiln.job/1)");
  cancel->callback([&options, exit_code] {
    kiln::v1::CancelJobRequest req;
    req.set_job_id(job_id);
    kiln::v1::Job job;
    grpc::Status st = CallUnary(options, &kiln::v1::JobService::Stub::CancelJob, req, &job);
    if (!st.ok()) {
      std::cerr << "kiln: cancel " << job_id << ": " << Describe(st) << "\n";
      *exit_code = 1;
      return;
    }
    if (json) {
      PrintJobJson(job);
    } else if (job.state() == kiln::v1::SUCCEEDED || job.state() == kiln::v1::FAILED) {
      std::printf("%s %s (already ended: nothing to cancel)\n", job.job_id().c_str(), StateName(job.state()));
    } else if (job.state() == kiln::v1::CANCELLED) {
      std::printf("%s %s\n", job.job_id().c_str(), StateName(job.state()));
    } else {
      // A running job stops at its next stage or layer boundary; `kiln job` shows it CANCELLED then.
      std::printf("%s %s (cancel requested)\n", job.job_id().c_str(), StateName(job.state()));
    }
    *exit_code = 0;
  });

  auto* result = app.add_subcommand("result", "finished jobs' report and outputs (several jobs: one report)");
  result->add_option("JOB_ID", job_ids,
                     "job id(s); a chained and a per_layer job of one model are shown side by side in HTML")
      ->required();
  AddReportOptions(*result, report);
  result->callback([&options, exit_code] { *exit_code = ResultCommand(options, job_ids, report); });
}

void AddReportOptions(CLI::App& cmd, ReportOptions& report) {
  cmd.add_option("--out", report.out_dir, "write outputs as DIR/<graph output>.npy (DIR/cK/ per configuration)");
  cmd.add_option("--report", report.report, "table, json (docs/cli-json.md) or html")
      ->check(CLI::IsMember({"table", "json", "html"}))
      ->capture_default_str();
  cmd.add_option("--report-file", report.report_file, "write the report to FILE instead of stdout");
}

}  // namespace kiln::cli
