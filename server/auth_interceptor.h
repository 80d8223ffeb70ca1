// Where the bearer token is enforced, by transport:
//   * TLS: MakeTokenProcessor's AuthMetadataProcessor runs in gRPC's server auth filter when a
//     call's metadata arrives, before its body is read; an unauthenticated call ends with
//     UNAUTHENTICATED and none of its request bytes are buffered.
//   * Plaintext: gRPC 1.51 aborts on InsecureServerCredentials()->SetAuthMetadataProcessor, and a
//     server interceptor cannot set a status. Kiln's own handlers check the token first
//     (RpcScope::Begin) and answer UNAUTHENTICATED; for the services Kiln does not implement
//     (reflection) AuthInterceptorFactory cancels the call right after its metadata arrives (the
//     client sees CANCELLED and receives nothing). gRPC reads a unary request's body before any
//     of this runs, so on plaintext what unauthenticated calls can make kilnd hold is bounded by
//     --grpc-memory-bytes (the server ResourceQuota, daemon.cc), not by the token.
// grpc.health.v1 is exempt everywhere, so probes need no token. Refusals are counted as
// kiln_rejected_requests_total{reason="unauthenticated"}.
#pragma once

#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/support/server_interceptor.h>

#include <memory>

#include "server/metrics.h"
#include "server/rpc_context.h"

namespace kiln::server {

class AuthInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  AuthInterceptorFactory(const Authenticator* auth, Metrics* metrics) : auth_(auth), metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  const Authenticator* auth_;
  Metrics* metrics_;
};

/// The TLS-only token check (see above). `auth` and `metrics` must outlive the server.
std::shared_ptr<grpc::AuthMetadataProcessor> MakeTokenProcessor(const Authenticator* auth, Metrics* metrics);

}  // namespace kiln::server
