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

class StreamGuard;  // server/stream_guard.h

/// Converts a Kiln Status to a grpc::Status (same numeric codes).
grpc::Status ToGrpc(const Status& status);

/// Who a call comes from, for fairness: "cert:<identity>" for a verified TLS client certificate
/// (kilnd --tls-client-ca; gRPC's peer identity: the first subjectAltName, else the subject CN),
/// else the peer's transport address without its port ("ipv4:127.0.0.1"). Never client metadata,
/// never the bearer token (one token is shared by all clients). docs/security.md, "Fairness identity".
std::string Principal(const grpc::ServerContextBase& context);

/// The scheduler's fairness key of a call: Principal(), then, when the call carries
/// x-kiln-client, sched::kSubKeySeparator and that header (escaped, at most 64 bytes). The
/// scheduler's per-client quota counts per principal (sched/scheduler.h), so the header only
/// splits a principal's own share: it can neither add quota nor claim another principal's.
std::string ClientId(const grpc::CallbackServerContext& context);

/// Longest grpc-message kilnd sends, and longest long form of a message put into
/// google.rpc.Status (grpc-status-details-bin). Both stay far below gRPC's default 8 KiB limit on
/// received metadata: a longer trailer reached clients as RESOURCE_EXHAUSTED ("received trailing
/// metadata size exceeds limit") instead of the real code.
inline constexpr size_t kMaxGrpcMessageBytes = 512;
inline constexpr size_t kMaxErrorDetailBytes = 3072;
/// Longest error message written into the per-RPC log line (escaped, common/echo.h).
inline constexpr size_t kMaxLoggedErrorBytes = 2048;

/// `status` fit for the wire: grpc-message escaped and cut to kMaxGrpcMessageBytes; when it had
/// to change, the message's longer form (kMaxErrorDetailBytes) travels as a serialized
/// google.rpc.Status in the error details (proto/google/rpc/status.proto). Same code always.
grpc::Status ForTheWire(const grpc::Status& status);

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
  /// The same check on the `authorization` value (nullptr = absent).
  grpc::Status CheckValue(const grpc::string_ref* header) const;

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
  /// --max-message-bytes: the largest response; DeviceService refuses a run whose outputs would
  /// not fit before running it (api/run_conv.h CheckRunOutputs). 0: not checked.
  int64_t max_message_bytes = 0;
  /// The limits of the streams that send stored bytes (ReadModel, GetJobResult); null: none.
  StreamGuard* streams = nullptr;
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
  /// Logs and records `status`, then returns ForTheWire(status) (so handlers can write
  /// `Finish(scope.Done(s))`).
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
