// What only the PostgreSQL side has (store/pg/): the pool (reconnects after a database restart,
// bounded, honours libpq URL parameters such as sslmode, ends sessions left idle in a transaction), the versioned schema (idempotent,
// refuses a newer incompatible one, accepts a newer additive one), transactions that roll back
// as a whole. Against a real, throwaway PostgreSQL 15 (tests/support/pg_server.h).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include "common/sha256.h"
#include "store/pg/pg_store.h"
#include "tests/support/pg_server.h"

namespace kiln::store::pg {
namespace {

class PgStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto s = kiln::testing::PgServer::Start();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value().release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    auto url = server_->CreateDatabase("pgstore");
    ASSERT_TRUE(url.ok()) << url.status().ToString();
    url_ = *url;
  }
  static inline kiln::testing::PgServer* server_ = nullptr;
  std::string url_;
};

int CountRows(const std::string& url, const std::string& sql) {
  pqxx::connection c(url);
  pqxx::work tx(c);
  return tx.exec1(sql)[0].as<int>();
}

TEST_F(PgStoreTest, MigrationIsIdempotentAndVersioned) {
  auto a = PgSharedState::Open({url_, 2});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->schema().before, 0);
  EXPECT_EQ((*a)->schema().after, KnownSchemaVersion());
  auto b = PgSharedState::Open({url_, 2});  // a second replica
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->schema().before, KnownSchemaVersion());
  EXPECT_EQ((*b)->schema().after, KnownSchemaVersion());
  EXPECT_EQ(CountRows(url_, "SELECT count(*) FROM kiln_schema_version"), KnownSchemaVersion());
}

TEST_F(PgStoreTest, RefusesANewerIncompatibleSchemaAndAcceptsANewerAdditiveOne) {
  auto pool = PgPool::Open({url_, 2});
  ASSERT_TRUE(pool.ok());
  const int n = KnownSchemaVersion();
  // A newer build adds a column and declares that binaries of version n still work.
  internal::ExtraMigration additive{n, "ALTER TABLE kiln_models ADD COLUMN labels jsonb NOT NULL DEFAULT '{}'"};
  auto newer = internal::MigrateForTesting(**pool, n, &additive);
  ASSERT_TRUE(newer.ok()) << newer.status().ToString();
  EXPECT_EQ(newer->after, n + 1);
  auto current = PgSharedState::Open({url_, 2});
  ASSERT_TRUE(current.ok()) << current.status().ToString();
  EXPECT_EQ((*current)->schema().after, n + 1);  // left as it is: never downgraded
  ModelInfo m;
  m.model_id = Sha256Hex("m");
  m.size_bytes = 10;
  ASSERT_TRUE((*current)->models().Put(m, "still-works").ok());
  // A later one that is not compatible with n: this build refuses to run on it.
  internal::ExtraMigration breaking{n + 2, "ALTER TABLE kiln_models ADD COLUMN x int"};
  ASSERT_TRUE(internal::MigrateForTesting(**pool, n + 1, &breaking).ok());
  auto refused = PgSharedState::Open({url_, 2});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("upgrade kilnd"), std::string::npos) << refused.status().message();
}

TEST_F(PgStoreTest, ATransactionRollsBackAsAWhole) {
  auto state = PgSharedState::Open({url_, 2});
  ASSERT_TRUE(state.ok());
  Status s = (*state)->pool().Transact("test", [](pqxx::work& tx) -> Status {
    tx.exec0("INSERT INTO kiln_models (model_id, size_bytes) VALUES (repeat('a', 64), 1)");
    tx.exec0("INSERT INTO kiln_models (model_id, size_bytes) VALUES (repeat('b', 64), 1)");
    return InvalidArgument("changed my mind");
  });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = (*state)->pool().Transact("test", [](pqxx::work& tx) -> Status {
    tx.exec0("INSERT INTO kiln_models (model_id, size_bytes) VALUES (repeat('c', 64), 1)");
    tx.exec0("INSERT INTO kiln_models (model_id, size_bytes) VALUES ('bad id', 1)");  // CHECK fails
    return Status::Ok();
  });
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
  EXPECT_EQ(CountRows(url_, "SELECT count(*) FROM kiln_models"), 0);
}

