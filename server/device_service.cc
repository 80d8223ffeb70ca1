#include "server/device_service.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <mutex>
#include <set>

#include "common/sha256.h"
#include "server/conv_run_job.h"

namespace kiln::server {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Fairness key of the worker pool: an explicit client id, else the peer's address without port.
std::string ClientId(const grpc::CallbackServerContext& context) {
  const auto& md = context.client_metadata();
  auto it = md.find("x-kiln-client");
  if (it != md.end()) return std::string(it->second.data(), it->second.size());
  std::string peer = context.peer();
  auto colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

}  // namespace

// State shared by the reactor and the job (the job may finish after a cancelled RPC is gone).
struct RunState {
  std::shared_ptr<convplan::RunResult> result = std::make_shared<convplan::RunResult>();
  SteadyClock::time_point submitted;
  std::atomic<int64_t> started_ns{0};
  std::mutex mu;
  std::string device;
};

class DeviceServiceImpl::RunReactor final : public grpc::ServerUnaryReactor {
 public:
  RunReactor(DeviceServiceImpl* service, grpc::CallbackServerContext* context,
             const kiln::v1::RunConvLayersRequest* request,
             kiln::v1::RunConvLayersResponse* response)
      : service_(service), context_(context), request_(request), response_(response),
        scope_(service->env_, *context, "/kiln.v1.DeviceService/RunConvLayers") {}

  void Start() {
    grpc::Status st = scope_.Begin(*context_);
    if (!st.ok()) return FinishOnce(st);
    auto info = service_->store_->Get(request_->model_id());
    if (!info.ok()) return FinishOnce(ToGrpc(info.status()));
    model_id_ = info->model_id;
    std::shared_ptr<const convplan::ConvPlan> plan = service_->CachedPlan(model_id_);
    if (!plan) {
      auto reader = service_->store_->OpenReader(model_id_);
      if (!reader.ok()) return FinishOnce(ToGrpc(reader.status()));
      auto bytes = (*reader)->ReadAll();
      if (!bytes.ok()) return FinishOnce(ToGrpc(bytes.status()));
      std::string name = info->names.empty() ? model_id_.substr(0, 12) : info->names.front();
      Result<std::shared_ptr<const convplan::ConvPlan>> planned = Internal("not planned");
      try {
        planned = PlanModel(*bytes, name);
      } catch (const std::exception& e) {
        planned = Internal(std::string("planning model '") + name + "' failed: " + e.what());
      }
      if (!planned.ok()) return FinishOnce(ToGrpc(planned.status()));
      plan = *planned;
      service_->CachePlan(model_id_, plan);
    }
    auto prepared = PrepareConvRun(plan, *request_);
    if (!prepared.ok()) return FinishOnce(ToGrpc(prepared.status()));

    auto state = std::make_shared<RunState>();
    device::JobFn inner = convplan::MakeRunJob(prepared->plan, std::move(prepared->inputs),
                                               prepared->options, state->result);
    device::JobRequest job;
    job.backend = prepared->backend;
    job.client_id = ClientId(*context_);
    job.work = [inner, state](device::Backend& backend, device::JobContext& ctx) {
      state->started_ns = SteadyClock::now().time_since_epoch().count();
      {
        std::lock_guard<std::mutex> lock(state->mu);
        state->device = ctx.device;
      }
      return inner(backend, ctx);
    };
    auto deadline = context_->deadline();
    if (deadline != std::chrono::system_clock::time_point::max()) {
      job.deadline = SteadyClock::now() + (deadline - std::chrono::system_clock::now());
    }
    state->submitted = SteadyClock::now();
    std::string backend = job.backend;
    auto handle = service_->pool_->Submit(std::move(job));
    if (!handle.ok()) {
      if (handle.status().code() == StatusCode::kResourceExhausted) {
        // gRPC clients with a retry policy honour this trailer (gRFC A6 server pushback).
        auto ms = service_->pool_->SuggestedRetryAfter(backend).count();
        context_->AddTrailingMetadata("grpc-retry-pushback-ms", std::to_string(ms));
      }
      return FinishOnce(ToGrpc(handle.status()));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      handle_ = *handle;
      if (cancelled_) handle_->Cancel();
    }
    // OnDone may run right here when the job is already finished: no lock held.
    (*handle)->OnDone([this, state](const Status& status) { Complete(state, status); });
  }

