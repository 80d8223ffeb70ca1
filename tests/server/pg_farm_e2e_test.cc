// A farm on loopback (api/jobs.h "A farm"): real kilnd replicas and real workers
// (`kilnd --role worker`) on one real PostgreSQL (tests/support/pg_server.h). 200 jobs from 8
// clients through 2 replicas run on 3 workers, exactly once each; any replica watches them and
// serves their results, also after the replica that took them was killed; `kiln devices` lists
// the workers; workers killed with -9 twenty times mid-job, or stopped (SIGSTOP) past their lease,
// lose their jobs to other workers, and a late end is discarded; cancel reaches a job through any
// replica; a drained worker leaves the registry, also when the database answers late; a PostgreSQL
// restart mid-run loses no job.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <pqxx/pqxx>

#include <chrono>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <signal.h>
#include <sys/wait.h>

#include "common/sha256.h"
#include "kiln/v1/device.grpc.pb.h"
#include "kiln/v1/job.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "tests/server/kilnd_process.h"
#include "tests/server/kilnd_test_util.h"
#include "tests/server/pg_kilnd_test.h"

namespace fs = std::filesystem;

namespace kiln::testing {
namespace {

const std::string kCases = std::string(KILN_TEST_DATA) + "/conv-cases/";
// Short leases, so that a lost worker's job moves within seconds (the defaults are 30 s / 10 s).
const std::vector<std::string> kLeaseFlags = {"--job-lease-seconds", "1.5", "--job-heartbeat-seconds", "0.25"};

class PgFarmE2E : public PgKilndTest {
 protected:
  std::string DatabaseName() const override { return "farm"; }

  std::unique_ptr<KilndProcess> Process(const std::string& name, std::vector<std::string> args) {
    std::vector<std::string> all = {"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir",
                                    (dir_ / name).string(), "--shutdown-grace", "2", "--log-level", "warn"};
    all.insert(all.end(), kLeaseFlags.begin(), kLeaseFlags.end());
    all.insert(all.end(), args.begin(), args.end());
    return std::make_unique<KilndProcess>(KILND_BINARY, all, (dir_ / (name + ".log")).string(),
                                          std::vector<std::string>{"KILN_DATABASE=" + url_});
  }
  std::unique_ptr<KilndProcess> Replica(const std::string& name) { return Process(name, {}); }
  std::unique_ptr<KilndProcess> Worker(const std::string& name, const std::string& devices = "tt-emu:1") {
    return Process(name, {"--role", "worker", "--devices", devices});
  }
  static std::unique_ptr<kiln::v1::JobService::Stub> Jobs(const KilndProcess& k) {
    grpc::ChannelArguments ch;
    ch.SetMaxReceiveMessageSize(256 << 20);
    return kiln::v1::JobService::NewStub(
        grpc::CreateCustomChannel(k.grpc_address(), grpc::InsecureChannelCredentials(), ch));
  }
  std::string Upload(const KilndProcess& k, const std::string& name) {
    auto models = kiln::v1::ModelService::NewStub(grpc::CreateChannel(k.grpc_address(), grpc::InsecureChannelCredentials()));
    kiln::v1::UploadModelResponse resp;
    grpc::Status st = UploadBytes(*models, name, ReadFileBytes(kCases + name + ".onnx"), &resp);
    EXPECT_TRUE(st.ok()) << name << ": " << st.error_message();
    return resp.model().model_id();
  }
  // A plain tt-emu run of `model` (callers may add a level, a sweep, ... before submitting it).
  static kiln::v1::SubmitRunRequest RunOf(const std::string& model) {
    kiln::v1::SubmitRunRequest req;
    req.mutable_run()->set_model_id(model);
    req.mutable_run()->set_backend("tt-emu");
    return req;
  }
  static kiln::v1::Job Submit(kiln::v1::JobService::Stub& jobs, const std::string& model, const std::string& client = "") {
    return Submit(jobs, RunOf(model), client);
  }
  static kiln::v1::Job Submit(kiln::v1::JobService::Stub& jobs, const kiln::v1::SubmitRunRequest& req,
                              const std::string& client = "") {
    grpc::ClientContext ctx;
    if (!client.empty()) ctx.AddMetadata("x-kiln-client", client);
    kiln::v1::Job job;
    grpc::Status st = jobs.SubmitRun(&ctx, req, &job);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return job;
  }
  static kiln::v1::Job Get(kiln::v1::JobService::Stub& jobs, const std::string& id) {
    grpc::ClientContext ctx;
    kiln::v1::GetJobRequest req;
    req.set_job_id(id);
    kiln::v1::Job job;
    grpc::Status st = jobs.GetJob(&ctx, req, &job);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return job;
  }
  static kiln::v1::Job WaitFor(kiln::v1::JobService::Stub& jobs, const std::string& id, int state, int seconds = 120) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    kiln::v1::Job j;
    while (std::chrono::steady_clock::now() < deadline) {
      j = Get(jobs, id);
      if (j.state() == state || (state >= kiln::v1::SUCCEEDED && j.state() >= kiln::v1::SUCCEEDED)) return j;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "job " << id << " still " << j.state() << ", waited for " << state;
    return j;
  }
  // Every event of a job through WatchJob (to its end).
  static std::vector<kiln::v1::JobEvent> Watch(kiln::v1::JobService::Stub& jobs, const std::string& id) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(180));
    kiln::v1::WatchJobRequest req;
    req.set_job_id(id);
    auto reader = jobs.WatchJob(&ctx, req);
    std::vector<kiln::v1::JobEvent> out;
    kiln::v1::JobEvent ev;
    while (reader->Read(&ev)) out.push_back(ev);
    grpc::Status st = reader->Finish();
    EXPECT_TRUE(st.ok()) << st.error_message();
    return out;
  }
  // The sha256 of a job's outputs (names and bytes) as GetJobResult streams them.
  static std::string ResultDigest(kiln::v1::JobService::Stub& jobs, const std::string& id) {
    grpc::ClientContext ctx;
    kiln::v1::GetJobResultRequest req;
    req.set_job_id(id);
    auto reader = jobs.GetJobResult(&ctx, req);
    std::string all;
    kiln::v1::JobResultChunk c;
    int results = 0;
    while (reader->Read(&c)) {
      if (c.has_result()) {
        ++results;
        for (const auto& t : c.result().response().outputs()) all += "|" + t.name();
      } else {
        all += c.output().data();
      }
    }
    grpc::Status st = reader->Finish();
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(results, 1);
    return Sha256Hex(all);
  }
  static int StateChangesTo(const std::vector<kiln::v1::JobEvent>& events, int state) {
    int n = 0;
    for (const auto& e : events) n += e.has_state_change() && e.state_change().state() == state;
    return n;
  }
  std::string Text(const std::string& sql) {
    pqxx::connection c(url_);
    pqxx::work tx(c);
    return tx.exec1(sql)[0].as<std::string>();
  }
};

