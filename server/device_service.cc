#include "server/device_service.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>

#include "api/lanes.h"
#include "api/models.h"
#include "common/reactor.h"

namespace kiln::server {

class DeviceServiceImpl::RunReactor final : public grpc::ServerUnaryReactor {
 public:
  RunReactor(DeviceServiceImpl* service, grpc::CallbackServerContext* context,
             const kiln::v1::RunConvLayersRequest* request, kiln::v1::RunConvLayersResponse* response)
      : service_(service), context_(context), request_(request), response_(response),
        scope_(service->env_, *context, "/kiln.v1.DeviceService/RunConvLayers") {}

  void Start() {
    grpc::Status st = scope_.Begin(*context_);
    if (!st.ok()) return FinishOnce(st);
    if (!service_->store_->reads_block()) return Resolve();
    // The store's lookups block (a shared store's database): resolve on the store lane.
    sched::JobRequest lookup;
    lookup.lane = api::kStoreLane;
    lookup.client_id = ClientId(*context_);
    lookup.task = [this](sched::JobContext&) {
      Resolve();
      return Status::Ok();
    };
    {
      std::lock_guard<std::mutex> lock(mu_);
      resolving_ = true;
    }
    auto handle = service_->scheduler_->Submit(std::move(lookup));
    if (!handle.ok()) {
      Resolved();
      return FinishOnce(ToGrpc(handle.status()));
    }
    // After the task (or instead of it, at shutdown): only then may OnDone delete the reactor,
    // which Resolve may have finished while it was still running.
    (*handle)->OnDone([this](const Status& status) {
      if (!status.ok()) FinishOnce(ToGrpc(status));  // not run (shutdown)
      Resolved();
    });
  }

 private:
  // Looks the model up and starts the run's job (which finishes the call).
  void Resolve() {
    auto ref = api::ResolveModelRef(*service_->store_, request_->model_id());  // api/models.h
    if (!ref.ok()) return FinishOnce(ToGrpc(ref.status()));
    auto info = service_->store_->Get(*ref);
    if (!info.ok()) return FinishOnce(ToGrpc(info.status()));
    std::optional<sched::CancelToken::Clock::time_point> deadline;
    if (context_->deadline() != std::chrono::system_clock::time_point::max()) {
      deadline = std::chrono::steady_clock::now() + (context_->deadline() - std::chrono::system_clock::now());
    }
    api::RunConvJob::Env env{service_->store_, service_->scheduler_, &service_->plans_, nullptr,
                             service_->env_.max_message_bytes};
    if (Metrics* m = service_->env_.metrics) env.on_refused = [m](std::string_view r) { m->CountRejected(r); };
    auto job = api::RunConvJob::Start(env, std::move(info).value(), request_, response_, ClientId(*context_), deadline,
                                      [this](const Status& status, int64_t retry_after_ms) {
                                        Complete(status, retry_after_ms);
                                      });
    bool cancelled;
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = job;
      cancelled = cancelled_;
    }
    if (cancelled) job->Cancel();
  }

 public:
  void OnCancel() override {
    ReactorScope on_reactor;
    std::shared_ptr<api::RunConvJob> job;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      job = job_;
    }
    if (job) job->Cancel();
  }

  void OnDone() override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      resolved_cv_.wait(lock, [this] { return !resolving_; });
    }
    delete this;
  }

 private:
  void Resolved() {
    std::lock_guard<std::mutex> lock(mu_);
    resolving_ = false;
    resolved_cv_.notify_all();
  }
  void Complete(const Status& status, int64_t retry_after_ms) {
    if (!status.ok()) {
      // Jobs cut off by the server's own shutdown are not the client's cancellation.
      if (status.code() == StatusCode::kCancelled && service_->env_.drain && service_->env_.drain->draining() &&
          !context_->IsCancelled()) {
        return FinishOnce(grpc::Status(grpc::StatusCode::UNAVAILABLE, "kilnd shut down before the run finished; retry"));
      }
      if (retry_after_ms > 0) context_->AddTrailingMetadata("grpc-retry-pushback-ms", std::to_string(retry_after_ms));
      return FinishOnce(ToGrpc(status));
    }
    FinishOnce(grpc::Status::OK);
  }

  void FinishOnce(const grpc::Status& status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return;
      finished_ = true;
      job_.reset();
    }
    Finish(scope_.Done(status));
  }

  DeviceServiceImpl* service_;
  grpc::CallbackServerContext* context_;
  const kiln::v1::RunConvLayersRequest* request_;
  kiln::v1::RunConvLayersResponse* response_;
  RpcScope scope_;
  std::mutex mu_;
  std::shared_ptr<api::RunConvJob> job_;
  bool cancelled_ = false;
  bool finished_ = false;
  bool resolving_ = false;  // the store-lane lookup has not finished with the reactor yet
  std::condition_variable resolved_cv_;
};

