#include "server/model_service.h"

#include <spdlog/spdlog.h>

#include "api/lanes.h"
#include "api/models.h"
#include "common/reactor.h"
#include "kiln/v1/model.pb.h"
#include "server/stream_guard.h"

namespace kiln::server {

using kiln::v1::UploadModelRequest;


// Client-streaming upload: header first, then chunks into a temp file; commit when the client
// half-closes. Every callback takes mu_, because OnCancel and CancelUploads race with reads.
class ModelServiceImpl::UploadReactor final
    : public grpc::ServerReadReactor<UploadModelRequest> {
 public:
  UploadReactor(ModelServiceImpl* service, grpc::CallbackServerContext* context,
                kiln::v1::UploadModelResponse* response)
      : service_(service), context_(context), response_(response),
        scope_(service->env_, *context, "/kiln.v1.ModelService/UploadModel") {
    ReactorScope on_reactor;
    grpc::Status auth = scope_.Begin(*context);
    std::lock_guard<std::mutex> lock(mu_);
    if (!auth.ok()) {
      FinishLocked(auth);
      return;
    }
    {
      std::lock_guard<std::mutex> ulock(service_->uploads_mu_);
      if (service_->uploads_closed_) {
        FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "kilnd is shutting down"));
        return;
      }
      service_->uploads_.insert(this);
      registered_ = true;
    }
    last_progress_ = std::chrono::steady_clock::now();
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    ReactorScope on_reactor;
    std::unique_lock<std::mutex> lock(mu_);
    if (finished_) return;
    if (!ok) {
      // Half-close (all sent) or a broken/cancelled stream.
      if (context_->IsCancelled()) {
        AbortLocked(grpc::Status(grpc::StatusCode::CANCELLED, "upload cancelled by the client"));
        return;
      }
      if (!upload_) {
        AbortLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "upload stream ended before its header"));
        return;
      }
      // From here on the commit finishes the call (OnCancel and shutdown leave it alone).
      committing_ = true;
      std::shared_ptr<store::Upload> upload = std::move(upload_);
      lock.unlock();  // the commit's callbacks take mu_, and may run on this thread
      SubmitCommit(std::move(upload));
      return;
    }
    if (!upload_) {
      if (!request_.has_header()) {
        AbortLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "first UploadModel message must carry the header"));
        return;
      }
      const auto& h = request_.header();
      header_name_ = h.name();
      auto upload = service_->store_->BeginUpload(h.name(), h.size_bytes(), h.sha256());
      if (!upload.ok()) {
        AbortLocked(ToGrpc(upload.status()));
        return;
      }
      upload_ = std::move(upload).value();
      outstanding_ = h.size_bytes();
      progress_need_ = NeedLocked();  // the header itself is not progress
    } else {
      if (request_.has_header()) {
        AbortLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "UploadModel header sent twice"));
        return;
      }
      const std::string& chunk = request_.chunk();
      if (chunk.size() > kMaxUploadChunkBytes) {
        AbortLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "upload chunk of " + std::to_string(chunk.size()) +
                                     " bytes exceeds the 1 MiB chunk limit"));
        return;
      }
      // Progress (what resets --upload-idle-timeout) is kUploadProgressBytes since the last mark, or
      // all the declared bytes still outstanding there: an upload that trickles a few bytes at a
      // time holds its reservation and in-flight slot no longer than one that sends nothing.
      since_progress_ += chunk.size();
      outstanding_ -= std::min<uint64_t>(outstanding_, chunk.size());
      if (since_progress_ >= progress_need_) MarkProgressLocked();
      scope_.AddBytes(chunk.size());
      service_->env_.metrics->AddUploadBytes(chunk.size());
      Status st = upload_->Append(chunk.data(), chunk.size());
      if (!st.ok()) {
        AbortLocked(ToGrpc(st.WithContext("model '" + header_name_ + "'")));
        return;
      }
    }
    StartRead(&request_);
  }

  void OnCancel() override {
    ReactorScope on_reactor;
    std::lock_guard<std::mutex> lock(mu_);
    if (committing_) return;  // the commit finishes the call
    AbortLocked(grpc::Status(grpc::StatusCode::CANCELLED, "upload cancelled"));
  }

  /// Server shutdown: the client gets UNAVAILABLE and nothing is stored (unless the commit has
  /// started: it then finishes the call with its own result).
  void CancelForShutdown() {
    std::lock_guard<std::mutex> lock(mu_);
    if (committing_) return;
    AbortLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                             "kilnd is shutting down; upload discarded, retry later"));
  }

  /// Ends the upload if it made no progress (OnReadDone) for `timeout` (called with
  /// service_->uploads_mu_ held, like CancelForShutdown). The header counts once.
  void AbortIfIdle(std::chrono::steady_clock::time_point now, std::chrono::milliseconds timeout) {
    std::lock_guard<std::mutex> lock(mu_);
    if (committing_ || finished_ || now - last_progress_ < timeout) return;
    service_->env_.metrics->CountRejected("upload_idle_timeout");
    std::string reserved = upload_ ? std::to_string(upload_->declared_bytes()) + " declared bytes" : "nothing";
    AbortLocked(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                             "upload sent " + std::to_string(since_progress_) + " of the " +
                                 std::to_string(progress_need_) + " bytes expected in " +
                                 std::to_string(timeout.count()) + " ms (--upload-idle-timeout); ended, freeing " +
                                 reserved));
  }

  void OnDone() override {
    ReactorScope on_reactor;
    if (registered_) {
      std::lock_guard<std::mutex> ulock(service_->uploads_mu_);
      service_->uploads_.erase(this);
    }
    // Finish is called with mu_ held (FinishLocked), and gRPC may run OnDone on another thread
    // before that caller has released it: wait for the release before mu_ is destroyed. Nothing
    // locks mu_ afterwards (the sweeper and CancelUploads reach only registered reactors).
    { std::lock_guard<std::mutex> wait_for_finisher(mu_); }
    delete this;
  }

 private:
  // The commit (fsync, SHA-256 check, ONNX parse, index rewrite) blocks: it runs on the store
  // lane, which has its own queue, so a busy compile lane never delays or refuses an upload.
  void SubmitCommit(std::shared_ptr<store::Upload> upload) {
    sched::JobRequest job;
    job.lane = api::kStoreLane;
    job.client_id = ClientId(*context_);
    job.task = [this, upload](sched::JobContext&) {
      bool already = false;
      std::string replaced;
      auto info = upload->Commit(&already, &replaced);
      std::lock_guard<std::mutex> lock(mu_);
      if (!info.ok()) {
        FinishLocked(ToGrpc(info.status()));
        return Status::Ok();
      }
      api::ToProto(*info, response_->mutable_model());
      response_->set_already_stored(already);
      response_->set_replaced_model_id(replaced);
      service_->UpdateStoreMetrics();
      spdlog::info("stored model id={} name={} size_bytes={} already_stored={}", info->model_id, header_name_,
                   info->size_bytes, already);
      FinishLocked(grpc::Status::OK);
      return Status::Ok();
    };
    auto handle = service_->env_.scheduler->Submit(std::move(job));
    if (!handle.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      FinishLocked(ToGrpc(handle.status()));
      return;
    }
    // Not run (shutdown): the upload is discarded when the task is destroyed.
    (*handle)->OnDone([this](const Status& status) {
      if (status.ok()) return;
      std::lock_guard<std::mutex> lock(mu_);
      FinishLocked(ToGrpc(status));
    });
  }

  void AbortLocked(const grpc::Status& status) {
    if (upload_) {
      upload_->Abort();
      upload_.reset();
    }
    FinishLocked(status);
  }
  void FinishLocked(const grpc::Status& status) {
    if (finished_) return;
    finished_ = true;
    Finish(scope_.Done(status));
  }

  ModelServiceImpl* service_;
  grpc::CallbackServerContext* context_;
  kiln::v1::UploadModelResponse* response_;
  RpcScope scope_;
  std::mutex mu_;
  UploadModelRequest request_;
  std::unique_ptr<store::Upload> upload_;
  std::string header_name_;
  bool finished_ = false;
  bool registered_ = false;
  bool committing_ = false;
  uint64_t NeedLocked() const { return std::max<uint64_t>(1, std::min<uint64_t>(kUploadProgressBytes, outstanding_)); }
  void MarkProgressLocked() {
    last_progress_ = std::chrono::steady_clock::now();
    since_progress_ = 0;
    progress_need_ = NeedLocked();
  }

  std::chrono::steady_clock::time_point last_progress_;  // start, header, or the last progress
  uint64_t outstanding_ = 0;     // declared bytes not yet received
  uint64_t since_progress_ = 0;  // bytes received since last_progress_
  uint64_t progress_need_ = 1;   // bytes that make progress: min(kUploadProgressBytes, outstanding at the mark)
};

