#include "server/auth_interceptor.h"

#include <cstring>

namespace kiln::server {
namespace {

bool Exempt(std::string_view method) { return method.rfind("/grpc.health.v1.", 0) == 0; }

class AuthInterceptor : public grpc::experimental::Interceptor {
 public:
  AuthInterceptor(grpc::experimental::ServerRpcInfo* info, const Authenticator* auth, Metrics* metrics)
      : info_(info), auth_(auth), metrics_(metrics) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      if (!auth_->Check(*info_->server_context()).ok()) {
        if (metrics_) metrics_->CountRejected("unauthenticated");
        info_->server_context()->TryCancel();
      }
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ServerRpcInfo* info_;
  const Authenticator* auth_;
  Metrics* metrics_;
};

class TokenProcessor : public grpc::AuthMetadataProcessor {
 public:
  TokenProcessor(const Authenticator* auth, Metrics* metrics) : auth_(auth), metrics_(metrics) {}
  bool IsBlocking() const override { return false; }  // a comparison: run inline in the filter

  grpc::Status Process(const InputMetadata& md, grpc::AuthContext* /*context*/, OutputMetadata* /*consumed*/,
                       OutputMetadata* /*response*/) override {
    auto path = md.find(":path");
    if (path != md.end() && Exempt(std::string_view(path->second.data(), path->second.size()))) {
      return grpc::Status::OK;
    }
    auto it = md.find("authorization");
    grpc::Status st = auth_->CheckValue(it == md.end() ? nullptr : &it->second);
    if (!st.ok() && metrics_) metrics_->CountRejected("unauthenticated");
    return st;
  }

 private:
  const Authenticator* auth_;
  Metrics* metrics_;
};

}  // namespace

grpc::experimental::Interceptor* AuthInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  const char* method = info->method();
  if (!auth_->enabled() || method == nullptr ||
      std::strncmp(method, "/kiln.", 6) == 0 ||  // checked by the handlers, which answer UNAUTHENTICATED
      Exempt(method)) {
    return nullptr;
  }
  return new AuthInterceptor(info, auth_, metrics_);
}

std::shared_ptr<grpc::AuthMetadataProcessor> MakeTokenProcessor(const Authenticator* auth, Metrics* metrics) {
  return std::make_shared<TokenProcessor>(auth, metrics);
}

}  // namespace kiln::server
