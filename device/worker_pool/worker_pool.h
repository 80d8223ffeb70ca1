// kiln::device::WorkerPool — schedules device jobs onto a fixed set of devices (issue 6).
//
// Model
// * Devices are configured per backend ("tt-emu:2,reference:1" → devices tt-emu:0, tt-emu:1,
//   reference:0). Each device owns one Backend instance (created from a BackendRegistry with
//   BackendOptions::device_index) and one thread running its own boost::asio::io_context: jobs
//   for a device are posted to that context, so a device executes one job at a time.
// * One bounded queue per backend, shared by that backend's devices (whichever device is idle
//   takes the next job). Full queue → RESOURCE_EXHAUSTED whose message carries a retry hint
//   ("retry after ~N ms", also available as SuggestedRetryAfter()). A client may hold at most
//   `max_queued_per_client` queued jobs per backend, so one client cannot fill the queue.
// * Fairness: queued jobs are kept per client and dispatched round-robin across clients (each
//   client's own jobs stay FIFO). A client with 1000 queued jobs delays another client's job by at
//   most one job per device.
// * Cancellation: JobHandle::Cancel() or a passed deadline. A queued job is removed at once and
//   completes with CANCELLED / DEADLINE_EXCEEDED (deadlines are armed as asio timers on a control
//   thread). A running job sees its CancelToken fire; the job function is expected to check it
//   between layers (backends also check it before every op), and its worker is free as soon as
//   the function returns.
// * Failure isolation: an exception thrown by a job becomes INTERNAL (std::bad_alloc:
//   RESOURCE_EXHAUSTED) for that job only; the worker keeps serving. (A crash — SIGSEGV — takes
//   the process down; out-of-process `kiln-worker`s isolate that.)
// * Metrics (prometheus-cpp, when a registry is given): kiln_device_queue_depth{backend} (gauge),
//   kiln_device_busy{device} (gauge 0/1), kiln_device_job_duration_seconds{backend} (histogram of
//   run time on the device), kiln_device_jobs_total{backend,status} (counter; status is the gRPC
//   code name, e.g. "OK", "CANCELLED", "RESOURCE_EXHAUSTED" for rejected submissions).
//
// The job itself is a function of (Backend&, JobContext&): the narrow worker interface. The conv
// plan runner (compiler/convplan + a plan executor) wraps "plan + input tensors + precision" into
// such a function; a remote `kiln-worker` or a real-card `ttnn` device plugs in as a Backend.
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

namespace kiln::device {

/// One entry of a device list: `count` devices of `backend`.
struct DeviceSpec {
  std::string backend;
  int count = 1;
  bool operator==(const DeviceSpec&) const = default;
};

/// Parses "tt-emu:2,reference:1" (count defaults to 1: "reference"). INVALID_ARGUMENT for empty
/// names, counts < 1 or > 256, duplicates.
Result<std::vector<DeviceSpec>> ParseDeviceList(std::string_view text);

/// What a job function sees while it runs on a device.
struct JobContext {
  uint64_t job_id = 0;
  std::string device;  ///< "tt-emu:1"
  int device_index = 0;
  const CancelToken* cancel = nullptr;  ///< never null inside a job; check between layers
  ProgressFn progress;                  ///< never empty inside a job (no-op if the client gave none)
};

/// The work: runs on the device's thread with the device's backend. Return OK or an error; the
/// result data travels through state captured by the function.
using JobFn = std::function<Status(Backend& backend, JobContext& ctx)>;

struct JobRequest {
  std::string backend;    ///< which device kind ("reference", "tt-emu", ...)
  std::string client_id;  ///< fairness key (e.g. the authenticated peer); "" is a client too
  JobFn work;
  ProgressFn progress;    ///< optional; called on the device thread
  /// Optional absolute deadline (queued or running). Default: none.
  std::optional<CancelToken::Clock::time_point> deadline;
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

struct WorkerPoolOptions {
  std::vector<DeviceSpec> devices;
  /// Queued (not running) jobs per backend.
  int queue_capacity = 64;
  /// Queued jobs per client per backend; 0 = queue_capacity / 2 (at least 1).
  int max_queued_per_client = 0;
  /// Backend-specific settings passed to every device of that backend (BackendOptions::settings),
  /// e.g. {"reference": {{"threads", "1"}}, "tt-emu": {{"level", "fast"}}}.
  std::map<std::string, std::map<std::string, std::string>> backend_settings;
  /// Registry to create backends from; null = DefaultBackendRegistry() (device/backends/builtin.h).
  const BackendRegistry* registry = nullptr;
  /// Metrics destination (optional).
  std::shared_ptr<prometheus::Registry> metrics;
};

struct DeviceInfo {
  std::string name;     ///< "tt-emu:0"
  std::string backend;  ///< "tt-emu"
  bool busy = false;
  uint64_t current_job = 0;  ///< 0 when idle
  uint64_t jobs_done = 0;
  std::string description;   ///< BackendCapabilities::description
};

class WorkerPool {
 public:
  /// Creates every device's backend and starts its thread. Errors: INVALID_ARGUMENT (no devices,
  /// bad capacities, no registry), NOT_FOUND / backend factory errors (the message names the
  /// device).
  static Result<std::unique_ptr<WorkerPool>> Create(WorkerPoolOptions options);

  /// Cancels what is queued or running and joins all threads (Shutdown(false)).
  ~WorkerPool();

  /// Queues a job. Errors: NOT_FOUND (no device of that backend, listing the configured ones),
  /// INVALID_ARGUMENT (empty work), RESOURCE_EXHAUSTED (queue or per-client quota full; message
  /// says "retry after ~N ms"), UNAVAILABLE (shutting down).
  Result<std::shared_ptr<JobHandle>> Submit(JobRequest request);

  /// Stops accepting jobs. drain = true: queued and running jobs finish normally; false: queued
  /// jobs complete with UNAVAILABLE and running ones are cancelled. Then joins the threads.
  /// Idempotent; blocking. Must not be called from inside a job or an OnDone callback that runs
  /// on a device thread (it joins those threads).
  void Shutdown(bool drain);

  std::vector<DeviceInfo> Devices() const;
  /// Jobs queued (not running) for `backend` (0 for unknown ones).
  int QueueDepth(const std::string& backend) const;
  /// Retry hint for a rejected submission: queued jobs × mean job duration / devices (at least
  /// 10 ms; 100 ms until a job of that backend has finished).
  std::chrono::milliseconds SuggestedRetryAfter(const std::string& backend) const;

  class Impl;

 private:
  explicit WorkerPool(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;  // shared so that JobHandles can hold weak references
};

}  // namespace kiln::device
