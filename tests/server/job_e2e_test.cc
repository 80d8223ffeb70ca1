// JobService end to end through the real kilnd (proto/kiln/v1/job.proto, api/jobs.h): submit →
// watch (events in order, one per layer, the same for a late watcher) → result (equal to
// RunConvLayers' answer); sweeps; cancel of queued and running jobs; idempotency; fairness of
// 100 jobs from 8 clients on one device; kill -9 of kilnd at random points (the seed is printed)
// with nothing answered lost and nothing finished re-run; retention and its pin; limits; metrics.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "api/convert.h"
#include "common/sha256.h"
#include "device/npy.h"
#include "kiln/v1/device.grpc.pb.h"
#include "kiln/v1/job.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "tests/server/kilnd_process.h"
#include "tests/server/kilnd_test_util.h"

namespace fs = std::filesystem;

namespace kiln::testing {
namespace {

const std::string kCases = std::string(KILN_TEST_DATA) + "/conv-cases/";

struct Config {
  kiln::v1::Precision precision;
  kiln::v1::RunConvLayersResponse response;
};

class JobE2E : public KilndTest {
 protected:
  void Start(std::vector<std::string> extra = {}, const std::string& listen = "127.0.0.1:0") {
    extra.insert(extra.end(), {"--log-level", "warn"});
    kilnd_ = StartKilnd(extra, listen);
    Connect();
  }
  void Connect() {
    grpc::ChannelArguments ch;
    ch.SetMaxReceiveMessageSize(256 << 20);
    channel_ = grpc::CreateCustomChannel(kilnd_->grpc_address(), grpc::InsecureChannelCredentials(), ch);
    models_ = kiln::v1::ModelService::NewStub(channel_);
    devices_ = kiln::v1::DeviceService::NewStub(channel_);
    jobs_ = kiln::v1::JobService::NewStub(channel_);
  }

  std::string UploadCase(const std::string& name) {
    kiln::v1::UploadModelResponse resp;
    grpc::Status st = UploadBytes(*models_, name, ReadFileBytes(kCases + name + ".onnx"), &resp);
    EXPECT_TRUE(st.ok()) << name << ": " << st.error_message();
    return resp.model().model_id();
  }

  grpc::Status Submit(const kiln::v1::SubmitRunRequest& req, kiln::v1::Job* job, const std::string& client = "") {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (!client.empty()) ctx.AddMetadata("x-kiln-client", client);
    return jobs_->SubmitRun(&ctx, req, job);
  }

  kiln::v1::Job Get(const std::string& id) {
    grpc::ClientContext ctx;
    kiln::v1::GetJobRequest req;
    req.set_job_id(id);
    kiln::v1::Job job;
    grpc::Status st = jobs_->GetJob(&ctx, req, &job);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return job;
  }

  // Waits until the job has finished; returns it.
  kiln::v1::Job WaitDone(const std::string& id, int seconds = 60) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    kiln::v1::Job j;
    while (std::chrono::steady_clock::now() < deadline) {
      j = Get(id);
      if (j.state() >= kiln::v1::SUCCEEDED) return j;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "job " << id << " still " << j.state();
    return j;
  }

  std::vector<kiln::v1::JobEvent> WatchAll(const std::string& id, grpc::Status* status = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    kiln::v1::WatchJobRequest req;
    req.set_job_id(id);
    auto reader = jobs_->WatchJob(&ctx, req);
    std::vector<kiln::v1::JobEvent> out;
    kiln::v1::JobEvent ev;
    while (reader->Read(&ev)) out.push_back(ev);
    grpc::Status st = reader->Finish();
    if (status) *status = st;
    else EXPECT_TRUE(st.ok()) << st.error_message();
    return out;
  }

  std::vector<Config> Result(const std::string& id, grpc::Status* status = nullptr) {
    grpc::ClientContext ctx;
    kiln::v1::GetJobResultRequest req;
    req.set_job_id(id);
    auto reader = jobs_->GetJobResult(&ctx, req);
    std::vector<Config> out;
    kiln::v1::JobResultChunk c;
    while (reader->Read(&c)) {
      if (c.has_result()) {
        out.push_back({c.result().precision(), c.result().response()});
        EXPECT_EQ(c.configuration(), static_cast<int>(out.size()) - 1);
      } else {
        EXPECT_FALSE(out.empty());
        EXPECT_LE(c.output().data().size(), 1u << 20);
        auto* t = out.back().response.mutable_outputs(c.output().output());
        EXPECT_EQ(static_cast<int64_t>(t->raw_data().size()), c.output().offset());
        t->mutable_raw_data()->append(c.output().data());
      }
    }
    grpc::Status st = reader->Finish();
    if (status) *status = st;
    else EXPECT_TRUE(st.ok()) << st.error_message();
    return out;
  }

  kiln::v1::SubmitRunRequest RunOf(const std::string& model, const std::string& backend) {
    kiln::v1::SubmitRunRequest r;
    r.mutable_run()->set_model_id(model);
    r.mutable_run()->set_backend(backend);
    return r;
  }

  // A tt-emu run of `model` over `points` configurations, math_fidelity LoFi, HiFi4, LoFi, ...: a
  // job that lasts long enough to be watched, interrupted or cancelled mid-way.
  kiln::v1::SubmitRunRequest SweepOf(const std::string& model, int points) {
    kiln::v1::SubmitRunRequest r = RunOf(model, "tt-emu");
    for (int i = 0; i < points; ++i) r.add_sweep()->set_math_fidelity(i % 2 ? kiln::v1::HIFI4 : kiln::v1::LOFI);
    return r;
  }

