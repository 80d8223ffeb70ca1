// kiln.v1.CompileService: ai8x compiles of stored or inline models on a bounded executor.
#pragma once

#include <memory>

#include <prometheus/counter.h>
#include <prometheus/histogram.h>

#include "kiln/v1/compile.grpc.pb.h"
#include "server/bounded_executor.h"
#include "server/model_store.h"
#include "server/rpc_context.h"

namespace kiln::server {

struct CompileServiceOptions {
  size_t concurrency = 2;  ///< compiles running at once
  size_t queue = 16;       ///< compiles waiting; beyond that RESOURCE_EXHAUSTED
};

class CompileServiceImpl final : public kiln::v1::CompileService::CallbackService {
 public:
  CompileServiceImpl(ModelStore* store, ServiceEnv env, CompileServiceOptions options);
  ~CompileServiceImpl() override;

  grpc::ServerUnaryReactor* CompileAi8x(grpc::CallbackServerContext* context,
                                        const kiln::v1::CompileAi8xRequest* request,
                                        kiln::v1::CompileAi8xResponse* response) override;

 private:
  ModelStore* store_;
  ServiceEnv env_;
  prometheus::Family<prometheus::Histogram>& durations_;
  prometheus::Family<prometheus::Counter>& totals_;
  BoundedExecutor executor_;
};

}  // namespace kiln::server
