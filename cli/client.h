// Client-side connection settings shared by every `kiln` subcommand.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace kiln::cli {

struct ClientOptions {
  std::string server = "127.0.0.1:50051";  ///< --server / KILN_SERVER
  std::string token;                        ///< ResolveToken's: sent as "Bearer <token>"
  std::string tls_ca;                       ///< --tls-ca / KILN_TLS_CA: PEM roots; enables TLS
  /// --tls-cert / KILN_TLS_CLIENT_CERT and --tls-key / KILN_TLS_CLIENT_KEY: this client's PEM
  /// certificate chain and key, for a kilnd started with --tls-client-ca (mutual TLS). Both or
  /// neither, and only with tls_ca. (Not KILN_TLS_CERT: that is kilnd's own certificate.)
  std::string tls_cert;
  std::string tls_key;
  double timeout_seconds = 0;               ///< per-RPC deadline; 0 = none
  /// Largest message sent or received (conv outputs can be large); --max-message-bytes.
  int max_message_bytes = 256 << 20;
};

/// The bearer token to send: --token (`flag`) if given, else the contents of --token-file (`file`),
/// else $KILN_TOKEN, else the contents of $KILN_TOKEN_FILE; "" = none. A token file's surrounding
/// whitespace (its trailing newline) is dropped. INVALID_ARGUMENT naming the file when it cannot be
/// read or holds no token.
Result<std::string> ResolveToken(const std::string& flag, const std::string& file);

/// Opens a channel to kilnd. INVALID_ARGUMENT when the CA, certificate or key file cannot be
/// read, or tls_cert/tls_key are given without each other or without tls_ca.
Result<std::shared_ptr<grpc::Channel>> Connect(const ClientOptions& options);

/// Applies token and deadline to a new call context.
void Prepare(const ClientOptions& options, grpc::ClientContext* context);

/// "CODE: message" of a failed call.
std::string Describe(const grpc::Status& status);

/// A fresh idempotency key, `prefix` then 32 random hex digits: a submit carries one so that the
/// retry policy (client.cc: SubmitRun / SubmitAdvise retried after the server's pushback) can never
/// make a second job.
std::string NewIdempotencyKey(const std::string& prefix);

/// One unary call: connect, build the stub, apply token and deadline, call `method`
/// (e.g. &kiln::v1::ModelService::Stub::GetModel). A channel that cannot be set up (unreadable
/// CA file) comes back as INVALID_ARGUMENT without contacting the server.
template <typename Stub, typename Request, typename Response>
grpc::Status CallUnary(const ClientOptions& options,
                       grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                       const Request& request, Response* response) {
  auto channel = Connect(options);
  if (!channel.ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, channel.status().message());
  }
  Stub stub(*channel);
  grpc::ClientContext ctx;
  Prepare(options, &ctx);
  return (stub.*method)(&ctx, request, response);
}

}  // namespace kiln::cli
