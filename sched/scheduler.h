// kiln::sched::Scheduler — the one scheduler of every unit of work in kilnd (docs/architecture.md).
//
// Lanes
// * A lane is a bounded, fair queue in front of a fixed set of workers. Each worker is one thread
//   running its own boost::asio::io_context, so a worker executes one job at a time.
// * Device lanes, one per backend ("tt-emu:2,reference:1" → lanes tt-emu and reference; workers
//   tt-emu:0, tt-emu:1, reference:0). Each device worker owns one Backend instance (created from
//   a BackendRegistry with BackendOptions::device_index); its jobs are JobFn(Backend&, JobContext&).
// * CPU lanes (SchedulerOptions::cpu_lanes) have workers without a backend; their jobs are
//   TaskFn(JobContext&). kilnd uses them for compiles, planning and the store's blocking work
//   (upload commit, index rewrite, large reads), each lane sized on its own so that a full compile
//   queue never delays or refuses an upload commit (api/lanes.h names kilnd's lanes).
// * The reference executor: Reference() is a Backend whose every op runs as a job on the
//   "reference" lane — the configured reference devices, or, when none is configured, one hidden
//   reference worker with SchedulerOptions::reference_threads OpenMP threads. The fp32 reference
//   chain of a run (runtime's RunOptions::reference) therefore runs on the reference lane's
//   threads, is counted in kiln_device_busy{device="reference:N"}, and never multiplies OpenMP
//   teams on a device worker's thread. These stage jobs skip the queue limits (each caller waits
//   for at most one at a time, so there are at most as many as there are workers) and go first.
// * Admission: a job costs one queue slot and JobRequest::cost_bytes bytes. A lane refuses a job
//   when its queue (not counting running jobs) holds `queue_capacity` jobs, when it would hold more
//   than `max_queued_bytes` bytes (0 = no byte limit), or when the client's principal already has
//   `max_queued_per_client` jobs queued there: RESOURCE_EXHAUSTED whose message carries a retry
//   hint ("retry after ~N ms" or "~N s", at most kMaxRetryAfter; also SuggestedRetryAfter()).
//   A client id is "principal" or "principal" kSubKeySeparator "sub-key" (server/rpc_context.h
//   ClientId): the quota counts per principal, round-robin goes per whole id.
// * Memory: with SchedulerOptions::memory_budget_bytes > 0, a job of JobRequest::memory_bytes
//   reserves that many bytes of the process-wide budget (common/memory.h MemoryBudget) when it is
//   admitted and returns them as it completes, before it shows as done to Wait, state() or OnDone
//   (queued and running jobs both hold theirs): a lane refuses a job whose bytes do not fit in what
//   is left (RESOURCE_EXHAUSTED with the retry hint, naming reserved and total bytes). Gauges
//   kiln_memory_budget_bytes and kiln_memory_reserved_bytes. Queued work is thereby bounded in
//   bytes, not only in jobs.
// * Fairness: queued jobs are kept per client and dispatched round-robin across clients (each
//   client's own jobs stay FIFO). A client with 1000 queued jobs delays another client's job by at
//   most one job per worker.
// * Cancellation: JobHandle::Cancel() or a passed deadline. A queued job is removed at once and
//   completes with CANCELLED / DEADLINE_EXCEEDED (deadlines are armed as asio timers on a control
//   thread). A running job sees its CancelToken fire; job functions check it at their stage and
//   layer boundaries (backends also check it before every op), and the worker is free as soon as
//   the function returns.
// * Failure isolation: an exception thrown by a job becomes INTERNAL (std::bad_alloc:
//   RESOURCE_EXHAUSTED) for that job only; the worker keeps serving. (A crash — SIGSEGV — takes
//   the process down; out-of-process workers isolate that.)
// * Metrics (prometheus-cpp, when a registry is given). Device lanes: kiln_device_queue_depth
//   {backend} (gauge), kiln_device_busy{device} (gauge 0/1), kiln_device_job_duration_seconds
//   {backend} (histogram of run time), kiln_device_jobs_total{backend,status} (counter; status is
//   the gRPC code name, "RESOURCE_EXHAUSTED" for refused submissions). CPU lanes: the same four as
//   kiln_sched_queue_depth{lane}, kiln_sched_busy_workers{lane}, kiln_sched_job_duration_seconds
//   {lane}, kiln_sched_jobs_total{lane,status}.
//
// scheduler.cc is one state machine under one mutex (lanes, workers, stage jobs, deadlines); it is
// kept in one file, over the usual ~600 lines, so that its locking invariants can be read in one
// place.
//
// The scheduler knows no compiler and no request type: a job is a function. api/ wraps "plan +
// inputs + precision" into one (api/run_conv.h); a real card plugs in as a Backend.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "device/backends/backend.h"

