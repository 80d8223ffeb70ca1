#include "server/rpc_context.h"

#include <openssl/crypto.h>
#include <spdlog/spdlog.h>

namespace kiln::server {

grpc::Status ToGrpc(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
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
      start_(std::chrono::steady_clock::now()) {}

namespace {
const char* GrpcCodeName(grpc::StatusCode code) {
  return StatusCodeName(static_cast<StatusCode>(code));
}
}  // namespace

grpc::Status RpcScope::Done(const grpc::Status& status) {
  if (done_) return status;
  done_ = true;
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