// Server-streaming read of a model's bytes in 1 MiB chunks. Each step (open, then one chunk per
// write) runs on the reactor, or on the store lane when the store's reads block (RunRead's rule).
class ModelServiceImpl::ReadReactor final
    : public grpc::ServerWriteReactor<kiln::v1::ReadModelResponse> {
 public:
  ReadReactor(ModelServiceImpl* service, grpc::CallbackServerContext* context,
              const kiln::v1::ReadModelRequest* request)
      : service_(service), context_(context), ref_(request->model_id()),
        scope_(service->env_, *context, "/kiln.v1.ModelService/ReadModel") {
    ReactorScope on_reactor;
    grpc::Status auth = scope_.Begin(*context);
    if (!auth.ok()) {
      End(auth);
      return;
    }
    grpc::Status admitted = AcquireStreamSlot(service->env_.streams, context, "ReadModel", &slot_);
    if (!admitted.ok()) {
      End(admitted);
      return;
    }
    NextStep();
  }
  void OnWriteDone(bool ok) override {
    ReactorScope on_reactor;
    if (slot_) slot_->WriteDone();
    if (!ok) {
      End(FailedWriteStatus(slot_.get(), "ReadModel"));
      return;
    }
    NextStep();
  }
  void OnDone() override { delete this; }

 private:
  // Finishes the call, releasing its stream slot first (so that a client that reads one stream
  // after another never finds its own ended streams holding its share while gRPC winds them down).
  void End(const grpc::Status& status) {
    slot_.reset();
    Finish(scope_.Done(status));
  }

  void NextStep() {
    if (!service_->store_->reads_block()) {
      Status st = Step();
      if (!st.ok()) End(ToGrpc(st));
      return;
    }
    sched::JobRequest job;
    job.lane = api::kStoreLane;
    job.client_id = ClientId(*context_);
    job.task = [this](sched::JobContext&) { return Step(); };
    auto handle = service_->env_.scheduler->Submit(std::move(job));
    if (!handle.ok()) {
      End(ToGrpc(handle.status()));
      return;
    }
    // A failed step (or one the scheduler never ran) finishes the call; a good one wrote or finished.
    (*handle)->OnDone([this](const Status& status) {
      if (!status.ok()) End(ToGrpc(status));
    });
  }

  // One step (Advance); on an error it lets go of the reader here, on the thread the store's
  // rule picked (a farm's reader ends its database transaction, a blocking round trip), instead of
  // when gRPC has sent the status.
  Status Step() {
    Status st = Advance();
    if (!st.ok()) reader_.reset();
    return st;
  }

  // Opens the model (first step), then hands out the next chunk or finishes with OK. An error is
  // returned, not finished: the caller finishes with it.
  Status Advance() {
    if (!reader_) {
      auto id = api::ResolveModelRef(*service_->store_, ref_);
      if (!id.ok()) return id.status();
      auto reader = service_->store_->OpenReader(*id);
      if (!reader.ok()) return reader.status();
      reader_ = std::move(reader).value();
    }
    if (offset_ >= reader_->size()) {
      // The reader (a farm's database connection) and the last chunk go now, not when a client
      // that delays taking the status lets gRPC reach OnDone.
      reader_.reset();
      std::string().swap(*response_.mutable_chunk());
      End(grpc::Status::OK);
      return Status::Ok();
    }
    // The reader checks the SHA-256 with the last chunk: a corrupted object ends the stream with
    // DATA_LOSS instead of completing it.
    KILN_RETURN_IF_ERROR(reader_->Read(kMaxUploadChunkBytes, response_.mutable_chunk()));
    if (response_.chunk().empty()) return DataLoss("model " + reader_->model_id() + ": bytes end before its size");
    offset_ += response_.chunk().size();
    scope_.AddBytes(response_.chunk().size());
    if (slot_) slot_->WriteStarted();
    StartWrite(&response_);
    return Status::Ok();
  }

  ModelServiceImpl* service_;
  grpc::CallbackServerContext* context_;
  std::string ref_;
  RpcScope scope_;
  std::unique_ptr<store::ModelReader> reader_;
  kiln::v1::ReadModelResponse response_;
  uint64_t offset_ = 0;
  std::unique_ptr<StreamGuard::Slot> slot_;  // env_.streams' place, given back in End
};