TEST_F(PgStoreTest, PoolReconnectsAfterADatabaseRestart) {
  auto state = PgSharedState::Open({url_, 2});
  ASSERT_TRUE(state.ok());
  ModelInfo m;
  m.model_id = Sha256Hex("restart");
  m.size_bytes = 5;
  ASSERT_TRUE((*state)->models().Put(m, "before").ok());
  ASSERT_TRUE(server_->Restart().ok());
  // The pooled connection is broken; Transact retries on a new one.
  auto got = (*state)->models().Get("before");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->model_id, m.model_id);
  ASSERT_TRUE((*state)->models().Put(m, "after").ok());
  EXPECT_EQ((*state)->models().Get(m.model_id)->names, (std::vector<std::string>{"after", "before"}));
}

TEST_F(PgStoreTest, BlobStreamsFailCleanlyWhenTheDatabaseRestarts) {
  auto state = PgSharedState::Open({url_, 4});
  ASSERT_TRUE(state.ok());
  BlobStore& blobs = (*state)->blobs();
  const std::string stored(3 << 20, 'a'), next(2 << 20, 'b');
  {
    auto w = blobs.Begin(Sha256Hex(stored), stored.size());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append(stored.data(), stored.size()).ok());
    ASSERT_TRUE((*w)->Commit().ok());
  }
  auto r = blobs.Open(Sha256Hex(stored));
  ASSERT_TRUE(r.ok());
  std::string part;
  ASSERT_TRUE((*r)->Read(1 << 20, &part).ok());
  auto w = blobs.Begin(Sha256Hex(next), next.size());
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Append(next.data(), 1000).ok());
  ASSERT_TRUE(server_->Restart().ok());
  // Both streams end with UNAVAILABLE (and stay ended), nothing half-written becomes visible.
  Status read = (*r)->Read(1 << 20, &part);
  EXPECT_EQ(read.code(), StatusCode::kUnavailable) << read.ToString();
  EXPECT_EQ((*r)->Read(1 << 20, &part).code(), StatusCode::kUnavailable);
  Status append = (*w)->Append(next.data() + 1000, next.size() - 1000);
  EXPECT_EQ(append.code(), StatusCode::kUnavailable) << append.ToString();
  EXPECT_FALSE((*w)->Commit().ok());
  r->reset();
  w->reset();
  EXPECT_EQ(blobs.Size(Sha256Hex(next)).status().code(), StatusCode::kNotFound);
  // The pool reconnected: the stored blob reads whole and verified.
  auto again = blobs.Open(Sha256Hex(stored));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  std::string all;
  for (;;) {
    ASSERT_TRUE((*again)->Read(1 << 20, &part).ok());
    if (part.empty()) break;
    all += part;
  }
  EXPECT_EQ(all, stored);
}

