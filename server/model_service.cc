#include "server/model_service.h"

#include <spdlog/spdlog.h>

namespace kiln::server {

using kiln::v1::UploadModelRequest;

void ToProto(const ModelInfo& info, kiln::v1::Model* out) {
  out->set_model_id(info.model_id);
  for (const auto& n : info.names) out->add_names(n);
  out->set_size_bytes(info.size_bytes);
  out->set_opset(info.opset);
  for (const auto& s : info.inputs) out->add_inputs(s);
  for (const auto& s : info.outputs) out->add_outputs(s);
  out->set_node_count(info.node_count);
  out->set_producer_name(info.producer_name);
  out->set_created_unix_seconds(info.created_unix_seconds);
}

// Client-streaming upload: header first, then chunks into a temp file; commit when the client
// half-closes. Every callback takes mu_, because OnCancel and CancelUploads race with reads.
class ModelServiceImpl::UploadReactor final
    : public grpc::ServerReadReactor<UploadModelRequest> {
 public:
  UploadReactor(ModelServiceImpl* service, grpc::CallbackServerContext* context,
                kiln::v1::UploadModelResponse* response)
      : service_(service), context_(context), response_(response),
        scope_(service->env_, *context, "/kiln.v1.ModelService/UploadModel") {
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
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
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
      bool already = false;
      std::string replaced;
      auto info = upload_->Commit(&already, &replaced);
      upload_.reset();
      if (!info.ok()) {
        FinishLocked(ToGrpc(info.status()));
        return;
      }
      ToProto(*info, response_->mutable_model());
      response_->set_already_stored(already);
      response_->set_replaced_model_id(replaced);
      service_->UpdateStoreMetrics();
      spdlog::info("stored model id={} name={} size_bytes={} already_stored={}", info->model_id,
                   header_name_, info->size_bytes, already);
      FinishLocked(grpc::Status::OK);
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
    std::lock_guard<std::mutex> lock(mu_);
    AbortLocked(grpc::Status(grpc::StatusCode::CANCELLED, "upload cancelled"));
  }

  /// Server shutdown: the client gets UNAVAILABLE and nothing is stored.
  void CancelForShutdown() {
    std::lock_guard<std::mutex> lock(mu_);
    AbortLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                             "kilnd is shutting down; upload discarded, retry later"));
  }

  void OnDone() override {
    if (registered_) {
      std::lock_guard<std::mutex> ulock(service_->uploads_mu_);
      service_->uploads_.erase(this);
    }
    delete this;
  }

 private:
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
  std::unique_ptr<Upload> upload_;
  std::string header_name_;
  bool finished_ = false;
  bool registered_ = false;
};

// Server-streaming read of a model's bytes in 1 MiB chunks.
class ModelServiceImpl::ReadReactor final
    : public grpc::ServerWriteReactor<kiln::v1::ReadModelResponse> {
 public:
  ReadReactor(ModelServiceImpl* service, grpc::CallbackServerContext* context,
              const kiln::v1::ReadModelRequest* request)
      : scope_(service->env_, *context, "/kiln.v1.ModelService/ReadModel") {
    grpc::Status auth = scope_.Begin(*context);
    if (!auth.ok()) {
      Finish(scope_.Done(auth));
      return;
    }
    auto reader = service->store_->OpenReader(request->model_id());
    if (!reader.ok()) {
      Finish(scope_.Done(ToGrpc(reader.status())));
      return;
    }
    reader_ = std::move(reader).value();
    NextWrite();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(scope_.Done(grpc::Status(grpc::StatusCode::CANCELLED, "stream broken")));
      return;
    }
    NextWrite();
  }
  void OnDone() override { delete this; }

 private:
  void NextWrite() {
    if (offset_ >= reader_->size()) {
      Finish(scope_.Done(grpc::Status::OK));
      return;
    }
    Status st = reader_->ReadAt(offset_, kMaxUploadChunkBytes, response_.mutable_chunk());
    if (st.ok()) {
      hash_.Update(response_.chunk().data(), response_.chunk().size());
      // The last chunk goes out only if all the bytes match the id: a corrupted object ends the
      // stream with DATA_LOSS instead of completing it.
      if (offset_ + response_.chunk().size() >= reader_->size()) st = reader_->Verify(hash_.HexDigest());
    }
    if (!st.ok()) {
      Finish(scope_.Done(ToGrpc(st)));
      return;
    }
    offset_ += response_.chunk().size();
    scope_.AddBytes(response_.chunk().size());
    StartWrite(&response_);
  }

  RpcScope scope_;
  std::unique_ptr<ModelReader> reader_;
  Sha256 hash_;
  kiln::v1::ReadModelResponse response_;
  uint64_t offset_ = 0;
};