ModelServiceImpl::ModelServiceImpl(store::ModelStore* store, ServiceEnv env, ModelServiceOptions options)
    : store_(store), env_(env), options_(options) {
  UpdateStoreMetrics();
  idle_thread_ = std::thread([this] { SweepIdleUploads(); });
}

ModelServiceImpl::~ModelServiceImpl() {
  {
    std::lock_guard<std::mutex> lock(uploads_mu_);
    uploads_closed_ = true;
  }
  idle_cv_.notify_all();
  if (idle_thread_.joinable()) idle_thread_.join();
}

void ModelServiceImpl::SweepIdleUploads() {
  // A tenth of the timeout (at most 1 s) between sweeps: an idle upload ends within 1.1 timeouts.
  const auto period = std::min<std::chrono::milliseconds>(std::chrono::seconds(1),
                                                           std::max<std::chrono::milliseconds>(
                                                               std::chrono::milliseconds(10),
                                                               options_.upload_idle_timeout / 10));
  std::unique_lock<std::mutex> lock(uploads_mu_);
  while (!uploads_closed_) {
    idle_cv_.wait_for(lock, period);
    // uploads_mu_ held: no reactor reaches OnDone meanwhile (see CancelUploads).
    auto now = std::chrono::steady_clock::now();
    for (UploadReactor* r : uploads_) r->AbortIfIdle(now, options_.upload_idle_timeout);
  }
}

