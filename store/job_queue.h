// kiln::store::JobQueue — the farm's work queue: jobs wait per backend,
// workers claim them under a lease that they renew by heartbeat, and commit one result each.
//
// Implementations:
//   MemoryJobQueue (store/memory_job_queue.h)   embedded: one process, in memory
//   PgJobQueue     (store/pg/pg_job_queue.h)    shared: table kiln_job_queue, SKIP LOCKED claims
// Both pass the same contract suite (tests/store/job_queue_contract_test.cc). A farm's JobManager
// (api/jobs.h "A farm") claims, renews, releases and sweeps through PgJobQueue; PgJobStore
// (store/pg/pg_job_store.h) enqueues with the job's row and completes an entry with the job's end,
// each in one transaction. The embedded JobManager keeps its own in-process queue.
//
// Contract
// * Enqueue: a job id (unique; ALREADY_EXISTS otherwise), its backend, an opaque payload, and the
//   client it is fair to (api/jobs.h: the job's `client`).
// * Claim: a claimable job of one of the worker's backends, or nothing: round-robin across clients
//   — of the clients with claimable jobs, the one served least recently on that backend (never
//   served first), and its oldest job — as the embedded JobManager starts its jobs. Claimable = queued,
//   or claimed under a lease that has expired (the worker died, hung or lost the network) while
//   attempts remain. Each claim increments `attempt` and issues a fresh lease token; no two
//   workers hold a job at once.
// * Heartbeat renews the lease for `lease` more; FAILED_PRECONDITION when the claim is no longer
//   current (expired and re-claimed, or finished).
// * Complete commits the result only if the claim's (attempt, lease token) is still current and
//   its lease has not expired, checked in the same atomic step that writes it: a job has at most
//   one recorded result. Otherwise the result is discarded, `late_results()` counts it (kilnd
//   exports kiln_job_late_results_total) and Complete returns false.
// * Release gives a current claim back without a result (graceful drain): claimable again at
//   once, and the attempt is not counted (the job was not at fault).
// * A job whose lease expired on its `max_attempts`-th attempt is never claimed again; ExpireLeases
//   (run by a sweeper) marks it kFailed.
// * WaitForWork blocks until work may have arrived (an Enqueue, a Release) or the timeout; it may
//   wake spuriously, so callers Claim after it.
// Durations are the queue's clock: PostgreSQL's now() for PgJobQueue (one clock for all workers).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace kiln::store {

struct JobClaim {
  std::string job_id;
  std::string backend;
  std::string payload;
  int attempt = 0;          ///< 1 for the first claim
  std::string lease_token;  ///< unique per claim
  bool reclaimed = false;   ///< taken over from a claim whose lease expired (kiln_job_lease_expiries_total)
};

/// A farm worker's heartbeat report (ReportWorker) and what Workers() returns.
struct WorkerReport {
  std::string worker;        ///< "host/pid"
  std::string devices;       ///< "tt-emu:2,reference:1"
  int running = 0;
  int64_t jobs_done = 0;
  bool draining = false;
  double age_seconds = 0;    ///< Workers(): seconds since its last report, by the queue's clock
};

/// One backend's queue (QueueDepths).
struct QueueDepth {
  std::string backend;
  int64_t queued = 0;   ///< claimable now (not expired leases)
  int64_t claimed = 0;  ///< held under a lease (expired or not)
};

struct JobQueueEntry {
  enum State { kQueued = 1, kClaimed = 2, kDone = 3, kFailed = 4 };
  std::string job_id;
  std::string backend;
  int state = kQueued;
  int attempt = 0;
  std::string result;      ///< the committed result (kDone)
  std::string worker;      ///< the worker holding (or last holding) the lease
};

class JobQueue {
 public:
  virtual ~JobQueue() = default;
  virtual Status Enqueue(const std::string& job_id, const std::string& backend, const std::string& payload,
                         const std::string& client = "") = 0;
  virtual Result<std::optional<JobClaim>> Claim(const std::string& worker, const std::vector<std::string>& backends,
                                                std::chrono::milliseconds lease) = 0;
  virtual Status Heartbeat(const JobClaim& claim, std::chrono::milliseconds lease) = 0;
  /// true: committed; false: late (discarded and counted).
  virtual Result<bool> Complete(const JobClaim& claim, const std::string& result) = 0;
  virtual Status Release(const JobClaim& claim) = 0;
  /// Fails jobs whose expired lease was their last attempt; returns how many.
  virtual Result<int> ExpireLeases() = 0;
  virtual Result<JobQueueEntry> Get(const std::string& job_id) = 0;
  virtual Status WaitForWork(std::chrono::milliseconds timeout) = 0;
  virtual uint64_t late_results() const = 0;

  // The farm's worker registry (`kiln devices`): each worker reports at every heartbeat and
  // removes itself when it has drained; a worker killed stays listed, its report ageing.
  virtual Status ReportWorker(const WorkerReport& report) = 0;
  virtual Status RemoveWorker(const std::string& worker) = 0;
  /// Every reported worker, freshest first; reports older than `forget_after` are deleted first.
  virtual Result<std::vector<WorkerReport>> Workers(std::chrono::seconds forget_after) = 0;
  /// Queued and claimed jobs per backend, by backend name.
  virtual Result<std::vector<QueueDepth>> QueueDepths() = 0;
};

}  // namespace kiln::store
