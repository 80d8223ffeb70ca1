// Client-side connection settings shared by every `kiln` subcommand.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace kiln::cli {

struct ClientOptions {
  std::string server = "127.0.0.1:50051";  ///< --server / KILN_SERVER
  std::string token;                        ///< --token / KILN_TOKEN: sent as "Bearer <token>"
  std::string tls_ca;                       ///< --tls-ca / KILN_TLS_CA: PEM roots; enables TLS
  double timeout_seconds = 0;               ///< per-RPC deadline; 0 = none
  /// Largest message sent or received (conv outputs can be large); --max-message-bytes.
  int max_message_bytes = 256 << 20;
};

/// Opens a channel to kilnd. INVALID_ARGUMENT when the CA file cannot be read.
Result<std::shared_ptr<grpc::Channel>> Connect(const ClientOptions& options);

/// Applies token and deadline to a new call context.
void Prepare(const ClientOptions& options, grpc::ClientContext* context);

/// "CODE: message" of a failed call.
std::string Describe(const grpc::Status& status);

}  // namespace kiln::cli
