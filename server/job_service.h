// kiln.v1.JobService (proto/kiln/v1/job.proto): thin adapters over api::JobManager (api/jobs.h).
// Unary calls run their store work on the scheduler's store lane (SQLite commits fsync); the two
// server streams write from the reactor and from the manager's notifications: WatchJob reads
// each page of events (at most 64, a short indexed SQLite read) when the previous write is done
// or a new event arrives; GetJobResult reads output files 1 MiB at a time, like ReadModel.
#pragma once

#include <string>

#include "api/jobs.h"
#include "kiln/v1/job.grpc.pb.h"
#include "server/rpc_context.h"

namespace kiln::server {

class JobServiceImpl final : public kiln::v1::JobService::CallbackService {
 public:
  /// `jobs` must outlive the service (embedded, or a farm's replica: api/jobs.h).
  JobServiceImpl(api::JobManager* jobs, ServiceEnv env) : jobs_(jobs), env_(env) {}

  grpc::ServerUnaryReactor* SubmitRun(grpc::CallbackServerContext* context, const kiln::v1::SubmitRunRequest* request,
                                      kiln::v1::Job* response) override;
  grpc::ServerUnaryReactor* SubmitAdvise(grpc::CallbackServerContext* context,
                                         const kiln::v1::SubmitAdviseRequest* request,
                                         kiln::v1::Job* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context, const kiln::v1::GetJobRequest* request,
                                   kiln::v1::Job* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context, const kiln::v1::ListJobsRequest* request,
                                     kiln::v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context, const kiln::v1::CancelJobRequest* request,
                                      kiln::v1::Job* response) override;
  grpc::ServerWriteReactor<kiln::v1::JobEvent>* WatchJob(grpc::CallbackServerContext* context,
                                                         const kiln::v1::WatchJobRequest* request) override;
  grpc::ServerWriteReactor<kiln::v1::JobResultChunk>* GetJobResult(
      grpc::CallbackServerContext* context, const kiln::v1::GetJobResultRequest* request) override;

 private:
  class WatchReactor;
  class ResultReactor;
  // Runs `work` on the store lane, then finishes `reactor` with its status.
  void OnStoreLane(grpc::CallbackServerContext& context, grpc::ServerUnaryReactor* reactor,
                   std::shared_ptr<RpcScope> scope, std::function<Status(int64_t* retry_after_ms)> work);
  // A stream's store read: `read` on the store lane, then `done` with its status on the lane's
  // completion thread (never the reactor: a farm's store is a database round trip away). A
  // refused submission (the lane is full) calls `done` at once with that status.
  void ReadOnStoreLane(const std::string& client, std::function<Status()> read, std::function<void(const Status&)> done);

  api::JobManager* jobs_;
  ServiceEnv env_;
};

}  // namespace kiln::server
