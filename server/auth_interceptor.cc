#include "server/auth_interceptor.h"

#include <cstring>

namespace kiln::server {
namespace {

class AuthInterceptor : public grpc::experimental::Interceptor {
 public:
  AuthInterceptor(grpc::experimental::ServerRpcInfo* info, const Authenticator* auth)
      : info_(info), auth_(auth) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      if (!auth_->Check(*info_->server_context()).ok()) info_->server_context()->TryCancel();
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ServerRpcInfo* info_;
  const Authenticator* auth_;
};

}  // namespace

grpc::experimental::Interceptor* AuthInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  const char* method = info->method();
  if (!auth_->enabled() || method == nullptr ||
      std::strncmp(method, "/kiln.", 6) == 0 ||               // checked by the handlers
      std::strncmp(method, "/grpc.health.v1.", 16) == 0) {    // probes need no token
    return nullptr;
  }
  return new AuthInterceptor(info, auth_);
}

}  // namespace kiln::server
