#include "store/job_store.h"

#include "common/reactor.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

namespace kiln::store {

namespace fs = std::filesystem;

namespace {

constexpr int kSchemaVersion = 2;

// Forward migrations: kMigrations[v] takes a database at version v to v + 1.
const char* const kMigrations[] = {
    // 0 -> 1
    "CREATE TABLE jobs ("
    "  job_id TEXT PRIMARY KEY, state INTEGER NOT NULL, created_ms INTEGER NOT NULL,"
    "  started_ms INTEGER NOT NULL DEFAULT 0, finished_ms INTEGER NOT NULL DEFAULT 0,"
    "  model_id TEXT NOT NULL, backend TEXT NOT NULL, device TEXT NOT NULL DEFAULT '',"
    "  client TEXT NOT NULL, idempotency_key TEXT NOT NULL DEFAULT '',"
    "  attempt INTEGER NOT NULL DEFAULT 0, error_code INTEGER NOT NULL DEFAULT 0,"
    "  error_message TEXT NOT NULL DEFAULT '', configurations INTEGER NOT NULL,"
    "  configurations_done INTEGER NOT NULL DEFAULT 0, layers_done INTEGER NOT NULL DEFAULT 0,"
    "  layers_total INTEGER NOT NULL DEFAULT 0, current_layer TEXT NOT NULL DEFAULT '',"
    "  layers_below_threshold INTEGER NOT NULL DEFAULT 0, results_expired INTEGER NOT NULL DEFAULT 0,"
    "  bytes INTEGER NOT NULL DEFAULT 0, events INTEGER NOT NULL DEFAULT 0,"
    "  dropped_events INTEGER NOT NULL DEFAULT 0, request BLOB NOT NULL);"
    "CREATE UNIQUE INDEX jobs_idempotency ON jobs(idempotency_key) WHERE idempotency_key <> '';"
    "CREATE INDEX jobs_state ON jobs(state);"
    "CREATE TABLE job_labels (job_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
    "  PRIMARY KEY (job_id, key));"
    "CREATE TABLE job_events (job_id TEXT NOT NULL, sequence INTEGER NOT NULL, time_ms INTEGER NOT NULL,"
    "  blob BLOB NOT NULL, PRIMARY KEY (job_id, sequence));"
    "CREATE TABLE job_results (job_id TEXT NOT NULL, configuration INTEGER NOT NULL, report BLOB NOT NULL,"
    "  outputs INTEGER NOT NULL, PRIMARY KEY (job_id, configuration));",
    // 1 -> 2: the job's kind (advise jobs); every earlier job is a run (0).
    "ALTER TABLE jobs ADD COLUMN kind INTEGER NOT NULL DEFAULT 0;",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == kSchemaVersion);

Status SqlError(sqlite3* db, const std::string& what) {
  const int code = sqlite3_errcode(db);
  std::string msg = "job store: " + what + ": " + sqlite3_errmsg(db);
  if (code == SQLITE_FULL) return ResourceExhausted(msg + " (disk full)");
  return Internal(msg);
}

}  // namespace

// A prepared statement; Bind* take 1-based indices as SQLite does. Named in the header so
// JobsOfLocked can take one; nothing outside this file uses it.
class SqliteStmt {
 public:
  SqliteStmt(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &st_, nullptr) != SQLITE_OK) st_ = nullptr;
  }
  ~SqliteStmt() { sqlite3_finalize(st_); }
  SqliteStmt(const SqliteStmt&) = delete;
  SqliteStmt& operator=(const SqliteStmt&) = delete;
  bool ok() const { return st_ != nullptr; }
  SqliteStmt& Text(int i, std::string_view v) {
    sqlite3_bind_text(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  SqliteStmt& Blob(int i, std::string_view v) {
    sqlite3_bind_blob(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  SqliteStmt& Int(int i, int64_t v) {
    sqlite3_bind_int64(st_, i, v);
    return *this;
  }
  // SQLITE_ROW → true, SQLITE_DONE → false; errors in *status.
  bool Step(Status* status) {
    const int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE && status->ok()) *status = SqlError(db_, "statement failed");
    return false;
  }
  Status Run() {
    Status s;
    while (Step(&s)) {
    }
    return s;
  }
  int64_t I(int col) const { return sqlite3_column_int64(st_, col); }
  std::string S(int col) const {
    const void* p = sqlite3_column_blob(st_, col);
    const int n = sqlite3_column_bytes(st_, col);
    return p ? std::string(static_cast<const char*>(p), static_cast<size_t>(n)) : std::string();
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
};

namespace {

using Stmt = SqliteStmt;

Status Exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    if (sqlite3_errcode(db) == SQLITE_FULL) return ResourceExhausted("job store: disk full: " + msg);
    return Internal(std::string("job store: ") + msg);
  }
  return Status::Ok();
}

// BEGIN IMMEDIATE … COMMIT; rolls back unless Commit() succeeded.
class Txn {
 public:
  explicit Txn(sqlite3* db) : db_(db) {
    AssertNotOnReactor("JobStore write");  // COMMIT fsyncs the WAL
    begun_ = Exec(db, "BEGIN IMMEDIATE");
  }
  ~Txn() {
    if (begun_.ok() && !done_) (void)Exec(db_, "ROLLBACK");
  }
  const Status& begun() const { return begun_; }
  Status Commit() {
    done_ = true;
    Status s = Exec(db_, "COMMIT");
    if (!s.ok()) (void)Exec(db_, "ROLLBACK");
    return s;
  }

 private:
  sqlite3* db_;
  Status begun_;
  bool done_ = false;
};

Status FileError(const std::string& what, const std::string& path) {
  const int e = errno;
  std::string msg = "job store: " + what + " '" + path + "': " + std::strerror(e);
  if (e == ENOSPC || e == EDQUOT) return ResourceExhausted(msg);
  return Internal(msg);
}

Status FsyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return FileError("cannot open directory", dir);
  int rc = fsync(fd);
  close(fd);
  if (rc != 0) return FileError("cannot fsync directory", dir);
  return Status::Ok();
}

// mkdir -p with an fsync of every parent that gained an entry.
Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  fs::path p(dir);
  std::vector<fs::path> created;
  for (fs::path q = p; !q.empty() && !fs::exists(q, ec); q = q.parent_path()) created.push_back(q);
  fs::create_directories(p, ec);
  if (ec) {
    errno = ec.value();
    return FileError("cannot create directory", dir);
  }
  for (const auto& c : created) KILN_RETURN_IF_ERROR(FsyncDir(c.parent_path().string()));
  return Status::Ok();
}

