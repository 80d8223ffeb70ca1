// kiln::api::JobManager — device-farm jobs (proto/kiln/v1/job.proto): durable in store/job_store.h.
// A run job (SubmitRun) runs through the same path as RunConvLayers (RunConvJob: plan stage, then
// the backend's device lane of the scheduler), one configuration after another. An advise job
// (SubmitAdvise) is the precision advisor's search (api/advisor/advise.h) as one job on a tt-emu
// device lane worker: its steps are events, its answer (kiln.v1.AdviseResult) the result of its one
// configuration; its fp32 reference runs on the scheduler's reference lane. It reserves nothing of
// the memory budget (--memory-budget): the search plans the model on the device, after admission.
//
// Queue and fairness
// * Jobs wait in the manager's own queue, not the scheduler's: per backend, per client (the job's
//   `client`), FIFO within a client, started round-robin across clients. At most as many jobs of
//   a backend run at once as it has devices, so the scheduler's queues only ever hold what can
//   start now, and a job's place is decided here, where it is durable. (RunConvLayers calls share
//   the devices through the scheduler's own fair queue.)
// * Limits (JobLimits): queued jobs in total and per client, configurations per job, events per
//   job, labels; RESOURCE_EXHAUSTED names the limit and carries a retry hint.
//
// Lifecycle: QUEUED → RUNNING (attempt + 1; a configuration at a time, results written as each
// ends) → SUCCEEDED | FAILED | CANCELLED. A run's own error fails the job (it would fail again);
// an interruption — kilnd stopped or killed while it ran — does not: on the next start
// (Create), RUNNING jobs are queued again with the configurations already finished kept, or FAILED
// (ABORTED) once `max_attempts` attempts were interrupted. Shutdown() stops starting jobs; a job
// cancelled by the server's own shutdown stays RUNNING in the store (so it is re-run), one that
// finishes during the grace period is recorded normally.
//
// Events: every state change and every finished layer is appended to the store before watchers
// are told (Subscribe), so a watcher reading from sequence 0 sees all of them in order.
//
// Retention: results of finished jobs are removed (results_expired) when older than
// `retention_seconds` or, oldest first, while the results total more than `results_max_bytes`;
// never while a GetJobResult stream holds them (PinResults).
//
// A farm (README "Jobs on a farm"; Env::queue set, the store a PgJobStore shared by every
// process): the queue is PostgreSQL's (store/job_queue.h), not this manager's.
// * A serving replica (worker = false) takes submissions — the store's Create queues them in the
//   same transaction — and runs none. Limits count the shared store's queued jobs (checked before
//   the insert: replicas submitting at the same instant may overshoot a limit by one job each).
//   Cancel dequeues a job no worker holds, else asks its worker (RequestCancel; seen at the next
//   heartbeat). Watchers hear of other processes' events through the store (WaitForEvents:
//   LISTEN/NOTIFY, polling each second while that is down, all watchers woken every 30 s
//   besides). Its dispatch thread fails jobs whose
//   last attempt's lease expired (Abandoned) and runs retention.
// * A worker (worker = true) claims jobs of the backends it has devices for, at most one per
//   device, and runs them exactly as the embedded manager does, every write fenced by its claim
//   (store/job_store.h JobFence). A heartbeat thread renews its leases every `heartbeat`; a lease
//   it lost (expired: the worker hung or was cut off, and another may hold the job now) cancels
//   the run, and its writes are refused; a job's end refused so is a late result
//   (kiln_job_late_results_total). A cancel request seen at a heartbeat cancels the run. A job
//   interrupted by the worker's shutdown is released (claimable at once, the attempt not counted;
//   the row reads QUEUED again, not RUNNING on the device that let it go).
//   Attempts are the queue's: a job whose lease expired on its last attempt is FAILED (ABORTED).
//
// Threads: one dispatch thread (start jobs, retry timers, retention; a worker's claims); a
// worker's heartbeat thread; a replica's event listener; completions run on the scheduler's
// threads. Every public call is thread-safe and blocks only on the job store (SQLite with fsync on
// writes, or PostgreSQL): servers call them off their reactors (server/job_service.cc uses the
// store lane).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "api/run_conv.h"
#include "common/status.h"
#include "kiln/v1/job.pb.h"
#include "sched/scheduler.h"
#include "store/job_queue.h"
#include "store/job_store.h"
#include "store/model_store.h"

namespace prometheus {
class Registry;
template <typename T>
class Family;
class Gauge;
class Counter;
class Histogram;
}  // namespace prometheus

