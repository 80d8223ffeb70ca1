#include "api/jobs.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <random>
#include <set>
#include <tuple>
#include <utility>

#include "api/advisor/advise_proto.h"
#include "api/convert.h"
#include "api/models.h"
#include "common/echo.h"
#include "device/backends/builtin.h"

namespace kiln::api {

namespace {

using SteadyClock = std::chrono::steady_clock;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void SetTime(int64_t ms, google::protobuf::Timestamp* t) {
  t->set_seconds(ms / 1000);
  t->set_nanos(static_cast<int32_t>((ms % 1000) * 1000000));
}

const char* StateName(int state) {
  switch (state) {
    case kiln::v1::QUEUED: return "queued";
    case kiln::v1::RUNNING: return "running";
    case kiln::v1::SUCCEEDED: return "succeeded";
    case kiln::v1::FAILED: return "failed";
    case kiln::v1::CANCELLED: return "cancelled";
    default: return "unspecified";
  }
}

bool IsFinished(int state) { return state >= kiln::v1::SUCCEEDED; }

// Progress and bookkeeping writes whose failure must not stop a running job (the next write, or
// the final state, carries the same information).
void LogIfError(const Status& s, const std::string& job_id) {
  if (!s.ok()) spdlog::warn("job {}: {}", job_id, s.ToString());
}

kiln::v1::Job ToJob(const store::JobRecord& r) {
  kiln::v1::Job j;
  j.set_job_id(r.job_id);
  j.set_kind(static_cast<kiln::v1::JobKind>(r.kind));
  j.set_state(static_cast<kiln::v1::JobState>(r.state));
  if (r.created_ms) SetTime(r.created_ms, j.mutable_created());
  if (r.started_ms) SetTime(r.started_ms, j.mutable_started());
  if (r.finished_ms) SetTime(r.finished_ms, j.mutable_finished());
  j.set_model_id(r.model_id);
  j.set_backend(r.backend);
  j.set_device(r.device);
  auto* p = j.mutable_progress();
  p->set_configurations_done(r.configurations_done);
  p->set_configurations_total(r.configurations);
  p->set_layers_done(r.layers_done);
  p->set_layers_total(r.layers_total);
  if (r.kind == kiln::v1::JOB_KIND_ADVISE) {
    p->set_step(r.current_layer);  // the store's one progress text (store/job_store.h)
  } else {
    p->set_current_layer(r.current_layer);
  }
  j.set_attempt(r.attempt);
  if (r.error_code != 0 || !r.error_message.empty()) {
    j.mutable_error()->set_code(r.error_code);
    j.mutable_error()->set_message(r.error_message);
  }
  for (const auto& [k, v] : r.labels) (*j.mutable_labels())[k] = v;
  j.set_idempotency_key(r.idempotency_key);
  j.set_configurations(r.configurations);
  j.set_results_expired(r.results_expired);
  j.set_layers_below_threshold(r.layers_below_threshold);
  std::string client = r.client;
  std::replace(client.begin(), client.end(), sched::kSubKeySeparator, '/');
  j.set_client(client);
  return j;
}

bool ValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n < 0 || i + n >= s.size() + (n == 0 ? 1 : 0)) {
      if (n != 0) return false;
    }
    for (int k = 1; k <= n; ++k) {
      if (i + k >= s.size() || (static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    }
    i += static_cast<size_t>(n) + 1;
  }
  return true;
}

// The per-client limit is the principal's (the part of a client id before its sub-key,
// sched/scheduler.h kSubKeySeparator): an x-kiln-client header must not buy more queue.
std::string PrincipalOf(const std::string& client) { return client.substr(0, client.find(sched::kSubKeySeparator)); }

bool ValidLabelKey(const std::string& k) {
  if (k.empty() || k.size() > 63) return false;
  return std::all_of(k.begin(), k.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
  });
}

std::string RetryHint(double seconds) {
  const int64_t s = std::max<int64_t>(1, static_cast<int64_t>(seconds + 0.5));
  return "retry after ~" + std::to_string(s) + " s";
}

}  // namespace

Status ValidateLabels(const google::protobuf::Map<std::string, std::string>& labels) {
  if (labels.size() > 16) return InvalidArgument("labels: " + std::to_string(labels.size()) + " given, at most 16");
  for (const auto& [k, v] : labels) {
    if (!ValidLabelKey(k)) {
      return InvalidArgument("label key '" + EscapeForEcho(k, 80) + "' must match [a-z0-9_.-]{1,63}");
    }
    if (v.size() > 256) return InvalidArgument("label '" + k + "': value is " + std::to_string(v.size()) +
                                               " bytes, at most 256");
    if (!ValidUtf8(v)) return InvalidArgument("label '" + k + "': value is not UTF-8");
    if (const size_t at = FindControlCharacter(v); at != std::string_view::npos) {
      return InvalidArgument("label '" + k + "': value has a control character at byte " + std::to_string(at) +
                             " (labels are shown in tables and terminals)");
    }
  }
  return Status::Ok();
}

std::string NewJobId() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  uint64_t hi, lo;
  {
    std::lock_guard<std::mutex> lock(mu);
    hi = rng();
    lo = rng();
  }
  // 128 bits: 48 bits of milliseconds, 80 random bits; 26 base32 digits (the first carries 2 bits).
  const uint64_t ms = static_cast<uint64_t>(NowMs()) & ((1ull << 48) - 1);
  unsigned __int128 v = (static_cast<unsigned __int128>(ms) << 80) |
                        (static_cast<unsigned __int128>(hi & 0xFFFF) << 64) | lo;
  static const char kDigits[] = "0123456789abcdefghjkmnpqrstvwxyz";
  std::string out(26, '0');
  for (int i = 25; i >= 0; --i) {
    out[static_cast<size_t>(i)] = kDigits[static_cast<int>(v & 31)];
    v >>= 5;
  }
  return "j-" + out;
}

// A job this process is running: its record (guarded by mu), its request with input bytes, and
// the configuration in flight. In live_ from the moment it leaves the queue (DispatchLoop,
// ClaimLoop), so that a cancel finds it while StartJob still reads its inputs.
class JobManager::LiveJob {
 public:
  std::mutex mu;
  store::JobRecord rec;
  kiln::v1::SubmitRunRequest request;  // inputs restored (run jobs)
  kiln::v1::SubmitAdviseRequest advise;  // inputs restored (advise jobs)
  store::ModelInfo model;
  int configuration = 0;
  kiln::v1::RunConvLayersRequest run;       // the configuration's request
  kiln::v1::RunConvLayersResponse response;  // its response
  std::shared_ptr<RunConvJob> job;
  int job_config = -1;  // the configuration `job` runs (guarded by mu): a finished one never replaces a later one
  std::shared_ptr<sched::JobHandle> search;  // an advise job's search on its device
  bool cancel_requested = false;
  SteadyClock::time_point started;
  // A farm's worker: the claim every write carries, and whether a heartbeat found it lost.
  std::optional<store::JobClaim> claim;
  bool lease_lost = false;  // guarded by mu
  // EndJob has begun (guarded by mu): its end, or its release, may already have closed the
  // claim, so a renewal refused from now on is not a lost lease.
  bool ending = false;
  store::JobFence fence() const {
    return claim ? store::JobFence{claim->attempt, claim->lease_token} : store::JobFence{};
  }
};

class PinImpl : public ResultPin {
 public:
  PinImpl(std::function<void()> release) : release_(std::move(release)) {}
  ~PinImpl() override { release_(); }

 private:
  std::function<void()> release_;
};

JobManager::JobManager(Env env, JobLimits limits) : env_(std::move(env)), limits_(limits) {}

Result<std::unique_ptr<JobManager>> JobManager::Create(Env env, JobLimits limits) {
  if (env.models == nullptr || env.jobs == nullptr || env.scheduler == nullptr || env.plans == nullptr) {
    return InvalidArgument("JobManager: store, job store, scheduler and plan cache are required");
  }
  if (env.worker && (env.queue == nullptr || env.worker_name.empty())) {
    return InvalidArgument("JobManager: a worker needs the farm's queue and a worker name");
  }
  std::unique_ptr<JobManager> m(new JobManager(std::move(env), limits));
  // Lanes are where jobs run: this process's devices, unless it is a farm's serving replica.
  if (!m->farm() || m->env_.worker) {
    std::map<std::string, int> slots;
    for (const auto& d : m->env_.scheduler->Devices()) ++slots[d.backend];
    for (const auto& [backend, n] : slots) m->lanes_[backend].slots = n;
  }
  m->InitMetrics();
  if (!m->farm()) KILN_RETURN_IF_ERROR(m->Recover());  // a farm's queue re-offers interrupted jobs itself
  // Each thread counts itself out as its last act (Stop).
  auto loop = [p = m.get()](void (JobManager::*fn)()) {
    return std::thread([p, fn] {
      (p->*fn)();
      {
        std::lock_guard<std::mutex> lock(p->mu_);
        --p->loops_running_;
      }
      p->cv_.notify_all();
    });
  };
  if (m->env_.worker) {
    m->loops_running_ = 2;
    m->dispatcher_ = loop(&JobManager::ClaimLoop);
    m->heartbeat_thread_ = loop(&JobManager::HeartbeatLoop);
  } else {
    m->loops_running_ = m->farm() ? 2 : 1;
    m->dispatcher_ = loop(&JobManager::DispatchLoop);
    if (m->farm()) m->events_thread_ = loop(&JobManager::EventLoop);
  }
  return m;
}