  // The kiln CLI as a child process (stdout and stderr into `log`, stdin /dev/null: no terminal),
  // for tests that signal it; reap it with waitpid.
  static pid_t SpawnKiln(const std::vector<std::string>& args, const std::string& log) {
    pid_t pid = fork();
    if (pid == 0) {
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      int null = open("/dev/null", O_RDONLY);
      dup2(null, STDIN_FILENO);
      std::vector<char*> argv{const_cast<char*>(KILN_BINARY)};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(KILN_BINARY, argv.data());
      _exit(127);
    }
    return pid;
  }

  // Waits (`seconds` at most) until `file` contains `what`; whether it does.
  static bool WaitForText(const std::string& file, const std::string& what, int seconds = 60) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (ReadFileBytes(file).find(what) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return ReadFileBytes(file).find(what) != std::string::npos;
  }

  std::map<std::string, double> Scrape() { return ScrapeMetrics(kilnd_->metrics_address()); }

  std::unique_ptr<KilndProcess> kilnd_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<kiln::v1::ModelService::Stub> models_;
  std::unique_ptr<kiln::v1::DeviceService::Stub> devices_;
  std::unique_ptr<kiln::v1::JobService::Stub> jobs_;
};

std::string OutputsDigest(const kiln::v1::RunConvLayersResponse& r) {
  std::string all;
  for (const auto& t : r.outputs()) all += t.name() + ":" + t.raw_data();
  return Sha256Hex(all);
}

// Submit → watch from the start → result, compared with RunConvLayers of the same request.
TEST_F(JobE2E, SubmitWatchResultMatchesRunConvLayers) {
  Start({"--devices", "tt-emu:1,reference:1"});
  const std::string id = UploadCase("residual_add_relu");
  kiln::v1::SubmitRunRequest req = RunOf(id, "tt-emu");
  auto t = device::ReadNpy(kCases + "residual_add_relu.input.npy");
  ASSERT_TRUE(t.ok());
  auto f = t->ToFloat32();
  ASSERT_TRUE(f.ok());
  api::ToProto("X", *f, req.mutable_run()->add_inputs());
  (*req.mutable_labels())["farm"] = "nightly";
  kiln::v1::Job job;
  ASSERT_TRUE(Submit(req, &job).ok());
  EXPECT_EQ(job.job_id().size(), 28u);
  EXPECT_EQ(job.job_id().rfind("j-", 0), 0u);
  EXPECT_EQ(job.state(), kiln::v1::QUEUED);
  EXPECT_EQ(job.model_id(), id);
  EXPECT_EQ(job.labels().at("farm"), "nightly");

  auto events = WatchAll(job.job_id());
  ASSERT_GE(events.size(), 3u);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].sequence(), static_cast<int64_t>(i) + 1);
  EXPECT_EQ(events.front().state_change().state(), kiln::v1::QUEUED);
  EXPECT_EQ(events.back().state_change().state(), kiln::v1::SUCCEEDED);
  std::vector<const kiln::v1::LayerDone*> layers;
  for (const auto& e : events) {
    if (e.has_layer()) layers.push_back(&e.layer());
  }
  ASSERT_FALSE(layers.empty());
  for (size_t i = 0; i < layers.size(); ++i) {
    EXPECT_EQ(layers[i]->index(), static_cast<int64_t>(i) + 1);
    EXPECT_EQ(layers[i]->total(), static_cast<int64_t>(layers.size()));
    EXPECT_EQ(layers[i]->configuration(), 0);
  }

  auto result = Result(job.job_id());
  ASSERT_EQ(result.size(), 1u);
  const auto& resp = result[0].response;
  ASSERT_EQ(resp.layers_size(), static_cast<int>(layers.size()));
  for (int i = 0; i < resp.layers_size(); ++i) {
    EXPECT_EQ(resp.layers(i).name(), layers[static_cast<size_t>(i)]->report().name());
    EXPECT_EQ(resp.layers(i).pcc(), layers[static_cast<size_t>(i)]->report().pcc());
    // `passed` = `pass` in the stored result and in the stored events (kiln/v1/device.proto).
    EXPECT_EQ(resp.layers(i).passed(), resp.layers(i).pass());
    EXPECT_EQ(layers[static_cast<size_t>(i)]->report().passed(), layers[static_cast<size_t>(i)]->report().pass());
  }
  EXPECT_EQ(resp.passed(), resp.pass());
  EXPECT_EQ(resp.device(), "tt-emu:0");

  kiln::v1::RunConvLayersResponse direct;
  grpc::ClientContext ctx;
  ASSERT_TRUE(devices_->RunConvLayers(&ctx, req.run(), &direct).ok());
  ASSERT_EQ(direct.outputs_size(), resp.outputs_size());
  ASSERT_GT(resp.outputs(0).raw_data().size(), 0u);
  EXPECT_EQ(OutputsDigest(direct), OutputsDigest(resp));  // tt-emu is deterministic: same bits

  // A late watcher sees the same events.
  auto late = WatchAll(job.job_id());
  ASSERT_EQ(late.size(), events.size());
  for (size_t i = 0; i < late.size(); ++i) EXPECT_EQ(late[i].SerializeAsString(), events[i].SerializeAsString());

  kiln::v1::Job done = Get(job.job_id());
  EXPECT_EQ(done.attempt(), 1);
  EXPECT_EQ(done.progress().configurations_done(), 1);
  EXPECT_TRUE(done.has_finished());
  auto m = Scrape();
  EXPECT_EQ(m["kiln_jobs{state=\"succeeded\"}"], 1);
  EXPECT_EQ(m["kiln_job_attempts_total{result=\"succeeded\"}"], 1);
}