namespace kiln::api {

namespace advisor {
struct AdviseResult;
}

struct JobLimits {
  int max_queued = 1024;             ///< --job-max-queued: queued jobs, all clients
  int max_queued_per_client = 256;   ///< --job-max-queued-per-client
  int max_attempts = 3;              ///< --job-max-attempts: interrupted attempts before FAILED
  int64_t max_events = 100000;       ///< --job-max-events: stored events per job
  int max_configurations = 64;       ///< --job-max-configurations: sweep points per job
  /// The most --job-max-configurations allows (server/config.cc): `kiln run` refuses a --sweep of
  /// more points before it builds them (cli/job_commands.cc ParseSweep).
  static constexpr int kMaxConfigurationsCeiling = 4096;
  double retention_seconds = 7 * 86400.0;  ///< --job-retention-seconds (results of finished jobs)
  int64_t results_max_bytes = 8ll << 30;   ///< --job-results-max-bytes (inputs + results on disk)
  int64_t max_result_bytes = 256ll << 20;  ///< one configuration's outputs (the message limit)
  int64_t max_store_bytes = 0;       ///< --max-store-bytes shared with the model store; 0 = none
  std::chrono::milliseconds retention_interval{60000};  ///< how often retention runs
};

/// A pinned set of results (GetJobResult): retention skips the job while a pin lives.
class ResultPin {
 public:
  virtual ~ResultPin() = default;
};

class JobManager {
 public:
  struct Env {
    store::ModelStore* models = nullptr;
    store::JobStore* jobs = nullptr;
    sched::Scheduler* scheduler = nullptr;
    PlanCache* plans = nullptr;
    std::shared_ptr<prometheus::Registry> metrics;  ///< optional
    /// Called once per Submit refused for a limit ("job_queue_full", "job_queue_per_client",
    /// "store_full"), possibly under the manager's lock; optional (server/daemon.cc counts it).
    std::function<void(std::string_view reason)> on_refused;
    /// A farm's shared queue (see the header comment); null = embedded.
    store::JobQueue* queue = nullptr;
    /// With a queue: a worker (claims and runs jobs) instead of a serving replica.
    bool worker = false;
    std::string worker_name;                  ///< the worker's name in the queue (host/pid)
    std::chrono::milliseconds lease{30000};   ///< --job-lease-seconds
    std::chrono::milliseconds heartbeat{10000};  ///< --job-heartbeat-seconds
  };

  /// Recovers the store's unfinished jobs (see the header comment) and starts the dispatch thread.
  static Result<std::unique_ptr<JobManager>> Create(Env env, JobLimits limits);
  ~JobManager();

  /// Validates, stores and queues a job; `client` is its fairness key. `*existed` is set when the
  /// idempotency key named an existing job (returned as it is).
  /// RESOURCE_EXHAUSTED refusals set `*retry_after_ms` (when given) to the hint in the message.
  Result<kiln::v1::Job> Submit(const kiln::v1::SubmitRunRequest& request, const std::string& client,
                               bool* existed = nullptr, int64_t* retry_after_ms = nullptr);
  /// An advise job (JobService.SubmitAdvise): validated (api/advisor/advise_proto.h), stored and
  /// queued on the tt-emu backend as Submit does, with the same limits and errors.
  Result<kiln::v1::Job> SubmitAdvise(const kiln::v1::SubmitAdviseRequest& request, const std::string& client,
                                     bool* existed = nullptr, int64_t* retry_after_ms = nullptr);
  Result<kiln::v1::Job> Get(const std::string& job_id) const;
  Result<kiln::v1::ListJobsResponse> List(const kiln::v1::ListJobsRequest& request) const;
  Result<kiln::v1::Job> Cancel(const std::string& job_id);

  /// Events with sequence > `after`, at most `limit`.
  Result<std::vector<kiln::v1::JobEvent>> Events(const std::string& job_id, int64_t after, int limit) const;
  /// Calls `notify` (on any thread, without locks held) after each new event of `job_id` and once
  /// at Shutdown; on a farm also whenever an event may have been missed (EventLoop: each second
  /// while NOTIFY is down, after listening afresh, every 30 s). Returns a token for Unsubscribe.
  uint64_t Subscribe(const std::string& job_id, std::function<void()> notify);
  void Unsubscribe(uint64_t token);

  /// The stored results of a job, pinned against retention while the pin lives. NOT_FOUND
  /// "results expired"; FAILED_PRECONDITION while the job has not finished.
  Result<std::pair<std::vector<store::JobResultRecord>, std::shared_ptr<ResultPin>>> OpenResults(
      const std::string& job_id);
  /// Up to `max_bytes` of output k of a configuration's result from `offset` (store/job_store.h
  /// ReadOutput), for a GetJobResult stream holding OpenResults' pin.
  Result<std::string> ReadOutput(const std::string& job_id, int configuration, int k, int64_t offset,
                                 int64_t max_bytes) const;