JobManager::~JobManager() {
  Shutdown();
  if (dispatcher_.joinable()) dispatcher_.join();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (events_thread_.joinable()) events_thread_.join();
  // Jobs still running (a kilnd whose start failed after recovery started them) are cancelled and
  // waited for: their completions use this object. They stay RUNNING in the store (EndJob).
  std::vector<std::shared_ptr<RunConvJob>> running;
  std::vector<std::shared_ptr<sched::JobHandle>> searches;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, live] : live_) {
      std::lock_guard<std::mutex> l(live->mu);
      if (live->job) running.push_back(live->job);
      if (live->search) searches.push_back(live->search);
    }
  }
  for (auto& j : running) j->Cancel();
  for (auto& j : searches) j->Cancel();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return live_.empty(); });
}

void JobManager::InitMetrics() {
  if (!env_.metrics) return;
  auto& reg = *env_.metrics;
  jobs_gauge_ = &prometheus::BuildGauge().Name("kiln_jobs").Help("Jobs in the job store by state").Register(reg);
  queue_wait_ = &prometheus::BuildHistogram()
                     .Name("kiln_job_queue_wait_seconds")
                     .Help("Time from a job's submission (or requeue after a restart) to its start")
                     .Register(reg);
  run_seconds_ = &prometheus::BuildHistogram()
                      .Name("kiln_job_run_seconds")
                      .Help("Time from a job attempt's start to its end")
                      .Register(reg);
  attempts_ = &prometheus::BuildCounter()
                   .Name("kiln_job_attempts_total")
                   .Help("Job attempts by result (succeeded, failed, cancelled, interrupted)")
                   .Register(reg);
  below_threshold_ = &prometheus::BuildCounter()
                          .Name("kiln_job_layers_below_threshold_total")
                          .Help("Compared layers of finished job configurations under tt-metal's PCC threshold")
                          .Register(reg);
  results_bytes_ = &prometheus::BuildGauge()
                        .Name("kiln_job_store_bytes")
                        .Help("Bytes of job inputs and results on disk")
                        .Register(reg)
                        .Add({});
  late_results_ = &prometheus::BuildCounter()
                      .Name("kiln_job_late_results_total")
                      .Help("Job results a worker produced after its lease was lost, discarded (a farm)")
                      .Register(reg)
                      .Add({});
  lease_expiries_ = &prometheus::BuildCounter()
                        .Name("kiln_job_lease_expiries_total")
                        .Help("Jobs this worker claimed from a worker whose lease had expired (a farm)")
                        .Register(reg)
                        .Add({});
  farm_workers_ = &prometheus::BuildGauge()
                       .Name("kiln_farm_workers")
                       .Help("A farm's workers by their last heartbeat: live (within the lease), lost, draining")
                       .Register(reg);
  worker_age_ = &prometheus::BuildGauge()
                     .Name("kiln_farm_worker_heartbeat_age_seconds")
                     .Help("Seconds since each farm worker's last heartbeat, by the database's clock")
                     .Register(reg);
  lease_lost_ = &prometheus::BuildCounter()
                    .Name("kiln_job_leases_lost_total")
                    .Help("Running jobs whose lease a worker found expired at a renewal, their run cancelled (a farm)")
                    .Register(reg)
                    .Add({});
  results_expired_ = &prometheus::BuildCounter()
                          .Name("kiln_job_results_expired_total")
                          .Help("Jobs whose results retention removed")
                          .Register(reg)
                          .Add({});
  for (int s = kiln::v1::QUEUED; s <= kiln::v1::CANCELLED; ++s) jobs_gauge_->Add({{"state", StateName(s)}}).Set(0);
  // Every series exists from the start, so that rates and alerts see a 0, not an absent series.
  for (const char* r : {"succeeded", "failed", "cancelled", "interrupted"}) attempts_->Add({{"result", r}});
  for (const auto& [backend, lane] : lanes_) below_threshold_->Add({{"backend", backend}});
  if (auto counts = env_.jobs->CountByState(); counts.ok()) {
    for (const auto& [s, n] : *counts) SetStateGauge(s, n);
  }
  results_bytes_->Set(static_cast<double>(env_.jobs->total_bytes()));
}

void JobManager::SetStateGauge(int state, int64_t delta) {
  // A farm's counts change in every process: a replica sets them from the store (DispatchLoop).
  if (jobs_gauge_ != nullptr && !farm()) jobs_gauge_->Add({{"state", StateName(state)}}).Increment(static_cast<double>(delta));
}

Status JobManager::Transition(store::JobRecord& rec, int new_state, const store::JobFence& fence) {
  const int old = rec.state;
  rec.state = new_state;
  if (IsFinished(new_state)) rec.finished_ms = NowMs();
  // The row and its state-change event in one transaction (store/job_store.h UpdateWithEvent):
  // state changes are always kept (a handful per attempt), so a watcher always sees the end, even
  // one that starts the moment the row reads finished.
  kiln::v1::JobEvent ev;
  ev.set_attempt(rec.attempt);
  *ev.mutable_state_change() = ToJob(rec);
  if (auto cur = env_.jobs->Get(rec.job_id); cur.ok()) ev.set_dropped_events(cur->dropped_events);
  auto seq = env_.jobs->UpdateWithEvent(rec, NowMs(), ev.SerializeAsString(), fence);
  if (!seq.ok()) return seq.status();
  if (old != new_state) {
    SetStateGauge(old, -1);
    SetStateGauge(new_state, 1);
  }
  Notify(rec.job_id);
  return Status::Ok();
}

void JobManager::AppendEvent(const store::JobRecord& rec, kiln::v1::JobEvent event, const store::JobFence& fence) {
  // Progress only (layers, advise steps): past --job-max-events they are dropped and counted.
  event.clear_sequence();
  event.clear_time();
  auto seq = env_.jobs->AppendEvent(rec.job_id, NowMs(), event.SerializeAsString(), limits_.max_events, fence);
  if (!seq.ok()) spdlog::warn("job {}: event not stored: {}", rec.job_id, seq.status().ToString());
  Notify(rec.job_id);
}

void JobManager::Notify(const std::string& job_id) {
  std::vector<std::function<void()>> fns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [token, w] : watchers_) {
      if (w.first == job_id) fns.push_back(w.second);
    }
  }
  for (auto& f : fns) f();
}

void JobManager::Enqueue(const store::JobRecord& rec, bool front) {
  Lane& lane = lanes_[rec.backend];
  auto& q = lane.queued[rec.client];
  if (front) {
    q.push_front(rec.job_id);
  } else {
    q.push_back(rec.job_id);
  }
  queued_client_[rec.job_id] = rec.client;
  ++queued_per_client_[PrincipalOf(rec.client)];
  ++queued_total_;
}

Status JobManager::Recover() {
  auto unfinished = env_.jobs->Unfinished();
  if (!unfinished.ok()) return unfinished.status();
  int requeued = 0, failed = 0;
  for (auto& rec : *unfinished) {
    if (rec.state == kiln::v1::RUNNING) {
      if (attempts_) attempts_->Add({{"result", "interrupted"}}).Increment();
      if (rec.attempt >= limits_.max_attempts) {
        rec.error_code = static_cast<int>(StatusCode::kAborted);
        rec.error_message = "kilnd stopped during attempt " + std::to_string(rec.attempt) + " of " +
                            std::to_string(limits_.max_attempts) + " (--job-max-attempts)";
        KILN_RETURN_IF_ERROR(Transition(rec, kiln::v1::FAILED));
        ++failed;
        continue;
      }
      rec.layers_done = 0;
      rec.layers_total = 0;
      rec.current_layer.clear();
      rec.device.clear();  // queued: on no device until it starts again
      KILN_RETURN_IF_ERROR(Transition(rec, kiln::v1::QUEUED));
      ++requeued;
    }
    std::lock_guard<std::mutex> lock(mu_);
    Enqueue(rec, /*front=*/false);
  }
  if (!unfinished->empty()) {
    spdlog::info("jobs: {} queued again after restart ({} were running), {} failed after {} interrupted attempts",
                 unfinished->size() - static_cast<size_t>(failed), requeued, failed, limits_.max_attempts);
  }
  return Status::Ok();
}

