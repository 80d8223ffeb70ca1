#include "cli/client.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

namespace kiln::cli {
namespace {

Result<std::string> ReadTokenFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument(std::string("cannot read ") + what + " '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string token = ss.str();
  const char* space = " \t\r\n";
  token.erase(token.find_last_not_of(space) + 1);
  token.erase(0, token.find_first_not_of(space));
  if (token.empty()) return InvalidArgument(std::string(what) + " '" + path + "' holds no token");
  return token;
}

Result<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument(std::string("cannot read ") + flag + " file '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Result<std::string> ResolveToken(const std::string& flag, const std::string& file) {
  if (!flag.empty()) return flag;
  if (!file.empty()) return ReadTokenFile(file, "--token-file");
  if (const char* v = std::getenv("KILN_TOKEN"); v != nullptr && *v != '\0') return std::string(v);
  if (const char* v = std::getenv("KILN_TOKEN_FILE"); v != nullptr && *v != '\0') {
    return ReadTokenFile(v, "KILN_TOKEN_FILE");
  }
  return std::string();
}

Result<std::shared_ptr<grpc::Channel>> Connect(const ClientOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  // A full job queue answers RESOURCE_EXHAUSTED with the server's grpc-retry-pushback-ms: gRPC's
  // retry policy waits that long and submits again (`kiln run` and `kiln advise` always send an
  // idempotency key, so a retry never makes a second job). The streams of stored bytes answer
  // RESOURCE_EXHAUSTED the same way when --max-read-streams are open (server/stream_guard.h),
  // before any message, so gRPC may retry them too; they only read.
  args.SetServiceConfigJSON(R"({"methodConfig": [{
    "name": [{"service": "kiln.v1.JobService", "method": "SubmitRun"},
             {"service": "kiln.v1.JobService", "method": "SubmitAdvise"},
             {"service": "kiln.v1.JobService", "method": "GetJobResult"},
             {"service": "kiln.v1.ModelService", "method": "ReadModel"}],
    "retryPolicy": {"maxAttempts": 5, "initialBackoff": "1s", "maxBackoff": "30s", "backoffMultiplier": 2,
                    "retryableStatusCodes": ["RESOURCE_EXHAUSTED", "UNAVAILABLE"]}}]})");
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return InvalidArgument("--tls-cert and --tls-key must be given together");
  }
  if (!options.tls_cert.empty() && options.tls_ca.empty()) {
    return InvalidArgument("--tls-cert needs --tls-ca (the CA that signed kilnd's certificate)");
  }
  if (!options.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    auto ca = ReadPem(options.tls_ca, "--tls-ca");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    if (!options.tls_cert.empty()) {
      // Mutual TLS (kilnd --tls-client-ca): kilnd refuses the handshake unless this chain is signed
      // by its client CA; a bad pair shows as UNAVAILABLE at the first call.
      auto cert = ReadPem(options.tls_cert, "--tls-cert");
      if (!cert.ok()) return cert.status();
      auto key = ReadPem(options.tls_key, "--tls-key");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
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
  std::string out = std::string(StatusCodeName(static_cast<StatusCode>(status.error_code()))) + ": " +
                    status.error_message();
  // gRPC's own size refusals name no setting. Both ends check both directions: "Sent" is the
  // sender's limit, "Received" the receiver's.
  const std::string& m = status.error_message();
  if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    if (m.rfind("Sent message larger than max", 0) == 0) {
      out += " (the sender's --max-message-bytes, up to 2047 MiB: this kiln's for a request, kilnd's for an answer)";
    } else if (m.rfind("Received message larger than max", 0) == 0) {
      out += " (the receiver's --max-message-bytes, up to 2047 MiB: kilnd's for a request, this kiln's for an answer)";
    }
  }
  return out;
}

std::string NewIdempotencyKey(const std::string& prefix) {
  std::random_device rd;
  static const char kHex[] = "0123456789abcdef";
  std::string out = prefix;
  for (int i = 0; i < 32; ++i) out += kHex[rd() % 16];
  return out;
}

}  // namespace kiln::cli