  /// Stops starting jobs and wakes every watcher; running jobs are left to the scheduler's
  /// shutdown (see the header comment). Idempotent.
  void Shutdown();
  /// Shutdown(), then waits until `deadline` for the running jobs to end (their ends written, a
  /// worker's claims released) and for the manager's threads to make their last writes (a
  /// worker's row removed from the farm's registry, a claim in flight handed back). False when the
  /// deadline came first. It cancels nothing: the caller shuts the scheduler down first (its
  /// Shutdown(false) cancels the running jobs), or Stop waits for them to finish. A process that
  /// ends without destructors (server/kilnd_main.cc, _Exit) calls it first: otherwise those writes
  /// race the exit and, on a loaded host, lose.
  bool Stop(std::chrono::steady_clock::time_point deadline);
  bool stopping() const;
  /// A farm's manager (Env::queue set): its store is PostgreSQL, which can be briefly unreachable,
  /// and its watchers are woken each second while notifications are down (EventLoop).
  bool farm() const { return env_.queue != nullptr; }
  /// Jobs running now.
  int running() const;
  /// A farm's workers (from their heartbeats; `live[i]`: workers[i] reported within the lease)
  /// and its queues, for `kiln devices`. FAILED_PRECONDITION without a database. Blocks on it.
  struct FarmView {
    std::vector<store::WorkerReport> workers;
    std::vector<bool> live;
    std::vector<store::QueueDepth> queues;
  };
  Result<FarmView> Farm() const;
  /// Results refused because their lease was no longer current (a worker; 0 elsewhere).
  uint64_t late_results() const { return late_results_count_.load(); }
  /// Runs retention now (tests; the dispatch thread runs it every retention_interval).
  void RunRetentionForTesting();
  /// Test hook: called with a job's id on the thread that took it from the queue, as the job's
  /// start begins to read it (tests cancel there); null in production.
  void SetStartHookForTesting(std::function<void(const std::string& job_id)> hook);

  class LiveJob;

 private:
  JobManager(Env env, JobLimits limits);
  Status Recover();
  void DispatchLoop();
  // Reads a job just taken from the queue (`live`, already in live_ and counted in `lane`'s
  // running) and starts it; a start that fails ends the job and releases both.
  void StartJob(std::shared_ptr<LiveJob> live, const std::string& lane);
  // Resolves the model and checks the request against it (`check_model`), applies the queue and
  // store limits, stores `rec` (its request blob made by `request_blob` from the resolved model id)
  // with `inputs`, and queues it: Submit's and SubmitAdvise's common end.
  Result<kiln::v1::Job> Admit(store::JobRecord rec, const std::string& model_ref, const std::string& client,
                              const std::vector<std::string_view>& inputs, int64_t input_bytes,
                              const std::function<std::string(const std::string& model_id)>& request_blob,
                              const std::function<Status(const store::ModelInfo&)>& check_model, bool* existed,
                              int64_t* retry_after_ms);
  /// Before a configuration (or an advise job's search) starts: ends the job where it was
  /// cancelled (`cancelled_message`), kilnd is stopping (left RUNNING for the next start) or every
  /// configuration is done; returns whether it did.
  bool EndedBeforeStart(const std::shared_ptr<LiveJob>& live, const char* cancelled_message);
  void StartConfiguration(std::shared_ptr<LiveJob> live);
  // The end of configuration `config`'s run: stored (StoreConfiguration) and the next one
  // started, or ConfigurationFailed.
  void ConfigurationDone(std::shared_ptr<LiveJob> live, int config, const Status& status, int64_t retry_after_ms);
  // Stores the finished configuration's result; false when that ended the job (over the result
  // limit, or the store refused it).
  bool StoreConfiguration(std::shared_ptr<LiveJob> live);
  // A configuration (or an advise search) that ended in error: cancelled, interrupted by the
  // shutdown (left RUNNING), back in the queue after a full device queue's hint, or FAILED.
  void ConfigurationFailed(std::shared_ptr<LiveJob> live, const Status& status, int64_t retry_after_ms,
                           bool cancel_requested, bool stopping);
  void StartAdvise(std::shared_ptr<LiveJob> live);
  void AdviseStep(const std::shared_ptr<LiveJob>& live, const std::string& step);
  void AdviseDone(std::shared_ptr<LiveJob> live, const Status& status,
                  std::shared_ptr<const advisor::AdviseResult> result);
  // Ends a live job once (a second call returns): its end written (WriteEnd; RUNNING, the
  // shutdown's interruption, becomes CANCELLED when a cancel was asked), then out of live_ and its
  // lane, whatever the write threw.
  void EndJob(std::shared_ptr<LiveJob> live, int state, const Status& error);
  void WriteEnd(const LiveJob& live, store::JobRecord& rec, int state, const Status& error, bool lease_lost,
                double ran);
  void EraseLiveLocked(const std::shared_ptr<LiveJob>& live);  // mu_ held
  Status Transition(store::JobRecord& rec, int new_state, const store::JobFence& fence = {});
  void AppendEvent(const store::JobRecord& rec, kiln::v1::JobEvent event, const store::JobFence& fence = {});
  bool IsLive(const store::WorkerReport& w) const;
  // Workers silent this long leave the registry (a killed worker's report).
  static constexpr std::chrono::seconds kForgetWorkersAfter{3600};
  // A worker: claims jobs while devices are free, else waits for work (the dispatch thread).
  void ClaimLoop();
  // A worker: renews the leases of running jobs, hears cancel requests (its own thread).
  void HeartbeatLoop();
  // A replica: wakes the watchers of jobs whose events other processes appended.
  void EventLoop();
  // A replica: fails jobs whose last lease expired.
  void FailAbandoned();
  void Notify(const std::string& job_id);
  void RunRetention();
  void Enqueue(const store::JobRecord& rec, bool front);
  void InitMetrics();
  void SetStateGauge(int state, int64_t delta);

