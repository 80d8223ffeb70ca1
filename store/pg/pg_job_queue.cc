#include "store/pg/pg_job_queue.h"

#include <random>
#include <thread>

namespace kiln::store::pg {
namespace {

constexpr char kChannel[] = "kiln_jobs";

std::string NewToken() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

}  // namespace

struct PgJobQueue::Listener {
  struct Receiver : pqxx::notification_receiver {
    Receiver(pqxx::connection_base& c) : pqxx::notification_receiver(c, kChannel) {}
    void operator()(const std::string&, int) override { ++received; }
    int received = 0;
  };
  explicit Listener(const std::string& url) : conn(url), receiver(conn) {}
  pqxx::connection conn;
  Receiver receiver;
};

PgJobQueue::PgJobQueue(PgPool* pool, int max_attempts) : pool_(pool), max_attempts_(max_attempts) {
  pool_->Prepare("kiln_job_enqueue",
                 "INSERT INTO kiln_job_queue (job_id, backend, payload, client) VALUES ($1, $2, $3, $4)"
                 " ON CONFLICT DO NOTHING");
  pool_->Prepare("kiln_job_notify", "SELECT pg_notify('kiln_jobs', $1)");
  // Round-robin across clients (store/job_queue.h Claim): the least recently served client of
  // the backend (kiln_job_turns; never served = 0) first, then its oldest job.
  pool_->Prepare("kiln_job_claim",
                 "WITH c AS (SELECT q.job_id, q.state AS was FROM kiln_job_queue q"
                 "  LEFT JOIN kiln_job_turns t ON t.backend = q.backend AND t.client = q.client"
                 "  WHERE q.backend = ANY($1::text[]) AND q.attempt < $4"
                 "    AND (q.state = 1 OR (q.state = 2 AND q.lease_expires < clock_timestamp()))"
                 "  ORDER BY coalesce(t.served, 0), q.seq LIMIT 1 FOR UPDATE OF q SKIP LOCKED)"
                 " UPDATE kiln_job_queue q SET state = 2, attempt = q.attempt + 1, worker = $2, lease_token = $3,"
                 "  lease_expires = clock_timestamp() + $5 * interval '1 millisecond'"
                 " FROM c WHERE q.job_id = c.job_id"
                 " RETURNING q.job_id, q.backend, q.payload, q.attempt, c.was = 2, q.client");
  pool_->Prepare("kiln_job_served",
                 "INSERT INTO kiln_job_turns (backend, client, served) VALUES ($1, $2, nextval('kiln_job_turn_seq'))"
                 " ON CONFLICT (backend, client) DO UPDATE SET served = EXCLUDED.served");
  const std::string current =
      " WHERE job_id = $1 AND attempt = $2 AND lease_token = $3 AND state = 2"
      " AND lease_expires >= clock_timestamp()";
  pool_->Prepare("kiln_job_heartbeat",
                 "UPDATE kiln_job_queue SET lease_expires = clock_timestamp() + $4 * interval '1 millisecond'" +
                     current);
  pool_->Prepare("kiln_job_complete",
                 "UPDATE kiln_job_queue SET state = 3, result = $4, lease_token = NULL, lease_expires = NULL" + current);
  pool_->Prepare("kiln_job_release",
                 "UPDATE kiln_job_queue SET state = 1, attempt = attempt - 1, lease_token = NULL,"
                 " lease_expires = NULL" + current + " RETURNING backend");
  pool_->Prepare("kiln_job_expire",
                 "UPDATE kiln_job_queue SET state = 4, lease_token = NULL"
                 " WHERE state = 2 AND lease_expires < clock_timestamp() AND attempt >= $1");
  pool_->Prepare("kiln_worker_report",
                 "INSERT INTO kiln_workers (worker, devices, running, jobs_done, draining) VALUES ($1, $2, $3, $4, $5)"
                 " ON CONFLICT (worker) DO UPDATE SET devices = EXCLUDED.devices, running = EXCLUDED.running,"
                 " jobs_done = EXCLUDED.jobs_done, draining = EXCLUDED.draining, heartbeat_at = clock_timestamp()");
  pool_->Prepare("kiln_worker_remove", "DELETE FROM kiln_workers WHERE worker = $1");
  pool_->Prepare("kiln_worker_forget",
                 "DELETE FROM kiln_workers WHERE heartbeat_at < clock_timestamp() - $1 * interval '1 second'");
  pool_->Prepare("kiln_worker_list",
                 "SELECT worker, devices, running, jobs_done, draining,"
                 " extract(epoch FROM clock_timestamp() - heartbeat_at)::float8 FROM kiln_workers"
                 " ORDER BY heartbeat_at DESC, worker");
  pool_->Prepare("kiln_job_depths",
                 "SELECT backend, count(*) FILTER (WHERE state = 1), count(*) FILTER (WHERE state = 2)"
                 " FROM kiln_job_queue WHERE state IN (1, 2) GROUP BY backend ORDER BY backend");
  pool_->Prepare("kiln_job_get",
                 "SELECT job_id, backend, state, attempt, result, worker FROM kiln_job_queue WHERE job_id = $1");
}

PgJobQueue::~PgJobQueue() = default;

Status PgJobQueue::Enqueue(const std::string& job_id, const std::string& backend, const std::string& payload,
                           const std::string& client) {
  if (job_id.empty() || backend.empty()) return InvalidArgument("job id and backend must not be empty");
  bool inserted = false;
  Status st = pool_->Transact("enqueueing job " + job_id, [&](pqxx::work& tx) -> Status {
    inserted = tx.exec_prepared("kiln_job_enqueue", job_id, backend,
                                pqxx::binarystring(payload.data(), payload.size()), client)
                   .affected_rows() == 1;
    if (inserted) tx.exec_prepared("kiln_job_notify", backend);
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (!inserted) return {StatusCode::kAlreadyExists, "job " + job_id + " is queued already"};
  return Status::Ok();
}

Result<std::optional<JobClaim>> PgJobQueue::Claim(const std::string& worker, const std::vector<std::string>& backends,
                                                  std::chrono::milliseconds lease) {
  std::optional<JobClaim> claim;
  const std::string token = NewToken();
  Status st = pool_->Transact("claiming a job", [&](pqxx::work& tx) -> Status {
    claim.reset();
    pqxx::result r = tx.exec_prepared("kiln_job_claim", TextArrayLiteral(backends), worker, token, max_attempts_,
                                      static_cast<int64_t>(lease.count()));
    if (!r.empty()) {
      claim = JobClaim{r[0][0].as<std::string>(), r[0][1].as<std::string>(), ByteaBytes(r[0][2]), r[0][3].as<int>(), token,
                       r[0][4].as<bool>()};
      tx.exec_prepared("kiln_job_served", claim->backend, r[0][5].as<std::string>());
    }
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return claim;
}

Status PgJobQueue::Heartbeat(const JobClaim& claim, std::chrono::milliseconds lease) {
  bool current = false;
  Status st = pool_->Transact("renewing the lease of job " + claim.job_id, [&](pqxx::work& tx) -> Status {
    current = tx.exec_prepared("kiln_job_heartbeat", claim.job_id, claim.attempt, claim.lease_token,
                               static_cast<int64_t>(lease.count()))
                  .affected_rows() == 1;
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (!current) {
    return FailedPrecondition("job " + claim.job_id + ": the lease of attempt " + std::to_string(claim.attempt) +
                              " is no longer current");
  }
  return Status::Ok();
}

Result<bool> PgJobQueue::Complete(const JobClaim& claim, const std::string& result) {
  bool committed = false;
  Status st = pool_->Transact("committing the result of job " + claim.job_id, [&](pqxx::work& tx) -> Status {
    committed = tx.exec_prepared("kiln_job_complete", claim.job_id, claim.attempt, claim.lease_token,
                                 pqxx::binarystring(result.data(), result.size()))
                    .affected_rows() == 1;
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (!committed) ++late_;
  return committed;
}

Status PgJobQueue::Release(const JobClaim& claim) {
  bool current = false;
  Status st = pool_->Transact("releasing job " + claim.job_id, [&](pqxx::work& tx) -> Status {
    pqxx::result r = tx.exec_prepared("kiln_job_release", claim.job_id, claim.attempt, claim.lease_token);
    current = !r.empty();
    if (current) tx.exec_prepared("kiln_job_notify", r[0][0].as<std::string>());
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (!current) return FailedPrecondition("job " + claim.job_id + ": the lease is no longer current");
  return Status::Ok();
}

Result<int> PgJobQueue::ExpireLeases() {
  int n = 0;
  Status st = pool_->Transact("failing jobs out of attempts", [&](pqxx::work& tx) -> Status {
    n = static_cast<int>(tx.exec_prepared("kiln_job_expire", max_attempts_).affected_rows());
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return n;
}

Result<JobQueueEntry> PgJobQueue::Get(const std::string& job_id) {
  std::optional<JobQueueEntry> e;
  Status st = pool_->Transact("looking up job " + job_id, [&](pqxx::work& tx) -> Status {
    pqxx::result r = tx.exec_prepared("kiln_job_get", job_id);
    if (r.empty()) return Status::Ok();
    e.emplace();
    e->job_id = r[0][0].as<std::string>();
    e->backend = r[0][1].as<std::string>();
    e->state = r[0][2].as<int>();
    e->attempt = r[0][3].as<int>();
    if (!r[0][4].is_null()) e->result = ByteaBytes(r[0][4]);
    e->worker = r[0][5].as<std::string>();
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (!e) return NotFound("job " + job_id + " not found");
  return *std::move(e);
}

Status PgJobQueue::WaitForWork(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::timed_mutex> lock(listen_mu_, std::defer_lock);
  if (!lock.try_lock_for(timeout)) return Status::Ok();  // another thread listens; callers Claim anyway
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return Status::Ok();
  try {
    if (!listener_) listener_ = std::make_unique<Listener>(pool_->options().url);
    if (listener_->conn.get_notifs() > 0) return Status::Ok();
    listener_->conn.await_notification(static_cast<long>(left.count() / 1000000), static_cast<long>(left.count() % 1000000));
  } catch (const std::exception&) {
    // The listening connection is down: poll (sleep the timeout); the next call reconnects.
    listener_.reset();
    std::this_thread::sleep_until(deadline);
  }
  return Status::Ok();
}

Status PgJobQueue::ReportWorker(const WorkerReport& r) {
  return pool_->Transact("reporting worker " + r.worker, [&](pqxx::work& tx) -> Status {
    tx.exec_prepared("kiln_worker_report", r.worker, r.devices, r.running, r.jobs_done, r.draining);
    return Status::Ok();
  });
}

Status PgJobQueue::RemoveWorker(const std::string& worker) {
  return pool_->Transact("removing worker " + worker, [&](pqxx::work& tx) -> Status {
    tx.exec_prepared("kiln_worker_remove", worker);
    return Status::Ok();
  });
}

Result<std::vector<WorkerReport>> PgJobQueue::Workers(std::chrono::seconds forget_after) {
  std::vector<WorkerReport> out;
  Status st = pool_->Transact("listing workers", [&](pqxx::work& tx) -> Status {
    out.clear();
    tx.exec_prepared("kiln_worker_forget", static_cast<int64_t>(forget_after.count()));
    for (const auto& row : tx.exec_prepared("kiln_worker_list")) {
      WorkerReport r;
      r.worker = row[0].as<std::string>();
      r.devices = row[1].as<std::string>();
      r.running = row[2].as<int>();
      r.jobs_done = row[3].as<int64_t>();
      r.draining = row[4].as<bool>();
      r.age_seconds = row[5].as<double>();
      out.push_back(std::move(r));
    }
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return out;
}

Result<std::vector<QueueDepth>> PgJobQueue::QueueDepths() {
  std::vector<QueueDepth> out;
  Status st = pool_->ReadOne("counting queued jobs", [&](pqxx::nontransaction& tx) -> Status {
    out.clear();
    for (const auto& row : tx.exec_prepared("kiln_job_depths")) {
      out.push_back({row[0].as<std::string>(), row[1].as<int64_t>(), row[2].as<int64_t>()});
    }
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return out;
}

}  // namespace kiln::store::pg
