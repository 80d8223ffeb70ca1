// Mutual TLS end to end against the real kilnd and kiln binaries on loopback (docs/security.md,
// "Mutual TLS"): kilnd --tls-client-ca requires a client certificate its CA signed, the token still
// applies on top, and the certificate's identity is the principal that fairness and the per-client
// job quota count (server/rpc_context.h Principal) — x-kiln-client only splits it. Certificates are
// made at test time with `openssl` (scripts/install-deps.sh).
#include <sys/wait.h>

#include <chrono>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "kiln/v1/job.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "tests/server/kilnd_test_util.h"

namespace kiln::testing {
namespace {

const std::string kCases = std::string(KILN_TEST_DATA) + "/conv-cases/";

bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

int Shell(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

class MutualTls : public KilndTest {
 protected:
  void SetUp() override {
    KilndTest::SetUp();
    d_ = dir_.string() + "/";
  }
  // A self-signed CA: <name>.pem, <name>.key (`req -x509` marks it CA:TRUE).
  void MakeCa(const std::string& name) {
    ASSERT_EQ(Shell("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=" +
                    name + " -keyout " + d_ + name + ".key -out " + d_ + name + ".pem >/dev/null 2>&1"),
              0);
  }
  // A client certificate with CN=<name> signed by CA `ca`; `san` ("DNS:x") adds a subjectAltName,
  // which gRPC then reports as its identity instead of the CN.
  void MakeClient(const std::string& name, const std::string& ca, const std::string& san = "") {
    std::ofstream(d_ + "client.ext") << "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n"
                                     << (san.empty() ? "" : "subjectAltName=" + san + "\n");
    ASSERT_EQ(Shell("openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=" + name +
                    " -keyout " + d_ + name + ".key -out " + d_ + name + ".csr >/dev/null 2>&1"),
              0);
    ASSERT_EQ(Shell("openssl x509 -req -in " + d_ + name + ".csr -CA " + d_ + ca + ".pem -CAkey " + d_ + ca +
                    ".key -CAcreateserial -days 1 -extfile " + d_ + "client.ext -out " + d_ + name +
                    ".pem >/dev/null 2>&1"),
              0);
  }
  // kilnd's certificate (self-signed, for 127.0.0.1), the client CA with alice (CN only) and bob
  // (with a subjectAltName), and an unrelated CA with mallory.
  void MakeCertificates() {
    ASSERT_EQ(Shell("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
                    "-subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " + d_ +
                    "server.key -out " + d_ + "server.pem >/dev/null 2>&1"),
              0);
    MakeCa("clients-ca");
    MakeCa("other-ca");
    MakeClient("alice", "clients-ca");
    MakeClient("bob", "clients-ca", "DNS:bob.example");
    MakeClient("mallory", "other-ca");
  }
  std::unique_ptr<KilndProcess> StartMtls(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--tls-cert", d_ + "server.pem", "--tls-key", d_ + "server.key",
                                     "--tls-client-ca", d_ + "clients-ca.pem", "--token", "s3cret",
                                     "--log-level", "warn"};
    args.insert(args.end(), extra.begin(), extra.end());
    return StartKilnd(args);
  }
  // A TLS channel that verifies kilnd's certificate and presents `client`'s ("" = none).
  std::shared_ptr<grpc::Channel> Channel(const std::string& address, const std::string& client) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFileBytes(d_ + "server.pem");
    if (!client.empty()) {
      ssl.pem_cert_chain = ReadFileBytes(d_ + client + ".pem");
      ssl.pem_private_key = ReadFileBytes(d_ + client + ".key");
    }
    return grpc::CreateChannel(address, grpc::SslCredentials(ssl));
  }
  static grpc::Status Health(const std::shared_ptr<grpc::Channel>& channel) {
    auto stub = grpc::health::v1::Health::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::health::v1::HealthCheckResponse resp;
    return stub->Check(&ctx, {}, &resp);
  }
  static grpc::Status Submit(kiln::v1::JobService::Stub& jobs, const std::string& model, const std::string& sub_key,
                             kiln::v1::Job* job) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ctx.AddMetadata("authorization", "Bearer s3cret");
    if (!sub_key.empty()) ctx.AddMetadata("x-kiln-client", sub_key);
    kiln::v1::SubmitRunRequest req;
    req.mutable_run()->set_model_id(model);
    req.mutable_run()->set_backend("tt-emu");
    return jobs.SubmitRun(&ctx, req, job);
  }
  static kiln::v1::Job Get(kiln::v1::JobService::Stub& jobs, const std::string& id) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer s3cret");
    kiln::v1::GetJobRequest req;
    req.set_job_id(id);
    kiln::v1::Job job;
    EXPECT_TRUE(jobs.GetJob(&ctx, req, &job).ok());
    return job;
  }
  static void Cancel(kiln::v1::JobService::Stub& jobs, const std::string& id) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer s3cret");
    kiln::v1::CancelJobRequest req;
    req.set_job_id(id);
    kiln::v1::Job job;
    jobs.CancelJob(&ctx, req, &job);
  }
  // `[ENV] kiln ARGS` with stdout and stderr together.
  std::string Kiln(const std::string& env, const std::string& args, int* rc) {
    return RunShell(env + " " + KILN_BINARY + " " + args + " 2>&1", rc);
  }
  // Runs kilnd expecting it to refuse to start; its exit code, stderr in *err.
  int RunExpectingFailure(const std::string& args, std::string* err) {
    const std::string errfile = d_ + "refused.err";
    int rc = Shell("timeout 15 " + std::string(KILND_BINARY) + " --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 " +
                   "--data-dir " + d_ + "data2 " + args + " </dev/null >/dev/null 2>" + errfile);
    *err = ReadFileBytes(errfile);
    return rc;
  }

  std::string d_;  // dir_ with a trailing '/'
};