TEST_F(PgFarmE2E, JobsRunOnTheWorkersOnceAndAnyReplicaServesThem) {
  auto a = Replica("a");
  auto b = Replica("b");
  std::vector<std::unique_ptr<KilndProcess>> workers;
  for (const char* w : {"w1", "w2", "w3"}) workers.push_back(Worker(w));
  auto ja = Jobs(*a);
  auto jb = Jobs(*b);
  const std::string quick = Upload(*a, "residual_add_relu");
  // 200 jobs from 8 clients at once, each client alternating between the replicas.
  std::vector<std::vector<std::string>> by_client(8);
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      auto ra = Jobs(*a), rb = Jobs(*b);
      for (int i = 0; i < 25; ++i) {
        by_client[c].push_back(Submit(i % 2 ? *rb : *ra, quick, "client-" + std::to_string(c)).job_id());
      }
    });
  }
  for (auto& t : clients) t.join();
  std::vector<std::string> ids;
  for (const auto& v : by_client) ids.insert(ids.end(), v.begin(), v.end());
  ASSERT_EQ(ids.size(), 200u);
  // Watched through the replica that did not take the submit.
  const auto events = Watch(*jb, by_client[0][0]);
  EXPECT_EQ(StateChangesTo(events, kiln::v1::QUEUED), 1);
  EXPECT_EQ(StateChangesTo(events, kiln::v1::RUNNING), 1);
  EXPECT_EQ(StateChangesTo(events, kiln::v1::SUCCEEDED), 1);
  int layers = 0;
  for (const auto& e : events) layers += e.has_layer();
  EXPECT_GT(layers, 0);
  std::string digest;
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto j = WaitFor(i % 2 ? *ja : *jb, ids[i], kiln::v1::SUCCEEDED);
    EXPECT_EQ(j.state(), kiln::v1::SUCCEEDED) << ids[i] << ": " << j.error().message();
    EXPECT_EQ(j.attempt(), 1) << ids[i];
    if (i % 10 != 0) continue;
    // The same model and inputs: the same outputs, whichever worker ran it and replica serves it.
    const std::string d = ResultDigest(i % 20 ? *ja : *jb, ids[i]);
    if (digest.empty()) digest = d;
    EXPECT_EQ(d, digest) << ids[i];
  }
  // Spread over all three workers; every queue entry done, each claimed once.
  EXPECT_EQ(Count(url_, "SELECT count(DISTINCT worker) FROM kiln_job_queue"), 3);
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_job_queue WHERE state = 3 AND attempt = 1"), 200);
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_jobs WHERE state = 3"), 200);
  // `kiln devices` through a replica lists the farm's workers from their heartbeats.
  {
    auto devices = kiln::v1::DeviceService::NewStub(grpc::CreateChannel(b->grpc_address(), grpc::InsecureChannelCredentials()));
    // Counts are as of each worker's last heartbeat (every 0.25 s here): wait for them to settle.
    kiln::v1::ListDevicesResponse resp;
    uint64_t done = 0;
    for (int tries = 0; tries < 50 && done != 200; ++tries) {
      if (tries > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      grpc::ClientContext ctx;
      resp.Clear();
      ASSERT_TRUE(devices->ListDevices(&ctx, kiln::v1::ListDevicesRequest(), &resp).ok());
      done = 0;
      for (const auto& w : resp.workers()) done += w.jobs_done();
    }
    EXPECT_EQ(done, 200u);
    ASSERT_EQ(resp.workers_size(), 3);
    for (const auto& w : resp.workers()) {
      EXPECT_TRUE(w.live()) << w.name();
      EXPECT_EQ(w.devices(), "tt-emu:1");
      EXPECT_LT(w.heartbeat_age_seconds(), 1.5);
    }
    // The CLI's table shows them (docs/cli-json.md for --json).
    int rc = 0;
    const std::string table = RunShell(std::string(KILN_BINARY) + " --server " + b->grpc_address() + " devices", &rc);
    EXPECT_EQ(rc, 0) << table;
    EXPECT_NE(table.find("FARM WORKER"), std::string::npos) << table;
    EXPECT_NE(table.find(resp.workers(0).name()), std::string::npos) << table;
    EXPECT_NE(table.find("live"), std::string::npos) << table;
  }
  // Cancel through B: a queued job (no worker has its backend) leaves the queue at once.
  {
    grpc::ClientContext ctx;
    kiln::v1::SubmitRunRequest req;
    req.mutable_run()->set_model_id(quick);
    req.mutable_run()->set_backend("reference");
    kiln::v1::Job queued;
    ASSERT_TRUE(ja->SubmitRun(&ctx, req, &queued).ok());
    grpc::ClientContext cctx;
    kiln::v1::CancelJobRequest creq;
    creq.set_job_id(queued.job_id());
    kiln::v1::Job cancelled;
    ASSERT_TRUE(jb->CancelJob(&cctx, creq, &cancelled).ok());
    EXPECT_EQ(cancelled.state(), kiln::v1::CANCELLED);
    EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_job_queue WHERE job_id = '" + queued.job_id() + "'"), 0);
  }
  // No replica holds state another needs: submit through A, kill -9 A, watch and fetch through B.
  const std::string last = Submit(*ja, quick).job_id();
  ASSERT_EQ(a->Stop(SIGKILL), 128 + SIGKILL);
  EXPECT_EQ(StateChangesTo(Watch(*jb, last), kiln::v1::SUCCEEDED), 1);
  EXPECT_EQ(ResultDigest(*jb, last), digest);
  // Drained workers leave the registry.
  for (auto& w : workers) EXPECT_EQ(w->Stop(), 0);
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_workers"), 0);
  EXPECT_EQ(b->Stop(), 0);
}

