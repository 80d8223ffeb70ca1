#include "sched/scheduler.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

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
#include <utility>

#include "common/memory.h"
#include "common/reactor.h"
#include "device/backends/builtin.h"

namespace kiln::sched {

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

// The memory budget and its gauge, shared by the scheduler and its jobs (a job may outlive it).
struct MemoryAccount {
  explicit MemoryAccount(uint64_t total) : budget(total) {}
  MemoryBudget budget;
  prometheus::Gauge* reserved_gauge = nullptr;
  bool TryReserve(uint64_t bytes) {
    if (!budget.TryReserve(bytes)) return false;
    if (reserved_gauge) reserved_gauge->Increment(static_cast<double>(bytes));
    return true;
  }
  void Release(uint64_t bytes) {
    budget.Release(bytes);
    if (reserved_gauge) reserved_gauge->Decrement(static_cast<double>(bytes));
  }
};

constexpr const char* kReferenceLane = device::kReferenceBackend;

}  // namespace

class Scheduler::Impl : public std::enable_shared_from_this<Scheduler::Impl> {
 public:
  struct Lane;
  struct Worker {
    std::string name, description;
    Lane* lane = nullptr;
    int index = 0;
    std::unique_ptr<Backend> be;  // null on CPU lanes
    asio::io_context io;
    std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
    std::thread thread;
    bool busy = false;
    std::shared_ptr<Job> current;
    uint64_t jobs_done = 0;
    prometheus::Gauge* busy_gauge = nullptr;
  };
  struct Lane {
    std::string name;
    bool device = false;  // device lane (workers own backends) or CPU lane
    bool hidden = false;  // the reference worker kept for Reference() only
    int capacity = 0, per_client_limit = 1;
    int64_t max_bytes = 0;
    std::map<std::string, std::string> settings;  // device lanes: BackendOptions::settings of the workers
    std::map<std::string, std::deque<std::shared_ptr<Job>>> per_client;
    std::map<std::string, int> per_principal;  // queued jobs per principal (the quota's key)
    std::deque<std::string> rotation;         // clients with queued jobs, in round-robin order
    std::deque<std::shared_ptr<Job>> stages;  // internal stage jobs (Reference()), served first
    int size = 0;                             // queued client jobs (stages not counted)
    int64_t bytes = 0;                        // cost_bytes of the queued client jobs
    std::vector<Worker*> workers;
    double mean_seconds = -1;  // EWMA of job run time; < 0 until the first job finished
    prometheus::Gauge* depth_gauge = nullptr;
    prometheus::Gauge* busy_workers = nullptr;  // CPU lanes
    prometheus::Histogram* duration = nullptr;
    prometheus::Family<prometheus::Counter>* jobs_total = nullptr;
  };

  SchedulerOptions opts;
  mutable std::mutex mu;
  std::condition_variable idle_cv;
  bool stopping = false;
  bool joined = false;
  uint64_t next_id = 1;
  std::map<std::string, Lane> lanes;
  std::vector<std::unique_ptr<Worker>> workers;
  std::unique_ptr<Backend> reference;  // the Reference() proxy
  std::shared_ptr<MemoryAccount> memory;  // null without a memory budget

  // Deadline timers live on the control thread only.
  asio::io_context control;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> control_guard;
  std::thread control_thread;
  std::unordered_map<uint64_t, std::unique_ptr<asio::steady_timer>> timers;  // control thread only

  void CountJob(const Lane& lane, StatusCode code) {
    if (lane.jobs_total == nullptr) return;
    const char* key = lane.device ? "backend" : "lane";
    lane.jobs_total->Add({{key, lane.name}, {"status", StatusCodeName(code)}}).Increment();
  }

  void UpdateDepthLocked(Lane& q) {
    if (q.depth_gauge) q.depth_gauge->Set(q.size);
  }
  void SetBusyLocked(Worker& w, bool busy) {
    w.busy = busy;
    if (w.busy_gauge) w.busy_gauge->Set(busy ? 1 : 0);
    if (w.lane->busy_workers) w.lane->busy_workers->Increment(busy ? 1 : -1);
  }

