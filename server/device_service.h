// kiln.v1.DeviceService: RunConvLayers runs a stored model as scheduler stages (api/run_conv.h
// RunConvJob: plan on the CPU lane unless cached, then the requested backend's device lane) and
// answers with outputs + per-layer accuracy report; ListDevices shows devices and queues (and a
// farm's workers, from their heartbeats, and its job queues). A
// client cancel or deadline cancels the queued or running stage (between layers at the latest).
#pragma once

#include "api/jobs.h"
#include "api/run_conv.h"
#include "kiln/v1/device.grpc.pb.h"
#include "sched/scheduler.h"
#include "server/rpc_context.h"
#include "store/model_store.h"

namespace kiln::server {

class DeviceServiceImpl final : public kiln::v1::DeviceService::CallbackService {
 public:
  /// `store` and `scheduler` must outlive the service. `queue_capacity` is reported by ListDevices;
  /// `plan_cache_bytes` bounds the plan cache (--plan-cache-bytes).
  DeviceServiceImpl(store::ModelStore* store, sched::Scheduler* scheduler, int queue_capacity, ServiceEnv env,
                    int64_t plan_cache_bytes = int64_t{1} << 30);

  grpc::ServerUnaryReactor* RunConvLayers(grpc::CallbackServerContext* context,
                                          const kiln::v1::RunConvLayersRequest* request,
                                          kiln::v1::RunConvLayersResponse* response) override;
  grpc::ServerUnaryReactor* ListDevices(grpc::CallbackServerContext* context,
                                        const kiln::v1::ListDevicesRequest* request,
                                        kiln::v1::ListDevicesResponse* response) override;

  /// Plans kept for recently run models (shared with JobService's runs).
  api::PlanCache* plans() { return &plans_; }
  /// A farm: ListDevices adds its workers and queues (api/jobs.h Farm, read on the store lane).
  void SetFarm(api::JobManager* jobs) { farm_ = jobs; }

 private:
  class RunReactor;

  store::ModelStore* store_;
  sched::Scheduler* scheduler_;
  int queue_capacity_;
  ServiceEnv env_;
  api::PlanCache plans_;
  api::JobManager* farm_ = nullptr;
};

}  // namespace kiln::server
