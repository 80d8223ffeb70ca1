// kiln::store::pg::PgJobQueue — the shared JobQueue (store/job_queue.h) in PostgreSQL:
// table kiln_job_queue (schema version 2, store/pg/pg_schema.cc); the worker registry in table
// kiln_workers (schema version 4), its ages by the database's clock.
//
// Claim is one statement: the oldest claimable row of the worker's backends, locked with
// SELECT ... FOR UPDATE SKIP LOCKED (workers claiming at once take different rows, none waits on
// another), updated to claimed with attempt + 1, a fresh random lease token and
// lease_expires = clock_timestamp() + lease. Heartbeat, Complete and Release are one UPDATE each
// whose WHERE clause is the claim being current (same attempt and token, lease not expired), so
// the check and the write are atomic; Complete that matches no row is a late result (counted,
// discarded). Leases use the database's clock only, so workers' clocks do not matter.
// Enqueue and Release NOTIFY channel kiln_jobs (delivered at commit); WaitForWork LISTENs on a
// connection of its own (outside the pool) and falls back to sleeping the timeout (polling) while
// that connection is down.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "store/job_queue.h"
#include "store/pg/pg_pool.h"

namespace kiln::store::pg {

class PgJobQueue : public JobQueue {
 public:
  /// The pool must reach a database migrated by Migrate (store/pg/pg_schema.h).
  PgJobQueue(PgPool* pool, int max_attempts);
  ~PgJobQueue() override;

  Status Enqueue(const std::string& job_id, const std::string& backend, const std::string& payload,
                 const std::string& client = "") override;
  Result<std::optional<JobClaim>> Claim(const std::string& worker, const std::vector<std::string>& backends,
                                        std::chrono::milliseconds lease) override;
  Status Heartbeat(const JobClaim& claim, std::chrono::milliseconds lease) override;
  Result<bool> Complete(const JobClaim& claim, const std::string& result) override;
  Status Release(const JobClaim& claim) override;
  Result<int> ExpireLeases() override;
  Result<JobQueueEntry> Get(const std::string& job_id) override;
  Status WaitForWork(std::chrono::milliseconds timeout) override;
  uint64_t late_results() const override { return late_.load(); }
  Status ReportWorker(const WorkerReport& report) override;
  Status RemoveWorker(const std::string& worker) override;
  Result<std::vector<WorkerReport>> Workers(std::chrono::seconds forget_after) override;
  Result<std::vector<QueueDepth>> QueueDepths() override;

 private:
  struct Listener;
  PgPool* pool_;
  const int max_attempts_;
  std::atomic<uint64_t> late_{0};
  std::timed_mutex listen_mu_;  // one thread waits on the listener; others sleep
  std::unique_ptr<Listener> listener_;
};

}  // namespace kiln::store::pg
