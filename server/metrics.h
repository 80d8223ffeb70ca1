// Prometheus metrics of kilnd (prometheus-cpp), served by server/metrics_endpoint.h on their own
// address. Names follow Prometheus conventions: base units (seconds, bytes), counters end in _total.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "common/status.h"
#include "server/metrics_endpoint.h"

namespace kiln::server {

/// The malloc this process runs with: "mimalloc X.Y.Z" when mimalloc is linked in (kilnd and kiln
/// are, see the top-level CMakeLists.txt), else "system". Exported as kiln_build_info{allocator}.
std::string RunningAllocator();

/// "/kiln.v1.ModelService/ListModels" -> {"kiln.v1.ModelService", "ListModels"}: the
/// grpc_service and grpc_method labels (the names go-grpc-prometheus and grpc-ecosystem use).
std::pair<std::string, std::string> SplitGrpcMethod(std::string_view method);

class Metrics {
 public:
  explicit Metrics(const std::string& version);

  /// Registry other modules add their own families to (device pool, compiler, ...).
  prometheus::Registry& registry() { return *registry_; }
  std::shared_ptr<prometheus::Registry> shared_registry() { return registry_; }

  /// One finished RPC (`method` as gRPC names it, "/kiln.v1.ModelService/ListModels"):
  /// kiln_grpc_requests_total{grpc_service,grpc_method,code} and
  /// kiln_grpc_request_duration_seconds{grpc_service,grpc_method}.
  void ObserveRpc(const std::string& method, const std::string& code, double seconds);
  /// kiln_upload_bytes_total: bytes received by UploadModel (stored or not).
  void AddUploadBytes(uint64_t bytes) { upload_bytes_.Increment(static_cast<double>(bytes)); }
  /// kiln_model_store_models and kiln_model_store_bytes.
  void SetStore(size_t models, uint64_t bytes);
  /// kiln_read_streams: streams of stored bytes (ReadModel, GetJobResult) holding a slot of
  /// --max-read-streams now (server/stream_guard.h).
  void SetReadStreams(size_t streams) { read_streams_.Set(static_cast<double>(streams)); }
  /// The one place a refused request (or connection) is counted:
  /// kiln_rejected_requests_total{reason}. `reason` is a short fixed snake_case word naming the
  /// limit, never client text (labels are not escaped for cardinality): e.g.
  /// "connection_limit" (server/listener.h), "unauthenticated" (server/auth_interceptor.h),
  /// "upload_idle_timeout" (server/model_service.cc), "read_streams" and "stream_write_timeout"
  /// (server/stream_guard.h); the store's, scheduler's, job manager's and
  /// runs' reasons are listed at their on_refused (store/model_store.h, sched/scheduler.h,
  /// api/jobs.h, api/run_conv.h), wired in server/daemon.cc.
  void CountRejected(std::string_view reason);

  /// Starts serving GET /metrics on `address` ("host:port", port 0 = free port) with the
  /// per-client timeout and client cap of server/metrics_endpoint.h.
  /// Returns the bound "host:port". UNAVAILABLE when the address cannot be bound.
  Result<std::string> Serve(const std::string& address,
                            std::chrono::milliseconds client_timeout = std::chrono::seconds(5),
                            int max_clients = 32);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& durations_;
  prometheus::Counter& upload_bytes_;
  prometheus::Gauge& store_models_;
  prometheus::Gauge& store_bytes_;
  prometheus::Gauge& read_streams_;
  prometheus::Family<prometheus::Counter>& rejected_;
  std::unique_ptr<MetricsEndpoint> endpoint_;
};

}  // namespace kiln::server
