// kilnd's composition root: opens the model store (embedded in the data dir, or shared on
// PostgreSQL when a database is configured: the one place that chooses), creates the scheduler (device lanes from
// --devices, CPU lanes from api/lanes.h), starts the metrics exposer and the gRPC server
// (callback services, grpc.health.v1, reflection) behind kilnd's own listener (server/listener.h),
// and drains them on shutdown. docs/security.md lists the limits set here.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

#include "common/status.h"
#include "sched/scheduler.h"
#include "server/compile_service.h"
#include "server/config.h"
#include "server/device_service.h"
#include "server/job_service.h"
#include "server/listener.h"
#include "server/metrics.h"
#include "server/model_service.h"
#include "server/rpc_context.h"
#include "server/stream_guard.h"
#include "store/job_store.h"
#include "store/model_store.h"
#include "store/pg/pg_store.h"

namespace kiln::server {

class Daemon {
 public:
  explicit Daemon(Config config);
  ~Daemon();

  /// Binds both listeners and starts serving. UNAVAILABLE when an address cannot be bound,
  /// INVALID_ARGUMENT for unreadable TLS files, FAILED_PRECONDITION for a bad store.
  Status Start();
  /// "host:port" actually bound (after Start).
  const std::string& grpc_address() const { return grpc_address_; }
  const std::string& metrics_address() const { return metrics_address_; }

  /// Graceful drain: health goes NOT_SERVING, open uploads end with UNAVAILABLE, in-flight unary
  /// RPCs get `shutdown_grace_seconds` to finish, then everything left is cancelled.
  void Shutdown();

 private:
  Status StartServices();

  Config config_;
  std::unique_ptr<Metrics> metrics_;
  // The farm's shared state (a database is configured), before the store that uses it.
  std::unique_ptr<store::pg::PgSharedState> shared_;
  std::unique_ptr<store::ModelStore> store_;
  std::unique_ptr<Authenticator> auth_;
  Drain drain_;
  std::unique_ptr<StreamGuard> streams_;  // before the services: their streams release slots in it
  std::unique_ptr<ModelServiceImpl> model_service_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  std::unique_ptr<CompileServiceImpl> compile_service_;
  std::unique_ptr<DeviceServiceImpl> device_service_;
  // After the scheduler: destroyed before it (its completions run on the scheduler's threads).
  std::unique_ptr<store::JobStore> job_store_;
  std::unique_ptr<api::JobManager> jobs_;
  std::unique_ptr<JobServiceImpl> job_service_;
  std::unique_ptr<ConnectionListener> listener_;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  std::unique_ptr<grpc::Server> server_;
  std::string grpc_address_;
  std::string metrics_address_;
};

}  // namespace kiln::server
