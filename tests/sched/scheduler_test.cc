#include "sched/scheduler.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <atomic>
#include <mutex>
#include <random>
#include <thread>

#include "device/backends/reference/reference_backend.h"

namespace kiln::sched {
namespace {

using namespace std::chrono_literals;
using device::BackendOptions;
using device::BackendRegistry;
using device::Conv2dParams;
using device::ConvTranspose2dParams;
using device::ExecContext;
using device::Tensor;
using device::RegisterReferenceBackend;
using device::BackendCapabilities;

// A backend whose ops do nothing; jobs in these tests mostly run their own code.
class NullBackend : public Backend {
 public:
  explicit NullBackend(int index) : index_(index) {}
  std::string name() const override { return "null"; }
  BackendCapabilities capabilities() const override {
    BackendCapabilities c;
    c.description = "null device " + std::to_string(index_);
    return c;
  }
  Result<Tensor> Conv2d(const Tensor&, const Tensor&, const Tensor*, const Conv2dParams&,
                        const ExecContext&) override {
    return Unimplemented("null");
  }
  Result<Tensor> ConvTranspose2d(const Tensor&, const Tensor&, const Tensor*, const ConvTranspose2dParams&,
                                 const ExecContext&) override {
    return Unimplemented("null");
  }

 private:
  int index_;
};

BackendRegistry& TestRegistry() {
  static BackendRegistry* r = [] {
    auto* reg = new BackendRegistry();
    (void)RegisterReferenceBackend(*reg);
    (void)reg->Register("null", [](const BackendOptions& o) -> Result<std::unique_ptr<Backend>> {
      return std::unique_ptr<Backend>(new NullBackend(o.device_index));
    });
    (void)reg->Register("broken", [](const BackendOptions&) -> Result<std::unique_ptr<Backend>> {
      return Unavailable("no card");
    });
    return reg;
  }();
  return *r;
}

std::unique_ptr<Scheduler> MakePool(std::vector<DeviceSpec> devices, int capacity = 64, int per_client = 0,
                                     std::shared_ptr<prometheus::Registry> metrics = nullptr) {
  SchedulerOptions o;
  o.devices = std::move(devices);
  o.queue_capacity = capacity;
  o.max_queued_per_client = per_client;
  o.registry = &TestRegistry();
  o.metrics = std::move(metrics);
  auto p = Scheduler::Create(std::move(o));
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? std::move(*p) : nullptr;
}

// A latch a test opens to let blocked jobs finish.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void Open() {
    {
      std::lock_guard<std::mutex> l(mu);
      open = true;
    }
    cv.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return open; });
  }
};

JobRequest Blocking(Gate& g, std::string client = "c", std::string backend = "null") {
  JobRequest r;
  r.lane = std::move(backend);
  r.client_id = std::move(client);
  r.work = [&g](Backend&, JobContext&) {
    g.Wait();
    return Status::Ok();
  };
  return r;
}