namespace prometheus {
class Registry;
}

namespace kiln::sched {

using device::Backend;
using device::CancelToken;
using device::JobProgress;
using device::ProgressFn;

/// One entry of a device list: `count` devices of `backend`.
struct DeviceSpec {
  std::string backend;
  int count = 1;
  bool operator==(const DeviceSpec&) const = default;
};

/// Parses "tt-emu:2,reference:1" (count defaults to 1: "reference"). INVALID_ARGUMENT for empty
/// names, counts < 1 or > 256, duplicates.
Result<std::vector<DeviceSpec>> ParseDeviceList(std::string_view text);

/// What a job function sees while it runs on a worker.
struct JobContext {
  uint64_t job_id = 0;
  std::string worker;  ///< "tt-emu:1" (a device), "compile:0" (a CPU-lane worker)
  int worker_index = 0;  ///< index within its lane (a device worker's BackendOptions::device_index)
  const CancelToken* cancel = nullptr;  ///< never null inside a job; check between stages/layers
  ProgressFn progress;                  ///< never empty inside a job (no-op if the client gave none)
};

/// Device-lane work: runs on the worker's thread with the worker's backend. Return OK or an
/// error; result data travels through state captured by the function.
using JobFn = std::function<Status(Backend& backend, JobContext& ctx)>;
/// CPU-lane work (no backend).
using TaskFn = std::function<Status(JobContext& ctx)>;

/// Separates a client id's principal from its optional sub-key (see Admission above).
inline constexpr char kSubKeySeparator = '\x1f';
/// Longest retry hint: past it, a queue's estimate says more about one slow job than about when
/// to come back.
inline constexpr std::chrono::milliseconds kMaxRetryAfter{30000};

struct JobRequest {
  std::string lane;       ///< a device backend ("reference", "tt-emu", ...) or a CPU lane name
  std::string client_id;  ///< fairness key (e.g. the authenticated peer); "" is a client too
  JobFn work;             ///< device lanes
  TaskFn task;            ///< CPU lanes
  ProgressFn progress;    ///< optional; called on the worker's thread
  /// Optional absolute deadline (queued or running). Default: none.
  std::optional<CancelToken::Clock::time_point> deadline;
  /// Bytes the job holds while queued (inputs, model bytes): counted against max_queued_bytes.
  int64_t cost_bytes = 0;
  /// Bytes the job may hold from admission until done (its inputs and the estimate of what it
  /// allocates while running): reserved from the memory budget (see the header comment).
  int64_t memory_bytes = 0;
};

enum class JobState { kQueued, kRunning, kDone };

/// A submitted job. Thread-safe.
class JobHandle {
 public:
  virtual ~JobHandle() = default;
  virtual uint64_t id() const = 0;
  /// Requests cancellation (see the header comment). Idempotent.
  virtual void Cancel() = 0;
  virtual JobState state() const = 0;
  /// Blocks until the job is done and returns its final status.
  virtual Status Wait() = 0;
  /// Waits at most `timeout`; false if still not done.
  virtual bool WaitFor(std::chrono::milliseconds timeout) = 0;
  /// Final status (OK until done).
  virtual Status status() const = 0;
  /// Called once when the job is done (immediately, on the caller's thread, if it already is;
  /// otherwise on the thread that finishes it). Only the last registered callback is kept.
  virtual void OnDone(std::function<void(const Status&)> fn) = 0;
};

/// A lane without backend.
struct CpuLaneSpec {
  std::string name;
  int workers = 1;
  int queue_capacity = 16;         ///< queued (not running) jobs; 0 = run only when a worker is free
  int max_queued_per_client = 0;   ///< 0 = queue_capacity / 2 (at least 1)
  int64_t max_queued_bytes = 0;    ///< 0 = no byte limit
};

struct SchedulerOptions {
  std::vector<DeviceSpec> devices;
  /// Queued (not running) jobs per device lane.
  int queue_capacity = 64;
  /// Queued jobs per client per device lane; 0 = queue_capacity / 2 (at least 1).
  int max_queued_per_client = 0;
  /// Bytes queued per device lane (JobRequest::cost_bytes); 0 = no byte limit.
  int64_t max_queued_bytes = 0;
  /// Process-wide memory budget for JobRequest::memory_bytes (see the header comment); 0 = none.
  uint64_t memory_budget_bytes = 0;
  std::vector<CpuLaneSpec> cpu_lanes;
  /// Backend-specific settings passed to every device of that backend (BackendOptions::settings),
  /// e.g. {"reference": {{"threads", "1"}}, "tt-emu": {{"level", "fast"}}}.
  std::map<std::string, std::map<std::string, std::string>> backend_settings;
  /// OpenMP threads of the hidden reference worker kept when no reference device is configured
  /// (0 = OpenMP's default, all cores).
  int reference_threads = 0;
  /// Registry to create backends from; null = DefaultBackendRegistry() (device/backends/builtin.h).
  const device::BackendRegistry* registry = nullptr;
  /// Metrics destination (optional).
  std::shared_ptr<prometheus::Registry> metrics;
  /// Called (under the scheduler's lock: keep it short, never call back) once per Submit refused
  /// for a limit, with a fixed reason: "queue_full", "queue_bytes", "queue_per_client",
  /// "memory_budget". Optional; kilnd counts it in kiln_rejected_requests_total (server/daemon.cc).
  std::function<void(std::string_view reason)> on_refused;
};

struct DeviceInfo {
  std::string name;     ///< "tt-emu:0"
  std::string backend;  ///< "tt-emu"
  bool busy = false;
  uint64_t current_job = 0;  ///< 0 when idle
  uint64_t jobs_done = 0;
  std::string description;   ///< BackendCapabilities::description
};

class Scheduler {
 public:
  /// Creates every device's backend and starts every worker's thread. Errors: INVALID_ARGUMENT
  /// (no lanes, bad capacities, duplicate lane names), NOT_FOUND / backend factory errors (the
  /// message names the device).
  static Result<std::unique_ptr<Scheduler>> Create(SchedulerOptions options);