namespace {

// A request's input tensors against the model's graph inputs (store::ModelInfo::inputs, complete:
// the store refuses a model whose names pass its metadata limit), at submission, so that a job
// naming an input twice or one the model lacks is refused, not run and failed. The words are
// runtime/inputs.cc ResolveInputs's and api/run_conv.cc's, which check the same when a job runs.
Status CheckInputNames(const google::protobuf::RepeatedPtrField<kiln::v1::Tensor>& given, const store::ModelInfo& model,
                       const std::string& where) {
  std::set<std::string> seen;
  for (const auto& t : given) {
    if (!seen.insert(t.name()).second) return InvalidArgument(where + ": input tensor '" + t.name() + "' given twice");
    if (std::find(model.inputs.begin(), model.inputs.end(), t.name()) == model.inputs.end()) {
      std::string known;
      for (const auto& n : model.inputs) known += (known.empty() ? "" : ", ") + n;
      return InvalidArgument(where + ": unknown input '" + t.name() + "' (model inputs: " + known + ")");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<kiln::v1::Job> JobManager::Submit(const kiln::v1::SubmitRunRequest& request, const std::string& client,
                                         bool* existed, int64_t* retry_after_ms) {
  if (existed) *existed = false;
  if (retry_after_ms) *retry_after_ms = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Unavailable("kilnd is shutting down; submit again to another replica or later");
  }
  KILN_RETURN_IF_ERROR(CheckEnumValues(request));  // out-of-range enums (api/convert.h)
  if (request.idempotency_key().size() > 128) return InvalidArgument("idempotency_key: at most 128 bytes");
  if (!ValidUtf8(request.idempotency_key())) return InvalidArgument("idempotency_key: not UTF-8");
  KILN_RETURN_IF_ERROR(ValidateLabels(request.labels()));
  if (request.sweep_size() > limits_.max_configurations) {
    return InvalidArgument("sweep: " + std::to_string(request.sweep_size()) + " configurations, at most " +
                           std::to_string(limits_.max_configurations) + " (--job-max-configurations)");
  }
  const auto& run = request.run();
  if (run.model_id().empty()) return InvalidArgument("run.model_id is empty");
  if (auto level = ResolveTtEmuLevel(run, {}); !level.ok()) return level.status().WithContext("run");
  // Precision values and tensors are checked now, so that a malformed job is refused, not failed.
  if (request.sweep_size() == 0) {
    if (auto p = FromProto(run.precision()); !p.ok()) return p.status().WithContext("run.precision");
  }
  for (int i = 0; i < request.sweep_size(); ++i) {
    if (auto p = FromProto(request.sweep(i)); !p.ok()) return p.status().WithContext("sweep[" + std::to_string(i) + "]");
  }
  // layer_precision merges over each sweep point (else over run.precision); its keys are checked
  // against the plan when the job runs (PrepareConvRun).
  for (const auto& [name, layer] : run.layer_precision()) {
    for (int i = 0; i < std::max(1, request.sweep_size()); ++i) {
      const auto& base = request.sweep_size() == 0 ? run.precision() : request.sweep(i);
      if (auto p = FromProto(MergePrecision(base, layer)); !p.ok()) {
        return p.status().WithContext("run.layer_precision[" + name + "]" +
                                      (request.sweep_size() == 0 ? "" : " over sweep[" + std::to_string(i) + "]"));
      }
    }
  }
  int64_t input_bytes = 0;
  for (const auto& t : run.inputs()) {
    if (auto v = FromProto(t); !v.ok()) return v.status().WithContext("run.inputs");
    input_bytes += static_cast<int64_t>(t.raw_data().size());
  }
  const std::string backend = run.backend().empty() ? device::DefaultBackendName() : run.backend();
  store::JobRecord rec;
  rec.kind = kiln::v1::JOB_KIND_RUN;
  rec.backend = backend;
  rec.idempotency_key = request.idempotency_key();
  for (const auto& [k, v] : request.labels()) rec.labels[k] = v;
  rec.configurations = std::max(1, request.sweep_size());
  kiln::v1::SubmitRunRequest stored = request;
  std::vector<std::string_view> inputs;
  for (int k = 0; k < run.inputs_size(); ++k) inputs.push_back(run.inputs(k).raw_data());
  for (auto& t : *stored.mutable_run()->mutable_inputs()) t.clear_raw_data();
  return Admit(std::move(rec), run.model_id(), client, inputs, input_bytes,
               [&stored](const std::string& model_id) {
                 stored.mutable_run()->set_model_id(model_id);
                 return stored.SerializeAsString();
               },
               [&run](const store::ModelInfo& m) { return CheckInputNames(run.inputs(), m, "run.inputs"); }, existed,
               retry_after_ms);
}

Result<kiln::v1::Job> JobManager::SubmitAdvise(const kiln::v1::SubmitAdviseRequest& request, const std::string& client,
                                               bool* existed, int64_t* retry_after_ms) {
  if (existed) *existed = false;
  if (retry_after_ms) *retry_after_ms = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Unavailable("kilnd is shutting down; submit again to another replica or later");
  }
  KILN_RETURN_IF_ERROR(CheckEnumValues(request));
  if (request.idempotency_key().size() > 128) return InvalidArgument("idempotency_key: at most 128 bytes");
  if (!ValidUtf8(request.idempotency_key())) return InvalidArgument("idempotency_key: not UTF-8");
  KILN_RETURN_IF_ERROR(ValidateLabels(request.labels()));
  const auto& advise = request.advise();
  if (advise.model_id().empty()) return InvalidArgument("advise.model_id is empty");
  // Every option and tensor now, so that a malformed job is refused, not failed.
  auto spec = advisor::AdviseSpecFromProto(advise, env_.scheduler->DeviceSettings(device::kTtEmuBackend));
  if (!spec.ok()) return spec.status().WithContext("advise");
  store::JobRecord rec;
  rec.kind = kiln::v1::JOB_KIND_ADVISE;
  rec.backend = device::kTtEmuBackend;  // the search emulates on tt-emu: it holds one of its devices
  rec.idempotency_key = request.idempotency_key();
  for (const auto& [k, v] : request.labels()) rec.labels[k] = v;
  rec.configurations = 1;
  kiln::v1::SubmitAdviseRequest stored = request;
  std::vector<std::string_view> inputs;  // every set's tensors in order (StartJob restores them so)
  int64_t input_bytes = 0;
  for (const auto& set : advise.input_sets()) {
    for (const auto& t : set.inputs()) {
      inputs.push_back(t.raw_data());
      input_bytes += static_cast<int64_t>(t.raw_data().size());
    }
  }
  for (auto& set : *stored.mutable_advise()->mutable_input_sets()) {
    for (auto& t : *set.mutable_inputs()) t.clear_raw_data();
  }
  return Admit(std::move(rec), advise.model_id(), client, inputs, input_bytes,
               [&stored](const std::string& model_id) {
                 stored.mutable_advise()->set_model_id(model_id);
                 return stored.SerializeAsString();
               },
               [&advise](const store::ModelInfo& m) -> Status {
                 for (int i = 0; i < advise.input_sets_size(); ++i) {
                   KILN_RETURN_IF_ERROR(CheckInputNames(advise.input_sets(i).inputs(), m,
                                                        "advise.input_sets[" + std::to_string(i) + "]"));
                 }
                 return Status::Ok();
               },
               existed, retry_after_ms);
}

Result<kiln::v1::Job> JobManager::Admit(store::JobRecord rec, const std::string& model_ref, const std::string& client,
                                        const std::vector<std::string_view>& inputs, int64_t input_bytes,
                                        const std::function<std::string(const std::string& model_id)>& request_blob,
                                        const std::function<Status(const store::ModelInfo&)>& check_model,
                                        bool* existed, int64_t* retry_after_ms) {
  auto ref = ResolveModelRef(*env_.models, model_ref);  // api/models.h: a short id prefix too
  auto model = ref.ok() ? env_.models->Get(*ref) : Result<store::ModelInfo>(ref.status());
  const std::string backend = rec.backend;
  rec.job_id = NewJobId();
  rec.state = kiln::v1::QUEUED;
  rec.created_ms = NowMs();
  rec.client = client;

  std::unique_lock<std::mutex> lock(mu_);
  // The checks that depend on the queue and the store hold mu_ so that two submissions cannot
  // both take the last place (the store write keeps it: one insert, a few ms).
  // Idempotency first: a retried submission of a job that exists is answered even when the model
  // was deleted since or the queue is full now.
  if (!rec.idempotency_key.empty()) {
    auto found = env_.jobs->FindByIdempotencyKey(rec.idempotency_key);
    if (!found.ok()) return found.status();
    if (found->has_value()) {
      if (existed) *existed = true;
      return ToJob(**found);
    }
  }
  if (!model.ok()) return model.status();
  KILN_RETURN_IF_ERROR(check_model(*model));
  rec.model_id = model->model_id;
  if (farm()) {
    // A farm's jobs run on its workers, which come and go: a backend this build knows is enough,
    // and the job waits for a worker that has it.
    const auto& registry = device::DefaultBackendRegistry();
    if (!registry.Contains(backend)) {
      std::string known;
      for (const auto& n : registry.Names()) known += (known.empty() ? "" : ", ") + n;
      return NotFound("backend '" + backend.substr(0, 64) + "' is not built into kilnd (known: " + known + ")");
    }
  } else {
    KILN_RETURN_IF_ERROR(env_.scheduler->CheckBackend(backend));
  }
  if (!farm() && (lanes_.find(backend) == lanes_.end() || lanes_[backend].slots <= 0)) {
    return NotFound("backend '" + backend + "' has no devices in this kilnd");
  }
  const std::string principal = PrincipalOf(client);
  int64_t queued_total = queued_total_;
  int64_t queued_of_client = queued_per_client_[principal];
  if (farm()) {
    auto counts = env_.jobs->CountQueued(principal, principal + sched::kSubKeySeparator);
    if (!counts.ok()) return counts.status();
    std::tie(queued_total, queued_of_client) = *counts;
  }
  // A queued job waits for about the mean run time per device; without run times, 1 s per job.
  const double hint = 1.0 + static_cast<double>(queued_total) / std::max(1, static_cast<int>(lanes_.size()));
  if (retry_after_ms) *retry_after_ms = static_cast<int64_t>(std::max<int64_t>(1, static_cast<int64_t>(hint + 0.5)) * 1000);
  auto refused = [this](std::string_view reason) {
    if (env_.on_refused) env_.on_refused(reason);
  };
  if (queued_total >= limits_.max_queued) {
    refused("job_queue_full");
    return ResourceExhausted("job queue full: " + std::to_string(queued_total) + " queued jobs (--job-max-queued " +
                             std::to_string(limits_.max_queued) + "); " + RetryHint(hint));
  }
  if (queued_of_client >= limits_.max_queued_per_client) {
    refused("job_queue_per_client");
    return ResourceExhausted("client '" + principal.substr(0, 64) + "' has " + std::to_string(queued_of_client) +
                             " queued jobs (--job-max-queued-per-client " +
                             std::to_string(limits_.max_queued_per_client) + "); " + RetryHint(hint));
  }
  if (limits_.max_store_bytes > 0) {
    const int64_t used = static_cast<int64_t>(env_.models->total_bytes()) + env_.jobs->total_bytes();
    if (used + input_bytes > limits_.max_store_bytes) {
      refused("store_full");
      return ResourceExhausted("store full: models and jobs hold " + std::to_string(used) + " bytes, this job's inputs " +
                               std::to_string(input_bytes) + " more, --max-store-bytes is " +
                               std::to_string(limits_.max_store_bytes));
    }
  }
  rec.request = request_blob(model->model_id);
  bool was = false;
  // The QUEUED event is stored with the row (a farm's worker may claim the job as soon as it is
  // stored: its RUNNING event must come second). Nobody watches a job whose id has not been
  // answered yet, so there is no one to notify.
  kiln::v1::JobEvent queued;
  *queued.mutable_state_change() = ToJob(rec);
  auto created = env_.jobs->Create(rec, inputs, &was, queued.SerializeAsString());
  if (!created.ok()) return created.status();
  if (was) {
    if (existed) *existed = true;
    return ToJob(*created);
  }
  if (!farm()) Enqueue(*created, /*front=*/false);  // a farm's store queued it with the row
  SetStateGauge(kiln::v1::QUEUED, 1);
  wake_ = true;
  lock.unlock();
  cv_.notify_all();
  if (results_bytes_) results_bytes_->Set(static_cast<double>(env_.jobs->total_bytes()));
  return ToJob(*created);
}

bool JobManager::IsLive(const store::WorkerReport& w) const {
  return w.age_seconds <= std::chrono::duration<double>(env_.lease).count();
}

Result<JobManager::FarmView> JobManager::Farm() const {
  if (!farm()) return FailedPrecondition("not a farm: this kilnd has no database");
  FarmView v;
  auto workers = env_.queue->Workers(kForgetWorkersAfter);
  if (!workers.ok()) return workers.status();
  v.workers = std::move(workers).value();
  for (const auto& w : v.workers) v.live.push_back(IsLive(w));
  auto depths = env_.queue->QueueDepths();
  if (!depths.ok()) return depths.status();
  v.queues = std::move(depths).value();
  return v;
}

Result<std::string> JobManager::ReadOutput(const std::string& job_id, int configuration, int k, int64_t offset,
                                           int64_t max_bytes) const {
  return env_.jobs->ReadOutput(job_id, configuration, k, offset, max_bytes);
}

Result<kiln::v1::Job> JobManager::Get(const std::string& job_id) const {
  auto rec = env_.jobs->Get(job_id);
  if (!rec.ok()) return rec.status();
  return ToJob(*rec);
}

Result<kiln::v1::ListJobsResponse> JobManager::List(const kiln::v1::ListJobsRequest& request) const {
  store::JobFilter f;
  if (request.state() < 0 || request.state() > kiln::v1::CANCELLED) return InvalidArgument("state: unknown value");
  f.state = request.state();
  f.model_id = request.model_id();
  if (!f.model_id.empty()) {
    // A name or a short id prefix as for every RPC that takes a model (api/models.h); a jobs'
    // model that is no longer stored is still found by its whole id.
    auto ref = ResolveModelRef(*env_.models, f.model_id);
    auto model = ref.ok() ? env_.models->Get(*ref) : Result<store::ModelInfo>(ref.status());
    if (model.ok()) {
      f.model_id = model->model_id;
    } else if (model.status().code() != StatusCode::kNotFound) {
      return model.status().WithContext("model_id");
    }
  }
  for (const auto& [k, v] : request.labels()) {
    if (!ValidLabelKey(k)) {
      return InvalidArgument("labels: key '" + EscapeForEcho(k, 80) + "' must match [a-z0-9_.-]{1,63}");
    }
    f.labels[k] = v;
  }
  if (request.page_size() < 0) return InvalidArgument("page_size must not be negative");
  const int size = request.page_size() == 0 ? 50 : std::min(request.page_size(), 500);
  f.limit = size + 1;
  if (!request.page_token().empty()) {
    if (request.page_token().rfind("j-", 0) != 0 || request.page_token().size() != 28) {
      return InvalidArgument("page_token: not a token this server returned");
    }
    f.before_job_id = request.page_token();
  }
  auto rows = env_.jobs->List(f);
  if (!rows.ok()) return rows.status();
  kiln::v1::ListJobsResponse out;
  for (size_t i = 0; i < rows->size() && static_cast<int>(i) < size; ++i) *out.add_jobs() = ToJob((*rows)[i]);
  if (static_cast<int>(rows->size()) > size) out.set_next_page_token((*rows)[static_cast<size_t>(size) - 1].job_id);
  return out;
}

Result<kiln::v1::Job> JobManager::Cancel(const std::string& job_id) {
  if (farm() && !env_.worker) {
    bool dequeued = false;
    auto rec = env_.jobs->RequestCancel(job_id, &dequeued);
    if (!rec.ok()) return rec.status();
    if (dequeued) {
      rec->error_code = static_cast<int>(StatusCode::kCancelled);
      rec->error_message = "cancelled while queued";
      if (attempts_) attempts_->Add({{"result", "cancelled"}}).Increment();
      KILN_RETURN_IF_ERROR(Transition(*rec, kiln::v1::CANCELLED));
    }
    return ToJob(*rec);
  }
  std::shared_ptr<LiveJob> live;
  bool was_queued = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto q = queued_client_.find(job_id);
    if (q != queued_client_.end()) {
      for (auto& [backend, lane] : lanes_) {
        auto c = lane.queued.find(q->second);
        if (c == lane.queued.end()) continue;
        auto it = std::find(c->second.begin(), c->second.end(), job_id);
        if (it != c->second.end()) c->second.erase(it);
      }
      --queued_per_client_[PrincipalOf(q->second)];
      --queued_total_;
      queued_client_.erase(q);
      was_queued = true;
    } else {
      for (auto it = retry_at_.begin(); it != retry_at_.end();) {
        if (it->second == job_id) was_queued = true;
        it = it->second == job_id ? retry_at_.erase(it) : std::next(it);
      }
      auto l = live_.find(job_id);
      if (l != live_.end()) {
        // Marked under mu_: a configuration going back to the queue checks the mark under it too
        // (ConfigurationFailed), so the cancel is either seen there or finds the job queued.
        live = l->second;
        std::lock_guard<std::mutex> g(live->mu);
        live->cancel_requested = true;
      }
    }
  }
  if (was_queued) {
    // Out of the queue under mu_; the store write and the event (which notifies under mu_) after.
    auto rec = env_.jobs->Get(job_id);
    if (!rec.ok()) return rec.status();
    rec->error_code = static_cast<int>(StatusCode::kCancelled);
    rec->error_message = "cancelled while queued";
    if (attempts_) attempts_->Add({{"result", "cancelled"}}).Increment();
    KILN_RETURN_IF_ERROR(Transition(*rec, kiln::v1::CANCELLED));
    return ToJob(*rec);
  }
  if (live) {
    std::shared_ptr<RunConvJob> job;
    std::shared_ptr<sched::JobHandle> search;
    {
      std::lock_guard<std::mutex> lock(live->mu);
      job = live->job;
      search = live->search;
    }
    if (job) job->Cancel();
    if (search) search->Cancel();
  }
  return Get(job_id);
}

Result<std::vector<kiln::v1::JobEvent>> JobManager::Events(const std::string& job_id, int64_t after, int limit) const {
  auto rows = env_.jobs->Events(job_id, after, limit);
  if (!rows.ok()) return rows.status();
  std::vector<kiln::v1::JobEvent> out;
  for (const auto& r : *rows) {
    kiln::v1::JobEvent e;
    if (!e.ParseFromString(r.blob)) return DataLoss("job " + job_id + ": event " + std::to_string(r.sequence) + " unreadable");
    if (e.has_layer()) FillPassedFromPass(e.mutable_layer()->mutable_report());
    e.set_sequence(r.sequence);
    SetTime(r.time_ms, e.mutable_time());
    out.push_back(std::move(e));
  }
  return out;
}

uint64_t JobManager::Subscribe(const std::string& job_id, std::function<void()> notify) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t token = next_watcher_++;
  watchers_[token] = {job_id, std::move(notify)};
  return token;
}

