// CPU lanes (compile, plan, store work in kilnd) and the reference executor of the scheduler.
// The first test re-expresses the cases of the deleted BoundedExecutor's test against a CPU lane.
#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <atomic>
#include <future>
#include <thread>

#include "device/backends/reference/reference_backend.h"
#include "sched/scheduler.h"

namespace kiln::sched {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Scheduler> CpuScheduler(int workers, int queue, std::shared_ptr<prometheus::Registry> metrics = nullptr,
                                        int64_t max_bytes = 0) {
  SchedulerOptions o;
  o.cpu_lanes = {{.name = "compile", .workers = workers, .queue_capacity = queue, .max_queued_bytes = max_bytes}};
  o.metrics = std::move(metrics);
  auto s = Scheduler::Create(std::move(o));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

JobRequest Task(TaskFn fn, std::string client = "c") {
  JobRequest r;
  r.lane = "compile";
  r.client_id = std::move(client);
  r.task = std::move(fn);
  return r;
}

TEST(CpuLaneTest, RefusesBeyondWorkersPlusQueueAndRecovers) {
  auto s = CpuScheduler(/*workers=*/1, /*queue=*/1);
  ASSERT_TRUE(s);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<int> ran{0};
  auto blocking = [&](JobContext&) {
    gate.wait();
    ran++;
    return Status::Ok();
  };
  auto running = s->Submit(Task(blocking));
  ASSERT_TRUE(running.ok());
  for (int i = 0; i < 1000 && (*running)->state() != JobState::kRunning; ++i) std::this_thread::sleep_for(1ms);
  auto queued = s->Submit(Task(blocking, "other"));  // another client: the per-client quota is not the limit
  ASSERT_TRUE(queued.ok());
  auto full = s->Submit(Task(blocking, "third"));
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("retry after"), std::string::npos);
  EXPECT_EQ(s->QueueDepth("compile"), 1);
  release.set_value();
  EXPECT_TRUE((*running)->Wait().ok());
  EXPECT_TRUE((*queued)->Wait().ok());
  EXPECT_EQ(ran.load(), 2);
  EXPECT_EQ(s->QueueDepth("compile"), 0);
  // OnDone runs after the worker is free: a new job is admitted from inside it.
  std::promise<bool> admitted_from_continuation;
  auto first = s->Submit(Task([&](JobContext&) {
    ran++;
    return Status::Ok();
  }));
  ASSERT_TRUE(first.ok());
  (*first)->OnDone([&](const Status&) {
    auto next = s->Submit(Task([](JobContext&) { return Status::Ok(); }));
    admitted_from_continuation.set_value(next.ok());
  });
  EXPECT_TRUE(admitted_from_continuation.get_future().get());
  s->Shutdown(/*drain=*/true);
  EXPECT_EQ(ran.load(), 3);
}

TEST(CpuLaneTest, WorkOfTheWrongKindAndUnknownLanes) {
  auto s = CpuScheduler(1, 4);
  ASSERT_TRUE(s);
  JobRequest device_work;
  device_work.lane = "compile";
  device_work.work = [](Backend&, JobContext&) { return Status::Ok(); };
  auto r = s->Submit(device_work);  // a CPU lane is no backend
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("no device for backend 'compile'"), std::string::npos) << r.status().ToString();
  JobRequest nothing;
  nothing.lane = "compile";
  EXPECT_EQ(s->Submit(nothing).status().code(), StatusCode::kInvalidArgument);
  auto nf = s->Submit(Task([](JobContext&) { return Status::Ok(); }, "c"));
  EXPECT_TRUE(nf.ok());
  JobRequest unknown = Task([](JobContext&) { return Status::Ok(); });
  unknown.lane = "plan";
  EXPECT_EQ(s->Submit(unknown).status().code(), StatusCode::kNotFound);
  // The hidden reference worker serves Reference() only.
  unknown.lane = "reference";
  EXPECT_EQ(s->Submit(unknown).status().code(), StatusCode::kNotFound);
  SchedulerOptions dup;
  dup.cpu_lanes = {{.name = "a"}, {.name = "a"}};
  EXPECT_EQ(Scheduler::Create(dup).status().code(), StatusCode::kInvalidArgument);
}

TEST(CpuLaneTest, ByteBudgetRefusesWhatWouldPassIt) {
  auto s = CpuScheduler(1, 8, nullptr, /*max_bytes=*/1000);
  ASSERT_TRUE(s);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  auto blocking = [gate](JobContext&) {
    gate.wait();
    return Status::Ok();
  };
  auto running = s->Submit(Task(blocking, "a"));  // runs at once: not queued, not counted
  ASSERT_TRUE(running.ok());
  for (int i = 0; i < 1000 && (*running)->state() != JobState::kRunning; ++i) std::this_thread::sleep_for(1ms);
  JobRequest big = Task(blocking, "b");
  big.cost_bytes = 800;
  auto queued = s->Submit(big);
  ASSERT_TRUE(queued.ok());
  JobRequest more = Task(blocking, "c");
  more.cost_bytes = 300;
  auto refused = s->Submit(more);
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("1000-byte budget"), std::string::npos) << refused.status().ToString();
  more.cost_bytes = 200;
  auto fits = s->Submit(more);
  EXPECT_TRUE(fits.ok());
  release.set_value();
  EXPECT_TRUE((*queued)->Wait().ok());
  EXPECT_TRUE((*fits)->Wait().ok());
}