void ModelServiceImpl::UpdateStoreMetrics() {
  env_.metrics->SetStore(store_->model_count(), store_->total_bytes());
}

void ModelServiceImpl::CancelUploads() {
  // Held across the loop so that no reactor can reach OnDone (and delete itself) meanwhile;
  // gRPC runs OnDone after Finish on its own executor, never inline in Finish.
  std::lock_guard<std::mutex> lock(uploads_mu_);
  uploads_closed_ = true;
  for (UploadReactor* r : uploads_) r->CancelForShutdown();
  idle_cv_.notify_all();
}

grpc::ServerReadReactor<UploadModelRequest>* ModelServiceImpl::UploadModel(
    grpc::CallbackServerContext* context, kiln::v1::UploadModelResponse* response) {
  ReactorScope on_reactor;
  return new UploadReactor(this, context, response);
}

grpc::ServerWriteReactor<kiln::v1::ReadModelResponse>* ModelServiceImpl::ReadModel(
    grpc::CallbackServerContext* context, const kiln::v1::ReadModelRequest* request) {
  ReactorScope on_reactor;
  return new ReadReactor(this, context, request);
}

grpc::ServerUnaryReactor* ModelServiceImpl::LookupModel(grpc::CallbackServerContext* context,
                                                        const kiln::v1::LookupModelRequest* request,
                                                        kiln::v1::LookupModelResponse* response) {
  ReactorScope on_reactor;
  auto* reactor = context->DefaultReactor();
  auto scope = std::make_shared<RpcScope>(env_, *context, "/kiln.v1.ModelService/LookupModel");
  grpc::Status st = scope->Begin(*context);
  if (!st.ok()) {
    reactor->Finish(scope->Done(st));
    return reactor;
  }
  RunRead(*context, reactor, scope, [this, request, response]() { return Lookup(*request, response); });
  return reactor;
}