// A process killed mid-upload (kill -9 of a replica) leaves nothing: its transaction, and the
// large object created in it, go when PostgreSQL sees the connection close.
TEST_F(PgStoreTest, AnUploaderKilledMidUploadLeavesNothing) {
  const std::string bytes(3 << 20, 'k');
  const std::string key = Sha256Hex(bytes);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto state = PgSharedState::Open({url_, 1});
    if (!state.ok()) ::_exit(3);
    auto w = (*state)->blobs().Begin(key, bytes.size());
    if (!w.ok() || !(*w)->Append(bytes.data(), 2 << 20).ok()) ::_exit(4);  // two chunks written
    char c = 1;
    if (::write(ready[1], &c, 1) != 1) ::_exit(5);
    ::pause();
    ::_exit(6);
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1) << "the child did not get to write its chunks";
  ::close(ready[0]);
  // The upload's large object exists (uncommitted) while the child lives.
  EXPECT_GE(CountRows(url_, "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' AND datname = current_database()"), 1);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFSIGNALED(st));
  // PostgreSQL notices the closed socket at once; give its backend a moment to roll back.
  int open_tx = 1;
  for (int i = 0; i < 100 && open_tx > 0; ++i) {
    open_tx = CountRows(url_, "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' AND datname = current_database()");
    if (open_tx > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(open_tx, 0);
  EXPECT_EQ(CountRows(url_, "SELECT count(*) FROM kiln_blobs"), 0);
  EXPECT_EQ(CountRows(url_, "SELECT count(*) FROM pg_largeobject_metadata"), 0);
  EXPECT_EQ(CountRows(url_, "SELECT count(*) FROM pg_largeobject"), 0);
}

// A process frozen inside a transaction (a worker stopped between a fenced write's statements,
// holding its job's queue row FOR UPDATE) loses the session after PgPoolOptions'
// idle_in_transaction_timeout, and with it the lock, so that another claim (SKIP LOCKED) reaches
// the row; a blob stream's transaction, which waits on its client, is not bounded.
TEST_F(PgStoreTest, ATransactionLeftIdleLosesItsSessionAndItsLocks) {
  using namespace std::chrono_literals;
  PgPoolOptions o;
  o.url = url_;
  o.size = 2;
  o.idle_in_transaction_timeout = 300ms;
  auto state = PgSharedState::Open(o);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  {
    pqxx::connection c(url_);
    pqxx::work tx(c);
    tx.exec0("CREATE TABLE idle_rows (k int PRIMARY KEY)");
    tx.exec0("INSERT INTO idle_rows VALUES (1)");
    tx.commit();
  }
  pqxx::connection other(url_);
  auto free_to_claim = [&] {
    pqxx::work t(other);
    return !t.exec("SELECT k FROM idle_rows WHERE k = 1 FOR UPDATE SKIP LOCKED").empty();
  };
  {
    auto lease = (*state)->pool().Acquire();
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    auto frozen = std::make_unique<pqxx::work>(lease->conn());
    frozen->exec("SELECT k FROM idle_rows WHERE k = 1 FOR UPDATE");
    EXPECT_FALSE(free_to_claim()) << "the row is locked while its transaction is open";
    std::this_thread::sleep_for(1500ms);
    EXPECT_TRUE(free_to_claim()) << "the idle session still holds its lock";
    EXPECT_THROW(frozen->exec("SELECT 1"), std::exception);
    try {
      frozen.reset();
    } catch (...) {
    }
    lease->Discard();
  }
  // A blob upload idle for longer than the bound between its chunks still commits.
  const std::string bytes(3 << 20, 'i');
  auto w = (*state)->blobs().Begin(Sha256Hex(bytes), bytes.size());
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_TRUE((*w)->Append(bytes.data(), 2 << 20).ok());
  std::this_thread::sleep_for(1000ms);
  ASSERT_TRUE((*w)->Append(bytes.data() + (2 << 20), bytes.size() - (2 << 20)).ok());
  Status c = (*w)->Commit();
  EXPECT_TRUE(c.ok()) << c.ToString();
  EXPECT_EQ(CountRows(url_, "SELECT count(*) FROM kiln_blobs"), 1);
}

// A worker killed with SIGKILL while it holds a job: once its lease expires another worker
// claims the job (attempt 2) and its result is the only one recorded.
TEST_F(PgStoreTest, AJobOfAKilledWorkerIsReclaimedAndCompletedOnce) {
  using namespace std::chrono_literals;
  auto state = PgSharedState::Open({url_, 2});
  ASSERT_TRUE(state.ok());
  JobQueue& q = (*state)->jobs();
  ASSERT_TRUE(q.Enqueue("j", "tt-emu", "p").ok());
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto worker = PgSharedState::Open({url_, 1});
    if (!worker.ok()) ::_exit(3);
    auto c = (*worker)->jobs().Claim("doomed", {"tt-emu"}, 500ms);
    if (!c.ok() || !c->has_value()) ::_exit(4);
    char b = 1;
    if (::write(ready[1], &b, 1) != 1) ::_exit(5);
    ::pause();
    ::_exit(6);
  }
  ::close(ready[1]);
  char b = 0;
  ASSERT_EQ(::read(ready[0], &b, 1), 1);
  ::close(ready[0]);
  EXPECT_FALSE(q.Claim("survivor", {"tt-emu"}, 2s)->has_value());  // still leased
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  ::waitpid(child, nullptr, 0);
  std::optional<JobClaim> claim;
  for (int i = 0; i < 100 && !claim; ++i) {
    auto c = q.Claim("survivor", {"tt-emu"}, 2s);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    claim = *c;
    if (!claim) std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(claim.has_value()) << "not claimable after the dead worker's lease";
  EXPECT_EQ(claim->attempt, 2);
  EXPECT_TRUE(*q.Complete(*claim, "done"));
  auto e = q.Get("j");
  EXPECT_EQ(e->state, JobQueueEntry::kDone);
  EXPECT_EQ(e->worker, "survivor");
  EXPECT_EQ(e->result, "done");
}

// The LISTEN connection breaks with a restart: WaitForWork falls back to sleeping (no busy loop)
// and listens again on the next call.
TEST_F(PgStoreTest, WaitForWorkSurvivesADatabaseRestart) {
  using namespace std::chrono_literals;
  auto state = PgSharedState::Open({url_, 2});
  ASSERT_TRUE(state.ok());
  JobQueue& q = (*state)->jobs();
  ASSERT_TRUE(q.WaitForWork(1ms).ok());
  ASSERT_TRUE(server_->Restart().ok());
  for (int i = 0; i < 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(q.WaitForWork(300ms).ok());
    const auto waited = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(waited, 250ms) << "returned early: a busy loop for a caller that waits in a loop";
  }
  auto producer = PgSharedState::Open({url_, 1});
  ASSERT_TRUE(producer.ok());
  std::thread enqueue([&] {
    std::this_thread::sleep_for(200ms);
    EXPECT_TRUE((*producer)->jobs().Enqueue("j", "tt-emu", "p").ok());
  });
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(q.WaitForWork(10s).ok());
  enqueue.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s) << "not woken by NOTIFY after the restart";
}

