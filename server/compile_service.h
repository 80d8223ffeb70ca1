// kiln.v1.CompileService: ai8x compiles of stored or inline models, each a job on the
// scheduler's compile lane (api/lanes.h). The reaction only authenticates and submits (and, when
// the store's index is in memory, answers a repeated compile from the cache).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/histogram.h>

#include <chrono>

#include "api/compile_cache.h"
#include "kiln/v1/compile.grpc.pb.h"
#include "sched/scheduler.h"
#include "server/rpc_context.h"
#include "store/model_store.h"

namespace kiln::server {

class CompileServiceImpl final : public kiln::v1::CompileService::CallbackService {
 public:
  /// `store` and `scheduler` must outlive the service. `cache_bytes`: the compile cache's budget
  /// (api/compile_cache.h; 0 = none).
  CompileServiceImpl(store::ModelStore* store, sched::Scheduler* scheduler, ServiceEnv env,
                     uint64_t cache_bytes = 0);

  grpc::ServerUnaryReactor* CompileAi8x(grpc::CallbackServerContext* context,
                                        const kiln::v1::CompileAi8xRequest* request,
                                        kiln::v1::CompileAi8xResponse* response) override;

 private:
  // The compile cache's answer for `key` (api::CompileCacheKey): true, and *response filled
  // (cache_hit, compile_seconds since `start`), on a hit.
  bool AnswerFromCache(const std::string& key, kiln::v1::CompileAi8xResponse* response,
                       std::chrono::steady_clock::time_point start);

  store::ModelStore* store_;
  sched::Scheduler* scheduler_;
  ServiceEnv env_;
  prometheus::Family<prometheus::Histogram>& durations_;
  prometheus::Family<prometheus::Counter>& totals_;
  api::CompileCache cache_;
  prometheus::Counter& cache_hits_;
  prometheus::Counter& cache_misses_;
};

}  // namespace kiln::server
