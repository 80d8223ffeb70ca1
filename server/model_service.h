// kiln.v1.ModelService over the gRPC callback API, backed by store::ModelStore. Reactions only
// authenticate, stream chunks and read the in-memory index; the store's blocking work (upload
// commit, DeleteModel's index rewrite, GetModel's inline bytes) runs on the scheduler's store lane,
// and so does every lookup of a store whose reads block (a shared store's index is a database:
// store::ModelStore::reads_block; one rule, ModelServiceImpl::RunRead).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "kiln/v1/model.grpc.pb.h"
#include "store/model_store.h"
#include "server/rpc_context.h"

namespace kiln::server {

/// Largest chunk UploadModel accepts in one message.
inline constexpr size_t kMaxUploadChunkBytes = 1u << 20;
/// Bytes an upload must send per --upload-idle-timeout (or all it still owes, if less) to stay
/// open: one that trickles a few bytes at a time is ended like one that sends nothing, so slow
/// clients cannot hold the in-flight upload slots (server/config.h max_uploads_in_flight) and
/// their store reservations for as long as they like.
inline constexpr uint64_t kUploadProgressBytes = 64u << 10;
/// Largest model GetModel returns inline (include_bytes); larger ones are read with ReadModel.
inline constexpr size_t kMaxInlineModelBytes = 3u << 20;

/// Limits of the service itself (the store's are store::ModelStoreOptions); kilnd sets them from
/// server/config.h (upload_idle_timeout_seconds, list_page_size).
struct ModelServiceOptions {
  /// An upload that delivers no chunk bytes for this long ends with DEADLINE_EXCEEDED and frees
  /// its reservation: a declared size is only held while bytes keep arriving.
  std::chrono::milliseconds upload_idle_timeout{30'000};
  /// Most models in one ListModels page (kiln/v1/model.proto, ListModelsRequest).
  size_t list_page_size = 1000;
};

/// Largest ListModels page in bytes: half of gRPC's default 4 MiB client receive limit.
inline constexpr size_t kMaxListPageBytes = 2u << 20;

class ModelServiceImpl final : public kiln::v1::ModelService::CallbackService {
 public:
  ModelServiceImpl(store::ModelStore* store, ServiceEnv env, ModelServiceOptions options = {});
  ~ModelServiceImpl() override;

  /// Ends every open upload with UNAVAILABLE (nothing of it is stored) and refuses new ones.
  /// Called on SIGTERM/SIGINT before the server drains unary calls.
  void CancelUploads();

  grpc::ServerReadReactor<kiln::v1::UploadModelRequest>* UploadModel(
      grpc::CallbackServerContext* context, kiln::v1::UploadModelResponse* response) override;
  grpc::ServerUnaryReactor* LookupModel(grpc::CallbackServerContext* context,
                                        const kiln::v1::LookupModelRequest* request,
                                        kiln::v1::LookupModelResponse* response) override;
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* context,
                                     const kiln::v1::GetModelRequest* request,
                                     kiln::v1::GetModelResponse* response) override;
  grpc::ServerWriteReactor<kiln::v1::ReadModelResponse>* ReadModel(
      grpc::CallbackServerContext* context, const kiln::v1::ReadModelRequest* request) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const kiln::v1::ListModelsRequest* request,
                                       kiln::v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* DeleteModel(grpc::CallbackServerContext* context,
                                        const kiln::v1::DeleteModelRequest* request,
                                        kiln::v1::DeleteModelResponse* response) override;

 private:
  class UploadReactor;
  class ReadReactor;
  friend class UploadReactor;
  void UpdateStoreMetrics();
  // Runs `work` (blocking store work) on the store lane, then finishes the unary call with it.
  void RunOnStoreLane(grpc::CallbackServerContext& context, grpc::ServerUnaryReactor* reactor,
                      std::shared_ptr<RpcScope> scope, std::function<Status()> work);

  // Runs a lookup: on the reactor when the store's reads do not block, else on the store lane.
  void RunRead(grpc::CallbackServerContext& context, grpc::ServerUnaryReactor* reactor,
               std::shared_ptr<RpcScope> scope, std::function<Status()> work);
  // LookupModel's answer from the index (kiln/v1/model.proto, LookupModelRequest).
  Status Lookup(const kiln::v1::LookupModelRequest& request, kiln::v1::LookupModelResponse* response) const;
  // One page of ListModels (kiln/v1/model.proto, ListModelsRequest).
  Status ListPage(const kiln::v1::ListModelsRequest& request, kiln::v1::ListModelsResponse* response) const;
  // Ends uploads idle for longer than options_.upload_idle_timeout (runs on idle_thread_).
  void SweepIdleUploads();

  store::ModelStore* store_;
  ServiceEnv env_;
  ModelServiceOptions options_;
  std::mutex uploads_mu_;
  std::unordered_set<UploadReactor*> uploads_;
  bool uploads_closed_ = false;
  std::condition_variable idle_cv_;  // with uploads_mu_: wakes the sweeper to stop
  std::thread idle_thread_;
};

}  // namespace kiln::server