// Only a certificate from the client CA gets through the handshake; the token still applies; the
// certificate's identity is the principal: alice and bob each get their own
// --job-max-queued-per-client share, and alice's x-kiln-client cannot buy her more.
TEST_F(MutualTls, ClientCertificateIsRequiredAndIsThePrincipal) {
  MakeCertificates();
  auto k = StartMtls({"--devices", "tt-emu:1", "--job-max-queued-per-client", "1"});
  const std::string addr = k->grpc_address();
  // No certificate, or one from another CA: the handshake fails (health needs no token, so the
  // refusal is the transport's).
  EXPECT_EQ(Health(Channel(addr, "")).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Health(Channel(addr, "mallory")).error_code(), grpc::StatusCode::UNAVAILABLE);
  auto alice = Channel(addr, "alice"), bob = Channel(addr, "bob");
  ASSERT_TRUE(Health(alice).ok());

  auto models = kiln::v1::ModelService::NewStub(alice);
  kiln::v1::UploadModelResponse up;
  const std::string onnx = ReadFileBytes(kCases + "unet_small.onnx");
  EXPECT_EQ(UploadBytes(*models, "unet_small", onnx, &up).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_TRUE(UploadBytes(*models, "unet_small", onnx, &up, "s3cret").ok());
  const std::string model = up.model().model_id();

  auto alice_jobs = kiln::v1::JobService::NewStub(alice);
  auto bob_jobs = kiln::v1::JobService::NewStub(bob);
  std::vector<std::string> ids;
  kiln::v1::Job j;
  ASSERT_TRUE(Submit(*alice_jobs, model, "", &j).ok());
  ids.push_back(j.job_id());
  EXPECT_EQ(j.client(), "cert:alice");
  // Wait until it runs (it holds the only tt-emu worker); the next ones stay queued.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (Get(*alice_jobs, j.job_id()).state() == kiln::v1::QUEUED && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(Submit(*alice_jobs, model, "a", &j).ok());
  ids.push_back(j.job_id());
  EXPECT_TRUE(j.client().rfind("cert:alice", 0) == 0) << j.client();
  EXPECT_TRUE(Has(j.client(), "a")) << j.client();
  // Alice's share is used up: another sub-key does not help, nor does claiming bob's name.
  for (const std::string sub : {"b", "cert:bob"}) {
    grpc::Status st = Submit(*alice_jobs, model, sub, &j);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << sub;
    EXPECT_TRUE(Has(st.error_message(), "cert:alice")) << st.error_message();
  }
  // Bob has his own share.
  ASSERT_TRUE(Submit(*bob_jobs, model, "", &j).ok());
  ids.push_back(j.job_id());
  EXPECT_EQ(j.client(), "cert:bob.example");  // the subjectAltName, not the CN
  EXPECT_EQ(Submit(*bob_jobs, model, "x", &j).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  for (const auto& id : ids) Cancel(*alice_jobs, id);
  EXPECT_EQ(k->Stop(), 0);
}

// `kiln --tls-ca --tls-cert --tls-key` (and KILN_TLS_CLIENT_CERT / KILN_TLS_CLIENT_KEY) reach a
// mutual-TLS kilnd; without a certificate the call fails UNAVAILABLE; the job's client is the
// certificate's identity.
TEST_F(MutualTls, CliClientCertificate) {
  MakeCertificates();
  auto k = StartMtls({"--devices", "reference:1"});
  const std::string base = "--server " + k->grpc_address() + " --tls-ca " + d_ + "server.pem --token s3cret ";
  const std::string alice = "--tls-cert " + d_ + "alice.pem --tls-key " + d_ + "alice.key ";
  int rc = -1;
  std::string out = Kiln("", base + "models", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, "UNAVAILABLE")) << out;
  out = Kiln("", base + "--tls-cert " + d_ + "mallory.pem --tls-key " + d_ + "mallory.key models", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(Has(out, "UNAVAILABLE")) << out;
  out = Kiln("", base + alice + "run " + kCases + "conv_relu.onnx --backend reference --detach", &rc);
  ASSERT_EQ(rc, 0) << out;
  const std::string id = out.substr(out.rfind("j-"), out.find_first_of(" \n", out.rfind("j-")) - out.rfind("j-"));
  // bob, through the environment, sees alice's job under her certificate's name.
  out = Kiln("KILN_TLS_CLIENT_CERT=" + d_ + "bob.pem KILN_TLS_CLIENT_KEY=" + d_ + "bob.key", base + "job " + id, &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Has(out, "cert:alice")) << out;
  // A certificate without its key, or without --tls-ca, is refused before any call.
  out = Kiln("", "--server " + k->grpc_address() + " --tls-ca " + d_ + "server.pem --tls-cert " + d_ +
                     "alice.pem models", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_TRUE(Has(out, "--tls-cert and --tls-key must be given together")) << out;
  out = Kiln("", "--server " + k->grpc_address() + " " + alice + "models", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_TRUE(Has(out, "--tls-cert needs --tls-ca")) << out;
  EXPECT_EQ(k->Stop(), 0);
}

// --tls-client-ca without TLS is a configuration error; an unreadable or non-PEM CA file stops
// start-up with a message naming it, as a bad --tls-cert or --tls-key does.
TEST_F(MutualTls, ClientCaErrorsAreNamed) {
  MakeCertificates();
  std::string err;
  EXPECT_EQ(RunExpectingFailure("--tls-client-ca " + d_ + "clients-ca.pem", &err), 2) << err;
  EXPECT_TRUE(Has(err, "--tls-client-ca needs --tls-cert")) << err;
  const std::string tls = "--tls-cert " + d_ + "server.pem --tls-key " + d_ + "server.key ";
  EXPECT_EQ(RunExpectingFailure(tls + "--tls-client-ca " + d_ + "missing.pem", &err), 1) << err;
  EXPECT_TRUE(Has(err, "cannot read TLS client CA file")) << err;
  std::ofstream(d_ + "not-pem.pem") << "this is not a certificate\n";
  EXPECT_EQ(RunExpectingFailure(tls + "--tls-client-ca " + d_ + "not-pem.pem", &err), 1) << err;
  EXPECT_TRUE(Has(err, "holds no PEM certificate")) << err;
  // The YAML key is the flag's name with '_'.
  std::ofstream(d_ + "kilnd.yaml") << "tls_client_ca: " << d_ << "missing.pem\n";
  EXPECT_EQ(RunExpectingFailure(tls + "--config " + d_ + "kilnd.yaml", &err), 1) << err;
  EXPECT_TRUE(Has(err, "missing.pem")) << err;
}

}  // namespace
}  // namespace kiln::testing
