#include "server/metrics.h"

#include <dlfcn.h>


namespace kiln::server {

std::string RunningAllocator() {
  // mimalloc interposes malloc when the program links it (CMake kiln_link_allocator); its
  // mi_version() is then visible to a global lookup.
  using VersionFn = int (*)();
  auto fn = reinterpret_cast<VersionFn>(dlsym(RTLD_DEFAULT, "mi_version"));
  if (fn == nullptr) return "system";
  const int v = fn();  // e.g. 209 = 2.0.9
  return "mimalloc " + std::to_string(v / 100) + "." + std::to_string(v / 10 % 10) + "." + std::to_string(v % 10);
}

Metrics::Metrics(const std::string& version)
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(prometheus::BuildCounter()
                    .Name("kiln_grpc_requests_total")
                    .Help("gRPC requests handled, by service (kiln.v1.ModelService), method (ListModels) and status code")
                    .Register(*registry_)),
      durations_(prometheus::BuildHistogram()
                     .Name("kiln_grpc_request_duration_seconds")
                     .Help("gRPC request latency from start to final status, by service and method")
                     .Register(*registry_)),
      upload_bytes_(prometheus::BuildCounter()
                        .Name("kiln_upload_bytes_total")
                        .Help("Model bytes received by UploadModel, stored or not")
                        .Register(*registry_)
                        .Add({})),
      store_models_(prometheus::BuildGauge()
                        .Name("kiln_model_store_models")
                        .Help("Models in the model store")
                        .Register(*registry_)
                        .Add({})),
      store_bytes_(prometheus::BuildGauge()
                       .Name("kiln_model_store_bytes")
                       .Help("Bytes of model data in the model store")
                       .Register(*registry_)
                       .Add({})),
      read_streams_(prometheus::BuildGauge()
                        .Name("kiln_read_streams")
                        .Help("Streams of stored bytes (ReadModel, GetJobResult) open now, against --max-read-streams")
                        .Register(*registry_)
                        .Add({})),
      rejected_(prometheus::BuildCounter()
                    .Name("kiln_rejected_requests_total")
                    .Help("Requests and connections refused by a limit, by the limit (reason)")
                    .Register(*registry_)) {
  prometheus::BuildGauge()
      .Name("kiln_build_info")
      .Help("Always 1; the labels say which kilnd is running (version) with which malloc (allocator)")
      .Register(*registry_)
      .Add({{"version", version}, {"allocator", RunningAllocator()}})
      .Set(1);
}

std::pair<std::string, std::string> SplitGrpcMethod(std::string_view method) {
  if (!method.empty() && method.front() == '/') method.remove_prefix(1);
  const auto slash = method.rfind('/');
  if (slash == std::string_view::npos) return {"", std::string(method)};
  return {std::string(method.substr(0, slash)), std::string(method.substr(slash + 1))};
}

void Metrics::ObserveRpc(const std::string& method, const std::string& code, double seconds) {
  auto [service, name] = SplitGrpcMethod(method);
  requests_.Add({{"grpc_service", service}, {"grpc_method", name}, {"code", code}}).Increment();
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
  durations_.Add({{"grpc_service", service}, {"grpc_method", name}}, kBuckets).Observe(seconds);
}

void Metrics::SetStore(size_t models, uint64_t bytes) {
  store_models_.Set(static_cast<double>(models));
  store_bytes_.Set(static_cast<double>(bytes));
}

void Metrics::CountRejected(std::string_view reason) {
  rejected_.Add({{"reason", std::string(reason)}}).Increment();
}

Result<std::string> Metrics::Serve(const std::string& address, std::chrono::milliseconds client_timeout,
                                   int max_clients) {
  auto ep = MetricsEndpoint::Start({address, client_timeout, max_clients}, registry_);
  if (!ep.ok()) return ep.status();
  endpoint_ = std::move(ep).value();
  return endpoint_->address();
}

}  // namespace kiln::server