  void OnCancel() override {
    std::shared_ptr<device::JobHandle> handle;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      handle = handle_;
    }
    if (handle) handle->Cancel();
  }

  void OnDone() override { delete this; }

 private:
  void Complete(const std::shared_ptr<RunState>& state, const Status& status) {
    if (!status.ok()) {
      // Jobs cut off by the server's own shutdown are not the client's cancellation.
      if (status.code() == StatusCode::kCancelled && service_->env_.drain &&
          service_->env_.drain->draining() && !context_->IsCancelled()) {
        return FinishOnce(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                       "kilnd shut down before the run finished; retry"));
      }
      return FinishOnce(ToGrpc(status));
    }
    FillRunResponse(*state->result, request_->omit_outputs(), response_);
    int64_t started = state->started_ns.load();
    if (started > 0) {
      response_->set_queue_seconds(std::chrono::duration<double>(
          SteadyClock::time_point(SteadyClock::duration(started)) - state->submitted).count());
    }
    {
      std::lock_guard<std::mutex> lock(state->mu);
      response_->set_device(state->device);
    }
    response_->set_model_id(model_id_);
    FinishOnce(grpc::Status::OK);
  }

  void FinishOnce(const grpc::Status& status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(scope_.Done(status));
  }

  DeviceServiceImpl* service_;
  grpc::CallbackServerContext* context_;
  const kiln::v1::RunConvLayersRequest* request_;
  kiln::v1::RunConvLayersResponse* response_;
  RpcScope scope_;
  std::mutex mu_;
  std::shared_ptr<device::JobHandle> handle_;
  bool cancelled_ = false;
  bool finished_ = false;
  std::string model_id_;
};

DeviceServiceImpl::DeviceServiceImpl(ModelStore* store, device::WorkerPool* pool, int queue_capacity,
                                     ServiceEnv env)
    : store_(store), pool_(pool), queue_capacity_(queue_capacity), env_(env) {}

std::shared_ptr<const convplan::ConvPlan> DeviceServiceImpl::CachedPlan(const std::string& model_id) {
  std::lock_guard<std::mutex> lock(cache_mu_);
  for (auto it = plan_cache_.begin(); it != plan_cache_.end(); ++it) {
    if (it->first == model_id) {
      plan_cache_.splice(plan_cache_.begin(), plan_cache_, it);
      return plan_cache_.front().second;
    }
  }
  return nullptr;
}

void DeviceServiceImpl::CachePlan(const std::string& model_id,
                                  std::shared_ptr<const convplan::ConvPlan> plan) {
  std::lock_guard<std::mutex> lock(cache_mu_);
  std::erase_if(plan_cache_, [&](const auto& e) { return e.first == model_id; });
  plan_cache_.emplace_front(model_id, std::move(plan));
  if (plan_cache_.size() > kPlanCacheEntries) plan_cache_.pop_back();
}

grpc::ServerUnaryReactor* DeviceServiceImpl::RunConvLayers(
    grpc::CallbackServerContext* context, const kiln::v1::RunConvLayersRequest* request,
    kiln::v1::RunConvLayersResponse* response) {
  auto* reactor = new RunReactor(this, context, request, response);
  reactor->Start();
  return reactor;
}

grpc::ServerUnaryReactor* DeviceServiceImpl::ListDevices(grpc::CallbackServerContext* context,
                                                         const kiln::v1::ListDevicesRequest*,
                                                         kiln::v1::ListDevicesResponse* response) {
  auto* reactor = context->DefaultReactor();
  RpcScope scope(env_, *context, "/kiln.v1.DeviceService/ListDevices");
  grpc::Status st = scope.Begin(*context);
  if (st.ok()) {
    std::set<std::string> backends;
    for (const auto& d : pool_->Devices()) {
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
      q->set_queued(pool_->QueueDepth(b));
      q->set_capacity(queue_capacity_);
    }
  }
  reactor->Finish(scope.Done(st));
  return reactor;
}

}  // namespace kiln::server
