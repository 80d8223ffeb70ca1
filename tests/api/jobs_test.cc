// api::JobManager in process (api/jobs.h) over a real model store, job store (SQLite) and
// scheduler: retention skips pinned results; recovery of interrupted jobs (queued again, or FAILED
// ABORTED after --job-max-attempts); the per-job event limit; Stop's wait for running jobs; a
// cancel while a job is being started; input names checked at submission; NewJobId's format and
// order. And
// store::JobStore (store/job_store.h): idempotency keys, schema version refusal, orphan files.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "api/jobs.h"
#include "api/lanes.h"
#include "api/run_conv.h"
#include "common/sha256.h"

namespace kiln::api {
namespace {

namespace fs = std::filesystem;

std::string ReadCase(const std::string& name) {
  std::ifstream in(std::string(KILN_TEST_DATA) + "/conv-cases/" + name, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class JobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln-jobs-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    store::ModelStoreOptions so;
    so.dir = dir_.string();
    auto st = store::ModelStore::Open(so);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    models_ = std::move(st).value();
    const std::string bytes = ReadCase("residual_add_relu.onnx");
    auto up = models_->BeginUpload("res", bytes.size(), Sha256Hex(bytes));
    ASSERT_TRUE(up.ok());
    ASSERT_TRUE((*up)->Append(bytes.data(), bytes.size()).ok());
    auto info = (*up)->Commit();
    ASSERT_TRUE(info.ok());
    model_id_ = info->model_id;
    sched::SchedulerOptions o;
    o.devices = {{"reference", 1}};
    o.cpu_lanes = KilndCpuLanes({});
    o.reference_threads = 1;
    auto scheduler = sched::Scheduler::Create(o);
    ASSERT_TRUE(scheduler.ok());
    scheduler_ = std::move(scheduler).value();
    OpenJobStore();
  }
  void TearDown() override {
    // Hooks that point at a failed test's locals go first.
    SetPlanStageHookForTesting(nullptr);
    if (manager_) manager_->SetStartHookForTesting(nullptr);
    manager_.reset();
    scheduler_.reset();
    jobs_.reset();
    fs::remove_all(dir_);
  }
  void OpenJobStore() {
    auto js = store::JobStore::Open(dir_.string());
    ASSERT_TRUE(js.ok()) << js.status().ToString();
    jobs_ = std::move(js).value();
  }
  void StartManager(JobLimits limits = {}) {
    JobManager::Env env;
    env.models = models_.get();
    env.jobs = jobs_.get();
    env.scheduler = scheduler_.get();
    env.plans = &plans_;
    auto m = JobManager::Create(std::move(env), limits);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    manager_ = std::move(m).value();
  }
  kiln::v1::Job WaitDone(const std::string& id) {
    kiln::v1::Job j;
    for (int i = 0; i < 3000; ++i) {
      auto g = manager_->Get(id);
      EXPECT_TRUE(g.ok());
      j = *g;
      if (j.state() >= kiln::v1::SUCCEEDED) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return j;
  }
  kiln::v1::SubmitRunRequest Run() {
    kiln::v1::SubmitRunRequest r;
    r.mutable_run()->set_model_id(model_id_);
    r.mutable_run()->set_backend("reference");
    return r;
  }

  fs::path dir_;
  std::unique_ptr<store::ModelStore> models_;
  std::unique_ptr<store::JobStore> jobs_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  PlanCache plans_{int64_t{1} << 30};
  std::unique_ptr<JobManager> manager_;
  std::string model_id_;
};

TEST_F(JobsTest, RetentionSkipsPinnedResults) {
  JobLimits limits;
  limits.retention_seconds = 0;  // everything finished is old
  limits.retention_interval = std::chrono::hours(1);
  StartManager(limits);
  auto job = manager_->Submit(Run(), "c");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(WaitDone(job->job_id()).state(), kiln::v1::SUCCEEDED);
  auto second = manager_->Submit(Run(), "c");
  ASSERT_TRUE(second.ok());
  // Wait until the second job has ended and retention has removed the first one's results.
  WaitDone(second->job_id());
  for (int i = 0; i < 200 && !manager_->Get(job->job_id())->results_expired(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(manager_->Get(job->job_id())->results_expired());
  auto gone = manager_->OpenResults(job->job_id());
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);

  // A pinned job survives retention; after the pin is released it goes.
  JobLimits keep = limits;
  keep.retention_seconds = 3600;
  manager_.reset();
  StartManager(keep);
  auto third = manager_->Submit(Run(), "c");
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(WaitDone(third->job_id()).state(), kiln::v1::SUCCEEDED);
  auto pinned = manager_->OpenResults(third->job_id());
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  ASSERT_EQ(pinned->first.size(), 1u);
  manager_.reset();
  StartManager(limits);  // 0 s retention again, with a pin taken before retention runs
  auto pin2 = manager_->OpenResults(third->job_id());
  ASSERT_TRUE(pin2.ok());
  manager_->RunRetentionForTesting();
  EXPECT_FALSE(manager_->Get(third->job_id())->results_expired());
  pin2->second.reset();
  manager_->RunRetentionForTesting();
  EXPECT_TRUE(manager_->Get(third->job_id())->results_expired());
}

TEST_F(JobsTest, RecoveryRequeuesOrFailsInterruptedJobs) {
  // Two rows left RUNNING by a kill: one with attempts left, one without.
  for (int attempt : {1, 3}) {
    store::JobRecord rec;
    rec.job_id = NewJobId();
    rec.state = kiln::v1::RUNNING;
    rec.created_ms = 1;
    rec.started_ms = 2;
    rec.model_id = model_id_;
    rec.backend = "reference";
    rec.client = "c";
    rec.attempt = attempt;
    rec.idempotency_key = "k" + std::to_string(attempt);
    rec.request = Run().SerializeAsString();
    bool existed = false;
    ASSERT_TRUE(jobs_->Create(rec, {}, &existed).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  JobLimits limits;
  limits.max_attempts = 3;
  StartManager(limits);
  auto list = manager_->List(kiln::v1::ListJobsRequest());
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->jobs_size(), 2);
  for (const auto& j : list->jobs()) {
    kiln::v1::Job end = WaitDone(j.job_id());
    if (j.idempotency_key() == "k1") {
      EXPECT_EQ(end.state(), kiln::v1::SUCCEEDED);
      EXPECT_EQ(end.attempt(), 2);
    } else {
      EXPECT_EQ(end.state(), kiln::v1::FAILED);
      EXPECT_EQ(end.error().code(), static_cast<int>(StatusCode::kAborted));
      EXPECT_NE(end.error().message().find("attempt 3 of 3"), std::string::npos) << end.error().message();
    }
  }
}

TEST_F(JobsTest, EventLimitKeepsStateChanges) {
  JobLimits limits;
  limits.max_events = 2;  // QUEUED + one more; the layers beyond are dropped
  StartManager(limits);
  auto job = manager_->Submit(Run(), "c");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(WaitDone(job->job_id()).state(), kiln::v1::SUCCEEDED);
  // The final event is appended right after the row changes state.
  Result<std::vector<kiln::v1::JobEvent>> events = std::vector<kiln::v1::JobEvent>();
  for (int i = 0; i < 200; ++i) {
    events = manager_->Events(job->job_id(), 0, 100);
    ASSERT_TRUE(events.ok());
    if (!events->empty() && events->back().state_change().state() == kiln::v1::SUCCEEDED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GE(events->size(), 3u);
  EXPECT_EQ(events->front().state_change().state(), kiln::v1::QUEUED);
  EXPECT_EQ(events->back().state_change().state(), kiln::v1::SUCCEEDED);
  EXPECT_GT(events->back().dropped_events(), 0);  // 4 layers, at most 1 kept
  int layers = 0;
  for (const auto& e : *events) layers += e.has_layer();
  EXPECT_LE(layers, 1);
}

TEST_F(JobsTest, StopWaitsForRunningJobsUntilItsDeadline) {
  // The job's plan stage held on a latch: Stop's deadline passes with the job live; once it is
  // released, the job ends (Stop cancels nothing; at its next stage it sees the shutdown and stays
  // RUNNING for the next start, api/jobs.h "Lifecycle") and Stop returns true.
  std::promise<void> reached, release;
  std::shared_future<void> gate = release.get_future().share();
  SetPlanStageHookForTesting([&reached, gate](const std::string&) {
    reached.set_value();
    gate.wait();
  });
  StartManager();
  auto job = manager_->Submit(Run(), "c");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  reached.get_future().wait();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(manager_->Stop(t0 + std::chrono::milliseconds(200)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
  EXPECT_TRUE(manager_->stopping());
  EXPECT_EQ(manager_->running(), 1);
  release.set_value();
  EXPECT_TRUE(manager_->Stop(std::chrono::steady_clock::now() + std::chrono::seconds(60)));
  EXPECT_EQ(manager_->running(), 0);
  EXPECT_EQ(manager_->Get(job->job_id())->state(), kiln::v1::RUNNING);
  EXPECT_EQ(manager_->Submit(Run(), "c").status().code(), StatusCode::kUnavailable);
  SetPlanStageHookForTesting(nullptr);
}

TEST_F(JobsTest, ACancelWhileTheJobIsBeingStartedEndsItCancelled) {
  // Cancelled after the dispatcher took it from the queue and before its run exists: neither
  // queued nor running then, the cancel must still reach it.
  StartManager();
  std::atomic<int> cancels{0};
  manager_->SetStartHookForTesting([this, &cancels](const std::string& id) {
    ++cancels;
    auto j = manager_->Cancel(id);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
  });
  auto job = manager_->Submit(Run(), "c");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const kiln::v1::Job end = WaitDone(job->job_id());
  EXPECT_EQ(cancels.load(), 1);
  EXPECT_EQ(end.state(), kiln::v1::CANCELLED) << end.error().message();
  // The state shows before the job leaves the running set (its event is written between).
  for (int i = 0; i < 500 && manager_->running() != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(manager_->running(), 0);
  manager_->SetStartHookForTesting(nullptr);
  // The lane is free again: the next job runs.
  auto next = manager_->Submit(Run(), "c");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(WaitDone(next->job_id()).state(), kiln::v1::SUCCEEDED);
}

TEST_F(JobsTest, InputNamesAreCheckedAtSubmission) {
  // An input the model lacks, or one given twice, is refused at once: no job is stored.
  StartManager();
  auto with_inputs = [this](std::vector<std::string> names, const std::string& key = "", bool* existed = nullptr) {
    kiln::v1::SubmitRunRequest r = Run();
    r.set_idempotency_key(key);
    for (const auto& n : names) {
      auto* t = r.mutable_run()->add_inputs();
      t->set_name(n);
      t->set_datatype("FP32");
      t->add_shape(1);
      t->set_raw_data(std::string(4, '\0'));
    }
    return manager_->Submit(r, "c", existed);
  };
  auto unknown = with_inputs({"nosuch"});
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("run.inputs: unknown input 'nosuch' (model inputs: X"), std::string::npos)
      << unknown.status().ToString();
  auto twice = with_inputs({"X", "X"});
  EXPECT_EQ(twice.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(twice.status().message().find("run.inputs: input tensor 'X' given twice"), std::string::npos)
      << twice.status().ToString();
  auto list = manager_->List(kiln::v1::ListJobsRequest());
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->jobs_size(), 0);
  // A retried submission is answered with its job before anything else is checked.
  auto first = with_inputs({}, "retry-me");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  bool existed = false;
  auto again = with_inputs({"nosuch"}, "retry-me", &existed);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(existed);
  EXPECT_EQ(again->job_id(), first->job_id());
}

TEST(JobIds, SortByTimeAndHaveTheDocumentedForm) {
  std::string prev;
  for (int i = 0; i < 5; ++i) {
    std::string id = NewJobId();
    ASSERT_EQ(id.size(), 28u);
    EXPECT_EQ(id.substr(0, 2), "j-");
    EXPECT_EQ(id.find_first_not_of("0123456789abcdefghjkmnpqrstvwxyz", 2), std::string::npos) << id;
    if (!prev.empty()) {
      EXPECT_LT(prev, id);
    }
    prev = id;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

TEST(JobStoreTest, IdempotencyOrphansAndSchemaVersion) {
  const fs::path dir = fs::temp_directory_path() / ("kiln-jobstore-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  {
    auto js = store::JobStore::Open(dir.string());
    ASSERT_TRUE(js.ok()) << js.status().ToString();
    store::JobRecord rec;
    rec.job_id = "j-a";
    rec.model_id = "m";
    rec.backend = "reference";
    rec.client = "c";
    rec.idempotency_key = "same";
    rec.request = "req";
    bool existed = true;
    const std::string input = "0123456789";
    auto a = (*js)->Create(rec, {input}, &existed);
    ASSERT_TRUE(a.ok());
    EXPECT_FALSE(existed);
    EXPECT_EQ(a->bytes, 10);
    EXPECT_EQ((*js)->ReadInput("j-a", 0).value(), input);
    rec.job_id = "j-b";
    auto b = (*js)->Create(rec, {input}, &existed);
    ASSERT_TRUE(b.ok());
    EXPECT_TRUE(existed);
    EXPECT_EQ(b->job_id, "j-a");
    EXPECT_FALSE(fs::exists(dir / "jobs" / "j-b"));
    EXPECT_EQ((*js)->total_bytes(), 10);
    ASSERT_TRUE((*js)->PutResult("j-a", 0, "report", {"out0", "out-1"}).ok());
    EXPECT_EQ((*js)->total_bytes(), 19);
    auto results = (*js)->Results("j-a");
    ASSERT_TRUE(results.ok());
    ASSERT_EQ(results->size(), 1u);
    EXPECT_EQ((*results)[0].output_sizes, (std::vector<int64_t>{4, 5}));
  }
  // Files no row names (a crash between the files and the commit) are removed on open.
  fs::create_directories(dir / "jobs" / "j-orphan" / "inputs");
  std::ofstream(dir / "jobs" / "j-orphan" / "inputs" / "0.bin") << "x";
  fs::create_directories(dir / "jobs" / "j-a" / "results" / "7");
  std::ofstream(dir / "jobs" / "j-a" / "results" / "7" / "0.bin") << "x";
  {
    auto js = store::JobStore::Open(dir.string());
    ASSERT_TRUE(js.ok());
    EXPECT_FALSE(fs::exists(dir / "jobs" / "j-orphan"));
    EXPECT_FALSE(fs::exists(dir / "jobs" / "j-a" / "results" / "7"));
    EXPECT_TRUE(fs::exists(dir / "jobs" / "j-a" / "results" / "0" / "1.bin"));
    EXPECT_EQ((*js)->total_bytes(), 19);
  }
  // A database from a newer kilnd is refused, not rewritten.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir / "jobs" / "jobs.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "INSERT INTO schema_version(version) VALUES (99)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto newer = store::JobStore::Open(dir.string());
  EXPECT_EQ(newer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(newer.status().message().find("schema version 99"), std::string::npos) << newer.status().message();
  fs::remove_all(dir);
}

// Schema 2 added jobs.kind: a version-1 database (made here by undoing that migration) opens
// migrated, its jobs runs (kind 0); an advise job's kind is kept.
TEST(JobStoreTest, Version1StoreMigratesAndKeepsKinds) {
  const fs::path dir = fs::temp_directory_path() / ("kiln-jobstore-kind-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  store::JobRecord rec;
  rec.job_id = "j-run";
  rec.model_id = "m";
  rec.backend = "tt-emu";
  rec.client = "c";
  rec.request = "req";
  {
    auto js = store::JobStore::Open(dir.string());
    ASSERT_TRUE(js.ok()) << js.status().ToString();
    ASSERT_TRUE((*js)->Create(rec, {}, nullptr).ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir / "jobs" / "jobs.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "ALTER TABLE jobs DROP COLUMN kind; DELETE FROM schema_version WHERE version = 2",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto js = store::JobStore::Open(dir.string());
  ASSERT_TRUE(js.ok()) << js.status().ToString();
  auto old = (*js)->Get("j-run");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->kind, kiln::v1::JOB_KIND_RUN);
  rec.job_id = "j-advise";
  rec.kind = kiln::v1::JOB_KIND_ADVISE;
  ASSERT_TRUE((*js)->Create(rec, {}, nullptr).ok());
  auto advise = (*js)->Get("j-advise");
  ASSERT_TRUE(advise.ok());
  EXPECT_EQ(advise->kind, kiln::v1::JOB_KIND_ADVISE);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln::api