void JobManager::Unsubscribe(uint64_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  watchers_.erase(token);
}

Result<std::pair<std::vector<store::JobResultRecord>, std::shared_ptr<ResultPin>>> JobManager::OpenResults(
    const std::string& job_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++pins_[job_id];  // before reading, so retention cannot remove what is being read
  }
  auto pin = std::make_shared<PinImpl>([this, job_id] {
    std::lock_guard<std::mutex> lock(mu_);
    if (--pins_[job_id] <= 0) pins_.erase(job_id);
  });
  auto rec = env_.jobs->Get(job_id);
  if (!rec.ok()) return rec.status();
  if (rec->results_expired) return NotFound("job " + job_id + ": results expired (--job-retention-seconds)");
  if (!IsFinished(rec->state)) {
    return FailedPrecondition("job " + job_id + " is " + StateName(rec->state) + "; results come when it has finished");
  }
  auto results = env_.jobs->Results(job_id);
  if (!results.ok()) return results.status();
  if (rec->state != kiln::v1::SUCCEEDED && results->empty()) {
    return FailedPrecondition("job " + job_id + " is " + StateName(rec->state) + " without results: " + rec->error_message);
  }
  return std::make_pair(std::move(results).value(), std::shared_ptr<ResultPin>(pin));
}

void JobManager::Shutdown() {
  std::vector<std::function<void()>> fns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (const auto& [t, w] : watchers_) fns.push_back(w.second);
  }
  cv_.notify_all();
  for (auto& f : fns) f();
}