// A sweep is one job with one result per configuration, in order.
TEST_F(JobE2E, PrecisionSweepGivesOneResultPerConfiguration) {
  Start({"--devices", "tt-emu:1"});
  const std::string id = UploadCase("residual_add_relu");
  kiln::v1::SubmitRunRequest req = RunOf(id, "tt-emu");
  const kiln::v1::MathFidelity fids[] = {kiln::v1::LOFI, kiln::v1::HIFI2, kiln::v1::HIFI4};
  for (auto fid : fids) {
    for (auto w : {kiln::v1::BFLOAT16, kiln::v1::BFLOAT8_B}) {
      auto* p = req.add_sweep();
      p->set_math_fidelity(fid);
      p->set_weights_dtype(w);
    }
  }
  kiln::v1::Job job;
  ASSERT_TRUE(Submit(req, &job).ok());
  EXPECT_EQ(job.configurations(), 6);
  auto events = WatchAll(job.job_id());
  std::set<int> configs;
  for (const auto& e : events) {
    if (e.has_layer()) configs.insert(e.layer().configuration());
  }
  EXPECT_EQ(configs, (std::set<int>{0, 1, 2, 3, 4, 5}));
  auto result = Result(job.job_id());
  ASSERT_EQ(result.size(), 6u);
  std::set<std::string> resolved, digests;
  for (size_t i = 0; i < result.size(); ++i) {
    EXPECT_EQ(result[i].precision.math_fidelity(), req.sweep(static_cast<int>(i)).math_fidelity());
    EXPECT_EQ(result[i].precision.weights_dtype(), req.sweep(static_cast<int>(i)).weights_dtype());
    resolved.insert(result[i].response.resolved_precision());
    digests.insert(OutputsDigest(result[i].response));
  }
  EXPECT_EQ(resolved.size(), 6u);
  EXPECT_GE(digests.size(), 2u);  // LoFi and HiFi4 do not return the same bits
}