TEST(CpuLaneTest, CancelAQueuedTaskAndMetrics) {
  auto metrics = std::make_shared<prometheus::Registry>();
  auto s = CpuScheduler(1, 4, metrics);
  ASSERT_TRUE(s);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  auto running = s->Submit(Task([gate](JobContext&) {
    gate.wait();
    return Status::Ok();
  }));
  ASSERT_TRUE(running.ok());
  std::atomic<bool> ran{false};
  auto queued = s->Submit(Task([&](JobContext&) {
    ran = true;
    return Status::Ok();
  }, "other"));
  ASSERT_TRUE(queued.ok());
  (*queued)->Cancel();
  EXPECT_EQ((*queued)->Wait().code(), StatusCode::kCancelled);
  release.set_value();
  EXPECT_TRUE((*running)->Wait().ok());
  s->Shutdown(true);
  EXPECT_FALSE(ran.load());
  const std::string text = prometheus::TextSerializer().Serialize(metrics->Collect());
  EXPECT_NE(text.find("kiln_sched_jobs_total{lane=\"compile\",status=\"OK\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("kiln_sched_jobs_total{lane=\"compile\",status=\"CANCELLED\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("kiln_sched_queue_depth{lane=\"compile\"} 0"), std::string::npos) << text;
}

// Reference() runs each op as a job on the reference lane's worker: a job on another lane gets
// the reference backend's numbers, the op runs on the reference worker's thread (not the
// caller's), and the hidden worker is a device for the metrics but not for Devices().
class ThreadRecordingReference : public Backend {
 public:
  explicit ThreadRecordingReference(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return "reference"; }
  device::BackendCapabilities capabilities() const override { return inner_->capabilities(); }
  Result<device::Tensor> Conv2d(const device::Tensor& x, const device::Tensor& w, const device::Tensor* b,
                                const device::Conv2dParams& p, const device::ExecContext& c) override {
    last_thread = std::this_thread::get_id();
    return inner_->Conv2d(x, w, b, p, c);
  }
  Result<device::Tensor> ConvTranspose2d(const device::Tensor& x, const device::Tensor& w, const device::Tensor* b,
                                         const device::ConvTranspose2dParams& p,
                                         const device::ExecContext& c) override {
    return inner_->ConvTranspose2d(x, w, b, p, c);
  }
  static inline std::thread::id last_thread;

 private:
  std::unique_ptr<Backend> inner_;
};

TEST(ReferenceExecutorTest, RunsOpsOnTheReferenceWorker) {
  device::BackendRegistry registry;
  ASSERT_TRUE(registry
                  .Register("reference",
                            [](const device::BackendOptions& o) -> Result<std::unique_ptr<Backend>> {
                              auto inner = device::MakeReferenceBackend(o);
                              if (!inner.ok()) return inner.status();
                              return std::unique_ptr<Backend>(new ThreadRecordingReference(std::move(*inner)));
                            })
                  .ok());
  auto metrics = std::make_shared<prometheus::Registry>();
  SchedulerOptions o;
  o.cpu_lanes = {{.name = "plan"}};
  o.reference_threads = 1;
  o.registry = &registry;
  o.metrics = metrics;
  auto s = Scheduler::Create(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::vector<float> xv{1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  const std::vector<float> wv{1.0f, 2.0f};
  auto x = device::Tensor::FromFloats({1, 2, 3, 3}, xv);
  auto w = device::Tensor::FromFloats({1, 2, 1, 1}, wv);
  ASSERT_TRUE(x.ok() && w.ok());
  std::thread::id caller;
  Result<device::Tensor> y = Internal("not run");
  JobRequest r;
  r.lane = "plan";
  r.task = [&](JobContext&) {
    caller = std::this_thread::get_id();
    y = (*s)->Reference().Conv2d(*x, *w, nullptr, device::Conv2dParams{}, {});
    return y.status();
  };
  auto h = (*s)->Submit(r);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*h)->Wait().ok()) << (*h)->status().ToString();
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{1, 1, 3, 3}));
  EXPECT_FLOAT_EQ(y->data<float>()[0], 1.0f + 2.0f * 9.0f);
  EXPECT_NE(ThreadRecordingReference::last_thread, std::thread::id());
  EXPECT_NE(ThreadRecordingReference::last_thread, caller);
  EXPECT_EQ((*s)->Reference().name(), "reference");
  const std::string text = prometheus::TextSerializer().Serialize(metrics->Collect());
  EXPECT_NE(text.find("kiln_device_busy{device=\"reference:0\"} 0"), std::string::npos) << text;
  EXPECT_TRUE((*s)->Devices().empty());
}

}  // namespace
}  // namespace kiln::sched