  std::chrono::milliseconds RetryAfterLocked(const Lane& q) const {
    if (q.mean_seconds < 0) return std::chrono::milliseconds(100);
    const double ms = (q.size + 1) * q.mean_seconds * 1000.0 / std::max<std::size_t>(1, q.workers.size());
    return std::chrono::milliseconds(
        std::clamp<int64_t>(static_cast<int64_t>(std::min(ms, 1e12)), 10, kMaxRetryAfter.count()));
  }

  static std::string PrincipalOf(const std::string& client_id) {
    return client_id.substr(0, client_id.find(kSubKeySeparator));
  }
  static void ForgetPrincipalLocked(Lane& q, const std::string& client_id) {
    auto it = q.per_principal.find(PrincipalOf(client_id));
    if (it != q.per_principal.end() && --it->second <= 0) q.per_principal.erase(it);
  }
  std::shared_ptr<Job> PopFairLocked(Lane& q);
  void DispatchLocked(Lane& q);
  void RunOnWorker(Worker* w, std::shared_ptr<Job> job);
  // Removes a queued job (cancel / deadline); completes it with its token's status. False if it
  // was not queued any more.
  bool RemoveQueued(const std::shared_ptr<Job>& job);
  void ArmDeadline(const std::shared_ptr<Job>& job);
  void DisarmDeadline(uint64_t id);
  void Shutdown(bool drain);
  Result<std::shared_ptr<Job>> Enqueue(JobRequest request, bool stage);
  Status UnknownLaneLocked(const std::string& lane, bool device) const {
    std::string known;
    for (const auto& [name, q] : lanes) {
      if (!q.hidden && q.device == device) known += (known.empty() ? "" : ", ") + name;
    }
    return device ? NotFound("no device for backend '" + lane + "' (configured: " + known + ")")
                  : NotFound("no CPU lane '" + lane + "' (configured: " + known + ")");
  }
};

namespace {

class Job final : public JobHandle, public std::enable_shared_from_this<Job> {
 public:
  Job(uint64_t id, JobRequest req, Scheduler::Impl::Lane* lane, bool stage, std::weak_ptr<Scheduler::Impl> pool)
      : id_(id),
        lane_(lane),
        client_(std::move(req.client_id)),
        work_(std::move(req.work)),
        task_(std::move(req.task)),
        progress_(std::move(req.progress)),
        cost_bytes_(req.cost_bytes),
        stage_(stage),
        token_(req.deadline ? std::make_unique<CancelToken>(*req.deadline) : std::make_unique<CancelToken>()),
        pool_(std::move(pool)) {}

  ~Job() override { ReleaseMemory(); }  // no other owner is left: mu_ is not needed

  // Takes over `bytes` reserved from `account` for this job; returned when it is done. Submit calls
  // it before the job is published, so it needs no lock.
  void HoldMemory(std::shared_ptr<MemoryAccount> account, uint64_t bytes) {
    memory_ = std::move(account);
    memory_bytes_ = bytes;
  }
  // Returns the held bytes (once). Complete calls it under mu_: MemoryAccount::Release is a leaf
  // (the budget's atomic and a gauge), so no lock order arises.
  void ReleaseMemory() {
    if (memory_ && memory_bytes_ > 0) memory_->Release(memory_bytes_);
    memory_.reset();
    memory_bytes_ = 0;
  }

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
      // The bytes go back before the job shows as done: whoever sees it done (Wait, state, the
      // callback) may submit a follow-up job that needs them.
      ReleaseMemory();
      state_ = JobState::kDone;
      status_ = s;
      fn = std::move(on_done_);
    }
    cv_.notify_all();
    if (fn) {
      try {
        fn(s);
      } catch (const std::exception& e) {
        // A callback's failure must not take a worker down; callers catch their own (a callback
        // that throws has lost whatever it was to do next).
        spdlog::error("job {}: its completion callback threw: {}", id_, e.what());
      } catch (...) {
        spdlog::error("job {}: its completion callback threw a non-standard exception", id_);
      }
    }
    return true;
  }

  const uint64_t id_;
  Scheduler::Impl::Lane* const lane_;
  const std::string client_;
  JobFn work_;
  TaskFn task_;
  ProgressFn progress_;
  const int64_t cost_bytes_;
  const bool stage_;
  std::unique_ptr<CancelToken> token_;
  std::weak_ptr<Scheduler::Impl> pool_;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  JobState state_ = JobState::kQueued;
  Status status_;
  std::function<void(const Status&)> on_done_;
  std::shared_ptr<MemoryAccount> memory_;
  uint64_t memory_bytes_ = 0;
};