DeviceServiceImpl::DeviceServiceImpl(store::ModelStore* store, sched::Scheduler* scheduler, int queue_capacity,
                                     ServiceEnv env, int64_t plan_cache_bytes)
    : store_(store), scheduler_(scheduler), queue_capacity_(queue_capacity), env_(env), plans_(plan_cache_bytes) {}

grpc::ServerUnaryReactor* DeviceServiceImpl::RunConvLayers(grpc::CallbackServerContext* context,
                                                           const kiln::v1::RunConvLayersRequest* request,
                                                           kiln::v1::RunConvLayersResponse* response) {
  ReactorScope on_reactor;
  auto* reactor = new RunReactor(this, context, request, response);
  reactor->Start();
  return reactor;
}

grpc::ServerUnaryReactor* DeviceServiceImpl::ListDevices(grpc::CallbackServerContext* context,
                                                         const kiln::v1::ListDevicesRequest*,
                                                         kiln::v1::ListDevicesResponse* response) {
  ReactorScope on_reactor;
  auto* reactor = context->DefaultReactor();
  auto scope = std::make_shared<RpcScope>(env_, *context, "/kiln.v1.DeviceService/ListDevices");
  grpc::Status st = scope->Begin(*context);
  if (!st.ok()) {
    reactor->Finish(scope->Done(st));
    return reactor;
  }
  std::set<std::string> backends;
  for (const auto& d : scheduler_->Devices()) {
    auto* p = response->add_devices();
    p->set_name(d.name);
    p->set_backend(d.backend);
    p->set_busy(d.busy);
    p->set_current_job(d.current_job);
    p->set_jobs_done(d.jobs_done);
    p->set_description(d.description);
    backends.insert(d.backend);
  }
  for (const auto& b : backends) {
    auto* q = response->add_queues();
    q->set_backend(b);
    q->set_queued(scheduler_->QueueDepth(b));
    q->set_capacity(queue_capacity_);
  }
  if (farm_ == nullptr) {
    reactor->Finish(scope->Done(grpc::Status::OK));
    return reactor;
  }
  // A farm's registry is in the database: read it on the store lane, off this reactor.
  sched::JobRequest job;
  job.lane = api::kStoreLane;
  job.client_id = ClientId(*context);
  job.task = [farm = farm_, response](sched::JobContext&) -> Status {
    auto view = farm->Farm();
    if (!view.ok()) return view.status();
    for (size_t i = 0; i < view->workers.size(); ++i) {
      const auto& w = view->workers[i];
      auto* p = response->add_workers();
      p->set_name(w.worker);
      p->set_devices(w.devices);
      p->set_running(w.running);
      p->set_jobs_done(static_cast<uint64_t>(w.jobs_done));
      p->set_heartbeat_age_seconds(w.age_seconds);
      p->set_live(view->live[i]);
      p->set_draining(w.draining);
    }
    for (const auto& q : view->queues) {
      auto* p = response->add_farm_queues();
      p->set_backend(q.backend);
      p->set_queued(static_cast<int32_t>(q.queued));
      p->set_claimed(static_cast<int32_t>(q.claimed));
    }
    return Status::Ok();
  };
  auto handle = scheduler_->Submit(std::move(job));
  if (!handle.ok()) {
    reactor->Finish(scope->Done(ToGrpc(handle.status())));
    return reactor;
  }
  (*handle)->OnDone([reactor, scope](const Status& status) { reactor->Finish(scope->Done(ToGrpc(status))); });
  return reactor;
}

}  // namespace kiln::server