bool JobManager::Stop(std::chrono::steady_clock::time_point deadline) {
  Shutdown();
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, deadline, [this] { return live_.empty() && loops_running_ == 0; });
}

bool JobManager::stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_;
}

int JobManager::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(live_.size());
}

void JobManager::DispatchLoop() {
  auto next_retention = SteadyClock::now() + limits_.retention_interval;
  auto next_sweep = SteadyClock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    const auto now = SteadyClock::now();
    if (farm() && now >= next_sweep) {
      // A farm's replica: every lease period, fail jobs whose last lease expired and refresh the
      // farm-wide kiln_jobs gauge.
      lock.unlock();
      FailAbandoned();
      lock.lock();
      next_sweep = SteadyClock::now() + env_.lease;
      continue;
    }
    // Jobs whose start was refused by a full device queue come back after the scheduler's hint.
    while (!retry_at_.empty() && retry_at_.begin()->first <= now) {
      auto rec = env_.jobs->Get(retry_at_.begin()->second);
      retry_at_.erase(retry_at_.begin());
      if (rec.ok() && rec->state == kiln::v1::QUEUED) Enqueue(*rec, /*front=*/true);
    }
    std::vector<std::pair<std::shared_ptr<LiveJob>, std::string>> start;  // job, its lane
    for (auto& [backend, lane] : lanes_) {
      while (lane.running < lane.slots) {
        // Round-robin: the first client after the last one served that has a queued job.
        std::string pick;
        auto it = lane.queued.upper_bound(lane.last_client);
        for (size_t n = 0; n < lane.queued.size() && pick.empty(); ++n, ++it) {
          if (it == lane.queued.end()) it = lane.queued.begin();
          if (!it->second.empty()) {
            pick = it->second.front();
            it->second.pop_front();
            lane.last_client = it->first;
            --queued_per_client_[PrincipalOf(it->first)];
          }
        }
        if (pick.empty()) break;
        --queued_total_;
        queued_client_.erase(pick);
        ++lane.running;
        auto live = std::make_shared<LiveJob>();
        live->rec.job_id = pick;
        live_[pick] = live;
        start.emplace_back(live, backend);
      }
    }
    if (!start.empty()) {
      lock.unlock();
      for (const auto& [live, backend] : start) StartJob(live, backend);
      lock.lock();
      continue;
    }
    if (now >= next_retention || retention_due_) {
      retention_due_ = false;
      lock.unlock();
      RunRetention();
      lock.lock();
      next_retention = SteadyClock::now() + limits_.retention_interval;
      continue;
    }
    auto until = next_retention;
    if (!retry_at_.empty()) until = std::min(until, retry_at_.begin()->first);
    if (farm()) until = std::min(until, next_sweep);
    cv_.wait_until(lock, until, [this] { return stopping_ || wake_ || retention_due_; });
    wake_ = false;
  }
}

void JobManager::StartJob(std::shared_ptr<LiveJob> live, const std::string& lane) {
  const std::string job_id = live->rec.job_id;
  const store::JobClaim* claim = live->claim ? &*live->claim : nullptr;
  // A start that ends here: marked ending first (the heartbeat then takes a refused renewal of its
  // claim for what it is, not a lost lease), its claim closed by the caller, then out of live_ and
  // its lane's count; `retry`: back to the dispatcher in a second (an embedded job that could not
  // be read stays QUEUED, and a cancel finds it there).
  auto ending = [&] {
    std::lock_guard<std::mutex> lock(live->mu);
    live->ending = true;
  };
  auto release_lane = [&](bool retry = false) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      EraseLiveLocked(live);
      --lanes_[lane].running;
      if (retry) retry_at_.emplace(SteadyClock::now() + std::chrono::seconds(1), job_id);
      wake_ = true;
    }
    cv_.notify_all();
  };
  auto fail_start = [&](Status error) {
    ending();
    release_lane();
    auto rec = env_.jobs->Get(job_id);
    if (!rec.ok()) return;
    rec->error_code = static_cast<int>(error.code());
    rec->error_message = error.message();
    if (claim) rec->attempt = claim->attempt;
    LogIfError(Transition(*rec, kiln::v1::FAILED, live->fence()), job_id);
    if (attempts_) attempts_->Add({{"result", "failed"}}).Increment();
  };
  std::function<void(const std::string&)> hook;
  {
    std::lock_guard<std::mutex> lock(mu_);
    hook = start_hook_;
  }
  if (hook) hook(job_id);
  auto rec = env_.jobs->Get(job_id);
  if (!rec.ok()) {
    spdlog::error("job {}: cannot start: {}", job_id, rec.status().ToString());
    // Unreadable now (the database went away between claim and read): a worker gives it back to
    // the farm's queue, an embedded manager tries it again.
    ending();
    if (claim) LogIfError(env_.queue->Release(*claim), job_id);
    return release_lane(/*retry=*/claim == nullptr);
  }
  const std::string backend = rec->backend;
  if (claim && IsFinished(rec->state)) {
    // Ended by a replica between the claim and now (nothing was running): close the entry.
    ending();
    LogIfError(env_.queue->Complete(*claim, "").status(), job_id);
    return release_lane();
  }
  if (rec->kind == kiln::v1::JOB_KIND_ADVISE) {
    if (!live->advise.ParseFromString(rec->request)) return fail_start(DataLoss("stored request unreadable"));
    int k = 0;  // the sets' tensors in order, as SubmitAdvise stored them
    for (auto& set : *live->advise.mutable_advise()->mutable_input_sets()) {
      for (auto& t : *set.mutable_inputs()) {
        auto bytes = env_.jobs->ReadInput(job_id, k++);
        if (!bytes.ok()) return fail_start(bytes.status());
        t.set_raw_data(std::move(bytes).value());
      }
    }
  } else {
    if (!live->request.ParseFromString(rec->request)) return fail_start(DataLoss("stored request unreadable"));
    for (int k = 0; k < live->request.run().inputs_size(); ++k) {
      auto bytes = env_.jobs->ReadInput(job_id, k);
      if (!bytes.ok()) return fail_start(bytes.status());
      live->request.mutable_run()->mutable_inputs(k)->set_raw_data(std::move(bytes).value());
    }
  }
  auto model = env_.models->Get(rec->model_id);
  if (!model.ok()) return fail_start(model.status().WithContext("model " + rec->model_id.substr(0, 12)));
  live->model = std::move(model).value();
  if (queue_wait_) {
    const double waited = static_cast<double>(NowMs() - (rec->started_ms ? rec->started_ms : rec->created_ms)) / 1e3;
    queue_wait_->Add({{"backend", backend}}, prometheus::Histogram::BucketBoundaries{0.01, 0.1, 1, 10, 60, 600, 3600})
        .Observe(std::max(0.0, waited));
  }
  rec->attempt = claim ? claim->attempt : rec->attempt + 1;  // a farm counts attempts in its queue
  rec->started_ms = NowMs();
  rec->layers_done = 0;
  rec->layers_total = 0;
  rec->current_layer.clear();
  rec->error_code = 0;
  rec->error_message.clear();
  live->configuration = rec->configurations_done;
  live->started = SteadyClock::now();
  Status s = Transition(*rec, kiln::v1::RUNNING, live->fence());
  if (!s.ok()) spdlog::warn("job {}: {}", job_id, s.ToString());
  {
    // A farm: cancelled while no worker held it; or a cancel that came while this read the job.
    std::lock_guard<std::mutex> lock(live->mu);
    live->rec = *rec;
    live->cancel_requested = live->cancel_requested || rec->cancel_requested;
  }
  if (live->rec.kind == kiln::v1::JOB_KIND_ADVISE) return StartAdvise(live);
  StartConfiguration(live);
}

