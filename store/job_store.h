// kiln::store::JobStore — the embedded, durable store of device-farm jobs (proto/kiln/v1/job.proto).
//
// Layout under DATA_DIR/jobs/ (the model store's objects/ is never touched):
//   jobs.db                           SQLite 3 (WAL, synchronous=FULL): tables schema_version,
//                                     jobs, job_labels, job_events, job_results
//   <job_id>/inputs/<k>.bin           raw bytes of the k-th inline input tensor of the request
//   <job_id>/results/<c>/<k>.bin      raw bytes of output k of configuration c
// Files are written, fsync'ed and their directory fsync'ed before the row that names them is
// committed, so a row never points at a missing or partial file; files without a row (a crash in
// between) are removed when the store opens.
//
// The store knows no protobuf: requests, events and reports are opaque blobs (api/jobs.cc
// serializes kiln.v1 messages into them). Thread-safe: one connection behind one mutex; every call
// is a short transaction (no call holds the mutex across more than its own statements and files).
// Errors: INTERNAL (SQLite or file errors, the message names the file), RESOURCE_EXHAUSTED (the
// disk is full: ENOSPC / SQLITE_FULL), NOT_FOUND (no such job), FAILED_PRECONDITION (a database
// whose schema is newer than this build).
//
// Schema versions (schema_version table, forward migrations in job_store.cc Migrate): 1 = the
// tables above; 2 = jobs.kind.
#pragma once

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
};

struct JobEventRecord {
  int64_t sequence = 0;
  int64_t time_ms = 0;
  std::string blob;
};

struct JobResultRecord {
  int configuration = 0;
  std::string report;                    ///< opaque: the report without output bytes
  std::vector<std::string> output_paths; ///< absolute paths of the output files, in order
  std::vector<int64_t> output_sizes;
};

struct JobFilter {
  int state = 0;                              ///< 0 = any
  std::string model_id;                       ///< "" = any
  std::map<std::string, std::string> labels;  ///< every pair must match
  std::string before_job_id;                  ///< page cursor: ids strictly smaller ("" = none)
  int limit = 50;
};

class SqliteStmt;  // a prepared SQLite statement (job_store.cc)

class JobStore {
 public:
  /// Opens (creating) DATA_DIR/jobs/jobs.db, migrates the schema, removes files without rows.
  static Result<std::unique_ptr<JobStore>> Open(const std::string& data_dir);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  /// Writes `inputs` (each as <job_id>/inputs/<k>.bin) then inserts `job` (its `bytes` set to the
  /// input files' total). When `job.idempotency_key` is already used, nothing is written and the
  /// existing row is returned with `*existed` = true.
  Result<JobRecord> Create(JobRecord job, const std::vector<std::string_view>& inputs, bool* existed);
  /// Rewrites the mutable fields of an existing row (everything but id, created, client, key,
  /// request, bytes, events).
  Status Update(const JobRecord& job);
  Result<JobRecord> Get(const std::string& job_id) const;
  /// The job submitted with `key`, if any.
  Result<std::optional<JobRecord>> FindByIdempotencyKey(const std::string& key) const;
  /// Newest first (job ids sort by submission time).
  Result<std::vector<JobRecord>> List(const JobFilter& filter) const;
  /// Rows in QUEUED or RUNNING state, oldest first (start-up recovery).
  Result<std::vector<JobRecord>> Unfinished() const;
  /// Counts by state (kiln.v1.JobState number → rows).
  Result<std::map<int, int64_t>> CountByState() const;

  /// Appends an event with the next sequence number (returned). Past `max_events` per job the
  /// event is not stored and the job's dropped_events grows; the returned sequence is then 0.
  Result<int64_t> AppendEvent(const std::string& job_id, int64_t time_ms, std::string_view blob,
                              int64_t max_events);
  /// Events with sequence > after, at most `limit`, in order.
  Result<std::vector<JobEventRecord>> Events(const std::string& job_id, int64_t after, int limit) const;

  /// Raw bytes of input k (as written by Create).
  Result<std::string> ReadInput(const std::string& job_id, int k) const;

  /// Writes the outputs of configuration `configuration` then its row; replaces an earlier result
  /// of the same configuration (a re-run). Adds the files' size to the job's `bytes`.
  Status PutResult(const std::string& job_id, int configuration, std::string_view report,
                   const std::vector<std::string_view>& outputs);
  /// Results in configuration order.
  Result<std::vector<JobResultRecord>> Results(const std::string& job_id) const;
  /// Removes the results (rows and files) and marks the job results_expired; inputs go too when
  /// the job is finished. Returns the bytes freed.
  Result<int64_t> ExpireResults(const std::string& job_id);

  /// Finished jobs with results, oldest finished first (retention candidates).
  Result<std::vector<JobRecord>> FinishedWithResults() const;
  /// Sum of `bytes` over all jobs.
  int64_t total_bytes() const;

  const std::string& dir() const { return dir_; }

 private:
  JobStore(std::string dir, sqlite3* db) : dir_(std::move(dir)), db_(db) {}
  Status Migrate();
  Status RemoveOrphanFiles();
  Result<JobRecord> GetLocked(const std::string& job_id) const;
  // The rows whose ids the prepared, bound `select_ids` returns, in its order (mu_ held): List,
  // Unfinished and FinishedWithResults differ only in that SELECT.
  Result<std::vector<JobRecord>> JobsOfLocked(SqliteStmt& select_ids) const;

  std::string dir_;  // DATA_DIR/jobs
  sqlite3* db_;
  mutable std::mutex mu_;
  int64_t total_bytes_ = 0;
};

}  // namespace kiln::store