TEST_F(PgFarmE2E, WorkersKilledTwentyTimesMidJobLoseNoJobAndRunNoneTwice) {
  const unsigned seed = std::random_device{}();
  std::cerr << "seed " << seed << "\n";
  std::mt19937 rng(seed);
  const std::vector<std::string> attempts = {"--job-max-attempts", "50"};
  auto a = Process("a", attempts);
  auto ja = Jobs(*a);
  const std::string slow = Upload(*a, "unet_small");
  const std::string quick = Upload(*a, "residual_add_relu");
  auto worker = [&](int i) {
    std::vector<std::string> args = {"--role", "worker", "--devices", "tt-emu:1"};
    args.insert(args.end(), attempts.begin(), attempts.end());
    return Process("w" + std::to_string(i), args);
  };
  std::vector<std::unique_ptr<KilndProcess>> workers;
  for (int i = 0; i < 3; ++i) workers.push_back(worker(i));
  std::vector<std::string> ids;
  for (int i = 0; i < 24; ++i) ids.push_back(Submit(*ja, i % 3 ? slow : quick).job_id());
  for (int kill = 0; kill < 20; ++kill) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + rng() % 400));
    const size_t w = rng() % workers.size();
    ASSERT_EQ(workers[w]->Stop(SIGKILL), 128 + SIGKILL);
    workers[w] = worker(static_cast<int>(w));
  }
  int retried = 0;
  for (const auto& id : ids) {
    const auto j = WaitFor(*ja, id, kiln::v1::SUCCEEDED, 240);
    EXPECT_EQ(j.state(), kiln::v1::SUCCEEDED) << id << ": " << j.error().message();
    EXPECT_EQ(StateChangesTo(Watch(*ja, id), kiln::v1::SUCCEEDED), 1) << id;
    retried += j.attempt() > 1;
  }
  std::cerr << retried << " of " << ids.size() << " jobs were re-claimed after a kill\n";
  EXPECT_GT(retried, 0);
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_job_queue WHERE state = 3"), 24);
  for (auto& w : workers) EXPECT_EQ(w->Stop(), 0);
  EXPECT_EQ(a->Stop(), 0);
}