bool JobManager::EndedBeforeStart(const std::shared_ptr<LiveJob>& live, const char* cancelled_message) {
  bool cancelled, stop;
  {
    std::lock_guard<std::mutex> lock(live->mu);
    cancelled = live->cancel_requested;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop = stopping_;
  }
  if (cancelled) {
    EndJob(live, kiln::v1::CANCELLED, Cancelled(cancelled_message));
  } else if (stop) {
    EndJob(live, kiln::v1::RUNNING, Unavailable("kilnd is shutting down"));
  } else if (live->configuration >= live->rec.configurations) {
    EndJob(live, kiln::v1::SUCCEEDED, Status::Ok());
  } else {
    return false;
  }
  return true;
}

void JobManager::StartConfiguration(std::shared_ptr<LiveJob> live) {
  if (EndedBeforeStart(live, "cancelled between configurations")) return;
  live->run = live->request.run();
  if (live->request.sweep_size() > 0) *live->run.mutable_precision() = live->request.sweep(live->configuration);
  live->response.Clear();
  {
    std::lock_guard<std::mutex> lock(live->mu);
    live->rec.layers_done = 0;
    live->rec.layers_total = 0;
    live->rec.current_layer.clear();
  }
  RunConvJob::Env env{env_.models, env_.scheduler, env_.plans, env_.on_refused, limits_.max_result_bytes};
  RunConvJob::Hooks hooks;
  hooks.on_device_start = [this, live](const std::string& device) {
    store::JobRecord rec;
    {
      std::lock_guard<std::mutex> lock(live->mu);
      if (live->ending) return;  // a run that outlived its job's end writes nothing
      live->rec.device = device;
      rec = live->rec;
    }
    LogIfError(env_.jobs->Update(rec, live->fence()), rec.job_id);
  };
  const int config = live->configuration;
  hooks.on_layer = [this, live, config](size_t index, size_t total, const kiln::v1::LayerReport& row) {
    store::JobRecord rec;
    {
      std::lock_guard<std::mutex> lock(live->mu);
      if (live->ending) return;
      live->rec.layers_done = static_cast<int64_t>(index);
      live->rec.layers_total = static_cast<int64_t>(total);
      live->rec.current_layer = row.name();
      rec = live->rec;
    }
    LogIfError(env_.jobs->Update(rec, live->fence()), rec.job_id);
    kiln::v1::JobEvent ev;
    ev.set_attempt(rec.attempt);
    auto* l = ev.mutable_layer();
    l->set_configuration(config);
    l->set_index(static_cast<int64_t>(index));
    l->set_total(static_cast<int64_t>(total));
    *l->mutable_report() = row;
    AppendEvent(rec, std::move(ev), live->fence());
  };
  auto job = RunConvJob::Start(
      env, live->model, &live->run, &live->response, live->rec.client, std::nullopt,
      [this, live, config](const Status& status, int64_t retry_after_ms) {
        ConfigurationDone(live, config, status, retry_after_ms);
      },
      std::move(hooks));
  bool cancelled_now;
  {
    std::lock_guard<std::mutex> lock(live->mu);
    // The run may have ended, and the next configuration started, before this line.
    if (config > live->job_config) {
      live->job = job;
      live->job_config = config;
    }
    cancelled_now = live->cancel_requested;
  }
  if (cancelled_now) job->Cancel();
}

void JobManager::ConfigurationFailed(std::shared_ptr<LiveJob> live, const Status& status, int64_t retry_after_ms,
                                     bool cancel_requested, bool stopping) {
  if (cancel_requested) return EndJob(live, kiln::v1::CANCELLED, Cancelled("cancelled by a client"));
  if (stopping) return EndJob(live, kiln::v1::RUNNING, status);  // re-run after the restart
  if (live->claim && status.code() == StatusCode::kResourceExhausted && retry_after_ms > 0) {
    return EndJob(live, kiln::v1::RUNNING, status);  // a worker gives the job back to the farm's queue
  }
  if (status.code() == StatusCode::kResourceExhausted && retry_after_ms > 0) {
    // The device queue was full (RunConvLayers calls share it): back to the front of the queue.
    store::JobRecord rec;
    {
      std::lock_guard<std::mutex> lock(live->mu);
      rec = live->rec;
    }
    rec.attempt -= 1;  // not an attempt: it never started
    const Status queued = Transition(rec, kiln::v1::QUEUED);
    LogIfError(queued, rec.job_id);
    bool cancelled;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::lock_guard<std::mutex> g(live->mu);
      cancelled = live->cancel_requested;  // a cancel since the caller looked (Cancel marks it under mu_)
      if (cancelled && queued.ok()) {
        live->rec = rec;  // the end follows the QUEUED row: its state, the attempt not counted
      } else if (!cancelled) {
        EraseLiveLocked(live);
        --lanes_[rec.backend].running;
        retry_at_.emplace(SteadyClock::now() + std::chrono::milliseconds(retry_after_ms), rec.job_id);
        wake_ = true;
      }
    }
    if (cancelled) return EndJob(live, kiln::v1::CANCELLED, Cancelled("cancelled while queued"));
    cv_.notify_all();
    return;
  }
  return EndJob(live, kiln::v1::FAILED, status);
}

void JobManager::ConfigurationDone(std::shared_ptr<LiveJob> live, int config, const Status& status,
                                   int64_t retry_after_ms) {
  bool cancel_requested, stop;
  {
    std::lock_guard<std::mutex> lock(live->mu);
    if (live->ending) return;  // the job already ended (out of memory starting this run): nothing to add
    cancel_requested = live->cancel_requested;
    if (live->job_config == config) live->job.reset();
    live->job_config = std::max(live->job_config, config);  // StartConfiguration may not have stored it yet
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop = stopping_;
  }
  if (!status.ok()) return ConfigurationFailed(live, status, retry_after_ms, cancel_requested, stop);
  // This runs in the scheduler's completion callback, which swallows exceptions: the copies below
  // (the outputs, the serialized result) must end the job when they cannot be made.
  try {
    if (!StoreConfiguration(live)) return;  // it ended the job
    live->configuration += 1;
    StartConfiguration(live);
  } catch (const std::bad_alloc&) {
    // EndJob returns at once when the job had already ended.
    EndJob(live, kiln::v1::FAILED,
           ResourceExhausted("configuration " + std::to_string(config) + " and the next: out of memory"));
  }
}

bool JobManager::StoreConfiguration(std::shared_ptr<LiveJob> live) {
  // Store the configuration's result: the report as a blob, each output's bytes as a file.
  kiln::v1::RunConvLayersResponse report = live->response;
  std::vector<std::string> outputs;
  int64_t bytes = 0;
  for (auto& t : *report.mutable_outputs()) {
    bytes += static_cast<int64_t>(t.raw_data().size());
    outputs.push_back(std::move(*t.mutable_raw_data()));
    t.clear_raw_data();
  }
  if (bytes > limits_.max_result_bytes) {
    EndJob(live, kiln::v1::FAILED,
           ResourceExhausted("configuration " + std::to_string(live->configuration) + " produced " +
                             std::to_string(bytes) + " bytes of outputs, over the result limit of " +
                             std::to_string(limits_.max_result_bytes) +
                             " (--max-message-bytes); run with omit_outputs"));
    return false;
  }
  kiln::v1::ConfigurationResult cr;
  if (live->request.sweep_size() > 0) {
    *cr.mutable_precision() = live->request.sweep(live->configuration);
  } else {
    *cr.mutable_precision() = live->request.run().precision();
  }
  *cr.mutable_response() = std::move(report);
  std::vector<std::string_view> views(outputs.begin(), outputs.end());
  Status put = env_.jobs->PutResult(live->rec.job_id, live->configuration, cr.SerializeAsString(), views, live->fence());
  if (!put.ok()) {
    EndJob(live, kiln::v1::FAILED, put.WithContext("storing the result"));
    return false;
  }
  int64_t below = 0;
  for (const auto& l : cr.response().layers()) {
    if (l.compared() && !l.pass() && l.pcc_threshold() > 0) ++below;
  }
  if (below_threshold_ && below > 0) {
    below_threshold_->Add({{"backend", live->rec.backend}}).Increment(static_cast<double>(below));
  }
  if (results_bytes_) results_bytes_->Set(static_cast<double>(env_.jobs->total_bytes()));
  store::JobRecord rec;
  {
    std::lock_guard<std::mutex> lock(live->mu);
    live->rec.layers_below_threshold += below;
    live->rec.configurations_done = live->configuration + 1;
    rec = live->rec;
  }
  Status u = env_.jobs->Update(rec, live->fence());
  if (!u.ok()) spdlog::warn("job {}: {}", rec.job_id, u.ToString());
  return true;
}

