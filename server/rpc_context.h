// Per-RPC bookkeeping shared by every Kiln service handler: bearer-token check, one spdlog line
// per RPC (method, status, duration, peer, bytes) and the kiln_grpc_* metrics.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <string>

#include "common/status.h"
#include "sched/scheduler.h"
#include "server/metrics.h"

namespace kiln::server {

/// Converts a Kiln Status to a grpc::Status (same numeric codes).
grpc::Status ToGrpc(const Status& status);

/// The scheduler's fairness key of a call: the x-kiln-client metadata, else the peer's address
/// without its port.
std::string ClientId(const grpc::CallbackServerContext& context);

/// For a RESOURCE_EXHAUSTED refusal by `lane`: the grpc-retry-pushback-ms trailer that gRPC
/// clients with a retry policy honour (gRFC A6 server pushback). No-op for other codes.
void AddRetryPushback(grpc::CallbackServerContext& context, const Status& status, const sched::Scheduler& scheduler,
                      const std::string& lane);

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

/// Counts RPCs in progress and refuses new ones once the server drains.
class Drain {
 public:
  void Enter() { inflight_.fetch_add(1); }
  void Leave() { inflight_.fetch_sub(1); }
  int inflight() const { return inflight_.load(); }
  void Start() { draining_ = true; }
  bool draining() const { return draining_.load(); }

 private:
  std::atomic<int> inflight_{0};
  std::atomic<bool> draining_{false};
};

/// What every handler needs: auth, metrics, drain state, the scheduler that runs its work.
struct ServiceEnv {
  Metrics* metrics = nullptr;
  const Authenticator* auth = nullptr;
  Drain* drain = nullptr;
  sched::Scheduler* scheduler = nullptr;
};

/// Tracks one RPC from start to Finish; Finish() logs and records metrics exactly once.
class RpcScope {
 public:
  RpcScope(const ServiceEnv& env, const grpc::ServerContextBase& context, std::string method);
  ~RpcScope();
  RpcScope(const RpcScope&) = delete;
  RpcScope& operator=(const RpcScope&) = delete;
  /// Admission: UNAVAILABLE while the server drains, else the bearer-token check.
  grpc::Status Begin(const grpc::ServerContextBase& context) const;
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
