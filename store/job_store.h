// kiln::store::JobStore — the durable store of device-farm jobs (proto/kiln/v1/job.proto): rows,
// labels, events, inputs and results. Two implementations pass the same contract suite
// (tests/store/job_store_contract_test.cc):
//   EmbeddedJobStore (this file)                   one kilnd: DATA_DIR/jobs, SQLite + files
//   PgJobStore       (store/pg/pg_job_store.h)     a farm: PostgreSQL, every replica and worker
//
// The store knows no protobuf: requests, events and reports are opaque blobs (api/jobs.cc
// serializes kiln.v1 messages into them). Thread-safe; every call is a short transaction.
// Errors: INTERNAL (storage errors, naming the file or statement), RESOURCE_EXHAUSTED (disk full),
// NOT_FOUND (no such job), FAILED_PRECONDITION (a schema newer than this build; a fenced write
// whose lease is no longer current), UNAVAILABLE (the database cannot be reached).
//
// Fencing (a farm, README "Jobs on a farm"): a worker's writes for a job it runs carry its claim (JobFence: the
// attempt and lease token of store/job_queue.h). PgJobStore checks in the same transaction that the
// claim is still current (kiln_job_queue), so a worker whose lease expired — killed, hung, cut off
// — writes nothing more: FAILED_PRECONDITION "lease ... no longer current". A fenced Update to a
// finished state also completes the queue entry in that transaction: a job has at most one
// recorded end. The embedded store has one process and no leases: it ignores fences.
//
// EmbeddedJobStore layout under DATA_DIR/jobs/ (the model store's objects/ is never touched):
//   jobs.db                           SQLite 3 (WAL, synchronous=FULL): tables schema_version,
//                                     jobs, job_labels, job_events, job_results
//   <job_id>/inputs/<k>.bin           raw bytes of the k-th inline input tensor of the request
//   <job_id>/results/<c>/<k>.bin      raw bytes of output k of configuration c
// Files are written, fsync'ed and their directory fsync'ed before the row that names them is
// committed, so a row never points at a missing or partial file; files without a row (a crash in
// between) are removed when the store opens. One connection behind one mutex.
// Schema versions (schema_version table, forward migrations in job_store.cc Migrate): 1 = the
// tables above; 2 = jobs.kind.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

struct sqlite3;

namespace kiln::store {

/// One job row. States use kiln.v1.JobState's numbers (1 QUEUED … 5 CANCELLED).
struct JobRecord {
  std::string job_id;
  int state = 1;
  int64_t created_ms = 0;   ///< Unix epoch milliseconds; 0 = unset
  int64_t started_ms = 0;
  int64_t finished_ms = 0;
  std::string model_id;
  std::string backend;
  std::string device;
  std::string client;
  std::string idempotency_key;  ///< "" = none (unique otherwise)
  int attempt = 0;
  int error_code = 0;
  std::string error_message;
  std::map<std::string, std::string> labels;
  int configurations = 1;
  int configurations_done = 0;
  int64_t layers_done = 0;
  int64_t layers_total = 0;
  std::string current_layer;    ///< advise jobs: the search's latest step
  int64_t layers_below_threshold = 0;
  bool results_expired = false;
  int64_t bytes = 0;            ///< input and result files of this job on disk
  int64_t events = 0;           ///< events stored (the last sequence number)
  int64_t dropped_events = 0;   ///< events not stored (over the per-job limit)
  std::string request;          ///< opaque: the submitted request without tensor bytes
  int kind = 0;                 ///< kiln.v1.JobKind's number: 0 a run, 1 an advise job (request's message)
  bool cancel_requested = false;  ///< a farm: a client cancelled it while a worker ran it (RequestCancel)
};

/// A worker's claim on a job (store/job_queue.h JobClaim), carried by its writes. Empty: unfenced.
struct JobFence {
  int attempt = 0;
  std::string lease_token;
  bool empty() const { return lease_token.empty(); }
};

struct JobEventRecord {
  int64_t sequence = 0;
  int64_t time_ms = 0;
  std::string blob;
};

struct JobResultRecord {
  int configuration = 0;
  std::string report;                    ///< opaque: the report without output bytes
  std::vector<int64_t> output_sizes;     ///< bytes of each output, in order (ReadOutput reads them)
};

struct JobFilter {
  int state = 0;                              ///< 0 = any
  std::string model_id;                       ///< "" = any
  std::map<std::string, std::string> labels;  ///< every pair must match
  std::string before_job_id;                  ///< page cursor: ids strictly smaller ("" = none)
  int limit = 50;
};

class JobStore {
 public:
  /// The embedded store: opens (creating) DATA_DIR/jobs/jobs.db, migrates the schema, removes
  /// files without rows (EmbeddedJobStore).
  static Result<std::unique_ptr<JobStore>> Open(const std::string& data_dir);
  virtual ~JobStore() = default;