Status WriteFileDurably(const std::string& path, std::string_view bytes) {
  AssertNotOnReactor("JobStore file write");
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return FileError("cannot create", tmp);
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      Status s = FileError("cannot write", tmp);
      close(fd);
      unlink(tmp.c_str());
      return s;
    }
    off += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    Status s = FileError("cannot fsync", tmp);
    close(fd);
    unlink(tmp.c_str());
    return s;
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = FileError("cannot rename", tmp);
    unlink(tmp.c_str());
    return s;
  }
  return Status::Ok();
}

int64_t TreeBytes(const fs::path& dir) {
  std::error_code ec;
  int64_t total = 0;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec)) total += static_cast<int64_t>(it->file_size(ec));
  }
  return total;
}

constexpr const char* kJobColumns =
    "job_id, state, created_ms, started_ms, finished_ms, model_id, backend, device, client, idempotency_key,"
    " attempt, error_code, error_message, configurations, configurations_done, layers_done, layers_total,"
     " current_layer, layers_below_threshold, results_expired, bytes, events, dropped_events, request, kind";

JobRecord ReadJob(const Stmt& s) {
  JobRecord j;
  j.job_id = s.S(0);
  j.state = static_cast<int>(s.I(1));
  j.created_ms = s.I(2);
  j.started_ms = s.I(3);
  j.finished_ms = s.I(4);
  j.model_id = s.S(5);
  j.backend = s.S(6);
  j.device = s.S(7);
  j.client = s.S(8);
  j.idempotency_key = s.S(9);
  j.attempt = static_cast<int>(s.I(10));
  j.error_code = static_cast<int>(s.I(11));
  j.error_message = s.S(12);
  j.configurations = static_cast<int>(s.I(13));
  j.configurations_done = static_cast<int>(s.I(14));
  j.layers_done = s.I(15);
  j.layers_total = s.I(16);
  j.current_layer = s.S(17);
  j.layers_below_threshold = s.I(18);
  j.results_expired = s.I(19) != 0;
  j.bytes = s.I(20);
  j.events = s.I(21);
  j.dropped_events = s.I(22);
  j.request = s.S(23);
  j.kind = static_cast<int>(s.I(24));
  return j;
}

