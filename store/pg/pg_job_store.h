// kiln::store::pg::PgJobStore — the farm's JobStore (store/job_store.h) in PostgreSQL: tables
// kiln_jobs, kiln_job_labels, kiln_job_inputs, kiln_job_events, kiln_job_results,
// kiln_job_outputs (schema version 3, store/pg/pg_schema.cc), beside the queue kiln_job_queue
// (store/pg/pg_job_queue.h) that it fills and closes.
//
// * Create inserts the row, its labels and inputs, its first event and the job's queue entry in
//   one transaction (and NOTIFYs kiln_jobs at commit), so a job is never stored without being
//   queued or queued without being stored.
// * Fenced writes (store/job_store.h "Fencing") lock the job's queue entry and check that the
//   claim is current — same attempt and lease token, and either claimed with its lease unexpired
//   or already completed by this very claim (a write of the claim that races its own end) — in
//   the transaction that writes. A fenced Update (or UpdateWithEvent) to a finished state marks
//   the entry done in that transaction.
// * Every stored event NOTIFYs channel kiln_job_events with the job id at commit (AppendEvent,
//   UpdateWithEvent, Create); WaitForEvents LISTENs on a
//   connection of its own (outside the pool) and returns std::nullopt while that connection is
//   down (the caller polls; the next call reconnects) and once when it has just (re)connected
//   (the events of the gap were announced to no one).
// * Inputs and outputs are bytea (a job's inputs and each configuration's outputs are bounded by
//   the message limit, --max-message-bytes); outputs are stored uncompressed out of line, so
//   ReadOutput's 1 MiB slices read only their own TOAST chunks.
// * total_bytes() is one aggregate query (0 when the database cannot be reached; logged).
#pragma once

#include <functional>
#include <memory>
#include <mutex>

#include "store/job_store.h"
#include "store/pg/pg_pool.h"

namespace kiln::store::pg {

class PgJobStore : public JobStore {
 public:
  /// The pool must reach a database migrated by Migrate (store/pg/pg_schema.h).
  explicit PgJobStore(PgPool* pool);
  ~PgJobStore() override;

  Result<JobRecord> Create(JobRecord job, const std::vector<std::string_view>& inputs, bool* existed,
                           std::string_view first_event = {}) override;
  Status Update(const JobRecord& job, const JobFence& fence = {}) override;
  Result<int64_t> UpdateWithEvent(const JobRecord& job, int64_t time_ms, std::string_view blob,
                                  const JobFence& fence = {}) override;
  Result<JobRecord> Get(const std::string& job_id) const override;
  Result<std::optional<JobRecord>> FindByIdempotencyKey(const std::string& key) const override;
  Result<std::vector<JobRecord>> List(const JobFilter& filter) const override;
  Result<std::vector<JobRecord>> Unfinished() const override;
  Result<std::map<int, int64_t>> CountByState() const override;
  Result<int64_t> AppendEvent(const std::string& job_id, int64_t time_ms, std::string_view blob, int64_t max_events,
                              const JobFence& fence = {}) override;
  Result<std::vector<JobEventRecord>> Events(const std::string& job_id, int64_t after, int limit) const override;
  Result<std::string> ReadInput(const std::string& job_id, int k) const override;
  Status PutResult(const std::string& job_id, int configuration, std::string_view report,
                   const std::vector<std::string_view>& outputs, const JobFence& fence = {}) override;
  Result<std::vector<JobResultRecord>> Results(const std::string& job_id) const override;
  Result<std::string> ReadOutput(const std::string& job_id, int configuration, int k, int64_t offset,
                                 int64_t max_bytes) const override;
  Result<int64_t> ExpireResults(const std::string& job_id) override;
  Result<std::vector<JobRecord>> FinishedWithResults() const override;
  int64_t total_bytes() const override;

  Result<JobRecord> RequestCancel(const std::string& job_id, bool* dequeued) override;
  Result<std::pair<int64_t, int64_t>> CountQueued(const std::string& principal,
                                                  const std::string& principal_prefix) const override;
  std::optional<std::vector<std::string>> WaitForEvents(std::chrono::milliseconds timeout) override;
  Result<std::vector<JobRecord>> Abandoned() const override;

 private:
  struct Listener;
  // The jobs whose rows `query` returns (kJobColumns first), with their labels, in its order.
  Result<std::vector<JobRecord>> Jobs(const std::string& what,
                                      const std::function<pqxx::result(pqxx::work&)>& query) const;

  PgPool* pool_;
  std::mutex listen_mu_;  // one thread listens at a time
  std::unique_ptr<Listener> listener_;
};

}  // namespace kiln::store::pg