// Waits until `pred` holds (polling), at most 5 s.
template <typename P>
bool Eventually(P pred) {
  for (int i = 0; i < 500; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

TEST(DeviceListTest, Parses) {
  auto d = ParseDeviceList("tt-emu:2, reference:1,ttnn");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, (std::vector<DeviceSpec>{{"tt-emu", 2}, {"reference", 1}, {"ttnn", 1}}));
  EXPECT_EQ(ParseDeviceList("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDeviceList("a:0").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDeviceList("a:x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDeviceList("a:1,a:2").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDeviceList(":2").status().code(), StatusCode::kInvalidArgument);
}

TEST(SchedulerTest, CreateErrors) {
  SchedulerOptions o;
  o.registry = &TestRegistry();
  EXPECT_EQ(Scheduler::Create(o).status().code(), StatusCode::kInvalidArgument);
  o.devices = {{"broken", 1}};
  auto p = Scheduler::Create(o);
  EXPECT_EQ(p.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(p.status().message().find("broken:0"), std::string::npos);
  o.devices = {{"nope", 1}};
  EXPECT_EQ(Scheduler::Create(o).status().code(), StatusCode::kNotFound);
  o.devices = {{"reference", 1}};
  o.backend_settings["reference"] = {{"bogus", "1"}};
  EXPECT_EQ(Scheduler::Create(o).status().code(), StatusCode::kInvalidArgument);  // from the factory
  o.backend_settings = {{"tt-emu", {{"level", "fast"}}}};
  EXPECT_EQ(Scheduler::Create(o).status().code(), StatusCode::kInvalidArgument);  // no such devices
  o.backend_settings = {{"reference", {{"threads", "1"}}}};
  EXPECT_TRUE(Scheduler::Create(o).ok());
}

TEST(SchedulerTest, RunsJobsOnTheirBackendAndReportsDevices) {
  auto pool = MakePool({{"null", 2}, {"reference", 1}});
  ASSERT_TRUE(pool);
  std::string seen_device;
  JobRequest r;
  r.lane = "reference";
  r.work = [&](Backend& b, JobContext& ctx) {
    seen_device = ctx.worker;
    EXPECT_NE(ctx.cancel, nullptr);
    ctx.progress({1, 1, "layer"});
    return b.name() == "reference" ? Status::Ok() : Internal("wrong backend");
  };
  std::vector<JobProgress> progress;
  r.progress = [&](const JobProgress& p) { progress.push_back(p); };
  auto h = pool->Submit(r);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE((*h)->Wait().ok());
  EXPECT_EQ((*h)->state(), JobState::kDone);
  EXPECT_EQ(seen_device, "reference:0");
  ASSERT_EQ(progress.size(), 1u);
  EXPECT_EQ(progress[0].message, "layer");
  auto devices = pool->Devices();
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices[0].name, "null:0");
  EXPECT_EQ(devices[1].description, "null device 1");
  EXPECT_EQ(devices[2].jobs_done, 1u);

  JobRequest bad;
  bad.lane = "tt-emu";
  bad.work = r.work;
  auto nf = pool->Submit(bad);
  EXPECT_EQ(nf.status().code(), StatusCode::kNotFound);
  EXPECT_NE(nf.status().message().find("reference"), std::string::npos);
  JobRequest empty;
  empty.lane = "null";
  EXPECT_EQ(pool->Submit(empty).status().code(), StatusCode::kInvalidArgument);
}

TEST(SchedulerTest, QueueFullIsResourceExhaustedWithRetryHint) {
  auto pool = MakePool({{"null", 1}}, /*capacity=*/3, /*per_client=*/3);
  Gate gate;
  std::vector<std::shared_ptr<JobHandle>> handles;
  for (int i = 0; i < 4; ++i) {  // 1 running + 3 queued
    auto h = pool->Submit(Blocking(gate));
    ASSERT_TRUE(h.ok()) << i << ": " << h.status().ToString();
    handles.push_back(*h);
  }
  EXPECT_TRUE(Eventually([&] { return pool->QueueDepth("null") == 3; }));
  auto full = pool->Submit(Blocking(gate, "other"));
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("retry after ~"), std::string::npos) << full.status().message();
  EXPECT_GE(pool->SuggestedRetryAfter("null").count(), 10);
  gate.Open();
  for (auto& h : handles) EXPECT_TRUE(h->Wait().ok());
  EXPECT_EQ(pool->QueueDepth("null"), 0);
  EXPECT_TRUE(pool->Submit(Blocking(gate, "other")).ok());
}

TEST(SchedulerTest, PerClientQuotaLeavesRoomForOthers) {
  auto pool = MakePool({{"null", 1}}, /*capacity=*/8, /*per_client=*/2);
  Gate gate;
  std::vector<std::shared_ptr<JobHandle>> hs;
  hs.push_back(*pool->Submit(Blocking(gate, "greedy")));  // runs
  EXPECT_TRUE(Eventually([&] { return pool->Devices()[0].busy; }));
  hs.push_back(*pool->Submit(Blocking(gate, "greedy")));
  hs.push_back(*pool->Submit(Blocking(gate, "greedy")));
  auto third = pool->Submit(Blocking(gate, "greedy"));
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("greedy"), std::string::npos);
  auto polite = pool->Submit(Blocking(gate, "polite"));
  EXPECT_TRUE(polite.ok());
  hs.push_back(*polite);
  gate.Open();
  for (auto& h : hs) EXPECT_TRUE(h->Wait().ok());
}

