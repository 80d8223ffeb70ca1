#include "server/compile_service.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "api/compile_ai8x.h"
#include "api/lanes.h"
#include "api/models.h"
#include "common/reactor.h"
#include "common/sha256.h"

namespace kiln::server {

CompileServiceImpl::CompileServiceImpl(store::ModelStore* store, sched::Scheduler* scheduler, ServiceEnv env,
                                       uint64_t cache_bytes)
    : store_(store),
      scheduler_(scheduler),
      env_(env),
      durations_(prometheus::BuildHistogram()
                     .Name("kiln_compile_duration_seconds")
                     .Help("Wall time of one compile (load + passes + emission), by target")
                     .Register(env.metrics->registry())),
      totals_(prometheus::BuildCounter()
                  .Name("kiln_compile_total")
                  .Help("Compiles finished, by target and result (ok, rule_errors, invalid, "
                        "rejected)")
                  .Register(env.metrics->registry())),
      cache_(cache_bytes),
      cache_hits_(prometheus::BuildCounter()
                      .Name("kiln_compile_cache_hits_total")
                      .Help("CompileAi8x answers served from the compile cache (--compile-cache-bytes)")
                      .Register(env.metrics->registry())
                      .Add({})),
      cache_misses_(prometheus::BuildCounter()
                        .Name("kiln_compile_cache_misses_total")
                        .Help("CompileAi8x calls the compile cache could not answer (compiled, then kept)")
                        .Register(env.metrics->registry())
                        .Add({})) {}

bool CompileServiceImpl::AnswerFromCache(const std::string& key, kiln::v1::CompileAi8xResponse* response,
                                         std::chrono::steady_clock::time_point start) {
  auto hit = cache_.Get(key);
  if (hit == nullptr) return false;
  cache_hits_.Increment();
  *response = *hit;
  response->set_cache_hit(true);
  response->set_compile_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return true;
}

grpc::ServerUnaryReactor* CompileServiceImpl::CompileAi8x(grpc::CallbackServerContext* context,
                                                          const kiln::v1::CompileAi8xRequest* request,
                                                          kiln::v1::CompileAi8xResponse* response) {
  ReactorScope on_reactor;
  auto* reactor = context->DefaultReactor();
  auto scope = std::make_shared<RpcScope>(env_, *context, "/kiln.v1.CompileService/CompileAi8x");
  grpc::Status st = scope->Begin(*context);
  if (!st.ok()) {
    reactor->Finish(scope->Done(st));
    return reactor;
  }
  auto count = [this](const char* result) { totals_.Add({{"target", "ai8x"}, {"result", result}}).Increment(); };
  // A stored model's id is its sha256 (store/model_store.h), so a repeated compile is answered
  // here, from the cache, without a job: no read, no hash, no load, no compile.
  // The model reference is resolved once, here (a short id prefix becomes the id:
  // api/models.h ResolveModelRef); the job reads by what it resolved to.
  // With a store whose reads block (a shared store's database: store::ModelStore::reads_block),
  // the lookup and the cache check run in the job instead, off the reactor.
  std::string ref;
  const bool resolve_in_job = store_->reads_block();
  if (request->model_case() == kiln::v1::CompileAi8xRequest::kModelId && !resolve_in_job) {
    auto resolved = api::ResolveModelRef(*store_, request->model_id());
    if (!resolved.ok()) {
      count("invalid");
      reactor->Finish(scope->Done(ToGrpc(resolved.status())));
      return reactor;
    }
    ref = std::move(resolved).value();
    const auto start = std::chrono::steady_clock::now();
    auto info = store_->Get(ref);
    if (info.ok() &&
        AnswerFromCache(api::CompileCacheKey(info->model_id, api::CompileModelName(*info, ref), request->options()),
                        response, start)) {
      count(response->ok() ? "ok" : "rule_errors");
      reactor->Finish(scope->Done(grpc::Status::OK));
      return reactor;
    }
  }
  sched::JobRequest job;
  job.lane = api::kCompileLane;
  job.client_id = ClientId(*context);
  if (request->model_case() == kiln::v1::CompileAi8xRequest::kModelBytes) {
    job.cost_bytes = static_cast<int64_t>(request->model_bytes().size());
  }
  job.task = [this, context, request, response, scope, count, ref, resolve_in_job](sched::JobContext&) mutable -> Status {
    if (context->IsCancelled()) return Cancelled("cancelled before start");
    auto start = std::chrono::steady_clock::now();
    std::string bytes;
    std::string name;
    std::string sha;  // the cache key's model hash
    if (request->model_case() == kiln::v1::CompileAi8xRequest::kModelBytes) {
      bytes = request->model_bytes();
      name = "inline";
      sha = Sha256Hex(bytes);
    } else {
      // One lookup: the reader carries the metadata of the model whose bytes it reads. Resolved
      // here (resolve_in_job): an id or a name is opened as it is, and only a reference that
      // names nothing is resolved as an id prefix (api/models.h ResolveModelRef's order), so a
      // compile costs the shared store one index query.
      if (resolve_in_job) ref = request->model_id();
      auto reader = store_->OpenReader(ref);
      if (resolve_in_job && !reader.ok() && reader.status().code() == StatusCode::kNotFound) {
        auto resolved = api::ResolveModelRef(*store_, ref);
        if (!resolved.ok()) {
          count("invalid");
          return resolved.status();
        }
        ref = std::move(resolved).value();
        reader = store_->OpenReader(ref);
      }
      if (!reader.ok()) {
        count("invalid");
        return reader.status();
      }
      if (resolve_in_job) {  // the cache check the reaction makes for an in-memory index
        if (AnswerFromCache(api::CompileCacheKey((*reader)->model_id(), api::CompileModelName((*reader)->info(), ref),
                                                 request->options()),
                            response, start)) {
          count(response->ok() ? "ok" : "rule_errors");
          return Status::Ok();
        }
      }
      auto all = (*reader)->ReadAll();
      if (!all.ok()) return all.status();
      bytes = std::move(all).value();
      name = api::CompileModelName((*reader)->info(), ref);
      sha = (*reader)->model_id();  // the reader verified the bytes against it
    }
    if (bytes.empty()) return InvalidArgument("request names no model: set model_id or model_bytes");
    scope->AddBytes(bytes.size());
    std::string key = api::CompileCacheKey(sha, name, request->options());
    if (AnswerFromCache(key, response, start)) {  // inline bytes seen before
      count(response->ok() ? "ok" : "rule_errors");
      return Status::Ok();
    }
    cache_misses_.Increment();
    Result<kiln::v1::CompileAi8xResponse> result = Internal("compile did not run");
    try {
      result = api::CompileAi8x(bytes, name, request->options(), sha);
    } catch (const std::exception& e) {
      // A compiler bug must fail this request only, never the server.
      spdlog::error("compile of model '{}' threw: {}", name, e.what());
      result = Internal(std::string("compiler failure on model '") + name + "': " + e.what());
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    durations_
        .Add({{"target", "ai8x"}}, prometheus::Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                                          0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30})
        .Observe(seconds);
    if (!result.ok()) {
      count("invalid");
      return result.status();
    }
    *response = std::move(result).value();
    cache_.Put(key, *response);
    count(response->ok() ? "ok" : "rule_errors");
    return Status::Ok();
  };
  auto handle = scheduler_->Submit(std::move(job));
  if (!handle.ok()) {
    count("rejected");
    AddRetryPushback(*context, handle.status(), *scheduler_, api::kCompileLane);
    reactor->Finish(scope->Done(ToGrpc(handle.status())));
    return reactor;
  }
  // Runs once the worker is free again: a client that sends its next request as soon as it has
  // the answer finds a free slot.
  (*handle)->OnDone([reactor, scope](const Status& status) { reactor->Finish(scope->Done(ToGrpc(status))); });
  return reactor;
}

}  // namespace kiln::server
