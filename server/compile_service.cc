#include "server/compile_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "server/ai8x_job.h"

namespace kiln::server {

CompileServiceImpl::CompileServiceImpl(ModelStore* store, ServiceEnv env,
                                       CompileServiceOptions options)
    : store_(store),
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
      executor_(options.concurrency, options.queue) {}

CompileServiceImpl::~CompileServiceImpl() { executor_.Join(); }

grpc::ServerUnaryReactor* CompileServiceImpl::CompileAi8x(
    grpc::CallbackServerContext* context, const kiln::v1::CompileAi8xRequest* request,
    kiln::v1::CompileAi8xResponse* response) {
  auto* reactor = context->DefaultReactor();
  auto scope = std::make_shared<RpcScope>(env_, *context, "/kiln.v1.CompileService/CompileAi8x");
  grpc::Status st = scope->Begin(*context);
  if (!st.ok()) {
    reactor->Finish(scope->Done(st));
    return reactor;
  }
  // The job computes the reply; the continuation it returns sends it once the slot is free.
  auto job = [this, context, request, response, reactor, scope]() -> std::function<void()> {
    auto finish = [reactor, scope](grpc::Status status) -> std::function<void()> {
      return [reactor, scope, status] { reactor->Finish(scope->Done(status)); };
    };
    if (context->IsCancelled()) {
      return finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled before start"));
    }
    auto start = std::chrono::steady_clock::now();
    std::string bytes;
    std::string name;
    if (request->model_case() == kiln::v1::CompileAi8xRequest::kModelBytes) {
      bytes = request->model_bytes();
      name = "inline";
    } else {
      auto reader = store_->OpenReader(request->model_id());
      auto info = store_->Get(request->model_id());
      if (!reader.ok() || !info.ok()) {
        totals_.Add({{"target", "ai8x"}, {"result", "invalid"}}).Increment();
        return finish(ToGrpc(reader.ok() ? info.status() : reader.status()));
      }
      auto all = (*reader)->ReadAll();
      if (!all.ok()) return finish(ToGrpc(all.status()));
      bytes = std::move(all).value();
      // Compiled by one of its names: that name (the default arch); by id: its first name.
      const auto& names = info->names;
      if (std::find(names.begin(), names.end(), request->model_id()) != names.end()) {
        name = request->model_id();
      } else {
        name = names.empty() ? info->model_id.substr(0, 12) : names.front();
      }
    }
    if (bytes.empty()) {
      return finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "request names no model: set model_id or model_bytes"));
    }
    scope->AddBytes(bytes.size());
    Result<kiln::v1::CompileAi8xResponse> result = Internal("compile did not run");
    try {
      result = CompileAi8xBytes(bytes, name, request->options());
    } catch (const std::exception& e) {
      // A compiler bug must fail this request only, never the server.
      spdlog::error("compile of model '{}' threw: {}", name, e.what());
      result = Internal(std::string("compiler failure on model '") + name + "': " + e.what());
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    durations_.Add({{"target", "ai8x"}}, prometheus::Histogram::BucketBoundaries{
                                             0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                             0.5, 1, 2.5, 5, 10, 30})
        .Observe(seconds);
    if (!result.ok()) {
      totals_.Add({{"target", "ai8x"}, {"result", "invalid"}}).Increment();
      return finish(ToGrpc(result.status()));
    }
    *response = std::move(result).value();
    totals_.Add({{"target", "ai8x"}, {"result", response->ok() ? "ok" : "rule_errors"}}).Increment();
    return finish(grpc::Status::OK);
  };
  if (!executor_.Submit(job)) {
    totals_.Add({{"target", "ai8x"}, {"result", "rejected"}}).Increment();
    reactor->Finish(scope->Done(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        "compile queue full (" + std::to_string(executor_.capacity()) +
            " compiles admitted); retry in a few seconds")));
  }
  return reactor;
}

}  // namespace kiln::server
