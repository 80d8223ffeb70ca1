#include "cli/client.h"

#include <chrono>
#include <fstream>
#include <sstream>

namespace kiln::cli {

Result<std::shared_ptr<grpc::Channel>> Connect(const ClientOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  // A full job queue answers RESOURCE_EXHAUSTED with the server's grpc-retry-pushback-ms: gRPC's
  // retry policy waits that long and submits again (`kiln run` always sends an idempotency key, so
  // a retry never makes a second job).
  args.SetServiceConfigJSON(R"({"methodConfig": [{
    "name": [{"service": "kiln.v1.JobService", "method": "SubmitRun"}],
    "retryPolicy": {"maxAttempts": 5, "initialBackoff": "1s", "maxBackoff": "30s", "backoffMultiplier": 2,
                    "retryableStatusCodes": ["RESOURCE_EXHAUSTED", "UNAVAILABLE"]}}]})");
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!options.tls_ca.empty()) {
    std::ifstream in(options.tls_ca, std::ios::binary);
    if (!in) return InvalidArgument("cannot read --tls-ca file '" + options.tls_ca + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ss.str();
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  return grpc::CreateCustomChannel(options.server, creds, args);
}

void Prepare(const ClientOptions& options, grpc::ClientContext* context) {
  if (!options.token.empty()) context->AddMetadata("authorization", "Bearer " + options.token);
  if (options.timeout_seconds > 0) {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(options.timeout_seconds * 1000)));
  }
}

std::string Describe(const grpc::Status& status) {
  return std::string(StatusCodeName(static_cast<StatusCode>(status.error_code()))) + ": " +
         status.error_message();
}

}  // namespace kiln::cli