bool Finished(int state) { return state >= 3; }

}  // namespace

Result<std::unique_ptr<JobStore>> JobStore::Open(const std::string& data_dir) {
  auto s = EmbeddedJobStore::Open(data_dir);
  if (!s.ok()) return s.status();
  return std::unique_ptr<JobStore>(std::move(s).value());
}

Result<std::unique_ptr<EmbeddedJobStore>> EmbeddedJobStore::Open(const std::string& data_dir) {
  const std::string dir = (fs::path(data_dir) / "jobs").string();
  KILN_RETURN_IF_ERROR(MakeDirs(dir));
  const std::string path = dir + "/jobs.db";
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Internal("job store: cannot open " + path + ": " + msg);
  }
  std::unique_ptr<EmbeddedJobStore> store(new EmbeddedJobStore(dir, db));
  sqlite3_busy_timeout(db, 5000);
  KILN_RETURN_IF_ERROR(Exec(db, "PRAGMA journal_mode=WAL"));
  KILN_RETURN_IF_ERROR(Exec(db, "PRAGMA synchronous=FULL"));
  KILN_RETURN_IF_ERROR(Exec(db, "PRAGMA foreign_keys=ON"));
  KILN_RETURN_IF_ERROR(store->Migrate());
  KILN_RETURN_IF_ERROR(store->RemoveOrphanFiles());
  {
    Stmt s(db, "SELECT COALESCE(SUM(bytes), 0) FROM jobs");
    Status st;
    if (s.ok() && s.Step(&st)) store->total_bytes_ = s.I(0);
    KILN_RETURN_IF_ERROR(st);
  }
  return store;
}

EmbeddedJobStore::~EmbeddedJobStore() { sqlite3_close(db_); }

Status EmbeddedJobStore::Migrate() {
  KILN_RETURN_IF_ERROR(Exec(db_, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"));
  int64_t version = 0;
  {
    Stmt s(db_, "SELECT MAX(version) FROM schema_version");
    Status st;
    if (s.ok() && s.Step(&st)) version = s.I(0);
    KILN_RETURN_IF_ERROR(st);
  }
  if (version > kSchemaVersion) {
    return FailedPrecondition("job store " + dir_ + "/jobs.db has schema version " + std::to_string(version) +
                              ", newer than this kilnd's " + std::to_string(kSchemaVersion) +
                              "; run a newer kilnd or move the file away");
  }
  for (int64_t v = version; v < kSchemaVersion; ++v) {
    Txn txn(db_);
    KILN_RETURN_IF_ERROR(txn.begun());
    KILN_RETURN_IF_ERROR(Exec(db_, kMigrations[v]));
    Stmt ins(db_, "INSERT INTO schema_version(version) VALUES (?)");
    ins.Int(1, v + 1);
    KILN_RETURN_IF_ERROR(ins.Run());
    KILN_RETURN_IF_ERROR(txn.Commit());
  }
  return Status::Ok();
}

// A crash between writing files and committing their row leaves files no row names: the job
// directories of unknown jobs, and result directories of configurations without a row.
Status EmbeddedJobStore::RemoveOrphanFiles() {
  std::set<std::string> jobs;
  std::set<std::pair<std::string, int64_t>> results;
  {
    Stmt s(db_, "SELECT job_id FROM jobs");
    Status st;
    while (s.Step(&st)) jobs.insert(s.S(0));
    KILN_RETURN_IF_ERROR(st);
    Stmt r(db_, "SELECT job_id, configuration FROM job_results");
    while (r.Step(&st)) results.insert({r.S(0), r.I(1)});
    KILN_RETURN_IF_ERROR(st);
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    if (!entry.is_directory(ec)) {
      const std::string name = entry.path().filename().string();
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) fs::remove(entry.path(), ec);
      continue;
    }
    const std::string id = entry.path().filename().string();
    if (!jobs.count(id)) {
      fs::remove_all(entry.path(), ec);
      continue;
    }
    const fs::path res = entry.path() / "results";
    for (const auto& c : fs::directory_iterator(res, ec)) {
      int64_t config = -1;
      try {
        config = std::stoll(c.path().filename().string());
      } catch (...) {
      }
      if (!results.count({id, config})) fs::remove_all(c.path(), ec);
    }
    for (const auto& f : fs::recursive_directory_iterator(entry.path(), ec)) {
      const std::string name = f.path().filename().string();
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) fs::remove(f.path(), ec);
    }
  }
  return Status::Ok();
}