Status ModelServiceImpl::Lookup(const kiln::v1::LookupModelRequest& request,
                                      kiln::v1::LookupModelResponse* response) const {
  // The checks are UploadHeader's.
  if (request.name().empty() && request.sha256().empty()) {
    return InvalidArgument("LookupModel needs a name or a sha256");
  }
  if (!request.name().empty()) {
    if (Status s = store::CheckModelName(request.name()); !s.ok()) return s;
  }
  if (!request.sha256().empty() && !store::IsModelId(request.sha256())) {
    return InvalidArgument("sha256 must be 64 lowercase hex characters, got '" +
                                  request.sha256().substr(0, 80) + "'");
  }
  // Each one exactly: a name or an id, never a prefix (store::ModelStore::Get).
  // Absent is an answer; a store that cannot be read (UNAVAILABLE) is not.
  auto one = [this](const std::string& key, kiln::v1::Model* out) -> Status {
    auto info = store_->Get(key);
    if (info.ok()) api::ToProto(*info, out);
    return info.ok() || info.status().code() == StatusCode::kNotFound ? Status::Ok() : info.status();
  };
  if (!request.sha256().empty()) KILN_RETURN_IF_ERROR(one(request.sha256(), response->mutable_by_sha256()));
  if (!request.name().empty()) KILN_RETURN_IF_ERROR(one(request.name(), response->mutable_by_name()));
  return Status::Ok();
}

grpc::ServerUnaryReactor* ModelServiceImpl::GetModel(grpc::CallbackServerContext* context,
                                                     const kiln::v1::GetModelRequest* request,
                                                     kiln::v1::GetModelResponse* response) {
  ReactorScope on_reactor;
  auto* reactor = context->DefaultReactor();
  auto scope = std::make_shared<RpcScope>(env_, *context, "/kiln.v1.ModelService/GetModel");
  grpc::Status st = scope->Begin(*context);
  if (!st.ok()) {
    reactor->Finish(scope->Done(st));
    return reactor;
  }
  if (!request->include_bytes()) {
    RunRead(*context, reactor, scope, [this, ref = request->model_id(), response]() -> Status {
      auto id = api::ResolveModelRef(*store_, ref);
      if (!id.ok()) return id.status();
      auto info = store_->Get(*id);
      if (!info.ok()) return info.status();
      api::ToProto(*info, response->mutable_model());
      return Status::Ok();
    });
    return reactor;
  }
  // One lookup for the metadata and the bytes (the reader carries both): resolving the name
  // twice could answer one model's bytes under another's id while the name moves. Reading (and,
  // once per process, checking) up to 3 MiB blocks: store lane.
  RunOnStoreLane(*context, reactor, scope, [this, ref = request->model_id(), response, scope]() -> Status {
    auto id = api::ResolveModelRef(*store_, ref);
    if (!id.ok()) return id.status();
    auto reader = store_->OpenReader(*id);
    if (!reader.ok()) return reader.status();
    const store::ModelInfo& info = (*reader)->info();
    if (info.size_bytes > kMaxInlineModelBytes) {
      return ResourceExhausted("model " + info.model_id + " is " + std::to_string(info.size_bytes) +
                               " bytes, over the " + std::to_string(kMaxInlineModelBytes) +
                               "-byte inline limit of GetModel; read it with ReadModel");
    }
    auto bytes = (*reader)->ReadAll();  // checked against the id, like every whole read
    if (!bytes.ok()) return bytes.status();
    api::ToProto(info, response->mutable_model());
    *response->mutable_model_bytes() = std::move(bytes).value();
    scope->AddBytes(response->model_bytes().size());
    return Status::Ok();
  });
  return reactor;
}