  Env env_;
  JobLimits limits_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Lane {
    std::map<std::string, std::deque<std::string>> queued;  // client → job ids
    std::string last_client;
    int running = 0;
    int slots = 1;
  };
  std::map<std::string, Lane> lanes_;           // by backend
  std::map<std::string, std::string> queued_client_;  // queued job → client
  std::map<std::string, int> queued_per_client_;
  int queued_total_ = 0;
  std::map<std::string, std::shared_ptr<LiveJob>> live_;
  std::multimap<std::chrono::steady_clock::time_point, std::string> retry_at_;  // job → backend lane retry
  std::map<std::string, int> pins_;
  std::map<uint64_t, std::pair<std::string, std::function<void()>>> watchers_;
  uint64_t next_watcher_ = 1;
  bool stopping_ = false;
  std::function<void(const std::string&)> start_hook_;  // SetStartHookForTesting
  int loops_running_ = 0;  // threads below not yet at their end (Stop waits for 0)
  bool wake_ = false;
  bool retention_due_ = false;  // a job ended: its results may push the total over the limit
  std::thread dispatcher_;
  std::thread heartbeat_thread_;  // a worker
  std::thread events_thread_;     // a serving replica of a farm
  std::atomic<uint64_t> late_results_count_{0};
  uint64_t jobs_done_ = 0;                // a worker's ended jobs (guarded by mu_)
  std::set<std::string> worker_series_;  // kiln_farm_worker_heartbeat_age_seconds labels (dispatch thread)

  // Metrics (null without a registry).
  prometheus::Family<prometheus::Gauge>* jobs_gauge_ = nullptr;
  prometheus::Family<prometheus::Histogram>* queue_wait_ = nullptr;
  prometheus::Family<prometheus::Histogram>* run_seconds_ = nullptr;
  prometheus::Family<prometheus::Counter>* attempts_ = nullptr;
  prometheus::Family<prometheus::Counter>* below_threshold_ = nullptr;
  prometheus::Gauge* results_bytes_ = nullptr;
  prometheus::Counter* results_expired_ = nullptr;
  prometheus::Counter* late_results_ = nullptr;
  prometheus::Counter* lease_lost_ = nullptr;
  prometheus::Counter* lease_expiries_ = nullptr;
  prometheus::Family<prometheus::Gauge>* farm_workers_ = nullptr;
  prometheus::Family<prometheus::Gauge>* worker_age_ = nullptr;
};

/// A new job id: "j-" + 26 lowercase Crockford base32 characters (48 bits of Unix milliseconds,
/// then 80 random bits), so ids sort by creation time.
std::string NewJobId();

/// A job's labels (SubmitRun, SubmitAdvise): at most 16; keys [a-z0-9_.-]{1,63}; values at most
/// 256 bytes of UTF-8 without control characters (C0, DEL, C1: labels are shown in tables and
/// terminals). INVALID_ARGUMENT naming the label. `kiln run` checks its --label flags with it
/// before it uploads anything (exit 2).
Status ValidateLabels(const google::protobuf::Map<std::string, std::string>& labels);

}  // namespace kiln::api