Result<JobRecord> EmbeddedJobStore::Create(JobRecord job, const std::vector<std::string_view>& inputs, bool* existed,
                                           std::string_view first_event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (existed) *existed = false;
  if (!job.idempotency_key.empty()) {
    Stmt s(db_, (std::string("SELECT ") + kJobColumns + " FROM jobs WHERE idempotency_key = ?").c_str());
    s.Text(1, job.idempotency_key);
    Status st;
    if (s.Step(&st)) {
      if (existed) *existed = true;
      return ReadJob(s);
    }
    KILN_RETURN_IF_ERROR(st);
  }
  const std::string jdir = dir_ + "/" + job.job_id;
  int64_t bytes = 0;
  if (!inputs.empty()) {
    KILN_RETURN_IF_ERROR(MakeDirs(jdir + "/inputs"));
    for (size_t k = 0; k < inputs.size(); ++k) {
      Status s = WriteFileDurably(jdir + "/inputs/" + std::to_string(k) + ".bin", inputs[k]);
      if (!s.ok()) {
        std::error_code ec;
        fs::remove_all(jdir, ec);
        return s;
      }
      bytes += static_cast<int64_t>(inputs[k].size());
    }
    Status s = FsyncDir(jdir + "/inputs");
    if (!s.ok()) return s;
  }
  job.bytes = bytes;
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begun());
  Stmt ins(db_, (std::string("INSERT INTO jobs (") + kJobColumns +
                 ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
                    .c_str());
  ins.Text(1, job.job_id).Int(2, job.state).Int(3, job.created_ms).Int(4, job.started_ms).Int(5, job.finished_ms);
  ins.Text(6, job.model_id).Text(7, job.backend).Text(8, job.device).Text(9, job.client).Text(10, job.idempotency_key);
  ins.Int(11, job.attempt).Int(12, job.error_code).Text(13, job.error_message).Int(14, job.configurations);
  ins.Int(15, job.configurations_done).Int(16, job.layers_done).Int(17, job.layers_total).Text(18, job.current_layer);
  ins.Int(19, job.layers_below_threshold).Int(20, job.results_expired).Int(21, job.bytes).Int(22, job.events);
  ins.Int(23, job.dropped_events).Blob(24, job.request).Int(25, job.kind);
  Status s = ins.Run();
  for (const auto& [k, v] : job.labels) {
    if (!s.ok()) break;
    Stmt l(db_, "INSERT INTO job_labels (job_id, key, value) VALUES (?,?,?)");
    l.Text(1, job.job_id).Text(2, k).Text(3, v);
    s = l.Run();
  }
  if (s.ok() && !first_event.empty()) {
    auto seq = AppendLocked(job.job_id, job.created_ms, first_event, 0);
    s = seq.status();
    if (s.ok()) job.events = *seq;
  }
  if (s.ok()) s = txn.Commit();
  if (!s.ok()) {
    std::error_code ec;
    fs::remove_all(jdir, ec);
    return s;
  }
  total_bytes_ += bytes;
  return job;
}

Status EmbeddedJobStore::Update(const JobRecord& j, const JobFence&) {
  std::lock_guard<std::mutex> lock(mu_);
  return UpdateLocked(j);
}

Result<int64_t> EmbeddedJobStore::UpdateWithEvent(const JobRecord& j, int64_t time_ms, std::string_view blob,
                                                  const JobFence&) {
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begun());
  KILN_RETURN_IF_ERROR(UpdateLocked(j));
  auto seq = AppendLocked(j.job_id, time_ms, blob, 0);
  if (!seq.ok()) return seq.status();
  KILN_RETURN_IF_ERROR(txn.Commit());
  return seq;
}

