#include "server/rpc_context.h"

#include <openssl/crypto.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/echo.h"
#include "google/rpc/status.pb.h"

namespace kiln::server {

grpc::Status ToGrpc(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

std::string Principal(const grpc::ServerContextBase& context) {
  // A verified TLS client certificate names the principal; else the peer's address (the
  // transport's, which a client cannot choose the way it chooses metadata).
  if (auto auth = context.auth_context(); auth && auth->IsPeerAuthenticated()) {
    auto ids = auth->GetPeerIdentity();
    if (!ids.empty()) return "cert:" + EscapeForEcho(std::string_view(ids.front().data(), ids.front().size()), 128);
  }
  std::string peer = context.peer();  // "ipv4:127.0.0.1:5555", "ipv6:[::1]:5555"
  auto colon = peer.rfind(':');
  return EscapeForEcho(colon == std::string::npos ? peer : peer.substr(0, colon), 128);
}

std::string ClientId(const grpc::CallbackServerContext& context) {
  std::string id = Principal(context);
  const auto& md = context.client_metadata();
  auto it = md.find("x-kiln-client");
  if (it != md.end()) {
    id += sched::kSubKeySeparator;
    id += EscapeForEcho(std::string_view(it->second.data(), it->second.size()), 64);
  }
  return id;
}

void AddRetryPushback(grpc::CallbackServerContext& context, const Status& status, const sched::Scheduler& scheduler,
                      const std::string& lane) {
  if (status.code() != StatusCode::kResourceExhausted) return;
  context.AddTrailingMetadata("grpc-retry-pushback-ms", std::to_string(scheduler.SuggestedRetryAfter(lane).count()));
}

grpc::Status ForTheWire(const grpc::Status& status) {
  const std::string& msg = status.error_message();
  std::string short_msg = EscapeForEcho(msg, kMaxGrpcMessageBytes);
  if (short_msg == msg || !status.error_details().empty()) {
    return short_msg == msg ? status : grpc::Status(status.error_code(), short_msg, status.error_details());
  }
  google::rpc::Status details;
  details.set_code(static_cast<int>(status.error_code()));
  details.set_message(EscapeForEcho(msg, kMaxErrorDetailBytes));
  return grpc::Status(status.error_code(), short_msg, details.SerializeAsString());
}

grpc::Status Authenticator::Check(const grpc::ServerContextBase& context) const {
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  return CheckValue(it == md.end() ? nullptr : &it->second);
}

grpc::Status Authenticator::CheckValue(const grpc::string_ref* header) const {
  if (token_.empty()) return grpc::Status::OK;
  if (header == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing 'authorization: Bearer <token>' metadata");
  }
  std::string value(header->data(), header->size());
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
  grpc::Status st = env_.auth ? env_.auth->Check(context) : grpc::Status::OK;
  if (!st.ok() && env_.metrics) env_.metrics->CountRejected("unauthenticated");
  return st;
}

namespace {
const char* GrpcCodeName(grpc::StatusCode code) {
  return StatusCodeName(static_cast<StatusCode>(code));
}
}  // namespace

grpc::Status RpcScope::Done(const grpc::Status& full) {
  const grpc::Status status = ForTheWire(full);
  if (done_) return status;
  done_ = true;
  if (env_.drain) env_.drain->Leave();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const char* code = GrpcCodeName(status.error_code());
  if (env_.metrics) env_.metrics->ObserveRpc(method_, code, seconds);
  auto level = status.ok() ? spdlog::level::info : spdlog::level::warn;
  // The log keeps more of the message than the wire does, escaped and capped all the same.
  spdlog::log(level, "rpc method={} status={} duration_ms={:.3f} peer={} bytes={}{}{}", method_,
              code, seconds * 1e3, EscapeForEcho(peer_, 128), bytes_, status.ok() ? "" : " error=",
              status.ok() ? std::string() : EscapeForEcho(full.error_message(), kMaxLoggedErrorBytes));
  return status;
}

}  // namespace kiln::server