ModelServiceImpl::ModelServiceImpl(ModelStore* store, ServiceEnv env)
    : store_(store), env_(env) {
  UpdateStoreMetrics();
}

ModelServiceImpl::~ModelServiceImpl() = default;

void ModelServiceImpl::UpdateStoreMetrics() {
  env_.metrics->SetStore(store_->model_count(), store_->total_bytes());
}

void ModelServiceImpl::CancelUploads() {
  // Held across the loop so that no reactor can reach OnDone (and delete itself) meanwhile;
  // gRPC runs OnDone after Finish on its own executor, never inline in Finish.
  std::lock_guard<std::mutex> lock(uploads_mu_);
  uploads_closed_ = true;
  for (UploadReactor* r : uploads_) r->CancelForShutdown();
}

grpc::ServerReadReactor<UploadModelRequest>* ModelServiceImpl::UploadModel(
    grpc::CallbackServerContext* context, kiln::v1::UploadModelResponse* response) {
  return new UploadReactor(this, context, response);
}

grpc::ServerWriteReactor<kiln::v1::ReadModelResponse>* ModelServiceImpl::ReadModel(
    grpc::CallbackServerContext* context, const kiln::v1::ReadModelRequest* request) {
  return new ReadReactor(this, context, request);
}

grpc::ServerUnaryReactor* ModelServiceImpl::GetModel(grpc::CallbackServerContext* context,
                                                     const kiln::v1::GetModelRequest* request,
                                                     kiln::v1::GetModelResponse* response) {
  auto* reactor = context->DefaultReactor();
  RpcScope scope(env_, *context, "/kiln.v1.ModelService/GetModel");
  grpc::Status st = scope.Begin(*context);
  if (st.ok()) {
    auto reader = store_->OpenReader(request->model_id());
    auto info = store_->Get(request->model_id());
    if (!reader.ok()) {
      st = ToGrpc(reader.status());
    } else if (!info.ok()) {
      st = ToGrpc(info.status());
    } else {
      ToProto(*info, response->mutable_model());
      if (request->include_bytes()) {
        if ((*reader)->size() > kMaxInlineModelBytes) {
          st = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            "model " + info->model_id + " is " + std::to_string((*reader)->size()) +
                                " bytes, over the " + std::to_string(kMaxInlineModelBytes) +
                                "-byte inline limit of GetModel; read it with ReadModel");
        } else {
          auto bytes = (*reader)->ReadAll();  // checked against the id, like every whole read
          if (bytes.ok()) {
            *response->mutable_model_bytes() = std::move(bytes).value();
          } else {
            st = ToGrpc(bytes.status());
          }
          scope.AddBytes(response->model_bytes().size());
        }
      }
    }
  }
  reactor->Finish(scope.Done(st));
  return reactor;
}

grpc::ServerUnaryReactor* ModelServiceImpl::ListModels(grpc::CallbackServerContext* context,
                                                       const kiln::v1::ListModelsRequest*,
                                                       kiln::v1::ListModelsResponse* response) {
  auto* reactor = context->DefaultReactor();
  RpcScope scope(env_, *context, "/kiln.v1.ModelService/ListModels");
  grpc::Status st = scope.Begin(*context);
  if (st.ok()) {
    for (const auto& m : store_->List()) ToProto(m, response->add_models());
  }
  reactor->Finish(scope.Done(st));
  return reactor;
}

grpc::ServerUnaryReactor* ModelServiceImpl::DeleteModel(grpc::CallbackServerContext* context,
                                                        const kiln::v1::DeleteModelRequest* request,
                                                        kiln::v1::DeleteModelResponse*) {
  auto* reactor = context->DefaultReactor();
  RpcScope scope(env_, *context, "/kiln.v1.ModelService/DeleteModel");
  grpc::Status st = scope.Begin(*context);
  if (st.ok()) {
    st = ToGrpc(store_->Delete(request->model_id()));
    if (st.ok()) UpdateStoreMetrics();
  }
  reactor->Finish(scope.Done(st));
  return reactor;
}

}  // namespace kiln::server