// An advise job: the whole search as one job on a tt-emu device (the model read and planned there,
// as `kiln advise --local` plans it), its steps as events, its answer as configuration 0's result.
void JobManager::StartAdvise(std::shared_ptr<LiveJob> live) {
  if (EndedBeforeStart(live, "cancelled before the search started")) return;
  auto spec = advisor::AdviseSpecFromProto(live->advise.advise(), env_.scheduler->DeviceSettings(device::kTtEmuBackend));
  if (!spec.ok()) return EndJob(live, kiln::v1::FAILED, spec.status().WithContext("advise"));
  auto search = std::make_shared<advisor::AdviseSpec>(std::move(spec).value());
  auto result = std::make_shared<advisor::AdviseResult>();
  sched::JobRequest job;
  job.lane = live->rec.backend;
  job.client_id = live->rec.client;
  for (const auto& set : live->advise.advise().input_sets()) {
    for (const auto& t : set.inputs()) job.cost_bytes += static_cast<int64_t>(t.raw_data().size());
  }
  // The worker's backend is not used: the search makes its own tt-emu at the requested level, as
  // a run with its own tt_emu_level does; the worker is held so that the search has the device.
  job.work = [this, live, search, result](device::Backend&, sched::JobContext& ctx) -> Status {
    store::JobRecord rec;
    {
      std::lock_guard<std::mutex> lock(live->mu);
      live->rec.device = ctx.worker;
      rec = live->rec;
    }
    LogIfError(env_.jobs->Update(rec, live->fence()), rec.job_id);
    auto reader = env_.models->OpenReader(live->model.model_id);
    if (!reader.ok()) return reader.status();
    auto bytes = (*reader)->ReadAll();
    if (!bytes.ok()) return bytes.status();
    advisor::AdviseOptions o = search->options;
    o.cancel = ctx.cancel;
    o.reference = &env_.scheduler->Reference();
    o.progress = [this, live](const std::string& step) { AdviseStep(live, step); };
    const std::string name =
        live->model.names.empty() ? live->model.model_id.substr(0, 12) : live->model.names.front();
    auto r = advisor::AdviseModel(*bytes, name, search->inputs, o);
    if (!r.ok()) return r.status();
    *result = std::move(r).value();
    return Status::Ok();
  };
  auto handle = env_.scheduler->Submit(std::move(job));
  if (!handle.ok()) {
    int64_t ms = 0;
    if (handle.status().code() == StatusCode::kResourceExhausted) {
      ms = env_.scheduler->SuggestedRetryAfter(live->rec.backend).count();
    }
    bool cancel_requested;
    {
      std::lock_guard<std::mutex> lock(live->mu);
      cancel_requested = live->cancel_requested;
    }
    return ConfigurationFailed(live, handle.status(), ms, cancel_requested, stopping());
  }
  bool cancelled_now;
  {
    std::lock_guard<std::mutex> lock(live->mu);
    live->search = *handle;
    cancelled_now = live->cancel_requested;
  }
  if (cancelled_now) (*handle)->Cancel();
  (*handle)->OnDone([this, live, result](const Status& status) { AdviseDone(live, status, result); });
}

void JobManager::AdviseStep(const std::shared_ptr<LiveJob>& live, const std::string& step) {
  store::JobRecord rec;
  {
    std::lock_guard<std::mutex> lock(live->mu);
    live->rec.current_layer = step;  // JobProgress.step of an advise job (ToJob)
    rec = live->rec;
  }
  LogIfError(env_.jobs->Update(rec, live->fence()), rec.job_id);
  kiln::v1::JobEvent ev;
  ev.set_attempt(rec.attempt);
  ev.set_advise_step(step);
  AppendEvent(rec, std::move(ev), live->fence());
}

void JobManager::AdviseDone(std::shared_ptr<LiveJob> live, const Status& status,
                            std::shared_ptr<const advisor::AdviseResult> result) {
  bool cancel_requested, stop;
  {
    std::lock_guard<std::mutex> lock(live->mu);
    cancel_requested = live->cancel_requested;
    live->search.reset();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop = stopping_;
  }
  if (!status.ok()) return ConfigurationFailed(live, status, 0, cancel_requested, stop);
  kiln::v1::ConfigurationResult cr;
  advisor::AdviseResultToProto(*result, live->advise.advise().budget_seconds(), cr.mutable_advice());
  Status put = env_.jobs->PutResult(live->rec.job_id, 0, cr.SerializeAsString(), {}, live->fence());
  if (!put.ok()) return EndJob(live, kiln::v1::FAILED, put.WithContext("storing the result"));
  if (results_bytes_) results_bytes_->Set(static_cast<double>(env_.jobs->total_bytes()));
  {
    std::lock_guard<std::mutex> lock(live->mu);
    live->rec.configurations_done = 1;
  }
  live->configuration = 1;
  EndJob(live, kiln::v1::SUCCEEDED, Status::Ok());
}

void JobManager::EndJob(std::shared_ptr<LiveJob> live, int state, const Status& error_in) {
  store::JobRecord rec;
  bool lease_lost;
  Status error = error_in;
  {
    std::lock_guard<std::mutex> lock(live->mu);
    if (live->ending) return;  // ended already (a completion that threw after ending it)
    rec = live->rec;
    lease_lost = live->lease_lost;
    live->ending = true;
    if (state == kiln::v1::RUNNING && live->cancel_requested && !lease_lost) {
      // Cancelled while the shutdown interrupted it: the cancel wins (no re-run after the restart).
      state = kiln::v1::CANCELLED;
      error = Cancelled("cancelled by a client");
    }
  }
  const double ran = std::chrono::duration<double>(SteadyClock::now() - live->started).count();
  // The job's end in the store. Whatever it throws, the job leaves live_ and its lane below.
  try {
    WriteEnd(*live, rec, state, error, lease_lost, ran);
  } catch (const std::exception& e) {
    spdlog::error("job {}: writing its end: {}", rec.job_id, e.what());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    EraseLiveLocked(live);
    if (state != kiln::v1::RUNNING || lease_lost) ++jobs_done_;
    --lanes_[rec.backend].running;
    wake_ = true;
    retention_due_ = true;
  }
  cv_.notify_all();
}

void JobManager::EraseLiveLocked(const std::shared_ptr<LiveJob>& live) {
  // By identity: a worker may hold a newer claim of the same job (re-claimed after a lost lease).
  auto it = live_.find(live->rec.job_id);
  if (it != live_.end() && it->second == live) live_.erase(it);
}

void JobManager::WriteEnd(const LiveJob& live, store::JobRecord& rec, int state, const Status& error, bool lease_lost,
                          double ran) {
  if (lease_lost) {
    // The heartbeat found the lease expired and cancelled the run: the job is the queue's again
    // (another worker may run it now); nothing of this attempt is written.
    spdlog::warn("job {}: attempt {} ended after its lease was lost; the farm's queue re-offers the job", rec.job_id,
                 rec.attempt);
  } else if (state == kiln::v1::RUNNING && live.claim) {
    // A worker's drain: back to the farm's queue at once, for another worker (the attempt not
    // counted). The row reads QUEUED first (fenced, with its event), so that nobody reads it
    // RUNNING on a device that let it go; a worker that dies in between leaves it to its lease.
    rec.attempt = std::max(0, rec.attempt - 1);
    rec.device.clear();
    rec.layers_done = 0;
    rec.layers_total = 0;
    rec.current_layer.clear();
    Status q = Transition(rec, kiln::v1::QUEUED, live.fence());
    if (!q.ok()) spdlog::warn("job {}: {}", rec.job_id, q.ToString());
    Status r = env_.queue->Release(*live.claim);
    if (!r.ok()) {
      spdlog::warn("job {}: release: {}; the job waits for its lease to expire", rec.job_id, r.ToString());
    } else {
      spdlog::info("job {}: attempt {} released ({}); another worker takes it", rec.job_id, live.claim->attempt,
                   error.ToString());
    }
  } else if (state == kiln::v1::RUNNING) {
    // Interrupted by the server's own shutdown: left RUNNING for the next start to re-run.
    Status u = env_.jobs->Update(rec, live.fence());
    if (!u.ok()) spdlog::warn("job {}: {}", rec.job_id, u.ToString());
    spdlog::info("job {}: interrupted by shutdown in attempt {}; it runs again after the restart", rec.job_id,
                 rec.attempt);
  } else {
    if (!error.ok()) {
      rec.error_code = static_cast<int>(error.code());
      rec.error_message = error.message().substr(0, 4096);
    }
    // Metrics first: a watcher that sees the final event may scrape at once.
    if (attempts_) attempts_->Add({{"result", StateName(state)}}).Increment();
    if (run_seconds_) {
      run_seconds_->Add({{"backend", rec.backend}}, prometheus::Histogram::BucketBoundaries{0.1, 1, 10, 60, 600, 3600})
          .Observe(ran);
    }
    Status s = Transition(rec, state, live.fence());
    if (!s.ok() && live.claim && s.code() == StatusCode::kFailedPrecondition) {
      // The lease expired before the end was written (the worker stalled past it): another
      // claim owns the job now, so this end is discarded (store/job_store.h "Fencing").
      late_results_count_.fetch_add(1);
      if (late_results_) late_results_->Increment();
      spdlog::warn("job {}: late result of attempt {} discarded: {}", rec.job_id, rec.attempt, s.ToString());
    } else if (!s.ok()) {
      spdlog::warn("job {}: {}", rec.job_id, s.ToString());
    }
  }
}

