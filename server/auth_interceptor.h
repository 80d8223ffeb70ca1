// Bearer-token enforcement for services Kiln does not implement itself (server reflection).
// Kiln's own handlers check the token in RpcScope::Begin and answer UNAUTHENTICATED; gRPC's
// interceptor API cannot set a status before the handler runs, so for the others an
// unauthenticated call is cancelled right after its metadata arrives (the client sees CANCELLED
// and receives nothing). grpc.health.v1 is exempt, so probes need no token.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include "server/rpc_context.h"

namespace kiln::server {

class AuthInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit AuthInterceptorFactory(const Authenticator* auth) : auth_(auth) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  const Authenticator* auth_;
};

}  // namespace kiln::server