// Reference(): every op becomes a stage job on the reference lane; the caller waits for it.
class ReferenceProxy final : public Backend {
 public:
  explicit ReferenceProxy(Scheduler::Impl* impl) : impl_(impl) {}
  std::string name() const override { return kReferenceLane; }
  device::BackendCapabilities capabilities() const override {
    device::BackendCapabilities caps;
    (void)RunStage([&](Backend& b) {
      caps = b.capabilities();
      return Status::Ok();
    });
    return caps;
  }
  Result<device::Tensor> Conv2d(const device::Tensor& input, const device::Tensor& weights,
                                const device::Tensor* bias, const device::Conv2dParams& params,
                                const device::ExecContext& ctx) override {
    return RunOp([&](Backend& b) { return b.Conv2d(input, weights, bias, params, ctx); });
  }
  Result<device::Tensor> ConvTranspose2d(const device::Tensor& input, const device::Tensor& weights,
                                         const device::Tensor* bias, const device::ConvTranspose2dParams& params,
                                         const device::ExecContext& ctx) override {
    return RunOp([&](Backend& b) { return b.ConvTranspose2d(input, weights, bias, params, ctx); });
  }
  Result<device::Tensor> Pool2d(const device::Tensor& input, const device::Pool2dParams& params,
                                const device::ExecContext& ctx) override {
    return RunOp([&](Backend& b) { return b.Pool2d(input, params, ctx); });
  }
  Result<device::Tensor> Add(const device::Tensor& a, const device::Tensor& b, device::Activation act,
                             const device::ExecContext& ctx) override {
    return RunOp([&](Backend& be) { return be.Add(a, b, act, ctx); });
  }

 private:
  template <typename Op>
  Result<device::Tensor> RunOp(const Op& op) const {
    Result<device::Tensor> out = Internal("reference stage did not run");
    KILN_RETURN_IF_ERROR(RunStage([&](Backend& b) {
      out = op(b);
      return Status::Ok();
    }));
    return out;
  }
  // The referenced data lives on the caller's stack, which waits until the stage is done.
  Status RunStage(const std::function<Status(Backend&)>& fn) const {
    AssertNotOnReactor("Scheduler::Reference() op");
    JobRequest r;
    r.lane = kReferenceLane;
    r.work = [&fn](Backend& b, JobContext&) { return fn(b); };
    auto job = impl_->Enqueue(std::move(r), /*stage=*/true);
    if (!job.ok()) return job.status();
    return (*job)->Wait();
  }
  Scheduler::Impl* impl_;
};

}  // namespace

std::shared_ptr<Job> Scheduler::Impl::PopFairLocked(Lane& q) {
  if (!q.stages.empty()) {
    auto job = q.stages.front();
    q.stages.pop_front();
    return job;
  }
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
    ForgetPrincipalLocked(q, client);
    if (it->second.empty()) {
      q.per_client.erase(it);
    } else {
      q.rotation.push_back(client);
    }
    --q.size;
    q.bytes -= job->cost_bytes_;
    UpdateDepthLocked(q);
    return job;
  }
  return nullptr;
}