grpc::ServerUnaryReactor* ModelServiceImpl::ListModels(grpc::CallbackServerContext* context,
                                                       const kiln::v1::ListModelsRequest* request,
                                                       kiln::v1::ListModelsResponse* response) {
  ReactorScope on_reactor;
  auto* reactor = context->DefaultReactor();
  auto scope = std::make_shared<RpcScope>(env_, *context, "/kiln.v1.ModelService/ListModels");
  grpc::Status st = scope->Begin(*context);
  if (!st.ok()) {
    reactor->Finish(scope->Done(st));
    return reactor;
  }
  RunRead(*context, reactor, scope, [this, request, response]() { return ListPage(*request, response); });
  return reactor;
}

Status ModelServiceImpl::ListPage(const kiln::v1::ListModelsRequest& request,
                                        kiln::v1::ListModelsResponse* response) const {
  // The token is the last model id of the previous page (ids are ordered); clients treat it as
  // opaque (kiln/v1/model.proto).
  const std::string& token = request.page_token();
  if (!token.empty() && !store::IsModelId(token)) {
    return InvalidArgument("page_token is not one this server handed out");
  }
  if (request.page_size() < 0) {
    return InvalidArgument("page_size must be >= 0");
  }
  size_t limit = options_.list_page_size;
  if (request.page_size() > 0) limit = std::min(limit, static_cast<size_t>(request.page_size()));
  // One more than the page: whether a next page exists.
  auto listed = store_->ListAfter(token, limit + 1);
  if (!listed.ok()) return listed.status();
  const std::vector<store::ModelInfo>& models = *listed;
  size_t bytes = 0;
  for (size_t i = 0; i < models.size(); ++i) {
    if (i == limit) {
      response->set_next_page_token(models[i - 1].model_id);
      break;
    }
    kiln::v1::Model m;
    api::ToProto(models[i], &m);
    bytes += m.ByteSizeLong() + 8;  // + the field's tag and length
    if (i > 0 && bytes > kMaxListPageBytes) {
      response->set_next_page_token(models[i - 1].model_id);
      break;
    }
    *response->add_models() = std::move(m);
  }
  return Status::Ok();
}

grpc::ServerUnaryReactor* ModelServiceImpl::DeleteModel(grpc::CallbackServerContext* context,
                                                        const kiln::v1::DeleteModelRequest* request,
                                                        kiln::v1::DeleteModelResponse*) {
  ReactorScope on_reactor;
  auto* reactor = context->DefaultReactor();
  auto scope = std::make_shared<RpcScope>(env_, *context, "/kiln.v1.ModelService/DeleteModel");
  grpc::Status st = scope->Begin(*context);
  if (!st.ok()) {
    reactor->Finish(scope->Done(st));
    return reactor;
  }
  // The index rewrite fsyncs: store lane.
  RunOnStoreLane(*context, reactor, scope, [this, ref = request->model_id()]() -> Status {
    auto id = api::ResolveModelRef(*store_, ref);  // here: the lane orders it after earlier writes
    if (!id.ok()) return id.status();
    KILN_RETURN_IF_ERROR(store_->Delete(*id));
    UpdateStoreMetrics();
    return Status::Ok();
  });
  return reactor;
}

void ModelServiceImpl::RunRead(grpc::CallbackServerContext& context, grpc::ServerUnaryReactor* reactor,
                               std::shared_ptr<RpcScope> scope, std::function<Status()> work) {
  if (store_->reads_block()) {
    RunOnStoreLane(context, reactor, scope, std::move(work));
    return;
  }
  reactor->Finish(scope->Done(ToGrpc(work())));
}

void ModelServiceImpl::RunOnStoreLane(grpc::CallbackServerContext& context, grpc::ServerUnaryReactor* reactor,
                                      std::shared_ptr<RpcScope> scope, std::function<Status()> work) {
  sched::JobRequest job;
  job.lane = api::kStoreLane;
  job.client_id = ClientId(context);
  job.task = [work = std::move(work)](sched::JobContext&) { return work(); };
  auto handle = env_.scheduler->Submit(std::move(job));
  if (!handle.ok()) {
    reactor->Finish(scope->Done(ToGrpc(handle.status())));
    return;
  }
  (*handle)->OnDone([reactor, scope](const Status& status) { reactor->Finish(scope->Done(ToGrpc(status))); });
}

}  // namespace kiln::server