Status EmbeddedJobStore::UpdateLocked(const JobRecord& j) {
  Stmt s(db_,
         "UPDATE jobs SET state=?, started_ms=?, finished_ms=?, device=?, attempt=?, error_code=?, error_message=?,"
         " configurations_done=?, layers_done=?, layers_total=?, current_layer=?, layers_below_threshold=?,"
         " results_expired=? WHERE job_id=?");
  s.Int(1, j.state).Int(2, j.started_ms).Int(3, j.finished_ms).Text(4, j.device).Int(5, j.attempt);
  s.Int(6, j.error_code).Text(7, j.error_message).Int(8, j.configurations_done).Int(9, j.layers_done);
  s.Int(10, j.layers_total).Text(11, j.current_layer).Int(12, j.layers_below_threshold).Int(13, j.results_expired);
  s.Text(14, j.job_id);
  KILN_RETURN_IF_ERROR(s.Run());
  if (sqlite3_changes(db_) == 0) return NotFound("job '" + j.job_id + "' not found");
  return Status::Ok();
}

Result<JobRecord> EmbeddedJobStore::GetLocked(const std::string& job_id) const {
  Stmt s(db_, (std::string("SELECT ") + kJobColumns + " FROM jobs WHERE job_id = ?").c_str());
  s.Text(1, job_id);
  Status st;
  if (!s.Step(&st)) {
    KILN_RETURN_IF_ERROR(st);
    return NotFound("job '" + job_id + "' not found");
  }
  JobRecord j = ReadJob(s);
  Stmt l(db_, "SELECT key, value FROM job_labels WHERE job_id = ?");
  l.Text(1, job_id);
  while (l.Step(&st)) j.labels[l.S(0)] = l.S(1);
  KILN_RETURN_IF_ERROR(st);
  return j;
}

Result<std::vector<JobRecord>> EmbeddedJobStore::JobsOfLocked(SqliteStmt& select_ids) const {
  if (!select_ids.ok()) return SqlError(db_, "select jobs");
  std::vector<std::string> ids;
  Status st;
  while (select_ids.Step(&st)) ids.push_back(select_ids.S(0));
  KILN_RETURN_IF_ERROR(st);
  std::vector<JobRecord> out;
  out.reserve(ids.size());
  for (const auto& id : ids) {
    auto j = GetLocked(id);
    if (!j.ok()) return j.status();
    out.push_back(std::move(j).value());
  }
  return out;
}

Result<JobRecord> EmbeddedJobStore::Get(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return GetLocked(job_id);
}

Result<std::optional<JobRecord>> EmbeddedJobStore::FindByIdempotencyKey(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT job_id FROM jobs WHERE idempotency_key = ?");
  s.Text(1, key);
  Status st;
  if (!s.Step(&st)) {
    KILN_RETURN_IF_ERROR(st);
    return std::optional<JobRecord>();
  }
  auto j = GetLocked(s.S(0));
  if (!j.ok()) return j.status();
  return std::optional<JobRecord>(std::move(j).value());
}

Result<std::vector<JobRecord>> EmbeddedJobStore::List(const JobFilter& f) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string sql = std::string("SELECT job_id FROM jobs WHERE 1=1");
  if (f.state != 0) sql += " AND state = ?1";
  if (!f.model_id.empty()) sql += " AND model_id = ?2";
  if (!f.before_job_id.empty()) sql += " AND job_id < ?3";
  int n = 0;
  for (size_t i = 0; i < f.labels.size(); ++i) {
    const int k = 4 + 2 * static_cast<int>(i);
    sql += " AND EXISTS (SELECT 1 FROM job_labels l WHERE l.job_id = jobs.job_id AND l.key = ?" + std::to_string(k) +
           " AND l.value = ?" + std::to_string(k + 1) + ")";
    ++n;
  }
  sql += " ORDER BY job_id DESC LIMIT ?" + std::to_string(4 + 2 * n);
  Stmt s(db_, sql.c_str());
  if (!s.ok()) return SqlError(db_, "list");
  if (f.state != 0) s.Int(1, f.state);
  if (!f.model_id.empty()) s.Text(2, f.model_id);
  if (!f.before_job_id.empty()) s.Text(3, f.before_job_id);
  int k = 4;
  for (const auto& [key, value] : f.labels) {
    s.Text(k, key).Text(k + 1, value);
    k += 2;
  }
  s.Int(k, f.limit);
  return JobsOfLocked(s);
}

