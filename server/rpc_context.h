// Per-RPC bookkeeping shared by every Kiln service handler: bearer-token check, one spdlog line
// per RPC (method, status, duration, peer, bytes) and the kiln_grpc_* metrics.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <string>

#include "common/status.h"
#include "server/metrics.h"

namespace kiln::server {

/// Converts a Kiln Status to a grpc::Status (same numeric codes).
grpc::Status ToGrpc(const Status& status);

/// Checks `authorization: Bearer <token>` metadata. Empty token = authentication off.
class Authenticator {
 public:
  explicit Authenticator(std::string token) : token_(std::move(token)) {}
  bool enabled() const { return !token_.empty(); }
  /// OK, or UNAUTHENTICATED naming what is missing or wrong.
  grpc::Status Check(const grpc::ServerContextBase& context) const;

 private:
  std::string token_;
};

/// What every handler needs: auth, metrics, and a flag raised when the server drains.
struct ServiceEnv {
  Metrics* metrics = nullptr;
  const Authenticator* auth = nullptr;
  std::atomic<bool>* shutting_down = nullptr;
};

/// Tracks one RPC from start to Finish; Finish() logs and records metrics exactly once.
class RpcScope {
 public:
  RpcScope(const ServiceEnv& env, const grpc::ServerContextBase& context, std::string method);
  void AddBytes(uint64_t n) { bytes_ += n; }
  uint64_t bytes() const { return bytes_; }
  /// Logs and records `status`, then returns it (so handlers can write `Finish(scope.Done(s))`).
  grpc::Status Done(const grpc::Status& status);
  const ServiceEnv& env() const { return env_; }

 private:
  const ServiceEnv& env_;
  std::string method_;
  std::string peer_;
  std::chrono::steady_clock::time_point start_;
  uint64_t bytes_ = 0;
  bool done_ = false;
};

}  // namespace kiln::server
