#include "device/worker_pool/worker_pool.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "device/backends/builtin.h"

namespace kiln::device {

namespace asio = boost::asio;

Result<std::vector<DeviceSpec>> ParseDeviceList(std::string_view text) {
  std::vector<DeviceSpec> out;
  std::set<std::string> seen;
  std::string s(text);
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto a = item.find_first_not_of(' ');
    const auto b = item.find_last_not_of(' ');
    if (a == std::string::npos) return InvalidArgument("empty entry in device list '" + s + "'");
    item = item.substr(a, b - a + 1);
    DeviceSpec d;
    const auto colon = item.rfind(':');
    d.backend = item.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string n = item.substr(colon + 1);
      if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos || n.size() > 3) {
        return InvalidArgument("bad device count '" + n + "' in '" + item + "' (expected backend[:count])");
      }
      d.count = std::stoi(n);
    }
    if (d.backend.empty()) return InvalidArgument("empty backend name in '" + item + "'");
    if (d.count < 1 || d.count > 256) {
      return InvalidArgument("device count for '" + d.backend + "' must be in 1..256, got " + std::to_string(d.count));
    }
    if (!seen.insert(d.backend).second) return InvalidArgument("backend '" + d.backend + "' listed twice");
    out.push_back(d);
  }
  if (out.empty()) return InvalidArgument("device list is empty");
  return out;
}

namespace {

class Job;

}  // namespace

class WorkerPool::Impl : public std::enable_shared_from_this<WorkerPool::Impl> {
 public:
  struct Device {
    std::string name, backend, description;
    int index = 0;
    std::unique_ptr<Backend> be;
    asio::io_context io;
    std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
    std::thread thread;
    bool busy = false;
    std::shared_ptr<Job> current;
    uint64_t jobs_done = 0;
    prometheus::Gauge* busy_gauge = nullptr;
  };
  struct Queue {
    std::map<std::string, std::deque<std::shared_ptr<Job>>> per_client;
    std::deque<std::string> rotation;  // clients with queued jobs, in round-robin order
    int size = 0;
    std::vector<Device*> devices;
    double mean_seconds = -1;  // EWMA of job run time; < 0 until the first job finished
    prometheus::Gauge* depth_gauge = nullptr;
    prometheus::Histogram* duration = nullptr;
  };

  WorkerPoolOptions opts;
  int per_client_limit = 1;
  mutable std::mutex mu;
  std::condition_variable idle_cv;
  bool stopping = false;
  bool joined = false;
  uint64_t next_id = 1;
  std::map<std::string, Queue> queues;
  std::vector<std::unique_ptr<Device>> devices;
  prometheus::Family<prometheus::Counter>* jobs_total = nullptr;

  // Deadline timers live on the control thread only.
  asio::io_context control;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> control_guard;
  std::thread control_thread;
  std::unordered_map<uint64_t, std::unique_ptr<asio::steady_timer>> timers;  // control thread only

  void CountJob(const std::string& backend, StatusCode code) {
    if (jobs_total) jobs_total->Add({{"backend", backend}, {"status", StatusCodeName(code)}}).Increment();
  }

  void UpdateDepthLocked(Queue& q) {
    if (q.depth_gauge) q.depth_gauge->Set(q.size);
  }

  std::chrono::milliseconds RetryAfterLocked(const Queue& q) const {
    if (q.mean_seconds < 0) return std::chrono::milliseconds(100);
    const double ms = (q.size + 1) * q.mean_seconds * 1000.0 / std::max<std::size_t>(1, q.devices.size());
    return std::chrono::milliseconds(std::max<int64_t>(10, static_cast<int64_t>(ms)));
  }

  std::shared_ptr<Job> PopFairLocked(Queue& q);
  void DispatchLocked(Queue& q);
  void RunOnDevice(Device* d, std::shared_ptr<Job> job);
  // Removes a queued job (cancel / deadline); completes it with its token's status. False if it
  // was not queued any more.
  bool RemoveQueued(const std::shared_ptr<Job>& job);
  void ArmDeadline(const std::shared_ptr<Job>& job);
  void DisarmDeadline(uint64_t id);
  void Shutdown(bool drain);
};