Result<std::vector<JobRecord>> EmbeddedJobStore::Unfinished() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT job_id FROM jobs WHERE state IN (1, 2) ORDER BY job_id");
  return JobsOfLocked(s);
}

Result<std::map<int, int64_t>> EmbeddedJobStore::CountByState() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT state, COUNT(*) FROM jobs GROUP BY state");
  std::map<int, int64_t> out;
  Status st;
  while (s.Step(&st)) out[static_cast<int>(s.I(0))] = s.I(1);
  KILN_RETURN_IF_ERROR(st);
  return out;
}

Result<int64_t> EmbeddedJobStore::AppendEvent(const std::string& job_id, int64_t time_ms, std::string_view blob,
                                              int64_t max_events, const JobFence&) {
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begun());
  auto seq = AppendLocked(job_id, time_ms, blob, max_events);
  if (!seq.ok()) return seq.status();
  KILN_RETURN_IF_ERROR(txn.Commit());
  return seq;
}

Result<int64_t> EmbeddedJobStore::AppendLocked(const std::string& job_id, int64_t time_ms, std::string_view blob,
                                               int64_t max_events) {
  Stmt q(db_, "SELECT events FROM jobs WHERE job_id = ?");
  q.Text(1, job_id);
  Status st;
  if (!q.Step(&st)) {
    KILN_RETURN_IF_ERROR(st);
    return NotFound("job '" + job_id + "' not found");
  }
  const int64_t events = q.I(0);
  if (max_events > 0 && events >= max_events) {
    Stmt u(db_, "UPDATE jobs SET dropped_events = dropped_events + 1 WHERE job_id = ?");
    u.Text(1, job_id);
    KILN_RETURN_IF_ERROR(u.Run());
    return int64_t{0};
  }
  const int64_t seq = events + 1;
  Stmt ins(db_, "INSERT INTO job_events (job_id, sequence, time_ms, blob) VALUES (?,?,?,?)");
  ins.Text(1, job_id).Int(2, seq).Int(3, time_ms).Blob(4, blob);
  KILN_RETURN_IF_ERROR(ins.Run());
  Stmt u(db_, "UPDATE jobs SET events = ? WHERE job_id = ?");
  u.Int(1, seq).Text(2, job_id);
  KILN_RETURN_IF_ERROR(u.Run());
  return seq;
}

Result<std::vector<JobEventRecord>> EmbeddedJobStore::Events(const std::string& job_id, int64_t after, int limit) const {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT sequence, time_ms, blob FROM job_events WHERE job_id = ? AND sequence > ? ORDER BY sequence LIMIT ?");
  s.Text(1, job_id).Int(2, after).Int(3, limit);
  std::vector<JobEventRecord> out;
  Status st;
  while (s.Step(&st)) out.push_back({s.I(0), s.I(1), s.S(2)});
  KILN_RETURN_IF_ERROR(st);
  return out;
}

Result<std::string> EmbeddedJobStore::ReadInput(const std::string& job_id, int k) const {
  const std::string path = dir_ + "/" + job_id + "/inputs/" + std::to_string(k) + ".bin";
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return FileError("cannot open input", path);
  struct stat sb {};
  fstat(fd, &sb);
  std::string out(static_cast<size_t>(sb.st_size), '\0');
  size_t off = 0;
  while (off < out.size()) {
    ssize_t n = read(fd, out.data() + off, out.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return Internal("job store: short read of " + path);
    }
    off += static_cast<size_t>(n);
  }
  close(fd);
  return out;
}

