// The implementations the shared-state contract suites (tests/store/*_contract_test.cc) run
// against: the embedded one (files in a temp dir) and the PostgreSQL one (a fresh database per
// test on one throwaway server per test binary, tests/support/pg_server.h). Each backend can open
// a second instance on the same state (another replica, or a restart) and damage a stored blob.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <pqxx/pqxx>
#include <sqlite3.h>

#include "store/file_blob_store.h"
#include "store/file_model_index.h"
#include "store/job_store.h"
#include "store/memory_job_queue.h"
#include "store/pg/pg_store.h"
#include "tests/support/pg_server.h"

namespace kiln::store::contract {

[[noreturn]] inline void Die(const Status& s) {
  std::fprintf(stderr, "contract backend: %s\n", s.ToString().c_str());
  std::abort();
}

/// One server for the whole test binary, started on first use, stopped at exit.
inline testing::PgServer& SharedPgServer() {
  static std::unique_ptr<testing::PgServer> server = [] {
    auto s = testing::PgServer::Start();
    if (!s.ok()) Die(s.status());
    return std::move(s).value();
  }();
  return *server;
}

class EmbeddedBackend {
 public:
  static constexpr const char* kName = "embedded";
  EmbeddedBackend() {
    dir_ = std::filesystem::temp_directory_path() /
           ("kiln-contract-" + std::to_string(::getpid()) + "-" + std::to_string(++counter_));
    std::filesystem::remove_all(dir_);
  }
  ~EmbeddedBackend() { std::filesystem::remove_all(dir_); }

  /// A new instance on this backend's state (owned by the backend; never null).
  BlobStore* OpenBlobs() {
    auto s = FileBlobStore::OpenDir(dir_);
    if (!s.ok()) Die(s.status());
    blobs_.push_back(std::move(s).value());
    return blobs_.back().get();
  }
  ModelIndex* OpenIndex() {
    auto s = FileModelIndex::Open(dir_);
    if (!s.ok()) Die(s.status());
    indexes_.push_back(std::move(s).value());
    return indexes_.back().get();
  }
  /// The embedded queue lives in one process: every "instance" is the same queue.
  JobQueue* OpenQueue(int max_attempts) {
    if (!queue_) queue_ = std::make_unique<MemoryJobQueue>(max_attempts);
    return queue_.get();
  }
  /// The embedded job store (one per data dir: every "instance" is the same store).
  JobStore* OpenJobStore() {
    if (!jobs_) {
      auto s = JobStore::Open(dir_.string());
      if (!s.ok()) Die(s.status());
      jobs_ = std::move(s).value();
    }
    return jobs_.get();
  }
  /// Flips the first byte of the stored blob.
  void Corrupt(const std::string& key) {
    const auto path = dir_ / "objects" / (key + ".onnx");
    FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    int c = std::fgetc(f);
    std::fseek(f, 0, SEEK_SET);
    std::fputc(c ^ 0xff, f);
    std::fclose(f);
  }
  /// From now on every event insert for `job_id` fails (a trigger), as a full disk would.
  void RefuseEventsOf(const std::string& job_id) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir_ / "jobs" / "jobs.db").c_str(), &db), SQLITE_OK);
    const std::string sql = "CREATE TRIGGER refuse_events_" + std::to_string(++triggers_) +
                            " BEFORE INSERT ON job_events WHEN NEW.job_id = '" + job_id +
                            "' BEGIN SELECT RAISE(ABORT, 'events refused'); END";
    char* err = nullptr;
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
    EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
  }
  /// Bytes of uploads that were not committed and are still held somewhere (temp files).
  int64_t Leftovers() {
    int64_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir_ / "tmp")) n += static_cast<int64_t>(e.file_size());
    return n;
  }

 private:
  static inline int counter_ = 0;
  int triggers_ = 0;
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<FileBlobStore>> blobs_;
  std::vector<std::unique_ptr<FileModelIndex>> indexes_;
  std::unique_ptr<MemoryJobQueue> queue_;
  std::unique_ptr<JobStore> jobs_;
};

class PgBackend {
 public:
  static constexpr const char* kName = "postgres";
  PgBackend() {
    auto url = SharedPgServer().CreateDatabase("contract");
    if (!url.ok()) Die(url.status());
    url_ = *url;
  }

  /// A new instance on this backend's database: its own pool, as another replica has.
  BlobStore* OpenBlobs() { return &Open().blobs(); }
  ModelIndex* OpenIndex() { return &Open().models(); }
  JobQueue* OpenQueue(int max_attempts) { return &Open(max_attempts).jobs(); }
  JobStore* OpenJobStore() { return &Open().job_store(); }
  void Corrupt(const std::string& key) {
    pqxx::connection c(url_);
    pqxx::work tx(c);
    tx.exec_params(
        "SELECT lo_put(loid, 0, set_byte(lo_get(loid, 0, 1), 0, get_byte(lo_get(loid, 0, 1), 0) # 255))"
        " FROM kiln_blobs WHERE sha256 = $1",
        key);
    tx.commit();
  }
  /// From now on every event insert for `job_id` fails (a trigger), as a full disk would.
  void RefuseEventsOf(const std::string& job_id) {
    pqxx::connection c(url_);
    pqxx::work tx(c);
    tx.exec0("CREATE OR REPLACE FUNCTION kiln_test_refuse() RETURNS trigger LANGUAGE plpgsql AS"
             " $$ BEGIN RAISE EXCEPTION 'events refused'; END $$");
    tx.exec0("CREATE TRIGGER refuse_events_" + std::to_string(++triggers_) +
             " BEFORE INSERT ON kiln_job_events FOR EACH ROW WHEN (NEW.job_id = " + tx.quote(job_id) +
             ") EXECUTE FUNCTION kiln_test_refuse()");
    tx.commit();
  }
  /// Bytes in large objects that no kiln_blobs row names (an upload that left something behind).
  int64_t Leftovers() {
    pqxx::connection c(url_);
    pqxx::work tx(c);
    return tx
        .exec1(
            "SELECT coalesce(sum(length(lo_get(m.oid))), 0) + count(*) FROM pg_largeobject_metadata m"
            " WHERE NOT EXISTS (SELECT 1 FROM kiln_blobs b WHERE b.loid = m.oid)")[0]
        .as<int64_t>();
  }
  const std::string& url() const { return url_; }

 private:
  pg::PgSharedState& Open(int job_max_attempts = 3) {
    auto s = pg::PgSharedState::Open({url_, 4}, job_max_attempts);
    if (!s.ok()) Die(s.status());
    states_.push_back(std::move(s).value());
    return *states_.back();
  }
  std::string url_;
  int triggers_ = 0;
  std::vector<std::unique_ptr<pg::PgSharedState>> states_;
};

struct BackendNames {
  template <typename T>
  static std::string GetName(int) {
    return T::kName;
  }
};

using Backends = ::testing::Types<EmbeddedBackend, PgBackend>;

}  // namespace kiln::store::contract