  /// Cancels what is queued or running and joins all threads (Shutdown(false)).
  ~Scheduler();

  /// Queues a job. Errors: NOT_FOUND (no such lane, listing the configured ones),
  /// INVALID_ARGUMENT (no work for that kind of lane), RESOURCE_EXHAUSTED (queue, byte budget or
  /// per-client quota full; message says "retry after ~N ms"), UNAVAILABLE (shutting down).
  Result<std::shared_ptr<JobHandle>> Submit(JobRequest request);

  /// The fp32 reference executor (see the header comment): thread-safe; each op blocks the
  /// caller until the reference lane has run it. Valid until the scheduler is destroyed.
  Backend& Reference();

  /// Stops accepting jobs. drain = true: queued and running jobs finish normally; false: queued
  /// jobs complete with UNAVAILABLE and running ones are cancelled. Then joins the threads.
  /// Idempotent; blocking. Must not be called from inside a job or an OnDone callback that runs
  /// on a worker thread (it joins those threads).
  void Shutdown(bool drain);

  /// The configured devices (not the hidden reference worker, not CPU workers).
  std::vector<DeviceInfo> Devices() const;
  /// OK when device work can be submitted to `backend`; else the NOT_FOUND Submit would answer
  /// (naming the configured backends). Lets a caller refuse a job before its earlier stages run.
  Status CheckBackend(const std::string& backend) const;
  /// The BackendOptions::settings the devices of `backend` were created with
  /// (SchedulerOptions::backend_settings; empty for a backend without devices). A key absent here
  /// has the default the backend declared (device::BackendRegistry::Settings).
  std::map<std::string, std::string> DeviceSettings(const std::string& backend) const;
  /// SchedulerOptions::memory_budget_bytes (0: none) and the bytes admitted jobs hold of it now.
  uint64_t MemoryBudgetBytes() const;
  uint64_t MemoryReservedBytes() const;
  /// Jobs queued (not running) in `lane` (0 for unknown ones).
  int QueueDepth(const std::string& lane) const;
  /// Retry hint for a refused submission: queued jobs × mean job duration / workers (at least
  /// 10 ms; 100 ms until a job of that lane has finished).
  std::chrono::milliseconds SuggestedRetryAfter(const std::string& lane) const;

  class Impl;

 private:
  explicit Scheduler(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;  // shared so that JobHandles can hold weak references
};

}  // namespace kiln::sched