namespace {

class Job final : public JobHandle, public std::enable_shared_from_this<Job> {
 public:
  Job(uint64_t id, JobRequest req, std::weak_ptr<WorkerPool::Impl> pool)
      : id_(id),
        backend_(std::move(req.backend)),
        client_(std::move(req.client_id)),
        work_(std::move(req.work)),
        progress_(std::move(req.progress)),
        token_(req.deadline ? std::make_unique<CancelToken>(*req.deadline) : std::make_unique<CancelToken>()),
        pool_(std::move(pool)) {}

  uint64_t id() const override { return id_; }
  void Cancel() override {
    token_->Cancel();
    if (auto p = pool_.lock()) p->RemoveQueued(shared_from_this());
  }
  JobState state() const override {
    std::lock_guard<std::mutex> l(mu_);
    return state_;
  }
  Status Wait() override {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return state_ == JobState::kDone; });
    return status_;
  }
  bool WaitFor(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, timeout, [&] { return state_ == JobState::kDone; });
  }
  Status status() const override {
    std::lock_guard<std::mutex> l(mu_);
    return status_;
  }
  void OnDone(std::function<void(const Status&)> fn) override {
    std::unique_lock<std::mutex> l(mu_);
    if (state_ == JobState::kDone) {
      Status s = status_;
      l.unlock();
      if (fn) fn(s);
      return;
    }
    on_done_ = std::move(fn);
  }

  void SetRunning() {
    std::lock_guard<std::mutex> l(mu_);
    if (state_ == JobState::kQueued) state_ = JobState::kRunning;
  }
  // Marks the job done (once). Returns false if it already was.
  bool Complete(Status s) {
    std::function<void(const Status&)> fn;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (state_ == JobState::kDone) return false;
      state_ = JobState::kDone;
      status_ = s;
      fn = std::move(on_done_);
    }
    cv_.notify_all();
    if (fn) {
      try {
        fn(s);
      } catch (...) {
        // A callback's failure must not take a worker down.
      }
    }
    return true;
  }

  const uint64_t id_;
  const std::string backend_, client_;
  JobFn work_;
  ProgressFn progress_;
  std::unique_ptr<CancelToken> token_;
  std::weak_ptr<WorkerPool::Impl> pool_;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  JobState state_ = JobState::kQueued;
  Status status_;
  std::function<void(const Status&)> on_done_;
};

}  // namespace

std::shared_ptr<Job> WorkerPool::Impl::PopFairLocked(Queue& q) {
  while (!q.rotation.empty()) {
    const std::string client = q.rotation.front();
    q.rotation.pop_front();
    auto it = q.per_client.find(client);
    if (it == q.per_client.end() || it->second.empty()) {
      if (it != q.per_client.end()) q.per_client.erase(it);
      continue;
    }
    auto job = it->second.front();
    it->second.pop_front();
    if (it->second.empty()) {
      q.per_client.erase(it);
    } else {
      q.rotation.push_back(client);
    }
    --q.size;
    UpdateDepthLocked(q);
    return job;
  }
  return nullptr;
}

void WorkerPool::Impl::DispatchLocked(Queue& q) {
  for (Device* d : q.devices) {
    if (q.size == 0) return;
    if (d->busy) continue;
    auto job = PopFairLocked(q);
    if (!job) return;
    d->busy = true;
    d->current = job;
    if (d->busy_gauge) d->busy_gauge->Set(1);
    job->SetRunning();
    asio::post(d->io, [this, d, job] { RunOnDevice(d, job); });
  }
}