void JobManager::FailAbandoned() {
  auto expired = env_.queue->ExpireLeases();
  if (!expired.ok()) spdlog::warn("jobs: expiring leases: {}", expired.status().ToString());
  auto abandoned = env_.jobs->Abandoned();
  if (!abandoned.ok()) {
    spdlog::warn("jobs: abandoned jobs: {}", abandoned.status().ToString());
  } else {
    for (auto& rec : *abandoned) {
      rec.error_code = static_cast<int>(StatusCode::kAborted);
      rec.error_message = "the worker running attempt " + std::to_string(rec.attempt) + " of " +
                          std::to_string(limits_.max_attempts) +
                          " (--job-max-attempts) stopped renewing its lease (killed, hung or cut off)";
      if (attempts_) attempts_->Add({{"result", "interrupted"}}).Increment();
      LogIfError(Transition(rec, kiln::v1::FAILED), rec.job_id);
    }
  }
  if (farm_workers_ != nullptr) {
    auto workers = env_.queue->Workers(kForgetWorkersAfter);
    if (workers.ok()) {
      std::map<std::string, double> live = {{"live", 0}, {"lost", 0}, {"draining", 0}};
      std::set<std::string> seen;
      for (const auto& w : *workers) {
        live[w.draining ? "draining" : IsLive(w) ? "live" : "lost"] += 1;
        worker_age_->Add({{"worker", w.worker}}).Set(w.age_seconds);
        seen.insert(w.worker);
      }
      for (const auto& [state, n] : live) farm_workers_->Add({{"state", state}}).Set(n);
      for (const auto& name : worker_series_) {
        if (!seen.count(name)) worker_age_->Remove(&worker_age_->Add({{"worker", name}}));
      }
      worker_series_ = std::move(seen);
    }
  }
  if (jobs_gauge_ != nullptr) {
    if (auto counts = env_.jobs->CountByState(); counts.ok()) {
      for (int st = kiln::v1::QUEUED; st <= kiln::v1::CANCELLED; ++st) {
        auto it = counts->find(st);
        jobs_gauge_->Add({{"state", StateName(st)}}).Set(it == counts->end() ? 0.0 : static_cast<double>(it->second));
      }
    }
  }
}

void JobManager::ClaimLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    // One claim per free device, backend by backend; the queue picks the job (round-robin across
    // clients, store/job_queue.h Claim).
    std::vector<std::string> free;
    for (auto& [backend, lane] : lanes_) {
      if (lane.running < lane.slots) free.push_back(backend);
    }
    if (free.empty()) {
      cv_.wait(lock, [this] { return stopping_ || wake_; });
      wake_ = false;
      continue;
    }
    lock.unlock();
    bool claimed = false;
    for (const auto& backend : free) {
      auto claim = env_.queue->Claim(env_.worker_name, {backend}, env_.lease);
      if (!claim.ok()) {
        spdlog::warn("jobs: claiming a {} job: {}", backend, claim.status().ToString());
        break;  // the database is away: wait below, then try again
      }
      if (!claim->has_value()) continue;
      std::shared_ptr<LiveJob> live;
      {
        std::lock_guard<std::mutex> l(mu_);
        if (!stopping_) {
          ++lanes_[backend].running;
          live = std::make_shared<LiveJob>();
          live->rec.job_id = (*claim)->job_id;
          live->claim = **claim;
          live_[live->rec.job_id] = live;
        }
      }
      if (!live) {
        // Drained between the claim and now: hand it straight back.
        LogIfError(env_.queue->Release(**claim), (*claim)->job_id);
        break;
      }
      claimed = true;
      if ((*claim)->reclaimed && lease_expiries_) lease_expiries_->Increment();
      StartJob(live, backend);
    }
    if (!claimed && !stopping()) {
      // Nothing to claim: sleep until NOTIFY says work arrived (or a heartbeat period passes).
      LogIfError(env_.queue->WaitForWork(std::min<std::chrono::milliseconds>(env_.heartbeat, std::chrono::seconds(1))),
                 env_.worker_name);
    }
    lock.lock();
  }
}

void JobManager::HeartbeatLoop() {
  std::string devices;  // what this worker runs, as --devices spells it
  for (const auto& [backend, lane] : lanes_) {
    devices += (devices.empty() ? "" : ",") + backend + ":" + std::to_string(lane.slots);
  }
  std::unique_lock<std::mutex> lock(mu_);
  bool first = true;
  while (!stopping_ || !live_.empty()) {
    if (!first) cv_.wait_for(lock, env_.heartbeat, [this] { return stopping_ && live_.empty(); });
    first = false;
    std::vector<std::shared_ptr<LiveJob>> live;
    for (auto& [id, l] : live_) live.push_back(l);
    store::WorkerReport report{env_.worker_name, devices, static_cast<int>(live_.size()),
                               static_cast<int64_t>(jobs_done_), stopping_};
    lock.unlock();
    if (Status r = env_.queue->ReportWorker(report); !r.ok()) spdlog::warn("worker: heartbeat report: {}", r.ToString());
    for (auto& l : live) {
      if (!l->claim) continue;
      Status hb = env_.queue->Heartbeat(*l->claim, env_.lease);
      bool lost = hb.code() == StatusCode::kFailedPrecondition;
      bool cancel = false;
      if (hb.ok()) {
        auto rec = env_.jobs->Get(l->claim->job_id);
        cancel = rec.ok() && rec->cancel_requested;
      } else if (!lost) {
        // The database is away: the lease runs on; the next period tries again.
        spdlog::warn("job {}: renewing the lease: {}", l->claim->job_id, hb.ToString());
        continue;
      }
      if (!lost && !cancel) continue;
      std::shared_ptr<RunConvJob> job;
      std::shared_ptr<sched::JobHandle> search;
      {
        std::lock_guard<std::mutex> g(l->mu);
        if (l->ending) continue;  // ended between the copy of live_ and the renewal (not lost)
        if (lost) {
          if (l->lease_lost) continue;
          l->lease_lost = true;
          l->cancel_requested = true;  // also stops a run between its stages (EndedBeforeStart)
        } else {
          if (l->cancel_requested) continue;
          l->cancel_requested = true;
        }
        job = l->job;
        search = l->search;
      }
      if (lost) {
        if (lease_lost_) lease_lost_->Increment();
        spdlog::warn("job {}: lease of attempt {} lost ({}); cancelling the run", l->claim->job_id, l->claim->attempt,
                     hb.message());
      }
      if (job) job->Cancel();
      if (search) search->Cancel();
    }
    lock.lock();
  }
  lock.unlock();
  // Drained: off the farm's list (a worker killed instead stays listed, its heartbeat ageing).
  if (Status r = env_.queue->RemoveWorker(env_.worker_name); !r.ok()) spdlog::warn("worker: {}", r.ToString());
}

void JobManager::EventLoop() {
  // Other processes' events arrive as NOTIFY; while notifications are down, each period wakes
  // every watcher (each reads its job's events after its last sequence, so a spurious wake costs
  // one query). So does every kResyncEvery: a NOTIFY lost in a way the listener cannot see (a
  // connection cut without a word) then delays a watcher by that much, not forever.
  constexpr auto kResyncEvery = std::chrono::seconds(30);
  auto next_resync = SteadyClock::now() + kResyncEvery;
  while (!stopping()) {
    auto ids = env_.jobs->WaitForEvents(std::chrono::seconds(1));
    const bool all = !ids || SteadyClock::now() >= next_resync;
    if (all) next_resync = SteadyClock::now() + kResyncEvery;
    const std::set<std::string> woken = ids ? std::set<std::string>(ids->begin(), ids->end()) : std::set<std::string>();
    std::vector<std::function<void()>> fns;  // one pass over the watchers (Notify's, for many jobs)
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [token, w] : watchers_) {
        if (all || woken.count(w.first)) fns.push_back(w.second);
      }
    }
    for (auto& f : fns) f();
    if (!ids) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; });
    }
  }
}

void JobManager::RunRetention() {
  auto finished = env_.jobs->FinishedWithResults();
  if (!finished.ok()) {
    spdlog::warn("job retention: {}", finished.status().ToString());
    return;
  }
  const int64_t cutoff = NowMs() - static_cast<int64_t>(limits_.retention_seconds * 1000);
  int64_t total = env_.jobs->total_bytes();
  for (const auto& rec : *finished) {
    const bool too_old = rec.finished_ms < cutoff;
    const bool too_big = limits_.results_max_bytes > 0 && total > limits_.results_max_bytes;
    if (!too_old && !too_big) continue;  // oldest first: later ones are newer, but may be big
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) break;  // the next start goes on (Stop waits for this thread)
      if (pins_.count(rec.job_id)) continue;  // a client streams them now
    }
    auto freed = env_.jobs->ExpireResults(rec.job_id);
    if (!freed.ok()) {
      spdlog::warn("job retention: {}: {}", rec.job_id, freed.status().ToString());
      continue;
    }
    total -= *freed;
    if (results_expired_) results_expired_->Increment();
  }
  if (results_bytes_) results_bytes_->Set(static_cast<double>(env_.jobs->total_bytes()));
}

void JobManager::RunRetentionForTesting() { RunRetention(); }

void JobManager::SetStartHookForTesting(std::function<void(const std::string& job_id)> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  start_hook_ = std::move(hook);
}

}  // namespace kiln::api