void Scheduler::Impl::DispatchLocked(Lane& q) {
  for (Worker* w : q.workers) {
    if (q.size == 0 && q.stages.empty()) return;
    if (w->busy) continue;
    auto job = PopFairLocked(q);
    if (!job) return;
    SetBusyLocked(*w, true);
    w->current = job;
    job->SetRunning();
    asio::post(w->io, [this, w, job] { RunOnWorker(w, job); });
  }
}

void Scheduler::Impl::RunOnWorker(Worker* w, std::shared_ptr<Job> job) {
  DisarmDeadline(job->id_);
  Status st = job->token_->Check();
  double seconds = -1;
  if (st.ok()) {
    JobContext ctx;
    ctx.job_id = job->id_;
    ctx.worker = w->name;
    ctx.worker_index = w->index;
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
      st = w->be ? job->work_(*w->be, ctx) : job->task_(ctx);
    } catch (const std::bad_alloc&) {
      st = ResourceExhausted("job " + std::to_string(job->id_) + " on " + w->name + ": out of memory");
    } catch (const std::exception& e) {
      st = Internal("job " + std::to_string(job->id_) + " on " + w->name + " threw: " + e.what());
    } catch (...) {
      st = Internal("job " + std::to_string(job->id_) + " on " + w->name + " threw a non-standard exception");
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // Release the job's resources (captured tensors) before reporting.
  job->work_ = nullptr;
  job->task_ = nullptr;
  Lane& q = *w->lane;
  {
    std::lock_guard<std::mutex> l(mu);
    SetBusyLocked(*w, false);
    w->current.reset();
    ++w->jobs_done;
    // Stage jobs are parts of a job timed elsewhere: they would skew the retry hint.
    if (seconds >= 0 && !job->stage_) {
      q.mean_seconds = q.mean_seconds < 0 ? seconds : 0.8 * q.mean_seconds + 0.2 * seconds;
      if (q.duration) q.duration->Observe(seconds);
    }
    DispatchLocked(q);
  }
  idle_cv.notify_all();
  if (!job->stage_) CountJob(q, st.code());
  job->Complete(st);
}

bool Scheduler::Impl::RemoveQueued(const std::shared_ptr<Job>& job) {
  Lane& q = *job->lane_;
  {
    std::lock_guard<std::mutex> l(mu);
    if (job->stage_) {
      auto it = std::find(q.stages.begin(), q.stages.end(), job);
      if (it == q.stages.end()) return false;
      q.stages.erase(it);
    } else {
      auto cit = q.per_client.find(job->client_);
      if (cit == q.per_client.end()) return false;
      auto& dq = cit->second;
      auto it = std::find(dq.begin(), dq.end(), job);
      if (it == dq.end()) return false;
      dq.erase(it);
      ForgetPrincipalLocked(q, job->client_);
      if (dq.empty()) {
        q.per_client.erase(cit);
        q.rotation.erase(std::remove(q.rotation.begin(), q.rotation.end(), job->client_), q.rotation.end());
      }
      --q.size;
      q.bytes -= job->cost_bytes_;
      UpdateDepthLocked(q);
    }
  }
  idle_cv.notify_all();
  DisarmDeadline(job->id_);
  Status st = job->token_->Check();
  if (st.ok()) st = Cancelled("cancelled while queued");
  if (!job->stage_) CountJob(q, st.code());
  job->Complete(st);
  return true;
}

void Scheduler::Impl::ArmDeadline(const std::shared_ptr<Job>& job) {
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

void Scheduler::Impl::DisarmDeadline(uint64_t id) {
  asio::post(control, [this, id] {
    auto it = timers.find(id);
    if (it != timers.end()) it->second->cancel();
  });
}

Result<std::shared_ptr<Job>> Scheduler::Impl::Enqueue(JobRequest request, bool stage) {
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> l(mu);
    auto it = lanes.find(request.lane);
    if (stopping && !(stage && it != lanes.end() && !joined)) return Unavailable("scheduler is shutting down");
    // Device work names a backend; a CPU lane's name is no backend (and the reverse).
    const bool device_job = static_cast<bool>(request.work);
    if (it == lanes.end() || (it->second.hidden && !stage) || (device_job && !it->second.device) ||
        (request.task && it->second.device)) {
      return UnknownLaneLocked(request.lane, device_job);
    }
    Lane& q = it->second;
    if (q.device ? !request.work : !request.task) {
      return InvalidArgument(std::string("job has no ") + (q.device ? "device work function" : "task") +
                             " for lane '" + q.name + "'");
    }
    if (!stage) {
      const auto busy = std::count_if(q.workers.begin(), q.workers.end(), [](auto* w) { return w->busy; });
      const bool will_queue = busy == static_cast<long>(q.workers.size()) || q.size > 0 || !q.stages.empty();
      const char* what = q.device ? "backend" : "lane";
      auto refuse = [&](const char* reason, const std::string& why) -> Status {
        const auto ms = RetryAfterLocked(q).count();
        CountJob(q, StatusCode::kResourceExhausted);
        if (opts.on_refused) opts.on_refused(reason);
        return ResourceExhausted(why + "; retry after ~" +
                                 (ms < 1000 ? std::to_string(ms) + " ms" : std::to_string((ms + 500) / 1000) + " s"));
      };
      if (will_queue && q.size >= q.capacity) {
        return refuse("queue_full", std::string("queue for ") + what + " '" + q.name + "' is full (" + std::to_string(q.size) +
                      " jobs)");
      }
      if (will_queue && q.max_bytes > 0 && q.bytes + request.cost_bytes > q.max_bytes) {
        return refuse("queue_bytes", std::string("queue for ") + what + " '" + q.name + "' holds " + std::to_string(q.bytes) +
                      " bytes; this job's " + std::to_string(request.cost_bytes) + " would pass its " +
                      std::to_string(q.max_bytes) + "-byte budget");
      }
      const std::string principal = PrincipalOf(request.client_id);
      auto cit = q.per_principal.find(principal);
      if (will_queue && cit != q.per_principal.end() && cit->second >= q.per_client_limit) {
        return refuse("queue_per_client", "client '" + principal + "' already has " + std::to_string(cit->second) +
                      " jobs queued for " + what + " '" + q.name + "' (limit " + std::to_string(q.per_client_limit) +
                      ")");
      }
    }
    const uint64_t memory_bytes = request.memory_bytes > 0 ? static_cast<uint64_t>(request.memory_bytes) : 0;
    if (!stage && memory && memory_bytes > 0 && !memory->TryReserve(memory_bytes)) {
      const auto ms = RetryAfterLocked(q).count();
      CountJob(q, StatusCode::kResourceExhausted);
      if (opts.on_refused) opts.on_refused("memory_budget");
      return ResourceExhausted("memory budget: admitted jobs hold " + FormatBytes(memory->budget.reserved()) + " of " +
                               FormatBytes(memory->budget.total()) + " (--memory-budget); this job's " +
                               FormatBytes(memory_bytes) + " would pass it; retry after ~" + std::to_string(ms) +
                               " ms");
    }
    job = std::make_shared<Job>(next_id++, std::move(request), &q, stage, shared_from_this());
    if (!stage && memory && memory_bytes > 0) job->HoldMemory(memory, memory_bytes);
    if (stage) {
      q.stages.push_back(job);
    } else {
      auto& dq = q.per_client[job->client_];
      if (dq.empty()) q.rotation.push_back(job->client_);
      dq.push_back(job);
      ++q.per_principal[PrincipalOf(job->client_)];
      ++q.size;
      q.bytes += job->cost_bytes_;
      UpdateDepthLocked(q);
    }
    DispatchLocked(q);
  }
  ArmDeadline(job);
  return job;
}

void Scheduler::Impl::Shutdown(bool drain) {
  std::vector<std::shared_ptr<Job>> dropped;
  {
    std::unique_lock<std::mutex> l(mu);
    if (joined) return;
    stopping = true;
    if (!drain) {
      for (auto& [name, q] : lanes) {
        // Stage jobs stay: the running jobs waiting for them end once they are done.
        while (q.size > 0) {
          std::deque<std::shared_ptr<Job>> keep;
          keep.swap(q.stages);
          if (auto job = PopFairLocked(q)) dropped.push_back(job);
          q.stages.swap(keep);
        }
      }
      for (auto& w : workers) {
        if (w->current) w->current->token_->Cancel();
      }
    }
  }
  for (auto& job : dropped) {
    job->token_->Cancel();
    CountJob(*job->lane_, StatusCode::kUnavailable);
    job->Complete(Unavailable("scheduler shutting down"));
  }
  {
    std::unique_lock<std::mutex> l(mu);
    idle_cv.wait(l, [&] {
      for (auto& [name, q] : lanes)
        if (q.size > 0 || !q.stages.empty()) return false;
      for (auto& w : workers)
        if (w->busy) return false;
      return true;
    });
    joined = true;
  }
  for (auto& w : workers) {
    w->guard.reset();
    if (w->thread.joinable()) w->thread.join();
  }
  control_guard.reset();
  control.stop();
  if (control_thread.joinable()) control_thread.join();
}

Scheduler::Scheduler(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Scheduler>> Scheduler::Create(SchedulerOptions options) {
  if (options.devices.empty() && options.cpu_lanes.empty()) {
    return InvalidArgument("scheduler needs at least one device or CPU lane");
  }
  if (options.queue_capacity < 1) return InvalidArgument("queue_capacity must be >= 1");
  if (options.max_queued_per_client < 0) return InvalidArgument("max_queued_per_client must be >= 0");
  if (options.max_queued_bytes < 0) return InvalidArgument("max_queued_bytes must be >= 0");
  const device::BackendRegistry& registry = options.registry ? *options.registry : device::DefaultBackendRegistry();
  for (const auto& [name, settings] : options.backend_settings) {
    if (std::none_of(options.devices.begin(), options.devices.end(),
                     [&name = name](const DeviceSpec& d) { return d.backend == name; })) {
      return InvalidArgument("backend_settings for '" + name + "', which has no devices");
    }
  }
  auto impl = std::shared_ptr<Impl>(new Impl());
  impl->opts = options;
  if (options.memory_budget_bytes > 0) {
    impl->memory = std::make_shared<MemoryAccount>(options.memory_budget_bytes);
    if (options.metrics) {
      auto& budget = prometheus::BuildGauge()
                         .Name("kiln_memory_budget_bytes")
                         .Help("Process-wide memory budget of admitted jobs (--memory-budget)")
                         .Register(*options.metrics);
      budget.Add({}).Set(static_cast<double>(options.memory_budget_bytes));
      impl->memory->reserved_gauge = &prometheus::BuildGauge()
                                          .Name("kiln_memory_reserved_bytes")
                                          .Help("Bytes of the memory budget held by queued and running jobs")
                                          .Register(*options.metrics)
                                          .Add({});
    }
  }
  auto per_client = [](int limit, int capacity) { return limit > 0 ? limit : std::max(1, capacity / 2); };

  prometheus::Family<prometheus::Gauge>* depth = nullptr;
  prometheus::Family<prometheus::Gauge>* busy = nullptr;
  prometheus::Family<prometheus::Histogram>* duration = nullptr;
  prometheus::Family<prometheus::Counter>* jobs_total = nullptr;
  prometheus::Family<prometheus::Gauge>* cpu_depth = nullptr;
  prometheus::Family<prometheus::Gauge>* cpu_busy = nullptr;
  prometheus::Family<prometheus::Histogram>* cpu_duration = nullptr;
  prometheus::Family<prometheus::Counter>* cpu_jobs_total = nullptr;
  const prometheus::Histogram::BucketBoundaries buckets{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5,
                                                        1,     2.5,   5,    10,   30,  60,   300};
  if (options.metrics) {
    auto& m = *options.metrics;
    depth = &prometheus::BuildGauge().Name("kiln_device_queue_depth").Help("Jobs queued (not yet running) per device backend").Register(m);
    busy = &prometheus::BuildGauge().Name("kiln_device_busy").Help("1 while the device executes a job").Register(m);
    duration = &prometheus::BuildHistogram().Name("kiln_device_job_duration_seconds").Help("Time a job ran on its device").Register(m);
    jobs_total = &prometheus::BuildCounter()
                      .Name("kiln_device_jobs_total")
                      .Help("Finished or rejected device jobs by backend and final status")
                      .Register(m);
    if (!options.cpu_lanes.empty()) {
      cpu_depth = &prometheus::BuildGauge().Name("kiln_sched_queue_depth").Help("Jobs queued (not yet running) per CPU lane").Register(m);
      cpu_busy = &prometheus::BuildGauge().Name("kiln_sched_busy_workers").Help("Workers of a CPU lane running a job").Register(m);
      cpu_duration = &prometheus::BuildHistogram().Name("kiln_sched_job_duration_seconds").Help("Time a job ran on a CPU lane").Register(m);
      cpu_jobs_total = &prometheus::BuildCounter()
                            .Name("kiln_sched_jobs_total")
                            .Help("Finished or rejected CPU-lane jobs by lane and final status")
                            .Register(m);
    }
  }

  auto add_workers = [&](Impl::Lane& q, int count, const std::string& backend,
                         const device::BackendOptions& base) -> Status {
    for (int i = 0; i < count; ++i) {
      auto w = std::make_unique<Impl::Worker>();
      w->lane = &q;
      w->index = i;
      w->name = q.name + ":" + std::to_string(i);
      if (!backend.empty()) {
        device::BackendOptions bo = base;
        bo.device_index = i;
        auto be = registry.Create(backend, bo);
        if (!be.ok()) return be.status().WithContext("device " + w->name);
        w->description = (*be)->capabilities().description;
        w->be = std::move(*be);
        if (busy) w->busy_gauge = &busy->Add({{"device", w->name}});
      }
      q.workers.push_back(w.get());
      impl->workers.push_back(std::move(w));
    }
    return Status::Ok();
  };

  for (const DeviceSpec& spec : options.devices) {
    Impl::Lane& q = impl->lanes[spec.backend];
    q.name = spec.backend;
    q.device = true;
    q.capacity = options.queue_capacity;
    q.per_client_limit = per_client(options.max_queued_per_client, options.queue_capacity);
    q.max_bytes = options.max_queued_bytes;
    if (depth) {
      q.depth_gauge = &depth->Add({{"backend", spec.backend}});
      q.duration = &duration->Add({{"backend", spec.backend}}, buckets);
      q.jobs_total = jobs_total;
    }
    device::BackendOptions bo;
    if (auto st = options.backend_settings.find(spec.backend); st != options.backend_settings.end()) {
      bo.settings = st->second;
    }
    q.settings = bo.settings;
    KILN_RETURN_IF_ERROR(add_workers(q, spec.count, spec.backend, bo));
  }
  if (impl->lanes.count(kReferenceLane) == 0) {
    // The reference executor of Reference(): one hidden worker.
    Impl::Lane& q = impl->lanes[kReferenceLane];
    q.name = kReferenceLane;
    q.device = true;
    q.hidden = true;
    device::BackendOptions bo;
    if (options.reference_threads > 0) bo.settings[device::kReferenceThreadsSetting] = std::to_string(options.reference_threads);
    KILN_RETURN_IF_ERROR(add_workers(q, 1, kReferenceLane, bo));
  }
  for (const CpuLaneSpec& spec : options.cpu_lanes) {
    if (spec.name.empty()) return InvalidArgument("CPU lane without a name");
    if (impl->lanes.count(spec.name) != 0) return InvalidArgument("lane '" + spec.name + "' declared twice");
    if (spec.workers < 1 || spec.queue_capacity < 0 || spec.max_queued_per_client < 0 || spec.max_queued_bytes < 0) {
      return InvalidArgument("CPU lane '" + spec.name + "': workers must be >= 1, queue limits >= 0");
    }
    Impl::Lane& q = impl->lanes[spec.name];
    q.name = spec.name;
    q.capacity = spec.queue_capacity;
    q.per_client_limit = per_client(spec.max_queued_per_client, std::max(1, spec.queue_capacity));
    q.max_bytes = spec.max_queued_bytes;
    if (cpu_depth) {
      q.depth_gauge = &cpu_depth->Add({{"lane", spec.name}});
      q.busy_workers = &cpu_busy->Add({{"lane", spec.name}});
      q.duration = &cpu_duration->Add({{"lane", spec.name}}, buckets);
      q.jobs_total = cpu_jobs_total;
    }
    KILN_RETURN_IF_ERROR(add_workers(q, spec.workers, "", {}));
  }
  impl->reference = std::make_unique<ReferenceProxy>(impl.get());

  for (auto& w : impl->workers) {
    w->guard.emplace(w->io.get_executor());
    Impl::Worker* raw = w.get();
    w->thread = std::thread([raw] { raw->io.run(); });
  }
  impl->control_guard.emplace(impl->control.get_executor());
  Impl* raw = impl.get();
  impl->control_thread = std::thread([raw] { raw->control.run(); });
  return std::unique_ptr<Scheduler>(new Scheduler(impl));
}

Scheduler::~Scheduler() { impl_->Shutdown(false); }

Result<std::shared_ptr<JobHandle>> Scheduler::Submit(JobRequest request) {
  auto job = impl_->Enqueue(std::move(request), /*stage=*/false);
  if (!job.ok()) return job.status();
  return std::shared_ptr<JobHandle>(*job);
}

Backend& Scheduler::Reference() { return *impl_->reference; }

void Scheduler::Shutdown(bool drain) { impl_->Shutdown(drain); }

std::vector<DeviceInfo> Scheduler::Devices() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  std::vector<DeviceInfo> out;
  for (const auto& w : impl_->workers) {
    if (!w->lane->device || w->lane->hidden) continue;
    DeviceInfo i;
    i.name = w->name;
    i.backend = w->lane->name;
    i.busy = w->busy;
    i.current_job = w->current ? w->current->id_ : 0;
    i.jobs_done = w->jobs_done;
    i.description = w->description;
    out.push_back(std::move(i));
  }
  return out;
}

Status Scheduler::CheckBackend(const std::string& backend) const {
  std::lock_guard<std::mutex> l(impl_->mu);
  auto it = impl_->lanes.find(backend);
  if (it != impl_->lanes.end() && it->second.device && !it->second.hidden) return Status::Ok();
  return impl_->UnknownLaneLocked(backend, /*device=*/true);
}

std::map<std::string, std::string> Scheduler::DeviceSettings(const std::string& backend) const {
  std::lock_guard<std::mutex> l(impl_->mu);
  auto it = impl_->lanes.find(backend);
  if (it == impl_->lanes.end() || !it->second.device || it->second.hidden) return {};
  return it->second.settings;
}

uint64_t Scheduler::MemoryBudgetBytes() const { return impl_->memory ? impl_->memory->budget.total() : 0; }
uint64_t Scheduler::MemoryReservedBytes() const { return impl_->memory ? impl_->memory->budget.reserved() : 0; }

int Scheduler::QueueDepth(const std::string& lane) const {
  std::lock_guard<std::mutex> l(impl_->mu);
  auto it = impl_->lanes.find(lane);
  return it == impl_->lanes.end() ? 0 : it->second.size;
}

std::chrono::milliseconds Scheduler::SuggestedRetryAfter(const std::string& lane) const {
  std::lock_guard<std::mutex> l(impl_->mu);
  auto it = impl_->lanes.find(lane);
  return it == impl_->lanes.end() ? std::chrono::milliseconds(100) : impl_->RetryAfterLocked(it->second);
}

}  // namespace kiln::sched