// WaitForEvents (a replica's watchers): std::nullopt — wake every watcher — whenever a NOTIFY
// may have been missed: at the first LISTEN, and when it listens again after a database restart
// (an event appended between the break and the new LISTEN was announced to no one). Then the
// NOTIFYs of new events arrive again.
TEST_F(PgStoreTest, WaitForEventsWakesEveryWatcherWhenItListensAfresh) {
  using namespace std::chrono_literals;
  auto state = PgSharedState::Open({url_, 2});
  ASSERT_TRUE(state.ok());
  JobStore& events = (*state)->job_store();
  JobRecord job;
  job.job_id = "j-w";
  job.backend = "tt-emu";
  bool existed = false;
  ASSERT_TRUE(events.Create(job, {}, &existed).ok());
  EXPECT_FALSE(events.WaitForEvents(10ms).has_value()) << "the first LISTEN";
  auto quiet = events.WaitForEvents(10ms);
  ASSERT_TRUE(quiet.has_value());
  EXPECT_TRUE(quiet->empty());
  ASSERT_TRUE(events.AppendEvent("j-w", 1, "a", 0).ok());
  auto heard = events.WaitForEvents(2s);
  ASSERT_TRUE(heard.has_value());
  EXPECT_EQ(*heard, std::vector<std::string>{"j-w"});

  ASSERT_TRUE(server_->Restart().ok());
  EXPECT_FALSE(events.WaitForEvents(100ms).has_value()) << "the listening session is gone";
  ASSERT_TRUE(events.AppendEvent("j-w", 2, "in the gap", 0).ok());  // the pool reconnects
  EXPECT_FALSE(events.WaitForEvents(100ms).has_value()) << "listening afresh: the gap's event reached no one";
  auto r = events.WaitForEvents(10ms);
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(events.AppendEvent("j-w", 3, "after", 0).ok());
  std::vector<std::string> ids = *r;
  for (int i = 0; i < 20 && ids.empty(); ++i) {
    r = events.WaitForEvents(100ms);
    if (r) ids = *r;
  }
  EXPECT_EQ(ids, std::vector<std::string>{"j-w"});
}

TEST_F(PgStoreTest, PoolIsBoundedAndTimesOut) {
  auto pool = PgPool::Open({url_, 2, std::chrono::milliseconds(200)});
  ASSERT_TRUE(pool.ok());
  auto a = (*pool)->Acquire();
  auto b = (*pool)->Acquire();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*pool)->open_connections(), 2u);
  const auto t0 = std::chrono::steady_clock::now();
  auto c = (*pool)->Acquire();
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(190));
  { auto drop = std::move(a).value(); }  // returned
  auto d = (*pool)->Acquire();
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ((*pool)->open_connections(), 2u);
}

TEST_F(PgStoreTest, UrlParametersReachLibpqAndPasswordsStayOut) {
  // The fixture's server has no TLS: sslmode=require in the URL must make libpq refuse it.
  auto tls = PgPool::Open({url_ + "?sslmode=require", 1});
  ASSERT_FALSE(tls.ok());
  EXPECT_EQ(tls.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(tls.status().message().find("SSL"), std::string::npos) << tls.status().message();
  auto plain = PgPool::Open({url_ + "?sslmode=disable&application_name=kiln-test", 1});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(CountRows(url_, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'kiln-test'"), 1);
  auto bad = PgPool::Open({"postgresql://kiln:s3cret@127.0.0.1:1/none", 1});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().find("s3cret"), std::string::npos) << bad.status().message();
  // libpq's two-line "Connection refused / Is the server running ..." reads as one line.
  EXPECT_NE(bad.status().message().find("Connection refused Is the server running"), std::string::npos)
      << bad.status().message();
  EXPECT_EQ(bad.status().message().find_first_of("\n\t"), std::string::npos) << bad.status().message();
  EXPECT_EQ(RedactUrl("postgresql://u:pw@h:5/db?sslmode=verify-full"), "postgresql://u:***@h:5/db?sslmode=verify-full");
  EXPECT_EQ(RedactUrl("host=h password=pw dbname=d"), "host=h password=*** dbname=d");
}

}  // namespace
}  // namespace kiln::store::pg