  /// Stores `inputs` then inserts `job` (its `bytes` set to the inputs' total) and, when
  /// `first_event` is not empty, that event as sequence 1 at `job.created_ms` in the same
  /// transaction: a job is never stored without its first event, so no later event (a farm's
  /// worker may claim the job the moment it is stored) comes before it. When
  /// `job.idempotency_key` is already used, nothing is written and the existing row is returned
  /// with `*existed` = true.
  virtual Result<JobRecord> Create(JobRecord job, const std::vector<std::string_view>& inputs, bool* existed,
                                   std::string_view first_event = {}) = 0;
  /// Rewrites the mutable fields of an existing row (everything but id, created, client, key,
  /// request, bytes, events, cancel_requested). Fenced by `fence` (see the header comment).
  virtual Status Update(const JobRecord& job, const JobFence& fence = {}) = 0;
  /// Update, and the event `blob` (a state change: never dropped, whatever the event limit)
  /// appended in the same transaction; returns its sequence. A reader who sees the row's new state
  /// also finds the event that announced it — a watcher that starts after a job ended reads the end
  /// at once (server/job_service.cc WatchJob) — and a failure stores neither.
  virtual Result<int64_t> UpdateWithEvent(const JobRecord& job, int64_t time_ms, std::string_view blob,
                                          const JobFence& fence = {}) = 0;
  virtual Result<JobRecord> Get(const std::string& job_id) const = 0;
  /// The job submitted with `key`, if any.
  virtual Result<std::optional<JobRecord>> FindByIdempotencyKey(const std::string& key) const = 0;
  /// Newest first (job ids sort by submission time).
  virtual Result<std::vector<JobRecord>> List(const JobFilter& filter) const = 0;
  /// Rows in QUEUED or RUNNING state, oldest first (start-up recovery).
  virtual Result<std::vector<JobRecord>> Unfinished() const = 0;
  /// Counts by state (kiln.v1.JobState number → rows).
  virtual Result<std::map<int, int64_t>> CountByState() const = 0;

  /// Appends an event with the next sequence number (returned). Past `max_events` per job the
  /// event is not stored and the job's dropped_events grows; the returned sequence is then 0.
  virtual Result<int64_t> AppendEvent(const std::string& job_id, int64_t time_ms, std::string_view blob,
                                      int64_t max_events, const JobFence& fence = {}) = 0;
  /// Events with sequence > after, at most `limit`, in order.
  virtual Result<std::vector<JobEventRecord>> Events(const std::string& job_id, int64_t after, int limit) const = 0;

  /// Raw bytes of input k (as written by Create).
  virtual Result<std::string> ReadInput(const std::string& job_id, int k) const = 0;

