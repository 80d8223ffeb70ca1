// kiln.v1.DeviceService: RunConvLayers plans a stored model, queues it on the WorkerPool's
// devices of the requested backend and answers with outputs + per-layer accuracy report;
// ListDevices shows devices and queues. A client cancel or deadline cancels the queued or running
// job (between layers at the latest).
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "compiler/convplan/plan.h"
#include "device/worker_pool/worker_pool.h"
#include "kiln/v1/device.grpc.pb.h"
#include "server/model_store.h"
#include "server/rpc_context.h"

namespace kiln::server {

class DeviceServiceImpl final : public kiln::v1::DeviceService::CallbackService {
 public:
  /// `pool` must outlive the service. `queue_capacity` is reported by ListDevices.
  DeviceServiceImpl(ModelStore* store, device::WorkerPool* pool, int queue_capacity, ServiceEnv env);

  grpc::ServerUnaryReactor* RunConvLayers(grpc::CallbackServerContext* context,
                                          const kiln::v1::RunConvLayersRequest* request,
                                          kiln::v1::RunConvLayersResponse* response) override;
  grpc::ServerUnaryReactor* ListDevices(grpc::CallbackServerContext* context,
                                        const kiln::v1::ListDevicesRequest* request,
                                        kiln::v1::ListDevicesResponse* response) override;

  /// Plans kept for recently run models (content-addressed, so a plan never goes stale).
  static constexpr size_t kPlanCacheEntries = 16;

 private:
  class RunReactor;
  /// The cached plan of `model_id`, or null.
  std::shared_ptr<const convplan::ConvPlan> CachedPlan(const std::string& model_id);
  void CachePlan(const std::string& model_id, std::shared_ptr<const convplan::ConvPlan> plan);

  std::mutex cache_mu_;
  std::list<std::pair<std::string, std::shared_ptr<const convplan::ConvPlan>>> plan_cache_;  // MRU first
  ModelStore* store_;
  device::WorkerPool* pool_;
  int queue_capacity_;
  ServiceEnv env_;
};

}  // namespace kiln::server