TEST_F(PgFarmE2E, AKilledWorkersJobCompletesOnceElsewhereAndCancelReachesARunningJob) {
  auto a = Replica("a");
  auto ja = Jobs(*a);
  const std::string slow = Upload(*a, "unet_small");
  auto w1 = Worker("w1");
  const std::string id = Submit(*ja, slow).job_id();
  WaitFor(*ja, id, kiln::v1::RUNNING, 60);
  const std::string first = Text("SELECT worker FROM kiln_job_queue WHERE job_id = '" + id + "'");
  ASSERT_EQ(w1->Stop(SIGKILL), 128 + SIGKILL);
  auto w2 = Worker("w2");
  const auto j = WaitFor(*ja, id, kiln::v1::SUCCEEDED, 120);
  EXPECT_EQ(j.state(), kiln::v1::SUCCEEDED) << j.error().message();
  EXPECT_EQ(j.attempt(), 2);
  EXPECT_NE(Text("SELECT worker FROM kiln_job_queue WHERE job_id = '" + id + "'"), first);
  const auto events = Watch(*ja, id);
  EXPECT_EQ(StateChangesTo(events, kiln::v1::SUCCEEDED), 1);
  EXPECT_EQ(StateChangesTo(events, kiln::v1::RUNNING), 2);  // one per attempt

  // A job running on w2, cancelled through another replica: w2 hears of it at a heartbeat.
  auto b = Replica("b");
  auto jb = Jobs(*b);
  // Long enough to be running when the cancel's heartbeat comes (0.25 s here) on any machine: an
  // eight-point precision sweep at the exact level, where one plain run of the model can end first.
  kiln::v1::SubmitRunRequest sweep = RunOf(slow);
  sweep.mutable_run()->set_tt_emu_level("exact");
  for (int i = 0; i < 8; ++i) sweep.add_sweep()->set_math_fidelity(kiln::v1::HIFI4);
  const std::string running = Submit(*ja, sweep).job_id();
  WaitFor(*ja, running, kiln::v1::RUNNING, 60);
  grpc::ClientContext ctx;
  kiln::v1::CancelJobRequest creq;
  creq.set_job_id(running);
  kiln::v1::Job resp;
  ASSERT_TRUE(jb->CancelJob(&ctx, creq, &resp).ok());
  const auto c = WaitFor(*jb, running, kiln::v1::CANCELLED, 30);
  EXPECT_EQ(c.state(), kiln::v1::CANCELLED);
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_job_queue WHERE state = 3 AND job_id = '" + running + "'"), 1);
  EXPECT_EQ(w2->Stop(), 0);
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

TEST_F(PgFarmE2E, AStoppedWorkerLosesItsLeaseAndItsLateEndIsDiscarded) {
  auto a = Replica("a");
  auto ja = Jobs(*a);
  const std::string slow = Upload(*a, "unet_small");
  auto w1 = Worker("w1");
  const std::string id = Submit(*ja, slow).job_id();
  WaitFor(*ja, id, kiln::v1::RUNNING, 60);
  // Frozen past its lease (a hung host, a network cut): w2 claims the job and finishes it.
  ASSERT_EQ(kill(w1->pid(), SIGSTOP), 0);
  auto w2 = Worker("w2");
  const auto j = WaitFor(*ja, id, kiln::v1::SUCCEEDED, 120);
  EXPECT_EQ(j.state(), kiln::v1::SUCCEEDED) << j.error().message();
  EXPECT_EQ(j.attempt(), 2);
  const std::string digest = ResultDigest(*ja, id);
  // w1 wakes up: whatever it finishes is refused (its lease is gone), the job keeps w2's end.
  ASSERT_EQ(kill(w1->pid(), SIGCONT), 0);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  double late = 0, lost = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    auto m = ScrapeMetrics(w1->metrics_address());
    late = m["kiln_job_late_results_total"];
    lost = m["kiln_job_leases_lost_total"];
    if (late + lost >= 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(late + lost, 1) << "w1 never noticed it lost the lease";
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto after = Get(*ja, id);
  EXPECT_EQ(after.state(), kiln::v1::SUCCEEDED);
  EXPECT_EQ(after.attempt(), 2);
  EXPECT_EQ(ResultDigest(*ja, id), digest);
  EXPECT_EQ(StateChangesTo(Watch(*ja, id), kiln::v1::SUCCEEDED), 1);
  EXPECT_EQ(w1->Stop(), 0);
  EXPECT_EQ(w2->Stop(), 0);
  EXPECT_EQ(a->Stop(), 0);
}

// A worker's drain writes to the database (its registry row removed) after its RPCs have ended;
// the process must wait for that write, even when the database is slow, before it exits.
TEST_F(PgFarmE2E, ADrainedWorkerLeavesTheRegistryEvenWhenTheDatabaseAnswersLate) {
  auto w = Worker("w1");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (Count(url_, "SELECT count(*) FROM kiln_workers") == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(Count(url_, "SELECT count(*) FROM kiln_workers"), 1);
  {
    // The registry locked while the worker drains: its last writes wait 1.5 s for the lock.
    pqxx::connection c(url_);
    pqxx::work tx(c);
    tx.exec0("LOCK TABLE kiln_workers IN ACCESS EXCLUSIVE MODE");
    ASSERT_EQ(kill(w->pid(), SIGTERM), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    siginfo_t si{};  // WNOWAIT: Stop below reaps it
    ASSERT_EQ(waitid(P_PID, static_cast<id_t>(w->pid()), &si, WEXITED | WNOHANG | WNOWAIT), 0);
    EXPECT_EQ(si.si_pid, 0) << "the worker exited before its last write";
    tx.commit();
  }
  EXPECT_EQ(w->Stop(), 0);
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_workers"), 0);
}

// A worker drained (SIGTERM) mid-job past its grace gives the job back: it reads QUEUED at once —
// not RUNNING on the device that let it go — with the attempt not counted, and another worker
// runs it to its end.
TEST_F(PgFarmE2E, ADrainedWorkersJobReadsQueuedAndRunsElsewhere) {
  auto a = Replica("a");
  auto ja = Jobs(*a);
  kiln::v1::SubmitRunRequest req = RunOf(Upload(*a, "unet_small"));
  for (int i = 0; i < 64; ++i) req.add_sweep()->set_math_fidelity(i % 2 ? kiln::v1::HIFI4 : kiln::v1::LOFI);
  const std::string id = Submit(*ja, req).job_id();
  auto w1 = Worker("w1");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (Get(*ja, id).progress().layers_done() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(w1->Stop(), 0);  // the drain hands the running job back (64 configurations outlast it)
  const kiln::v1::Job queued = Get(*ja, id);
  EXPECT_EQ(queued.state(), kiln::v1::QUEUED);
  EXPECT_EQ(queued.attempt(), 0);
  EXPECT_EQ(queued.device(), "");
  EXPECT_EQ(queued.progress().layers_done(), 0);
  auto w2 = Worker("w2");
  grpc::ClientContext c;
  kiln::v1::CancelJobRequest cancel;
  cancel.set_job_id(id);
  WaitFor(*ja, id, kiln::v1::RUNNING, 60);
  kiln::v1::Job out;
  ASSERT_TRUE(ja->CancelJob(&c, cancel, &out).ok());  // 64 configurations: no need to run them all
  const kiln::v1::Job end = WaitFor(*ja, id, kiln::v1::CANCELLED, 60);
  EXPECT_EQ(end.state(), kiln::v1::CANCELLED);
  EXPECT_GE(end.attempt(), 1);  // 1, unless a starved heartbeat lost w2 its 1.5 s lease
  std::vector<std::pair<int, int>> changes;  // (state, attempt)
  for (const auto& e : Watch(*ja, id)) {
    if (e.has_state_change()) changes.emplace_back(e.state_change().state(), e.state_change().attempt());
  }
  const std::vector<std::pair<int, int>> first = {{kiln::v1::QUEUED, 0}, {kiln::v1::RUNNING, 1}, {kiln::v1::QUEUED, 0},
                                                  {kiln::v1::RUNNING, 1}};
  ASSERT_GE(changes.size(), first.size() + 1);
  const std::vector<std::pair<int, int>> head(changes.begin(), changes.begin() + 4);
  EXPECT_EQ(head, first);
  EXPECT_EQ(changes.back().first, kiln::v1::CANCELLED);
  EXPECT_EQ(w2->Stop(), 0);
  EXPECT_EQ(a->Stop(), 0);
}

TEST_F(PgFarmE2E, PostgresRestartedMidRunLosesNoJob) {
  auto a = Replica("a");
  auto ja = Jobs(*a);
  const std::string slow = Upload(*a, "unet_small");
  const std::string quick = Upload(*a, "residual_add_relu");
  auto w1 = Worker("w1");
  auto w2 = Worker("w2");
  std::vector<std::string> ids;
  for (int i = 0; i < 8; ++i) ids.push_back(Submit(*ja, i % 4 == 0 ? slow : quick).job_id());
  WaitFor(*ja, ids[0], kiln::v1::RUNNING, 60);
  // Watches open across the restart go on to the job's end: their reads fail while the database
  // is down, and they wait for it (server/job_service.cc kStoreOutage) instead of ending.
  std::vector<std::vector<kiln::v1::JobEvent>> across(2);
  std::vector<std::thread> watchers;
  for (int k = 0; k < 2; ++k) {
    watchers.emplace_back([&, k] {
      auto stub = Jobs(*a);
      across[k] = Watch(*stub, ids[k * 4]);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // both watches open
  // Down for 2 s: longer than the leases (1.5 s), and long enough for the watches to read (and
  // fail) while it is down.
  ASSERT_TRUE(server_->Restart(std::chrono::milliseconds(2000)).ok());
  // Replicas and workers reconnect by themselves (store/pg/pg_pool.h); a write lost in the outage
  // at worst leaves an attempt unfinished, whose lease then expires and is claimed again.
  for (int i = 0; i < 4; ++i) ids.push_back(Submit(*ja, quick).job_id());
  for (const auto& id : ids) {
    const auto j = WaitFor(*ja, id, kiln::v1::SUCCEEDED, 120);
    EXPECT_EQ(j.state(), kiln::v1::SUCCEEDED) << id << ": " << j.error().message();
    EXPECT_EQ(StateChangesTo(Watch(*ja, id), kiln::v1::SUCCEEDED), 1) << id;
  }
  for (auto& t : watchers) t.join();
  for (int k = 0; k < 2; ++k) EXPECT_EQ(StateChangesTo(across[k], kiln::v1::SUCCEEDED), 1) << ids[k * 4];
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_job_queue WHERE state = 3"), 12);
  // The outage's warnings went to each process's log, from kilnd's own logger (store/pg once
  // logged through a registry of its own, to stdout).
  for (auto* p : {a.get(), w1.get(), w2.get()}) EXPECT_EQ(p->StdoutSoFar(), "");
  EXPECT_NE(ReadFileBytes((dir_ / "a.log").string()).find("[kilnd] [warning] jobs: listening for events"),
            std::string::npos);
  EXPECT_EQ(w1->Stop(), 0);
  EXPECT_EQ(w2->Stop(), 0);
  EXPECT_EQ(a->Stop(), 0);
}

}  // namespace
}  // namespace kiln::testing
