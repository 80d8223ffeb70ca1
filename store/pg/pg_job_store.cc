#include "store/pg/pg_job_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

namespace kiln::store::pg {
namespace {

constexpr char kEventsChannel[] = "kiln_job_events";

constexpr char kJobColumns[] =
    "j.job_id, j.state, j.created_ms, j.started_ms, j.finished_ms, j.model_id, j.backend, j.device, j.client,"
    " coalesce(j.idempotency_key, ''), j.attempt, j.error_code, j.error_message, j.configurations,"
    " j.configurations_done, j.layers_done, j.layers_total, j.current_layer, j.layers_below_threshold,"
    " j.results_expired, j.bytes, j.events, j.dropped_events, j.request, j.kind, j.cancel_requested";

pqxx::binarystring Bin(std::string_view v) { return pqxx::binarystring(v.data(), v.size()); }

JobRecord FromRow(const pqxx::row& r) {
  JobRecord j;
  j.job_id = r[0].as<std::string>();
  j.state = r[1].as<int>();
  j.created_ms = r[2].as<int64_t>();
  j.started_ms = r[3].as<int64_t>();
  j.finished_ms = r[4].as<int64_t>();
  j.model_id = r[5].as<std::string>();
  j.backend = r[6].as<std::string>();
  j.device = r[7].as<std::string>();
  j.client = r[8].as<std::string>();
  j.idempotency_key = r[9].as<std::string>();
  j.attempt = r[10].as<int>();
  j.error_code = r[11].as<int>();
  j.error_message = r[12].as<std::string>();
  j.configurations = r[13].as<int>();
  j.configurations_done = r[14].as<int>();
  j.layers_done = r[15].as<int64_t>();
  j.layers_total = r[16].as<int64_t>();
  j.current_layer = r[17].as<std::string>();
  j.layers_below_threshold = r[18].as<int64_t>();
  j.results_expired = r[19].as<bool>();
  j.bytes = r[20].as<int64_t>();
  j.events = r[21].as<int64_t>();
  j.dropped_events = r[22].as<int64_t>();
  j.request = ByteaBytes(r[23]);
  j.kind = r[24].as<int>();
  j.cancel_requested = r[25].as<bool>();
  return j;
}

bool Finished(int state) { return state >= 3; }

Status LeaseLost(const std::string& job_id, const JobFence& fence) {
  return FailedPrecondition("job " + job_id + ": the lease of attempt " + std::to_string(fence.attempt) +
                            " is no longer current (it expired, or another worker holds the job now)");
}

// In `tx`: locks the job's queue entry when `fence` is its current claim (see the header);
// FAILED_PRECONDITION otherwise. Unfenced writes pass.
Status CheckFence(pqxx::work& tx, const std::string& job_id, const JobFence& fence) {
  if (fence.empty()) return Status::Ok();
  if (tx.exec_prepared("kiln_jobs_fence", job_id, fence.attempt, fence.lease_token).empty()) {
    return LeaseLost(job_id, fence);
  }
  return Status::Ok();
}

// The row's UPDATE inside `tx` (a fenced end also completes the queue entry).
Status UpdateRow(pqxx::work& tx, const JobRecord& j, const JobFence& fence) {
  if (!fence.empty() && Finished(j.state)) tx.exec_prepared("kiln_jobs_queue_done", j.job_id);
  const bool found = tx.exec_prepared("kiln_jobs_update", j.job_id, j.state, j.started_ms, j.finished_ms, j.device,
                                      j.attempt, j.error_code, j.error_message, j.configurations_done, j.layers_done,
                                      j.layers_total, j.current_layer, j.layers_below_threshold, j.results_expired)
                         .affected_rows() == 1;
  if (!found) return NotFound("job '" + j.job_id + "' not found");
  return Status::Ok();
}

// One event inside `tx` (JobStore::AppendEvent's rules); NOTIFYs at commit.
Result<int64_t> InsertEvent(pqxx::work& tx, const std::string& job_id, int64_t time_ms, std::string_view blob,
                            int64_t max_events) {
  pqxx::result r = tx.exec_prepared("kiln_jobs_event_seq", job_id, max_events);
  if (r.empty()) {
    if (tx.exec_prepared("kiln_jobs_event_drop", job_id).affected_rows() != 1) {
      return NotFound("job '" + job_id + "' not found");
    }
    return int64_t{0};
  }
  const int64_t seq = r[0][0].as<int64_t>();
  tx.exec_prepared("kiln_jobs_event_insert", job_id, seq, time_ms, Bin(blob));
  tx.exec_prepared("kiln_jobs_notify_events", job_id);
  return seq;
}

}  // namespace

struct PgJobStore::Listener {
  struct Receiver : pqxx::notification_receiver {
    Receiver(pqxx::connection_base& c) : pqxx::notification_receiver(c, kEventsChannel) {}
    void operator()(const std::string& payload, int) override { ids.push_back(payload); }
    std::vector<std::string> ids;
  };
  explicit Listener(const std::string& url) : conn(url), receiver(conn) {}
  pqxx::connection conn;
  Receiver receiver;
};

PgJobStore::PgJobStore(PgPool* pool) : pool_(pool) {
  const std::string cols = kJobColumns;
  pool_->Prepare("kiln_jobs_get", "SELECT " + cols + " FROM kiln_jobs j WHERE j.job_id = $1");
  pool_->Prepare("kiln_jobs_by_key", "SELECT " + cols + " FROM kiln_jobs j WHERE j.idempotency_key = $1");
  pool_->Prepare("kiln_jobs_labels_of",
                 "SELECT job_id, key, value FROM kiln_job_labels WHERE job_id = ANY($1::text[]) ORDER BY job_id, key");
  pool_->Prepare("kiln_jobs_insert",
                 "INSERT INTO kiln_jobs (job_id, state, created_ms, model_id, backend, client, idempotency_key,"
                 " attempt, configurations, request, kind, bytes)"
                 " VALUES ($1, $2, $3, $4, $5, $6, NULLIF($7, ''), $8, $9, $10, $11, $12)"
                 " ON CONFLICT (idempotency_key) DO NOTHING");
  pool_->Prepare("kiln_jobs_insert_label", "INSERT INTO kiln_job_labels (job_id, key, value) VALUES ($1, $2, $3)");
  pool_->Prepare("kiln_jobs_insert_input", "INSERT INTO kiln_job_inputs (job_id, k, bytes) VALUES ($1, $2, $3)");
  pool_->Prepare("kiln_jobs_enqueue",
                 "INSERT INTO kiln_job_queue (job_id, backend, payload, client) VALUES ($1, $2, '', $3)");
  pool_->Prepare("kiln_jobs_notify_work", "SELECT pg_notify('kiln_jobs', $1)");
  pool_->Prepare("kiln_jobs_fence",
                 "SELECT 1 FROM kiln_job_queue WHERE job_id = $1 AND attempt = $2 AND lease_token = $3"
                 " AND (state = 3 OR (state = 2 AND lease_expires >= clock_timestamp())) FOR UPDATE");
  pool_->Prepare("kiln_jobs_queue_done",
                 "UPDATE kiln_job_queue SET state = 3, lease_expires = NULL WHERE job_id = $1");
  pool_->Prepare("kiln_jobs_update",
                 "UPDATE kiln_jobs SET state = $2, started_ms = $3, finished_ms = $4, device = $5, attempt = $6,"
                 " error_code = $7, error_message = $8, configurations_done = $9, layers_done = $10,"
                 " layers_total = $11, current_layer = $12, layers_below_threshold = $13, results_expired = $14"
                 " WHERE job_id = $1");
  pool_->Prepare("kiln_jobs_list",
                 "SELECT " + cols + " FROM kiln_jobs j WHERE ($1 = 0 OR j.state = $1) AND ($2 = '' OR j.model_id = $2)"
                 " AND ($3 = '' OR j.job_id < $3) AND NOT EXISTS (SELECT 1 FROM unnest($4::text[], $5::text[]) AS"
                 " f(k, v) WHERE NOT EXISTS (SELECT 1 FROM kiln_job_labels l WHERE l.job_id = j.job_id AND"
                 " l.key = f.k AND l.value = f.v)) ORDER BY j.job_id DESC LIMIT $6");
  pool_->Prepare("kiln_jobs_unfinished",
                 "SELECT " + cols + " FROM kiln_jobs j WHERE j.state IN (1, 2) ORDER BY j.job_id");
  pool_->Prepare("kiln_jobs_count", "SELECT state, count(*) FROM kiln_jobs GROUP BY state");
  pool_->Prepare("kiln_jobs_event_seq",
                 "UPDATE kiln_jobs SET events = events + 1 WHERE job_id = $1 AND ($2 = 0 OR events < $2)"
                 " RETURNING events");
  pool_->Prepare("kiln_jobs_event_drop",
                 "UPDATE kiln_jobs SET dropped_events = dropped_events + 1 WHERE job_id = $1");
  pool_->Prepare("kiln_jobs_event_insert",
                 "INSERT INTO kiln_job_events (job_id, sequence, time_ms, blob) VALUES ($1, $2, $3, $4)");
  pool_->Prepare("kiln_jobs_notify_events", "SELECT pg_notify('kiln_job_events', $1)");
  pool_->Prepare("kiln_jobs_events",
                 "SELECT sequence, time_ms, blob FROM kiln_job_events WHERE job_id = $1 AND sequence > $2"
                 " ORDER BY sequence LIMIT $3");
  pool_->Prepare("kiln_jobs_input", "SELECT bytes FROM kiln_job_inputs WHERE job_id = $1 AND k = $2");
  pool_->Prepare("kiln_jobs_output_bytes",
                 "SELECT coalesce(sum(length(bytes)), 0) FROM kiln_job_outputs WHERE job_id = $1 AND configuration = $2");
  pool_->Prepare("kiln_jobs_output_delete", "DELETE FROM kiln_job_outputs WHERE job_id = $1 AND configuration = $2");
  pool_->Prepare("kiln_jobs_output_insert",
                 "INSERT INTO kiln_job_outputs (job_id, configuration, k, bytes) VALUES ($1, $2, $3, $4)");
  pool_->Prepare("kiln_jobs_result_upsert",
                 "INSERT INTO kiln_job_results (job_id, configuration, report, outputs) VALUES ($1, $2, $3, $4)"
                 " ON CONFLICT (job_id, configuration) DO UPDATE SET report = EXCLUDED.report, outputs = EXCLUDED.outputs");
  pool_->Prepare("kiln_jobs_add_bytes", "UPDATE kiln_jobs SET bytes = bytes + $2 WHERE job_id = $1");
  pool_->Prepare("kiln_jobs_results",
                 "SELECT configuration, report, outputs FROM kiln_job_results WHERE job_id = $1 ORDER BY configuration");
  pool_->Prepare("kiln_jobs_output_sizes",
                 "SELECT configuration, k, length(bytes) FROM kiln_job_outputs WHERE job_id = $1"
                 " ORDER BY configuration, k");
  pool_->Prepare("kiln_jobs_output_slice",
                 "SELECT substring(bytes FROM $4 FOR $5), length(bytes) FROM kiln_job_outputs"
                 " WHERE job_id = $1 AND configuration = $2 AND k = $3");
  pool_->Prepare("kiln_jobs_lock", "SELECT state, bytes FROM kiln_jobs WHERE job_id = $1 FOR UPDATE");
  pool_->Prepare("kiln_jobs_results_delete", "DELETE FROM kiln_job_results WHERE job_id = $1");
  pool_->Prepare("kiln_jobs_outputs_delete", "DELETE FROM kiln_job_outputs WHERE job_id = $1");
  pool_->Prepare("kiln_jobs_inputs_delete", "DELETE FROM kiln_job_inputs WHERE job_id = $1");
  pool_->Prepare("kiln_jobs_expired", "UPDATE kiln_jobs SET results_expired = true, bytes = 0 WHERE job_id = $1");
  pool_->Prepare("kiln_jobs_finished_with_results",
                 "SELECT " + cols + " FROM kiln_jobs j WHERE j.state >= 3 AND NOT j.results_expired"
                 " ORDER BY j.finished_ms, j.job_id");
  pool_->Prepare("kiln_jobs_total_bytes", "SELECT coalesce(sum(bytes), 0) FROM kiln_jobs");
  pool_->Prepare("kiln_jobs_dequeue", "DELETE FROM kiln_job_queue WHERE job_id = $1 AND state = 1");
  pool_->Prepare("kiln_jobs_cancel_request",
                 "UPDATE kiln_jobs SET cancel_requested = true WHERE job_id = $1 AND state IN (1, 2)");
  pool_->Prepare("kiln_jobs_count_queued",
                 "SELECT count(*), count(*) FILTER (WHERE client = $1 OR starts_with(client, $2))"
                 " FROM kiln_jobs WHERE state = 1");
  pool_->Prepare("kiln_jobs_abandoned",
                 "SELECT " + cols + " FROM kiln_jobs j JOIN kiln_job_queue q ON q.job_id = j.job_id"
                 " WHERE j.state IN (1, 2) AND q.state = 4 ORDER BY j.job_id");
}

PgJobStore::~PgJobStore() = default;

Result<std::vector<JobRecord>> PgJobStore::Jobs(const std::string& what,
                                                const std::function<pqxx::result(pqxx::work&)>& query) const {
  std::vector<JobRecord> out;
  Status st = pool_->Transact(what, [&](pqxx::work& tx) -> Status {
    out.clear();
    pqxx::result r = query(tx);
    std::vector<std::string> ids;
    std::map<std::string, size_t> at;
    for (const auto& row : r) {
      out.push_back(FromRow(row));
      at[out.back().job_id] = out.size() - 1;
      ids.push_back(out.back().job_id);
    }
    if (ids.empty()) return Status::Ok();
    for (const auto& row : tx.exec_prepared("kiln_jobs_labels_of", TextArrayLiteral(ids))) {
      out[at[row[0].as<std::string>()]].labels[row[1].as<std::string>()] = row[2].as<std::string>();
    }
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return out;
}

Result<JobRecord> PgJobStore::Create(JobRecord job, const std::vector<std::string_view>& inputs, bool* existed,
                                     std::string_view first_event) {
  if (existed) *existed = false;
  int64_t bytes = 0;
  for (const auto& in : inputs) bytes += static_cast<int64_t>(in.size());
  job.bytes = bytes;
  bool was = false;
  Status st = pool_->Transact("storing job " + job.job_id, [&](pqxx::work& tx) -> Status {
    was = false;
    const bool inserted =
        tx.exec_prepared("kiln_jobs_insert", job.job_id, job.state, job.created_ms, job.model_id, job.backend, job.client,
                         job.idempotency_key, job.attempt, job.configurations, Bin(job.request), job.kind, bytes)
            .affected_rows() == 1;
    if (!inserted) {
      was = true;  // the idempotency key is taken: the caller gets that job
      return Status::Ok();
    }
    for (const auto& [k, v] : job.labels) tx.exec_prepared("kiln_jobs_insert_label", job.job_id, k, v);
    for (size_t k = 0; k < inputs.size(); ++k) {
      tx.exec_prepared("kiln_jobs_insert_input", job.job_id, static_cast<int>(k), Bin(inputs[k]));
    }
    if (!first_event.empty()) {
      auto seq = InsertEvent(tx, job.job_id, job.created_ms, first_event, 0);
      if (!seq.ok()) return seq.status();
      job.events = *seq;
    }
    if (job.state == 1) {
      tx.exec_prepared("kiln_jobs_enqueue", job.job_id, job.backend, job.client);
      tx.exec_prepared("kiln_jobs_notify_work", job.backend);
    }
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (was) {
    auto found = FindByIdempotencyKey(job.idempotency_key);
    if (!found.ok()) return found.status();
    if (!found->has_value()) return Status{StatusCode::kAborted, "job " + job.job_id + ": idempotency key taken by a job not found; retry"};
    if (existed) *existed = true;
    return **found;
  }
  return job;
}

Status PgJobStore::Update(const JobRecord& j, const JobFence& fence) {
  return pool_->Transact("updating job " + j.job_id, [&](pqxx::work& tx) -> Status {
    KILN_RETURN_IF_ERROR(CheckFence(tx, j.job_id, fence));
    return UpdateRow(tx, j, fence);
  });
}

Result<int64_t> PgJobStore::UpdateWithEvent(const JobRecord& j, int64_t time_ms, std::string_view blob,
                                            const JobFence& fence) {
  int64_t seq = 0;
  Status st = pool_->Transact("updating job " + j.job_id, [&](pqxx::work& tx) -> Status {
    KILN_RETURN_IF_ERROR(CheckFence(tx, j.job_id, fence));
    KILN_RETURN_IF_ERROR(UpdateRow(tx, j, fence));
    auto r = InsertEvent(tx, j.job_id, time_ms, blob, 0);
    if (!r.ok()) return r.status();
    seq = *r;
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return seq;
}

Result<JobRecord> PgJobStore::Get(const std::string& job_id) const {
  auto rows = Jobs("looking up job " + job_id, [&](pqxx::work& tx) { return tx.exec_prepared("kiln_jobs_get", job_id); });
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return NotFound("job '" + job_id + "' not found");
  return std::move(rows->front());
}

Result<std::optional<JobRecord>> PgJobStore::FindByIdempotencyKey(const std::string& key) const {
  auto rows = Jobs("looking up an idempotency key", [&](pqxx::work& tx) { return tx.exec_prepared("kiln_jobs_by_key", key); });
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return std::optional<JobRecord>();
  return std::optional<JobRecord>(std::move(rows->front()));
}

Result<std::vector<JobRecord>> PgJobStore::List(const JobFilter& f) const {
  std::vector<std::string> keys, values;
  for (const auto& [k, v] : f.labels) {
    keys.push_back(k);
    values.push_back(v);
  }
  return Jobs("listing jobs", [&](pqxx::work& tx) {
    return tx.exec_prepared("kiln_jobs_list", f.state, f.model_id, f.before_job_id, TextArrayLiteral(keys),
                            TextArrayLiteral(values),
                            f.limit);
  });
}

Result<std::vector<JobRecord>> PgJobStore::Unfinished() const {
  return Jobs("listing unfinished jobs", [&](pqxx::work& tx) { return tx.exec_prepared("kiln_jobs_unfinished"); });
}

Result<std::map<int, int64_t>> PgJobStore::CountByState() const {
  std::map<int, int64_t> out;
  Status st = pool_->ReadOne("counting jobs", [&](pqxx::nontransaction& tx) -> Status {
    out.clear();
    for (const auto& r : tx.exec_prepared("kiln_jobs_count")) out[r[0].as<int>()] = r[1].as<int64_t>();
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return out;
}

Result<int64_t> PgJobStore::AppendEvent(const std::string& job_id, int64_t time_ms, std::string_view blob,
                                        int64_t max_events, const JobFence& fence) {
  int64_t seq = 0;
  Status st = pool_->Transact("appending an event to job " + job_id, [&](pqxx::work& tx) -> Status {
    KILN_RETURN_IF_ERROR(CheckFence(tx, job_id, fence));
    auto r = InsertEvent(tx, job_id, time_ms, blob, max_events);
    if (!r.ok()) return r.status();
    seq = *r;
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return seq;
}

Result<std::vector<JobEventRecord>> PgJobStore::Events(const std::string& job_id, int64_t after, int limit) const {
  std::vector<JobEventRecord> out;
  Status st = pool_->ReadOne("reading the events of job " + job_id, [&](pqxx::nontransaction& tx) -> Status {
    out.clear();
    for (const auto& r : tx.exec_prepared("kiln_jobs_events", job_id, after, limit)) {
      out.push_back({r[0].as<int64_t>(), r[1].as<int64_t>(), ByteaBytes(r[2])});
    }
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return out;
}

Result<std::string> PgJobStore::ReadInput(const std::string& job_id, int k) const {
  std::optional<std::string> out;
  Status st = pool_->ReadOne("reading an input of job " + job_id, [&](pqxx::nontransaction& tx) -> Status {
    pqxx::result r = tx.exec_prepared("kiln_jobs_input", job_id, k);
    if (!r.empty()) out = ByteaBytes(r[0][0]);
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (!out) return NotFound("job " + job_id + ": input " + std::to_string(k) + " not stored");
  return *std::move(out);
}

Status PgJobStore::PutResult(const std::string& job_id, int configuration, std::string_view report,
                             const std::vector<std::string_view>& outputs, const JobFence& fence) {
  int64_t bytes = 0;
  for (const auto& o : outputs) bytes += static_cast<int64_t>(o.size());
  return pool_->Transact("storing a result of job " + job_id, [&](pqxx::work& tx) -> Status {
    KILN_RETURN_IF_ERROR(CheckFence(tx, job_id, fence));
    const int64_t old = tx.exec_prepared1("kiln_jobs_output_bytes", job_id, configuration)[0].as<int64_t>();
    tx.exec_prepared("kiln_jobs_output_delete", job_id, configuration);
    for (size_t k = 0; k < outputs.size(); ++k) {
      tx.exec_prepared("kiln_jobs_output_insert", job_id, configuration, static_cast<int>(k), Bin(outputs[k]));
    }
    tx.exec_prepared("kiln_jobs_result_upsert", job_id, configuration, Bin(report), static_cast<int>(outputs.size()));
    if (tx.exec_prepared("kiln_jobs_add_bytes", job_id, bytes - old).affected_rows() != 1) {
      return NotFound("job '" + job_id + "' not found");
    }
    return Status::Ok();
  });
}

Result<std::vector<JobResultRecord>> PgJobStore::Results(const std::string& job_id) const {
  std::vector<JobResultRecord> out;
  Status st = pool_->Transact("reading the results of job " + job_id, [&](pqxx::work& tx) -> Status {
    out.clear();
    std::map<int, size_t> at;
    for (const auto& r : tx.exec_prepared("kiln_jobs_results", job_id)) {
      JobResultRecord rec;
      rec.configuration = r[0].as<int>();
      rec.report = ByteaBytes(r[1]);
      rec.output_sizes.assign(static_cast<size_t>(r[2].as<int>()), -1);  // -1: missing (DATA_LOSS on read)
      at[rec.configuration] = out.size();
      out.push_back(std::move(rec));
    }
    for (const auto& r : tx.exec_prepared("kiln_jobs_output_sizes", job_id)) {
      auto it = at.find(r[0].as<int>());
      const auto k = static_cast<size_t>(r[1].as<int>());
      if (it != at.end() && k < out[it->second].output_sizes.size()) out[it->second].output_sizes[k] = r[2].as<int64_t>();
    }
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return out;
}

Result<std::string> PgJobStore::ReadOutput(const std::string& job_id, int configuration, int k, int64_t offset,
                                           int64_t max_bytes) const {
  std::optional<std::string> out;
  Status st = pool_->ReadOne("reading a result of job " + job_id, [&](pqxx::nontransaction& tx) -> Status {
    // substring counts from 1.
    pqxx::result r = tx.exec_prepared("kiln_jobs_output_slice", job_id, configuration, k, offset + 1, max_bytes);
    if (!r.empty()) out = ByteaBytes(r[0][0]);
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (!out) {
    return DataLoss("job " + job_id + ": output " + std::to_string(k) + " of configuration " +
                    std::to_string(configuration) + " missing");
  }
  return *std::move(out);
}

Result<int64_t> PgJobStore::ExpireResults(const std::string& job_id) {
  int64_t freed = 0;
  bool found = false;
  Status st = pool_->Transact("expiring the results of job " + job_id, [&](pqxx::work& tx) -> Status {
    pqxx::result r = tx.exec_prepared("kiln_jobs_lock", job_id);
    found = !r.empty();
    if (!found) return Status::Ok();
    const int state = r[0][0].as<int>();
    freed = r[0][1].as<int64_t>();
    tx.exec_prepared("kiln_jobs_results_delete", job_id);
    tx.exec_prepared("kiln_jobs_outputs_delete", job_id);
    if (Finished(state)) tx.exec_prepared("kiln_jobs_inputs_delete", job_id);
    tx.exec_prepared("kiln_jobs_expired", job_id);
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (!found) return NotFound("job '" + job_id + "' not found");
  return freed;
}

Result<std::vector<JobRecord>> PgJobStore::FinishedWithResults() const {
  return Jobs("listing finished jobs", [&](pqxx::work& tx) { return tx.exec_prepared("kiln_jobs_finished_with_results"); });
}

int64_t PgJobStore::total_bytes() const {
  int64_t total = 0;
  Status st = pool_->ReadOne("summing job bytes", [&](pqxx::nontransaction& tx) -> Status {
    total = tx.exec_prepared1("kiln_jobs_total_bytes")[0].as<int64_t>();
    return Status::Ok();
  });
  if (!st.ok()) spdlog::warn("jobs: {}", st.ToString());
  return total;
}

Result<JobRecord> PgJobStore::RequestCancel(const std::string& job_id, bool* dequeued) {
  *dequeued = false;
  Status st = pool_->Transact("cancelling job " + job_id, [&](pqxx::work& tx) -> Status {
    // The job's row first (FOR UPDATE), then its queue entry: a worker's claim locks the entry
    // (SKIP LOCKED), so either the claim or this delete wins, never both.
    pqxx::result r = tx.exec_prepared("kiln_jobs_lock", job_id);
    if (r.empty() || Finished(r[0][0].as<int>())) return Status::Ok();
    *dequeued = tx.exec_prepared("kiln_jobs_dequeue", job_id).affected_rows() == 1;
    if (!*dequeued) tx.exec_prepared("kiln_jobs_cancel_request", job_id);
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return Get(job_id);
}

Result<std::pair<int64_t, int64_t>> PgJobStore::CountQueued(const std::string& principal,
                                                            const std::string& principal_prefix) const {
  std::pair<int64_t, int64_t> out;
  Status st = pool_->ReadOne("counting queued jobs", [&](pqxx::nontransaction& tx) -> Status {
    pqxx::row r = tx.exec_prepared1("kiln_jobs_count_queued", principal, principal_prefix);
    out = {r[0].as<int64_t>(), r[1].as<int64_t>()};
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return out;
}

std::optional<std::vector<std::string>> PgJobStore::WaitForEvents(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(listen_mu_);
  try {
    if (!listener_) {
      // Events appended while nobody listened (before the first LISTEN, or between a break and
      // this one) were announced to no one: std::nullopt makes the caller wake every watcher once.
      listener_ = std::make_unique<Listener>(pool_->options().url);
      return std::nullopt;
    }
    listener_->receiver.ids.clear();
    if (listener_->conn.get_notifs() == 0) {
      listener_->conn.await_notification(static_cast<long>(timeout.count() / 1000),
                                         static_cast<long>((timeout.count() % 1000) * 1000));
      listener_->conn.get_notifs();
    }
    return std::move(listener_->receiver.ids);
  } catch (const std::exception& e) {
    // The listening connection is down (libpqxx 6.4 throws broken_connection when it reads the
    // end of the session, and never reopens a connection it has: connection_base::get_notifs,
    // activate): the caller polls; the next call reconnects.
    spdlog::warn("jobs: listening for events: {}", PgErrorStatus(e, "LISTEN kiln_job_events").message());
    listener_.reset();
    return std::nullopt;
  }
}

Result<std::vector<JobRecord>> PgJobStore::Abandoned() const {
  return Jobs("listing abandoned jobs", [&](pqxx::work& tx) { return tx.exec_prepared("kiln_jobs_abandoned"); });
}

}  // namespace kiln::store::pg