TEST_F(JobE2E, IdempotencyKeyReturnsTheFirstJob) {
  Start({"--devices", "reference:1"});
  const std::string id = UploadCase("residual_add_relu");
  kiln::v1::SubmitRunRequest req = RunOf(id, "reference");
  req.set_idempotency_key("nightly-2026-12-01-resnet");
  kiln::v1::Job a, b;
  ASSERT_TRUE(Submit(req, &a).ok());
  ASSERT_TRUE(Submit(req, &b, "another-client").ok());
  EXPECT_EQ(a.job_id(), b.job_id());
  WaitDone(a.job_id());
  kiln::v1::Job c;
  ASSERT_TRUE(Submit(req, &c).ok());
  EXPECT_EQ(c.job_id(), a.job_id());
  EXPECT_EQ(c.state(), kiln::v1::SUCCEEDED);
  grpc::ClientContext ctx;
  kiln::v1::ListJobsResponse list;
  ASSERT_TRUE(jobs_->ListJobs(&ctx, kiln::v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 1);
}

TEST_F(JobE2E, CancelQueuedAndRunning) {
  Start({"--devices", "tt-emu:1"});
  const std::string slow = UploadCase("unet_small");
  kiln::v1::Job running, queued;
  ASSERT_TRUE(Submit(RunOf(slow, "tt-emu"), &running).ok());
  ASSERT_TRUE(Submit(RunOf(slow, "tt-emu"), &queued).ok());
  // Wait for the first job's first layer, so that it is running on the device.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (Get(running.job_id()).progress().layers_done() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  grpc::ClientContext c1;
  kiln::v1::CancelJobRequest cq;
  cq.set_job_id(queued.job_id());
  kiln::v1::Job after;
  ASSERT_TRUE(jobs_->CancelJob(&c1, cq, &after).ok());
  EXPECT_EQ(after.state(), kiln::v1::CANCELLED);  // at once
  grpc::ClientContext c2;
  kiln::v1::CancelJobRequest cr;
  cr.set_job_id(running.job_id());
  ASSERT_TRUE(jobs_->CancelJob(&c2, cr, &after).ok());
  kiln::v1::Job end = WaitDone(running.job_id());
  EXPECT_EQ(end.state(), kiln::v1::CANCELLED);
  EXPECT_EQ(end.error().code(), static_cast<int>(grpc::StatusCode::CANCELLED));
  EXPECT_LT(end.progress().layers_done(), end.progress().layers_total());  // stopped between layers
  grpc::Status st;
  Result(running.job_id(), &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // Cancelling a finished job answers it unchanged.
  grpc::ClientContext c3;
  ASSERT_TRUE(jobs_->CancelJob(&c3, cq, &after).ok());
  EXPECT_EQ(after.state(), kiln::v1::CANCELLED);
}

// A watcher of a job with nothing new waits for the next event instead of reading again at once:
// while a queued job waits behind a running one, its open WatchJob costs no store-lane reads (it
// once read the job's events in a loop, about 25,000 times a second); cancelling the job ends the
// watch with the job's last event.
TEST_F(JobE2E, WatchOfAQuietJobDoesNotPoll) {
  Start({"--devices", "tt-emu:1"});
  const std::string slow = UploadCase("unet_small");
  // 64 configurations (--job-max-configurations): 8 of unet_small ended within the 1.3 s below on
  // a quick VM, and the queued job then ran before the idle second was over.
  kiln::v1::SubmitRunRequest long_run = SweepOf(slow, 64);
  kiln::v1::Job running, queued;
  ASSERT_TRUE(Submit(long_run, &running).ok());
  ASSERT_TRUE(Submit(RunOf(slow, "tt-emu"), &queued).ok());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (Get(running.job_id()).progress().layers_done() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<kiln::v1::JobEvent> events;
  std::thread watcher([&] { events = WatchAll(queued.job_id()); });
  const std::string reads = "kiln_sched_job_duration_seconds_count{lane=\"store\"}";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the watch's first reads
  const double before = Scrape()[reads];
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const double after = Scrape()[reads];
  EXPECT_EQ(Get(queued.job_id()).state(), kiln::v1::QUEUED);
  EXPECT_LE(after - before, 5) << "store-lane reads in one second of an idle watch";
  for (const auto& job : {queued, running}) {
    grpc::ClientContext c;
    kiln::v1::CancelJobRequest cq;
    cq.set_job_id(job.job_id());
    kiln::v1::Job out;
    ASSERT_TRUE(jobs_->CancelJob(&c, cq, &out).ok());
  }
  watcher.join();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state_change().state(), kiln::v1::CANCELLED);
  WaitDone(running.job_id());
}

// 100 jobs from 8 clients on one device: after every k completions no client has more than
// ceil(k/8)+1 of them.
TEST_F(JobE2E, FairAcrossClients) {
  Start({"--devices", "tt-emu:1"});
  const std::string slow = UploadCase("unet_small");
  const std::string quick = UploadCase("residual_add_relu");
  kiln::v1::Job blocker;
  kiln::v1::SubmitRunRequest block = RunOf(slow, "tt-emu");
  for (int i = 0; i < 32; ++i) block.add_sweep();
  ASSERT_TRUE(Submit(block, &blocker, "blocker").ok());
  std::vector<std::thread> threads;
  std::mutex mu;
  std::map<std::string, std::string> client_of;  // job → client
  for (int c = 0; c < 8; ++c) {
    threads.emplace_back([&, c] {
      const int n = c < 4 ? 13 : 12;  // 100 in all
      for (int i = 0; i < n; ++i) {
        kiln::v1::Job j;
        grpc::Status st = Submit(RunOf(quick, "tt-emu"), &j, "client-" + std::to_string(c));
        ASSERT_TRUE(st.ok()) << st.error_message();
        std::lock_guard<std::mutex> lock(mu);
        client_of[j.job_id()] = "client-" + std::to_string(c);
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(client_of.size(), 100u);
  EXPECT_EQ(Get(blocker.job_id()).state(), kiln::v1::RUNNING);  // all 100 queued behind it
  grpc::ClientContext cctx;
  kiln::v1::CancelJobRequest creq;
  creq.set_job_id(blocker.job_id());
  kiln::v1::Job cancelled;
  ASSERT_TRUE(jobs_->CancelJob(&cctx, creq, &cancelled).ok());
  std::vector<std::pair<int64_t, std::string>> order;  // (start, job)
  for (const auto& [job, client] : client_of) {
    kiln::v1::Job j = WaitDone(job, 120);
    ASSERT_EQ(j.state(), kiln::v1::SUCCEEDED);
    order.push_back({j.started().seconds() * 1000000000LL + j.started().nanos(), job});
  }
  std::sort(order.begin(), order.end());
  std::map<std::string, int> count;
  for (size_t k = 1; k <= order.size(); ++k) {
    ++count[client_of[order[k - 1].second]];
    const int bound = static_cast<int>((k + 7) / 8) + 1;
    for (const auto& [client, n] : count) ASSERT_LE(n, bound) << client << " after " << k << " completions";
  }
}

TEST_F(JobE2E, LimitsAndBadRequests) {
  Start({"--devices", "tt-emu:1", "--job-max-queued-per-client", "2", "--job-max-configurations", "3"});
  // (The invalid-argument cases below are checked before the queue limit.)
  const std::string slow = UploadCase("unet_small");
  kiln::v1::Job j;
  ASSERT_TRUE(Submit(RunOf(slow, "tt-emu"), &j, "a").ok());  // runs
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (Get(j.job_id()).state() == kiln::v1::QUEUED && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(Submit(RunOf(slow, "tt-emu"), &j, "a").ok());
  ASSERT_TRUE(Submit(RunOf(slow, "tt-emu"), &j, "a").ok());
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-kiln-client", "a");
  kiln::v1::Job refused;
  grpc::Status st = jobs_->SubmitRun(&ctx, RunOf(slow, "tt-emu"), &refused);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("--job-max-queued-per-client"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("retry after"), std::string::npos);
  auto md = ctx.GetServerTrailingMetadata();
  EXPECT_NE(md.find("grpc-retry-pushback-ms"), md.end());
  // x-kiln-client is a sub-key of the principal (the peer address here): another header does not
  // buy more queue.
  EXPECT_EQ(Submit(RunOf(slow, "tt-emu"), &j, "b").error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  kiln::v1::SubmitRunRequest sweep = RunOf(slow, "tt-emu");
  for (int i = 0; i < 4; ++i) sweep.add_sweep();
  EXPECT_EQ(Submit(sweep, &j, "c").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Submit(RunOf("no-such-model", "tt-emu"), &j, "c").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Submit(RunOf(slow, "no-such-backend"), &j, "c").error_code(), grpc::StatusCode::NOT_FOUND);
  kiln::v1::SubmitRunRequest bad_label = RunOf(slow, "tt-emu");
  (*bad_label.mutable_labels())["Bad Key"] = "x";
  EXPECT_EQ(Submit(bad_label, &j, "c").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // A value with a terminal escape, a newline or a C1 control would reach `kiln job` as it is.
  for (const std::string v : {"a\x1b[31m", "a\nb", "a\xc2\x9b" "2J", "a\xe2\x80\xa8", "a\xe2\x80\xae" "cba"}) {
    kiln::v1::SubmitRunRequest control = RunOf(slow, "tt-emu");
    (*control.mutable_labels())["suite"] = v;
    grpc::Status st = Submit(control, &j, "c");
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << v;
    EXPECT_NE(st.error_message().find("label 'suite': value has a control character at byte 1"), std::string::npos)
        << st.error_message();
  }
  (*bad_label.mutable_labels()).clear();
  (*bad_label.mutable_labels())["suite"] = "caf\xc3\xa9 \xe2\x80\x94 ok";
  // UTF-8 text passes the label check: the (full) queue answers.
  EXPECT_EQ(Submit(bad_label, &j, "c").error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  kiln::v1::SubmitRunRequest bad_tensor = RunOf(slow, "tt-emu");
  auto* t = bad_tensor.mutable_run()->add_inputs();
  t->set_name("x");
  t->set_datatype("FP32");
  t->add_shape(4);
  t->set_raw_data("abc");
  EXPECT_EQ(Submit(bad_tensor, &j, "c").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext g;
  kiln::v1::GetJobRequest gr;
  gr.set_job_id("j-nope");
  EXPECT_EQ(jobs_->GetJob(&g, gr, &j).error_code(), grpc::StatusCode::NOT_FOUND);
}

// kill -9 of kilnd at points drawn from a printed seed, 20 times: every job whose SubmitRun was
// answered exists; a job seen SUCCEEDED keeps its result and is never re-run; every other job
// ends SUCCEEDED with one result per configuration, or FAILED after --job-max-attempts.
TEST_F(JobE2E, SurvivesKillNine) {
  const unsigned seed = std::random_device{}();
  std::cerr << "SurvivesKillNine seed " << seed << "\n";
  std::mt19937 rng(seed);
  const std::vector<std::string> flags = {"--devices", "tt-emu:1", "--job-max-attempts", "4"};
  Start(flags);
  const std::string slow = UploadCase("unet_small");
  const std::string quick = UploadCase("residual_add_relu");
  std::map<std::string, int> configurations;          // answered job → configurations
  std::map<std::string, std::string> succeeded_digest;  // job seen SUCCEEDED → its result
  std::map<std::string, int> succeeded_attempt;
  auto submit_some = [&] {
    for (int i = 0; i < 2; ++i) {
      kiln::v1::SubmitRunRequest r = RunOf(rng() % 2 ? slow : quick, "tt-emu");
      const int n = 1 + static_cast<int>(rng() % 2);
      if (n == 2) {
        r.add_sweep()->set_math_fidelity(kiln::v1::LOFI);
        r.add_sweep()->set_math_fidelity(kiln::v1::HIFI4);
      }
      kiln::v1::Job j;
      if (Submit(r, &j).ok()) configurations[j.job_id()] = n;
    }
  };
  auto observe = [&] {
    for (const auto& [id, n] : configurations) {
      if (succeeded_digest.count(id)) continue;
      grpc::ClientContext ctx;
      kiln::v1::GetJobRequest req;
      req.set_job_id(id);
      kiln::v1::Job j;
      if (!jobs_->GetJob(&ctx, req, &j).ok()) continue;
      if (j.state() == kiln::v1::SUCCEEDED) {
        grpc::Status st;
        auto res = Result(id, &st);
        if (!st.ok()) continue;  // killed while streaming
        std::string d;
        for (const auto& c : res) d += OutputsDigest(c.response);
        succeeded_digest[id] = d;
        succeeded_attempt[id] = j.attempt();
      }
    }
  };
  for (int round = 0; round < 20; ++round) {
    submit_some();
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 1500));
    observe();
    ASSERT_EQ(kilnd_->Stop(SIGKILL), 128 + SIGKILL);
    kilnd_ = StartKilnd({flags[0], flags[1], flags[2], flags[3], "--log-level", "warn"});
    Connect();
  }
  // Let everything finish.
  for (const auto& [id, n] : configurations) {
    kiln::v1::Job j = WaitDone(id, 180);
    if (j.state() == kiln::v1::SUCCEEDED) {
      auto res = Result(id);
      EXPECT_EQ(static_cast<int>(res.size()), n) << id;
      std::string d;
      for (const auto& c : res) d += OutputsDigest(c.response);
      if (succeeded_digest.count(id)) {
        EXPECT_EQ(d, succeeded_digest[id]) << id;
        EXPECT_EQ(j.attempt(), succeeded_attempt[id]) << id << " was re-run after it SUCCEEDED";
      }
    } else {
      EXPECT_EQ(j.state(), kiln::v1::FAILED) << id;
      EXPECT_EQ(j.error().code(), static_cast<int>(grpc::StatusCode::ABORTED)) << id << ": " << j.error().message();
      EXPECT_EQ(j.attempt(), 4);
      EXPECT_FALSE(succeeded_digest.count(id));
    }
  }
  EXPECT_GE(configurations.size(), 30u);
  // Nothing but job directories and the database under jobs/.
  for (const auto& e : fs::directory_iterator(dir_ / "data" / "jobs")) {
    const std::string name = e.path().filename().string();
    if (e.is_directory()) {
      EXPECT_TRUE(configurations.count(name)) << "orphan job directory " << name;
    } else {
      EXPECT_EQ(name.rfind("jobs.db", 0), 0u) << name;
    }
  }
}

// Results older than --job-retention-seconds go (the pin of a reading stream is tested in process:
// tests/api/jobs_test.cc).
TEST_F(JobE2E, RetentionRemovesOldResults) {
  Start({"--devices", "reference:1", "--job-retention-seconds", "1"});
  const std::string id = UploadCase("residual_add_relu");
  kiln::v1::Job first;
  ASSERT_TRUE(Submit(RunOf(id, "reference"), &first).ok());
  WaitDone(first.job_id());
  EXPECT_EQ(Result(first.job_id()).size(), 1u);
  EXPECT_TRUE(fs::exists(dir_ / "data" / "jobs" / first.job_id()));
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  kiln::v1::Job second;
  ASSERT_TRUE(Submit(RunOf(id, "reference"), &second).ok());
  WaitDone(second.job_id());  // a job's end runs retention
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!Get(first.job_id()).results_expired() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(Get(first.job_id()).results_expired());
  EXPECT_EQ(Get(first.job_id()).state(), kiln::v1::SUCCEEDED);  // the job stays listed
  grpc::Status st;
  Result(first.job_id(), &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(st.error_message().find("expired"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "data" / "jobs" / first.job_id()));
  EXPECT_FALSE(Get(second.job_id()).results_expired());
  EXPECT_GE(Scrape()["kiln_job_results_expired_total"], 1);
}

// SIGTERM while a job runs: the grace lets it finish or it runs again after the restart; a
// watcher is told UNAVAILABLE.
TEST_F(JobE2E, SigtermWithAJobRunningResumesAfterRestart) {
  // StartKilnd's grace is 2 s: shorter than these 8 configurations.
  const std::vector<std::string> flags = {"--devices", "tt-emu:1"};
  Start(flags);
  const std::string slow = UploadCase("unet_small");
  kiln::v1::SubmitRunRequest r = SweepOf(slow, 8);
  kiln::v1::Job j;
  ASSERT_TRUE(Submit(r, &j).ok());
  grpc::Status watch_status;
  std::thread watcher([&] { WatchAll(j.job_id(), &watch_status); });
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (Get(j.job_id()).progress().layers_done() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(kilnd_->Stop(SIGTERM), 0);
  watcher.join();
  EXPECT_EQ(watch_status.error_code(), grpc::StatusCode::UNAVAILABLE) << watch_status.error_message();
  Start(flags);
  kiln::v1::Job end = WaitDone(j.job_id(), 120);
  EXPECT_EQ(end.state(), kiln::v1::SUCCEEDED);
  EXPECT_EQ(end.attempt(), 2);
  EXPECT_EQ(Result(j.job_id()).size(), 8u);
}

// Runs the kiln CLI; stdout (and stderr when `with_stderr`) into the result, exit status in *rc.
std::string Kiln(const std::string& server, const std::string& args, int* rc, bool with_stderr = true) {
  std::string cmd = std::string(KILN_BINARY) + " --server " + server + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  return RunShell(cmd, rc);
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// `kiln watch` across a restart of kilnd: its watch ends UNAVAILABLE ("watch again"), the CLI
// opens it again on the same address once kilnd is back and shows no event twice; a watch that
// never opened (nobody at the address) fails at once instead.
TEST_F(JobE2E, CliWatchesAgainAcrossARestart) {
  const std::vector<std::string> flags = {"--devices", "tt-emu:1"};
  Start(flags);
  const std::string server = kilnd_->grpc_address();
  kiln::v1::Job j;
  ASSERT_TRUE(Submit(SweepOf(UploadCase("unet_small"), 64), &j).ok());
  const std::string log = (dir_ / "watch.out").string();
  pid_t pid = SpawnKiln({"--server", server, "watch", j.job_id()}, log);
  ASSERT_TRUE(WaitForText(log, "RUNNING (attempt 1)")) << ReadFileBytes(log);  // the watch is open
  EXPECT_EQ(kilnd_->Stop(SIGTERM), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the CLI finds nobody there
  Start(flags, server);
  EXPECT_TRUE(WaitForText(log, "RUNNING (attempt 2)")) << ReadFileBytes(log);  // the watch is open again
  grpc::ClientContext c;
  kiln::v1::CancelJobRequest cancel;
  cancel.set_job_id(j.job_id());
  kiln::v1::Job after;
  ASSERT_TRUE(jobs_->CancelJob(&c, cancel, &after).ok());  // 64 configurations: no need to run them all
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string out = ReadFileBytes(log);
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;  // a CANCELLED job
  EXPECT_NE(out.find("kilnd is shutting down"), std::string::npos) << out;
  EXPECT_NE(out.find("watching again"), std::string::npos) << out;
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = out.find(what); at != std::string::npos; at = out.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("QUEUED (attempt 0)"), 1u) << out;  // not shown again by the second watch
  EXPECT_EQ(count("RUNNING (attempt 1)"), 1u) << out;
  EXPECT_EQ(count("CANCELLED (attempt 2)"), 1u) << out;
  EXPECT_EQ(out.find("QUEUED (attempt 1) on"), std::string::npos) << out;  // queued again: on no device
  // Nobody at the address: the first watch never opened, so it is an error at once.
  int rc = -1;
  const std::string none = Kiln("127.0.0.1:1", "watch " + j.job_id(), &rc);
  EXPECT_EQ(rc, 1) << none;
  EXPECT_EQ(none.find("watching again"), std::string::npos) << none;
}

TEST_F(JobE2E, CliDetachWatchJobsResultCancel) {
  Start({"--devices", "tt-emu:1,reference:1"});
  const std::string server = kilnd_->grpc_address();
  int rc = -1;
  std::string out = Kiln(server, "upload " + kCases + "residual_add_relu.onnx", &rc);
  ASSERT_EQ(rc, 0) << out;
  const std::string id = Trim(Kiln(server, "run residual_add_relu --backend reference --detach --label suite=cli", &rc, false));
  ASSERT_EQ(rc, 0) << id;
  ASSERT_EQ(id.rfind("j-", 0), 0u) << id;
  out = Kiln(server, "watch " + id, &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[4/4] add0"), std::string::npos) << out;  // progress lines (stderr is no terminal)
  EXPECT_NE(out.find("all layers pass"), std::string::npos) << out;
  out = Kiln(server, "jobs --state succeeded --label suite=cli", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find(id), std::string::npos) << out;
  out = Kiln(server, "jobs --state failed", &rc);
  EXPECT_EQ(out.find(id), std::string::npos) << out;
  out = Kiln(server, "job " + id, &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("state      SUCCEEDED"), std::string::npos) << out;
  const std::string dir = (dir_ / "result").string();
  out = Kiln(server, "result " + id + " --out " + dir + " --report json", &rc, false);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"layers\""), std::string::npos) << out;
  auto y = device::ReadNpy(dir + "/Y.npy");
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{1, 4, 8, 8}));
  out = Kiln(server, "result " + id + " --report html", &rc, false);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("<table class=\"layers\">"), std::string::npos);
  EXPECT_NE(out.find("<td class=l>conv_a</td>"), std::string::npos) << out;

  // A sweep from the command line: one job, a table per configuration.
  out = Kiln(server, "run residual_add_relu --sweep math_fidelity=LoFi,HiFi4 --sweep weights_dtype=bfloat16,bfloat8_b", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("== configuration 3:"), std::string::npos) << out;
  EXPECT_EQ(out.find("== configuration 4:"), std::string::npos) << out;

  // Cancel a running job; watching it then ends with status 1 and says so.
  out = Kiln(server, "upload " + kCases + "unet_small.onnx", &rc);
  const std::string slow = Trim(Kiln(server, "run unet_small --sweep math_fidelity=LoFi,HiFi2,HiFi3,HiFi4 --detach", &rc, false));
  ASSERT_EQ(rc, 0) << slow;
  out = Kiln(server, "cancel " + slow, &rc);
  EXPECT_EQ(rc, 0) << out;
  out = Kiln(server, "watch " + slow, &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("CANCELLED"), std::string::npos) << out;
  out = Kiln(server, "job j-0000000000000000000000000", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("NOT_FOUND"), std::string::npos) << out;
}

// Ctrl-C on `kiln run` without a terminal cancels the job; exit status 130.
// `kiln result` of a sweep cancelled after some configurations: the finished ones are reported,
// marked INCOMPLETE in each format, and the exit status is 1 (it was 0 with "all layers pass").
TEST_F(JobE2E, CliResultOfACancelledSweepIsIncompleteWithStatus1) {
  Start({"--devices", "tt-emu:1"});
  const std::string server = kilnd_->grpc_address();
  const std::string model = UploadCase("unet_small");
  kiln::v1::SubmitRunRequest req = SweepOf(model, 32);
  kiln::v1::Job job;
  ASSERT_TRUE(Submit(req, &job).ok());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (Get(job.job_id()).progress().configurations_done() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  grpc::ClientContext cctx;  // at once: a CLI process would take long enough for a few more configurations
  kiln::v1::CancelJobRequest creq;
  creq.set_job_id(job.job_id());
  kiln::v1::Job cancelled;
  ASSERT_TRUE(jobs_->CancelJob(&cctx, creq, &cancelled).ok());
  const kiln::v1::Job end = WaitDone(job.job_id());
  ASSERT_EQ(end.state(), kiln::v1::CANCELLED) << "the sweep finished before the cancel; make it longer";
  const int64_t done = end.progress().configurations_done();
  ASSERT_GE(done, 1);
  const std::string line = "job " + job.job_id() + " ended CANCELLED after " + std::to_string(done) + " of 32 configuration(s)";
  int rc = -1;
  std::string out = Kiln(server, "result " + job.job_id(), &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("INCOMPLETE: " + line), std::string::npos) << out;
  out = Kiln(server, "result " + job.job_id() + " --report json", &rc, false);
  EXPECT_EQ(rc, 1) << out;
  auto doc = nlohmann::json::parse(out);
  ASSERT_EQ(doc["unfinished_jobs"].size(), 1u) << out;
  EXPECT_EQ(doc["unfinished_jobs"][0]["state"], "CANCELLED");
  EXPECT_EQ(doc["unfinished_jobs"][0]["configurations_reported"], done);
  EXPECT_EQ(doc["configurations"].size(), static_cast<size_t>(done));
  out = Kiln(server, "result " + job.job_id() + " --report html", &rc, false);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("INCOMPLETE: " + line), std::string::npos) << out.substr(0, 2000);
  EXPECT_NE(out.find("in the finished configurations of an incomplete job"), std::string::npos);
  // `kiln watch` of the ended job reports the same finished configurations.
  out = Kiln(server, "watch " + job.job_id(), &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("INCOMPLETE: " + line), std::string::npos) << out;
}

TEST_F(JobE2E, CliInterruptCancelsTheJob) {
  Start({"--devices", "tt-emu:1"});
  const std::string server = kilnd_->grpc_address();
  int rc = -1;
  Kiln(server, "upload " + kCases + "unet_small.onnx", &rc);
  ASSERT_EQ(rc, 0);
  const std::string log = (dir_ / "cli.txt").string();
  pid_t pid = SpawnKiln({"--server", server, "run", "unet_small", "--sweep", "math_fidelity=LoFi,HiFi2,HiFi3,HiFi4"},
                        log);
  WaitForText(log, "[1/");  // the first progress line, then interrupt
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string out = ReadFileBytes(log);
  EXPECT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 130) << out;
  EXPECT_NE(out.find("cancel requested"), std::string::npos) << out;
  grpc::ClientContext ctx;
  kiln::v1::ListJobsResponse list;
  ASSERT_TRUE(jobs_->ListJobs(&ctx, kiln::v1::ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_EQ(WaitDone(list.jobs(0).job_id()).state(), kiln::v1::CANCELLED);
}

// Ctrl-C while kilnd is away (the watch waiting to open again): without a terminal the CLI still
// cancels — it retries the cancel until kilnd is back — and exits 130.
TEST_F(JobE2E, CliInterruptWhileKilndRestartsCancelsOnceItIsBack) {
  const std::vector<std::string> flags = {"--devices", "tt-emu:1"};
  Start(flags);
  const std::string server = kilnd_->grpc_address();
  kiln::v1::Job j;
  ASSERT_TRUE(Submit(SweepOf(UploadCase("unet_small"), 64), &j).ok());
  const std::string log = (dir_ / "cli.txt").string();
  pid_t pid = SpawnKiln({"--server", server, "watch", j.job_id()}, log);
  EXPECT_TRUE(WaitForText(log, "RUNNING (attempt 1)")) << ReadFileBytes(log);
  EXPECT_EQ(kilnd_->Stop(SIGTERM), 0);
  EXPECT_TRUE(WaitForText(log, "watching again")) << ReadFileBytes(log);
  kill(pid, SIGINT);  // between two streams: nobody to cancel with yet
  EXPECT_TRUE(WaitForText(log, "retrying for 30 s")) << ReadFileBytes(log);
  Start(flags, server);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string out = ReadFileBytes(log);
  EXPECT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 130) << out;
  EXPECT_NE(out.find("cancel requested"), std::string::npos) << out;
  EXPECT_EQ(WaitDone(j.job_id()).state(), kiln::v1::CANCELLED);
}

// A full job queue: `kiln run` is retried by gRPC's retry policy after the server's pushback.
TEST_F(JobE2E, CliRetriesAFullQueue) {
  Start({"--devices", "tt-emu:1", "--job-max-queued", "1"});
  const std::string server = kilnd_->grpc_address();
  int rc = -1;
  Kiln(server, "upload " + kCases + "unet_small.onnx", &rc);
  Kiln(server, "upload " + kCases + "residual_add_relu.onnx", &rc);
  const std::string a = Trim(Kiln(server, "run unet_small --detach", &rc, false));
  ASSERT_EQ(rc, 0);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (Get(a).state() == kiln::v1::QUEUED && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const std::string b = Trim(Kiln(server, "run unet_small --detach", &rc, false));  // fills the queue
  ASSERT_EQ(rc, 0);
  const std::string c = Trim(Kiln(server, "run residual_add_relu --detach", &rc));
  EXPECT_EQ(rc, 0) << c;
  EXPECT_EQ(c.rfind("j-", 0), 0u) << c;
  auto m = Scrape();
  EXPECT_GE((m["kiln_grpc_requests_total{code=\"RESOURCE_EXHAUSTED\",grpc_method=\"SubmitRun\",grpc_service=\"kiln.v1.JobService\"}"]), 1);
  grpc::ClientContext ctx;
  kiln::v1::ListJobsResponse list;
  ASSERT_TRUE(jobs_->ListJobs(&ctx, kiln::v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 3);  // the retries made no second job
}

// --tt-emu-level is a per-request option (RunConvLayersRequest.tt_emu_level) the server honours
// on its tt-emu workers, whatever its own --tt-emu-level, and reports in the response.
TEST_F(JobE2E, TtEmuLevelPerRequest) {
  Start({"--devices", "tt-emu:1,reference:1", "--tt-emu-level", "exact"});
  const std::string name = "conv_autopad_same_upper_d2_s1";
  const std::string id = UploadCase(name);
  kiln::v1::RunConvLayersRequest req = RunOf(id, "tt-emu").run();
  auto t = device::ReadNpy(kCases + name + ".input.npy");
  ASSERT_TRUE(t.ok());
  api::ToProto("X", *t->ToFloat32(), req.add_inputs());
  // A bf16 Dst: the fast level's fp32 accumulation differs from the card's per-MVMUL rounding
  // (device/backends/tt_emu/tt_conv.h), so the outputs tell the levels apart.
  req.mutable_precision()->set_fp32_dest_acc_en(false);
  req.set_skip_reference(true);
  auto run = [&](const std::string& level, kiln::v1::RunConvLayersResponse* resp) {
    kiln::v1::RunConvLayersRequest r = req;
    r.set_tt_emu_level(level);
    grpc::ClientContext ctx;
    return devices_->RunConvLayers(&ctx, r, resp);
  };
  kiln::v1::RunConvLayersResponse server_default, exact, fast;
  ASSERT_TRUE(run("", &server_default).ok());
  ASSERT_TRUE(run("exact", &exact).ok());
  ASSERT_TRUE(run("fast", &fast).ok());
  EXPECT_EQ(server_default.tt_emu_level(), "exact");
  EXPECT_EQ(exact.tt_emu_level(), "exact");
  EXPECT_EQ(fast.tt_emu_level(), "fast");
  EXPECT_EQ(OutputsDigest(server_default), OutputsDigest(exact));
  EXPECT_NE(OutputsDigest(fast), OutputsDigest(exact));
  EXPECT_EQ(fast.device(), "tt-emu:0");  // on the server's worker, with its own level

  kiln::v1::RunConvLayersResponse bad;
  grpc::Status st = run("turbo", &bad);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("tt_emu_level: unknown tt-emu level 'turbo'"), std::string::npos)
      << st.error_message();
  req.set_backend("reference");
  st = run("fast", &bad);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("applies to backend tt-emu only"), std::string::npos) << st.error_message();
  // A job is refused at submission, not failed later.
  kiln::v1::SubmitRunRequest submit = RunOf(id, "tt-emu");
  submit.mutable_run()->set_tt_emu_level("turbo");
  kiln::v1::Job job;
  st = Submit(submit, &job);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();

  // The CLI sends it (it only applied to --local before) and prints what the server used.
  const std::string server = kilnd_->grpc_address();
  int rc = -1;
  std::string out = Kiln(server, "run " + name + " --tt-emu-level fast --skip-reference --report json", &rc, false);
  EXPECT_NE(out.find("\"tt_emu_level\": \"fast\""), std::string::npos) << out;
  out = Kiln(server, "run " + name + " --skip-reference", &rc, false);
  EXPECT_NE(out.find("tt-emu level: exact\n"), std::string::npos) << out;
  out = Kiln(server, "run " + name + " --tt-emu-level turbo", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("turbo"), std::string::npos) << out;

  // The other way round: a server at fast runs "" at fast and "exact" at exact.
  EXPECT_EQ(kilnd_->Stop(), 0);
  Start({"--devices", "tt-emu:1,reference:1", "--tt-emu-level", "fast"});
  req.set_backend("tt-emu");
  kiln::v1::RunConvLayersResponse fast_default, exact_asked;
  ASSERT_TRUE(run("", &fast_default).ok());
  ASSERT_TRUE(run("exact", &exact_asked).ok());
  EXPECT_EQ(fast_default.tt_emu_level(), "fast");
  EXPECT_EQ(exact_asked.tt_emu_level(), "exact");
  EXPECT_EQ(OutputsDigest(fast_default), OutputsDigest(fast));
  EXPECT_EQ(OutputsDigest(exact_asked), OutputsDigest(exact));
}

}  // namespace
}  // namespace kiln::testing