void WorkerPool::Impl::RunOnDevice(Device* d, std::shared_ptr<Job> job) {
  DisarmDeadline(job->id_);
  Status st = job->token_->Check();
  double seconds = -1;
  if (st.ok()) {
    JobContext ctx;
    ctx.job_id = job->id_;
    ctx.device = d->name;
    ctx.device_index = d->index;
    ctx.cancel = job->token_.get();
    ProgressFn user = job->progress_;
    ctx.progress = [user](const JobProgress& p) {
      if (user) {
        try {
          user(p);
        } catch (...) {
        }
      }
    };
    const auto t0 = std::chrono::steady_clock::now();
    try {
      st = job->work_(*d->be, ctx);
    } catch (const std::bad_alloc&) {
      st = ResourceExhausted("job " + std::to_string(job->id_) + " on " + d->name + ": out of memory");
    } catch (const std::exception& e) {
      st = Internal("job " + std::to_string(job->id_) + " on " + d->name + " threw: " + e.what());
    } catch (...) {
      st = Internal("job " + std::to_string(job->id_) + " on " + d->name + " threw a non-standard exception");
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // Release the job's resources (captured tensors) before reporting.
  job->work_ = nullptr;
  {
    std::lock_guard<std::mutex> l(mu);
    Queue& q = queues[d->backend];
    d->busy = false;
    d->current.reset();
    ++d->jobs_done;
    if (d->busy_gauge) d->busy_gauge->Set(0);
    if (seconds >= 0) {
      q.mean_seconds = q.mean_seconds < 0 ? seconds : 0.8 * q.mean_seconds + 0.2 * seconds;
      if (q.duration) q.duration->Observe(seconds);
    }
    DispatchLocked(q);
  }
  idle_cv.notify_all();
  CountJob(d->backend, st.code());
  job->Complete(st);
}

bool WorkerPool::Impl::RemoveQueued(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> l(mu);
    auto qit = queues.find(job->backend_);
    if (qit == queues.end()) return false;
    Queue& q = qit->second;
    auto cit = q.per_client.find(job->client_);
    if (cit == q.per_client.end()) return false;
    auto& dq = cit->second;
    auto it = std::find(dq.begin(), dq.end(), job);
    if (it == dq.end()) return false;
    dq.erase(it);
    if (dq.empty()) {
      q.per_client.erase(cit);
      q.rotation.erase(std::remove(q.rotation.begin(), q.rotation.end(), job->client_), q.rotation.end());
    }
    --q.size;
    UpdateDepthLocked(q);
  }
  idle_cv.notify_all();
  DisarmDeadline(job->id_);
  Status st = job->token_->Check();
  if (st.ok()) st = Cancelled("cancelled while queued");
  CountJob(job->backend_, st.code());
  job->Complete(st);
  return true;
}

void WorkerPool::Impl::ArmDeadline(const std::shared_ptr<Job>& job) {
  if (!job->token_->has_deadline()) return;
  std::weak_ptr<Job> weak = job;
  const auto deadline = job->token_->deadline();
  const uint64_t id = job->id_;
  asio::post(control, [this, weak, deadline, id] {
    auto timer = std::make_unique<asio::steady_timer>(control, deadline);
    timer->async_wait([this, weak, id](const boost::system::error_code& ec) {
      timers.erase(id);
      if (ec) return;  // cancelled: the job left the queue
      if (auto j = weak.lock()) RemoveQueued(j);
    });
    timers[id] = std::move(timer);
  });
}

void WorkerPool::Impl::DisarmDeadline(uint64_t id) {
  asio::post(control, [this, id] {
    auto it = timers.find(id);
    if (it != timers.end()) it->second->cancel();
  });
}

void WorkerPool::Impl::Shutdown(bool drain) {
  std::vector<std::shared_ptr<Job>> dropped;
  {
    std::unique_lock<std::mutex> l(mu);
    if (joined) return;
    stopping = true;
    if (!drain) {
      for (auto& [name, q] : queues) {
        while (auto job = PopFairLocked(q)) dropped.push_back(job);
      }
      for (auto& d : devices) {
        if (d->current) d->current->token_->Cancel();
      }
    }
  }
  for (auto& job : dropped) {
    job->token_->Cancel();
    CountJob(job->backend_, StatusCode::kUnavailable);
    job->Complete(Unavailable("worker pool shutting down"));
  }
  {
    std::unique_lock<std::mutex> l(mu);
    idle_cv.wait(l, [&] {
      for (auto& [name, q] : queues)
        if (q.size > 0) return false;
      for (auto& d : devices)
        if (d->busy) return false;
      return true;
    });
    joined = true;
  }
  for (auto& d : devices) {
    d->guard.reset();
    if (d->thread.joinable()) d->thread.join();
  }
  control_guard.reset();
  control.stop();
  if (control_thread.joinable()) control_thread.join();
}

WorkerPool::WorkerPool(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<WorkerPool>> WorkerPool::Create(WorkerPoolOptions options) {
  if (options.devices.empty()) return InvalidArgument("worker pool needs at least one device");
  if (options.queue_capacity < 1) return InvalidArgument("queue_capacity must be >= 1");
  if (options.max_queued_per_client < 0) return InvalidArgument("max_queued_per_client must be >= 0");
  const BackendRegistry& registry = options.registry ? *options.registry : DefaultBackendRegistry();
  for (const auto& [name, settings] : options.backend_settings) {
    if (std::none_of(options.devices.begin(), options.devices.end(),
                     [&](const DeviceSpec& d) { return d.backend == name; })) {
      return InvalidArgument("backend_settings for '" + name + "', which has no devices");
    }
  }
  auto impl = std::shared_ptr<Impl>(new Impl());
  impl->opts = options;
  impl->per_client_limit = options.max_queued_per_client > 0 ? options.max_queued_per_client
                                                             : std::max(1, options.queue_capacity / 2);
  prometheus::Family<prometheus::Gauge>* depth = nullptr;
  prometheus::Family<prometheus::Gauge>* busy = nullptr;
  prometheus::Family<prometheus::Histogram>* duration = nullptr;
  if (options.metrics) {
    depth = &prometheus::BuildGauge()
                 .Name("kiln_device_queue_depth")
                 .Help("Jobs queued (not yet running) per device backend")
                 .Register(*options.metrics);
    busy = &prometheus::BuildGauge()
                .Name("kiln_device_busy")
                .Help("1 while the device executes a job")
                .Register(*options.metrics);
    duration = &prometheus::BuildHistogram()
                    .Name("kiln_device_job_duration_seconds")
                    .Help("Time a job ran on its device")
                    .Register(*options.metrics);
    impl->jobs_total = &prometheus::BuildCounter()
                            .Name("kiln_device_jobs_total")
                            .Help("Finished or rejected device jobs by backend and final status")
                            .Register(*options.metrics);
  }
  for (const DeviceSpec& spec : options.devices) {
    Impl::Queue& q = impl->queues[spec.backend];
    if (depth) {
      q.depth_gauge = &depth->Add({{"backend", spec.backend}});
      q.duration = &duration->Add({{"backend", spec.backend}},
                                  prometheus::Histogram::BucketBoundaries{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1,
                                                                          2.5, 5, 10, 30, 60, 300});
    }
    for (int i = 0; i < spec.count; ++i) {
      auto d = std::make_unique<Impl::Device>();
      d->backend = spec.backend;
      d->index = i;
      d->name = spec.backend + ":" + std::to_string(i);
      BackendOptions bo;
      bo.device_index = i;
      if (auto st = options.backend_settings.find(spec.backend); st != options.backend_settings.end()) {
        bo.settings = st->second;
      }
      auto be = registry.Create(spec.backend, bo);
      if (!be.ok()) return be.status().WithContext("device " + d->name);
      d->description = (*be)->capabilities().description;
      d->be = std::move(*be);
      if (busy) d->busy_gauge = &busy->Add({{"device", d->name}});
      q.devices.push_back(d.get());
      impl->devices.push_back(std::move(d));
    }
  }
  for (auto& d : impl->devices) {
    d->guard.emplace(d->io.get_executor());
    Impl::Device* raw = d.get();
    d->thread = std::thread([raw] { raw->io.run(); });
  }
  impl->control_guard.emplace(impl->control.get_executor());
  Impl* raw = impl.get();
  impl->control_thread = std::thread([raw] { raw->control.run(); });

  auto pool = std::unique_ptr<WorkerPool>(new WorkerPool(impl));
  return pool;
}

WorkerPool::~WorkerPool() { impl_->Shutdown(false); }

Result<std::shared_ptr<JobHandle>> WorkerPool::Submit(JobRequest request) {
  Impl& p = *impl_;
  if (!request.work) return InvalidArgument("job has no work function");
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> l(p.mu);
    if (p.stopping) return Unavailable("worker pool is shutting down");
    auto it = p.queues.find(request.backend);
    if (it == p.queues.end()) {
      std::string known;
      for (const auto& [name, q] : p.queues) known += (known.empty() ? "" : ", ") + name;
      return NotFound("no device for backend '" + request.backend + "' (configured: " + known + ")");
    }
    Impl::Queue& q = it->second;
    const auto busy_devices = std::count_if(q.devices.begin(), q.devices.end(), [](auto* d) { return d->busy; });
    const bool will_queue = busy_devices == static_cast<long>(q.devices.size()) || q.size > 0;
    if (will_queue && q.size >= p.opts.queue_capacity) {
      const auto ms = p.RetryAfterLocked(q).count();
      p.CountJob(request.backend, StatusCode::kResourceExhausted);
      return ResourceExhausted("queue for backend '" + request.backend + "' is full (" +
                               std::to_string(q.size) + " jobs); retry after ~" + std::to_string(ms) + " ms");
    }
    auto cit = q.per_client.find(request.client_id);
    if (will_queue && cit != q.per_client.end() && static_cast<int>(cit->second.size()) >= p.per_client_limit) {
      const auto ms = p.RetryAfterLocked(q).count();
      p.CountJob(request.backend, StatusCode::kResourceExhausted);
      return ResourceExhausted("client '" + request.client_id + "' already has " +
                               std::to_string(cit->second.size()) + " jobs queued for backend '" + request.backend +
                               "' (limit " + std::to_string(p.per_client_limit) + "); retry after ~" +
                               std::to_string(ms) + " ms");
    }
    job = std::make_shared<Job>(p.next_id++, std::move(request), impl_);
    auto& dq = q.per_client[job->client_];
    if (dq.empty()) q.rotation.push_back(job->client_);
    dq.push_back(job);
    ++q.size;
    p.UpdateDepthLocked(q);
    p.DispatchLocked(q);
  }
  p.ArmDeadline(job);
  return std::shared_ptr<JobHandle>(job);
}

void WorkerPool::Shutdown(bool drain) { impl_->Shutdown(drain); }

std::vector<DeviceInfo> WorkerPool::Devices() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  std::vector<DeviceInfo> out;
  for (const auto& d : impl_->devices) {
    DeviceInfo i;
    i.name = d->name;
    i.backend = d->backend;
    i.busy = d->busy;
    i.current_job = d->current ? d->current->id_ : 0;
    i.jobs_done = d->jobs_done;
    i.description = d->description;
    out.push_back(std::move(i));
  }
  return out;
}

int WorkerPool::QueueDepth(const std::string& backend) const {
  std::lock_guard<std::mutex> l(impl_->mu);
  auto it = impl_->queues.find(backend);
  return it == impl_->queues.end() ? 0 : it->second.size;
}

std::chrono::milliseconds WorkerPool::SuggestedRetryAfter(const std::string& backend) const {
  std::lock_guard<std::mutex> l(impl_->mu);
  auto it = impl_->queues.find(backend);
  return it == impl_->queues.end() ? std::chrono::milliseconds(100) : impl_->RetryAfterLocked(it->second);
}

}  // namespace kiln::device