// A client id's sub-key (x-kiln-client, after kSubKeySeparator) only splits its principal's own
// quota: new sub-keys add no room, and another principal is not affected.
TEST(SchedulerTest, SubKeysShareTheirPrincipalsQuota) {
  auto pool = MakePool({{"null", 1}}, /*capacity=*/8, /*per_client=*/2);
  Gate gate;
  const std::string sep(1, kSubKeySeparator);
  std::vector<std::shared_ptr<JobHandle>> hs;
  hs.push_back(*pool->Submit(Blocking(gate, "ipv4:10.0.0.1" + sep + "a")));  // runs
  EXPECT_TRUE(Eventually([&] { return pool->Devices()[0].busy; }));
  hs.push_back(*pool->Submit(Blocking(gate, "ipv4:10.0.0.1" + sep + "b")));
  hs.push_back(*pool->Submit(Blocking(gate, "ipv4:10.0.0.1" + sep + "c")));
  auto more = pool->Submit(Blocking(gate, "ipv4:10.0.0.1" + sep + "d"));
  EXPECT_EQ(more.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(more.status().message().find("'ipv4:10.0.0.1'"), std::string::npos) << more.status().message();
  // Claiming the victim's sub-key name changes nothing: the victim's principal still has room.
  auto victim = pool->Submit(Blocking(gate, "ipv4:10.0.0.2"));
  ASSERT_TRUE(victim.ok()) << victim.status().ToString();
  hs.push_back(*victim);
  auto victim_sub = pool->Submit(Blocking(gate, "ipv4:10.0.0.2" + sep + "x"));
  ASSERT_TRUE(victim_sub.ok()) << victim_sub.status().ToString();
  hs.push_back(*victim_sub);
  gate.Open();
  for (auto& h : hs) EXPECT_TRUE(h->Wait().ok());
  // Quota returns as jobs leave the queue.
  EXPECT_TRUE(pool->Submit(Blocking(gate, "ipv4:10.0.0.1" + sep + "e")).ok());
}

// The retry hint is capped (kMaxRetryAfter) and written in seconds once it passes one: an estimate
// from slow jobs used to say "~986850 ms".
TEST(SchedulerTest, RetryHintIsCappedAndReadable) {
  auto pool = MakePool({{"null", 1}}, /*capacity=*/40, /*per_client=*/40);
  JobRequest slow;
  slow.lane = "null";
  slow.work = [](Backend&, JobContext&) {
    std::this_thread::sleep_for(1100ms);  // one job's run time seeds the lane's mean
    return Status::Ok();
  };
  ASSERT_TRUE((*pool->Submit(std::move(slow)))->Wait().ok());
  Gate gate;
  std::vector<std::shared_ptr<JobHandle>> hs;
  for (int i = 0; i < 41; ++i) hs.push_back(*pool->Submit(Blocking(gate)));  // 1 running + 40 queued
  auto full = pool->Submit(Blocking(gate));
  ASSERT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  // 41 jobs x 1.1 s would be ~45 s; the hint stops at 30 s.
  EXPECT_NE(full.status().message().find("retry after ~30 s"), std::string::npos) << full.status().message();
  EXPECT_EQ(pool->SuggestedRetryAfter("null"), kMaxRetryAfter);
  gate.Open();
  for (auto& h : hs) EXPECT_TRUE(h->Wait().ok());
}

TEST(SchedulerTest, RoundRobinAcrossClients) {
  auto pool = MakePool({{"null", 1}}, 64, 32);
  Gate gate;
  auto first = *pool->Submit(Blocking(gate, "A"));
  EXPECT_TRUE(Eventually([&] { return pool->Devices()[0].busy; }));
  std::mutex mu;
  std::vector<std::string> order;
  auto rec = [&](std::string client) {
    JobRequest r;
    r.lane = "null";
    r.client_id = client;
    r.work = [&, client](Backend&, JobContext&) {
      std::lock_guard<std::mutex> l(mu);
      order.push_back(client);
      return Status::Ok();
    };
    return r;
  };
  std::vector<std::shared_ptr<JobHandle>> hs;
  for (int i = 0; i < 10; ++i) hs.push_back(*pool->Submit(rec("A")));
  for (int i = 0; i < 2; ++i) hs.push_back(*pool->Submit(rec("B")));
  gate.Open();
  for (auto& h : hs) EXPECT_TRUE(h->Wait().ok());
  ASSERT_EQ(order.size(), 12u);
  // B's two jobs run among the first four, not after A's ten.
  int b_in_first_four = 0;
  for (int i = 0; i < 4; ++i) b_in_first_four += order[i] == "B";
  EXPECT_EQ(b_in_first_four, 2);
  EXPECT_EQ(order.back(), "A");
}

TEST(SchedulerTest, CancelQueuedJobCompletesAtOnceWithoutRunning) {
  auto pool = MakePool({{"null", 1}});
  Gate gate;
  auto running = *pool->Submit(Blocking(gate));
  std::atomic<bool> ran{false};
  JobRequest r;
  r.lane = "null";
  r.work = [&](Backend&, JobContext&) {
    ran = true;
    return Status::Ok();
  };
  auto queued = *pool->Submit(r);
  EXPECT_TRUE(Eventually([&] { return pool->QueueDepth("null") == 1; }));
  Status cb_status;
  std::atomic<bool> cb{false};
  queued->OnDone([&](const Status& s) {
    cb_status = s;
    cb = true;
  });
  queued->Cancel();
  EXPECT_TRUE(queued->WaitFor(1s));
  EXPECT_EQ(queued->status().code(), StatusCode::kCancelled);
  EXPECT_TRUE(cb);
  EXPECT_EQ(cb_status.code(), StatusCode::kCancelled);
  EXPECT_EQ(pool->QueueDepth("null"), 0);
  gate.Open();
  EXPECT_TRUE(running->Wait().ok());
  EXPECT_FALSE(ran);
}

TEST(SchedulerTest, CancelRunningJobStopsBetweenLayersAndFreesTheWorker) {
  auto pool = MakePool({{"null", 1}});
  std::atomic<int> layers{0};
  JobRequest r;
  r.lane = "null";
  r.work = [&](Backend&, JobContext& ctx) -> Status {
    for (int layer = 0; layer < 100000; ++layer) {
      KILN_RETURN_IF_ERROR(ctx.cancel->Check());
      ++layers;
      std::this_thread::sleep_for(1ms);
    }
    return Status::Ok();
  };
  auto h = *pool->Submit(r);
  EXPECT_TRUE(Eventually([&] { return layers > 3; }));
  EXPECT_EQ(h->state(), JobState::kRunning);
  h->Cancel();
  EXPECT_TRUE(h->WaitFor(2s));
  EXPECT_EQ(h->status().code(), StatusCode::kCancelled);
  EXPECT_LT(layers.load(), 100000);
  // The worker serves the next job.
  JobRequest next;
  next.lane = "null";
  next.work = [](Backend&, JobContext&) { return Status::Ok(); };
  EXPECT_TRUE((*pool->Submit(next))->Wait().ok());
}

TEST(SchedulerTest, DeadlinePassedInQueueAndWhileRunning) {
  auto pool = MakePool({{"null", 1}});
  Gate gate;
  auto blocker = *pool->Submit(Blocking(gate));
  JobRequest q;
  q.lane = "null";
  q.work = [](Backend&, JobContext&) { return Status::Ok(); };
  q.deadline = CancelToken::Clock::now() + 50ms;
  auto queued = *pool->Submit(q);
  // Completes by its deadline timer although the device is still busy.
  EXPECT_TRUE(queued->WaitFor(2s));
  EXPECT_EQ(queued->status().code(), StatusCode::kDeadlineExceeded);
  gate.Open();
  EXPECT_TRUE(blocker->Wait().ok());

  JobRequest run;
  run.lane = "null";
  run.deadline = CancelToken::Clock::now() + 50ms;
  run.work = [](Backend&, JobContext& ctx) -> Status {
    for (;;) {
      KILN_RETURN_IF_ERROR(ctx.cancel->Check());
      std::this_thread::sleep_for(1ms);
    }
  };
  auto h = *pool->Submit(run);
  EXPECT_TRUE(h->WaitFor(2s));
  EXPECT_EQ(h->status().code(), StatusCode::kDeadlineExceeded);
}

TEST(SchedulerTest, ThrowingJobFailsAloneAndWorkerKeepsServing) {
  auto pool = MakePool({{"reference", 1}});
  JobRequest bad;
  bad.lane = "reference";
  bad.work = [](Backend&, JobContext&) -> Status { throw std::runtime_error("boom"); };
  auto h = *pool->Submit(bad);
  EXPECT_EQ(h->Wait().code(), StatusCode::kInternal);
  EXPECT_NE(h->status().message().find("boom"), std::string::npos);
  JobRequest oom;
  oom.lane = "reference";
  oom.work = [](Backend&, JobContext&) -> Status { throw std::bad_alloc(); };
  EXPECT_EQ((*pool->Submit(oom))->Wait().code(), StatusCode::kResourceExhausted);
  // Bad shapes are an ordinary error status from the backend.
  JobRequest shapes;
  shapes.lane = "reference";
  shapes.work = [](Backend& b, JobContext&) -> Status {
    auto x = Tensor::Zeros({1, 3, 4, 4});
    auto w = Tensor::Zeros({2, 5, 3, 3});
    return b.Conv2d(*x, *w, nullptr, {}, {}).status();
  };
  EXPECT_EQ((*pool->Submit(shapes))->Wait().code(), StatusCode::kInvalidArgument);
  JobRequest good;
  good.lane = "reference";
  good.work = [](Backend&, JobContext&) { return Status::Ok(); };
  EXPECT_TRUE((*pool->Submit(good))->Wait().ok());
  EXPECT_EQ(pool->Devices()[0].jobs_done, 4u);
}

TEST(SchedulerTest, ThirtyTwoConcurrentClientsGetCorrectResults) {
  SchedulerOptions o;
  o.devices = {{"reference", 2}};
  o.queue_capacity = 64;
  o.max_queued_per_client = 4;
  o.registry = &TestRegistry();
  o.backend_settings["reference"] = {{"threads", "1"}};  // two devices share two cores
  auto created = Scheduler::Create(o);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto pool = std::move(*created);
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 32; ++c) {
    clients.emplace_back([&, c] {
      // Each client convolves its own constant input with an all-ones 3x3 kernel: every interior
      // output equals 9 * C * value.
      const float value = static_cast<float>(c + 1);
      std::vector<float> xv(1 * 4 * 12 * 12, value);
      auto x = Tensor::FromFloats({1, 4, 12, 12}, xv);
      auto w = Tensor::FromFloats({2, 4, 3, 3}, std::vector<float>(2 * 4 * 9, 1.f));
      Tensor out;
      JobRequest r;
      r.lane = "reference";
      r.client_id = "client-" + std::to_string(c);
      r.work = [&](Backend& b, JobContext& ctx) -> Status {
        ExecContext e;
        e.cancel = ctx.cancel;
        auto y = b.Conv2d(*x, *w, nullptr, {}, e);
        if (!y.ok()) return y.status();
        out = std::move(*y);
        return Status::Ok();
      };
      for (int attempt = 0; attempt < 1000; ++attempt) {
        auto h = pool->Submit(r);
        if (!h.ok()) {
          ASSERT_EQ(h.status().code(), StatusCode::kResourceExhausted);
          std::this_thread::sleep_for(pool->SuggestedRetryAfter("reference"));
          continue;
        }
        ASSERT_TRUE((*h)->Wait().ok());
        ASSERT_EQ(out.shape(), (std::vector<int64_t>{1, 2, 10, 10}));
        for (float v : out.span<float>()) ASSERT_EQ(v, 36.f * value);
        ++ok;
        return;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 32);
  uint64_t done = 0;
  for (const auto& d : pool->Devices()) done += d.jobs_done;
  EXPECT_EQ(done, 32u);
}

double Value(prometheus::Registry& reg, const std::string& family, const std::map<std::string, std::string>& labels) {
  for (const auto& f : reg.Collect()) {
    if (f.name != family) continue;
    for (const auto& m : f.metric) {
      bool match = true;
      for (const auto& [k, v] : labels) {
        bool found = false;
        for (const auto& l : m.label) found |= l.name == k && l.value == v;
        match &= found;
      }
      if (!match) continue;
      switch (f.type) {
        case prometheus::MetricType::Counter: return m.counter.value;
        case prometheus::MetricType::Gauge: return m.gauge.value;
        case prometheus::MetricType::Histogram: return static_cast<double>(m.histogram.sample_count);
        default: return -1;
      }
    }
  }
  return -1;
}

TEST(SchedulerTest, MetricsMove) {
  auto reg = std::make_shared<prometheus::Registry>();
  auto pool = MakePool({{"null", 1}}, 1, 1, reg);
  Gate gate;
  auto running = *pool->Submit(Blocking(gate));
  EXPECT_TRUE(Eventually([&] { return Value(*reg, "kiln_device_busy", {{"device", "null:0"}}) == 1; }));
  auto queued = *pool->Submit(Blocking(gate));
  EXPECT_EQ(Value(*reg, "kiln_device_queue_depth", {{"backend", "null"}}), 1);
  EXPECT_EQ(pool->Submit(Blocking(gate, "x")).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(Value(*reg, "kiln_device_jobs_total", {{"backend", "null"}, {"status", "RESOURCE_EXHAUSTED"}}), 1);
  queued->Cancel();
  EXPECT_EQ(Value(*reg, "kiln_device_jobs_total", {{"backend", "null"}, {"status", "CANCELLED"}}), 1);
  gate.Open();
  EXPECT_TRUE(running->Wait().ok());
  EXPECT_TRUE(Eventually([&] { return Value(*reg, "kiln_device_busy", {{"device", "null:0"}}) == 0; }));
  EXPECT_EQ(Value(*reg, "kiln_device_queue_depth", {{"backend", "null"}}), 0);
  EXPECT_EQ(Value(*reg, "kiln_device_jobs_total", {{"backend", "null"}, {"status", "OK"}}), 1);
  EXPECT_EQ(Value(*reg, "kiln_device_job_duration_seconds", {{"backend", "null"}}), 1);
}

TEST(SchedulerTest, ShutdownDrainsOrCancels) {
  {
    auto pool = MakePool({{"null", 1}});
    std::atomic<int> done{0};
    std::vector<std::shared_ptr<JobHandle>> hs;
    for (int i = 0; i < 5; ++i) {
      JobRequest r;
      r.lane = "null";
      r.work = [&](Backend&, JobContext&) {
        std::this_thread::sleep_for(5ms);
        ++done;
        return Status::Ok();
      };
      hs.push_back(*pool->Submit(r));
    }
    pool->Shutdown(/*drain=*/true);
    EXPECT_EQ(done.load(), 5);
    for (auto& h : hs) EXPECT_TRUE(h->status().ok());
    JobRequest late;
    late.lane = "null";
    late.work = [](Backend&, JobContext&) { return Status::Ok(); };
    EXPECT_EQ(pool->Submit(late).status().code(), StatusCode::kUnavailable);
  }
  {
    auto pool = MakePool({{"null", 1}});
    JobRequest spin;
    spin.lane = "null";
    spin.work = [](Backend&, JobContext& ctx) -> Status {
      for (;;) {
        KILN_RETURN_IF_ERROR(ctx.cancel->Check());
        std::this_thread::sleep_for(1ms);
      }
    };
    auto running = *pool->Submit(spin);
    auto queued = *pool->Submit(spin);
    EXPECT_TRUE(Eventually([&] { return running->state() == JobState::kRunning; }));
    pool.reset();  // destructor = Shutdown(false)
    EXPECT_EQ(running->status().code(), StatusCode::kCancelled);
    EXPECT_EQ(queued->status().code(), StatusCode::kUnavailable);
    queued->Cancel();  // handles outlive the pool safely
  }
}

}  // namespace
}  // namespace kiln::sched