  /// Stores the outputs of configuration `configuration` then its row; replaces an earlier result
  /// of the same configuration (a re-run). Adds the outputs' size to the job's `bytes`.
  virtual Status PutResult(const std::string& job_id, int configuration, std::string_view report,
                           const std::vector<std::string_view>& outputs, const JobFence& fence = {}) = 0;
  /// Results in configuration order.
  virtual Result<std::vector<JobResultRecord>> Results(const std::string& job_id) const = 0;
  /// Up to `max_bytes` of output k of configuration c from `offset` (DATA_LOSS when it is
  /// shorter than its recorded size).
  virtual Result<std::string> ReadOutput(const std::string& job_id, int configuration, int k, int64_t offset,
                                         int64_t max_bytes) const = 0;
  /// Removes the results and marks the job results_expired; inputs go too when the job is
  /// finished. Returns the bytes freed.
  virtual Result<int64_t> ExpireResults(const std::string& job_id) = 0;

  /// Finished jobs with results, oldest finished first (retention candidates).
  virtual Result<std::vector<JobRecord>> FinishedWithResults() const = 0;
  /// Sum of `bytes` over all jobs.
  virtual int64_t total_bytes() const = 0;

  // --- a farm's (PgJobStore); the embedded store has one process and needs none of these ---
  /// In one transaction: takes a QUEUED job no worker holds out of the queue (`*dequeued` = true;
  /// the caller records it CANCELLED), or sets cancel_requested on an unfinished one (its worker
  /// sees it at its next heartbeat, a later claimer at its start). Returns the row.
  virtual Result<JobRecord> RequestCancel(const std::string& job_id, bool* dequeued) {
    (void)dequeued;
    return Unimplemented("cancel requests are for a farm's shared store (job " + job_id + ")");
  }
  /// Queued jobs in all, and those of one principal: clients equal to `principal` or starting
  /// with `principal_prefix` (the principal and the sub-key separator, sched/scheduler.h).
  virtual Result<std::pair<int64_t, int64_t>> CountQueued(const std::string& principal,
                                                          const std::string& principal_prefix) const {
    (void)principal_prefix;
    return Unimplemented("queue counts are for a farm's shared store (" + principal + ")");
  }
  /// Blocks until events of some jobs were appended by any process (their ids; may repeat), or
  /// the timeout (empty). std::nullopt: some may have been missed — notifications are down, or
  /// were just (re)established — so the caller treats every job as woken, and polls.
  virtual std::optional<std::vector<std::string>> WaitForEvents(std::chrono::milliseconds timeout) {
    (void)timeout;
    return std::nullopt;
  }
  /// Unfinished jobs whose queue entry failed for good (the lease of the last attempt expired:
  /// store/job_queue.h ExpireLeases); the caller FAILs them.
  virtual Result<std::vector<JobRecord>> Abandoned() const { return std::vector<JobRecord>{}; }
};

class SqliteStmt;  // a prepared SQLite statement (job_store.cc)

class EmbeddedJobStore : public JobStore {
 public:
  static Result<std::unique_ptr<EmbeddedJobStore>> Open(const std::string& data_dir);
  ~EmbeddedJobStore() override;
  EmbeddedJobStore(const EmbeddedJobStore&) = delete;
  EmbeddedJobStore& operator=(const EmbeddedJobStore&) = delete;

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

  const std::string& dir() const { return dir_; }

 private:
  EmbeddedJobStore(std::string dir, sqlite3* db) : dir_(std::move(dir)), db_(db) {}
  Status Migrate();
  Status RemoveOrphanFiles();
  Result<JobRecord> GetLocked(const std::string& job_id) const;
  // The row's UPDATE, and one event's INSERT (AppendEvent's rules), inside the caller's
  // transaction (mu_ held).
  Status UpdateLocked(const JobRecord& job);
  Result<int64_t> AppendLocked(const std::string& job_id, int64_t time_ms, std::string_view blob, int64_t max_events);
  // The rows whose ids the prepared, bound `select_ids` returns, in its order (mu_ held): List,
  // Unfinished and FinishedWithResults differ only in that SELECT.
  Result<std::vector<JobRecord>> JobsOfLocked(SqliteStmt& select_ids) const;

  std::string dir_;  // DATA_DIR/jobs
  sqlite3* db_;
  mutable std::mutex mu_;
  int64_t total_bytes_ = 0;
};

}  // namespace kiln::store
