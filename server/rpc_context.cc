#include "server/rpc_context.h"

#include <openssl/crypto.h>
#include <spdlog/spdlog.h>

namespace kiln::server {

grpc::Status ToGrpc(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

std::string ClientId(const grpc::CallbackServerContext& context) {
  const auto& md = context.client_metadata();
  auto it = md.find("x-kiln-client");
  if (it != md.end()) return std::string(it->second.data(), it->second.size());
  std::string peer = context.peer();
  auto colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

void AddRetryPushback(grpc::CallbackServerContext& context, const Status& status, const sched::Scheduler& scheduler,
                      const std::string& lane) {
  if (status.code() != StatusCode::kResourceExhausted) return;
  context.AddTrailingMetadata("grpc-retry-pushback-ms", std::to_string(scheduler.SuggestedRetryAfter(lane).count()));
}

grpc::Status Authenticator::Check(const grpc::ServerContextBase& context) const {
  if (token_.empty()) return grpc::Status::OK;
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing 'authorization: Bearer <token>' metadata");
  }
  std::string value(it->second.data(), it->second.size());
  const std::string expected = "Bearer " + token_;
  // Constant-time comparison: the token must not leak through timing.
  bool match = value.size() == expected.size() &&
               CRYPTO_memcmp(value.data(), expected.data(), value.size()) == 0;
  if (!match) return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "invalid bearer token");
  return grpc::Status::OK;
}

RpcScope::RpcScope(const ServiceEnv& env, const grpc::ServerContextBase& context, std::string method)
    : env_(env), method_(std::move(method)), peer_(context.peer()),
      start_(std::chrono::steady_clock::now()) {
  if (env_.drain) env_.drain->Enter();
}

RpcScope::~RpcScope() {
  if (env_.drain && !done_) env_.drain->Leave();
}

grpc::Status RpcScope::Begin(const grpc::ServerContextBase& context) const {
  if (env_.drain && env_.drain->draining()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "kilnd is shutting down; retry elsewhere");
  }
  return env_.auth ? env_.auth->Check(context) : grpc::Status::OK;
}

namespace {
const char* GrpcCodeName(grpc::StatusCode code) {
  return StatusCodeName(static_cast<StatusCode>(code));
}
}  // namespace

grpc::Status RpcScope::Done(const grpc::Status& status) {
  if (done_) return status;
  done_ = true;
  if (env_.drain) env_.drain->Leave();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const char* code = GrpcCodeName(status.error_code());
  if (env_.metrics) env_.metrics->ObserveRpc(method_, code, seconds);
  auto level = status.ok() ? spdlog::level::info : spdlog::level::warn;
  spdlog::log(level, "rpc method={} status={} duration_ms={:.3f} peer={} bytes={}{}{}", method_,
              code, seconds * 1e3, peer_, bytes_, status.ok() ? "" : " error=",
              status.error_message());
  return status;
}

}  // namespace kiln::server