Status EmbeddedJobStore::PutResult(const std::string& job_id, int configuration, std::string_view report,
                                   const std::vector<std::string_view>& outputs, const JobFence&) {
  const std::string cdir = dir_ + "/" + job_id + "/results/" + std::to_string(configuration);
  std::error_code ec;
  const int64_t old_bytes = TreeBytes(cdir);
  fs::remove_all(cdir, ec);
  KILN_RETURN_IF_ERROR(MakeDirs(cdir));
  int64_t bytes = 0;
  for (size_t k = 0; k < outputs.size(); ++k) {
    Status s = WriteFileDurably(cdir + "/" + std::to_string(k) + ".bin", outputs[k]);
    if (!s.ok()) {
      fs::remove_all(cdir, ec);
      return s;
    }
    bytes += static_cast<int64_t>(outputs[k].size());
  }
  KILN_RETURN_IF_ERROR(FsyncDir(cdir));
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begun());
  Stmt ins(db_, "INSERT OR REPLACE INTO job_results (job_id, configuration, report, outputs) VALUES (?,?,?,?)");
  ins.Text(1, job_id).Int(2, configuration).Blob(3, report).Int(4, static_cast<int64_t>(outputs.size()));
  Status s = ins.Run();
  if (s.ok()) {
    Stmt u(db_, "UPDATE jobs SET bytes = bytes + ? WHERE job_id = ?");
    u.Int(1, bytes - old_bytes).Text(2, job_id);
    s = u.Run();
  }
  if (s.ok()) s = txn.Commit();
  if (!s.ok()) {
    fs::remove_all(cdir, ec);
    return s;
  }
  total_bytes_ += bytes - old_bytes;
  return Status::Ok();
}

Result<std::vector<JobResultRecord>> EmbeddedJobStore::Results(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT configuration, report, outputs FROM job_results WHERE job_id = ? ORDER BY configuration");
  s.Text(1, job_id);
  std::vector<JobResultRecord> out;
  Status st;
  while (s.Step(&st)) {
    JobResultRecord r;
    r.configuration = static_cast<int>(s.I(0));
    r.report = s.S(1);
    const int64_t n = s.I(2);
    for (int64_t k = 0; k < n; ++k) {
      std::string path = dir_ + "/" + job_id + "/results/" + std::to_string(r.configuration) + "/" +
                         std::to_string(k) + ".bin";
      std::error_code ec;
      const auto size = fs::file_size(path, ec);
      r.output_sizes.push_back(ec ? -1 : static_cast<int64_t>(size));
    }
    out.push_back(std::move(r));
  }
  KILN_RETURN_IF_ERROR(st);
  return out;
}

Result<std::string> EmbeddedJobStore::ReadOutput(const std::string& job_id, int configuration, int k, int64_t offset,
                                                 int64_t max_bytes) const {
  const std::string path =
      dir_ + "/" + job_id + "/results/" + std::to_string(configuration) + "/" + std::to_string(k) + ".bin";
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return DataLoss("job " + job_id + ": result file missing: " + path + ": " + std::strerror(errno));
  struct stat sb {};
  fstat(fd, &sb);
  const int64_t n = std::max<int64_t>(0, std::min<int64_t>(max_bytes, static_cast<int64_t>(sb.st_size) - offset));
  std::string out(static_cast<size_t>(n), '\0');
  const ssize_t got = n > 0 ? pread(fd, out.data(), out.size(), offset) : 0;
  close(fd);
  if (got != n) return DataLoss("job " + job_id + ": short read of " + path);
  return out;
}

Result<int64_t> EmbeddedJobStore::ExpireResults(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto job = GetLocked(job_id);
  if (!job.ok()) return job.status();
  Txn txn(db_);
  KILN_RETURN_IF_ERROR(txn.begun());
  Stmt d(db_, "DELETE FROM job_results WHERE job_id = ?");
  d.Text(1, job_id);
  KILN_RETURN_IF_ERROR(d.Run());
  Stmt u(db_, "UPDATE jobs SET results_expired = 1, bytes = 0 WHERE job_id = ?");
  u.Text(1, job_id);
  KILN_RETURN_IF_ERROR(u.Run());
  KILN_RETURN_IF_ERROR(txn.Commit());
  // Rows first: a crash now leaves files without rows, which Open removes.
  std::error_code ec;
  fs::remove_all(dir_ + "/" + job_id + "/results", ec);
  if (Finished(job->state)) fs::remove_all(dir_ + "/" + job_id, ec);
  total_bytes_ -= job->bytes;
  return job->bytes;
}

Result<std::vector<JobRecord>> EmbeddedJobStore::FinishedWithResults() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT job_id FROM jobs WHERE state >= 3 AND results_expired = 0 ORDER BY finished_ms, job_id");
  return JobsOfLocked(s);
}

int64_t EmbeddedJobStore::total_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_bytes_;
}

}  // namespace kiln::store
