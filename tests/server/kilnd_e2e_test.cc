// End-to-end tests of the real kilnd binary on 127.0.0.1 with ephemeral ports.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>
#include <sstream>
#include <thread>

#include "common/sha256.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "kiln/v1/compile.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "tests/server/kilnd_process.h"
#include "tests/server/kilnd_test_util.h"
#include "tests/server/onnx_bytes.h"

namespace fs = std::filesystem;

namespace kiln::testing {
namespace {

using kiln::v1::ModelService;

class KilndE2E : public KilndTest {
 protected:
  std::unique_ptr<KilndProcess> Start(std::vector<std::string> extra = {}) { return StartKilnd(extra); }

  static std::shared_ptr<grpc::Channel> Channel(const KilndProcess& k) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    return grpc::CreateCustomChannel(k.grpc_address(), grpc::InsecureChannelCredentials(), args);
  }

  static grpc::Status Upload(ModelService::Stub& stub, const std::string& name,
                             const std::string& bytes, kiln::v1::UploadModelResponse* resp,
                             const std::string& token = "") {
    return UploadBytes(stub, name, bytes, resp, token);
  }

  static std::string ReadBack(ModelService::Stub& stub, const std::string& id) {
    grpc::ClientContext ctx;
    kiln::v1::ReadModelRequest req;
    req.set_model_id(id);
    auto reader = stub.ReadModel(&ctx, req);
    kiln::v1::ReadModelResponse resp;
    std::string out;
    while (reader->Read(&resp)) out += resp.chunk();
    EXPECT_TRUE(reader->Finish().ok());
    return out;
  }

  static std::map<std::string, double> Scrape(const KilndProcess& k) {
    return ScrapeMetrics(k.metrics_address());
  }
};

TEST_F(KilndE2E, UploadTwentyMiBReadBackAndSurviveRestart) {
  std::string bytes = MakeOnnxBytes(20 << 20);
  std::string id;
  {
    auto k = Start();
    auto stub = ModelService::NewStub(Channel(*k));
    kiln::v1::UploadModelResponse resp;
    grpc::Status st = Upload(*stub, "big", bytes, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    id = resp.model().model_id();
    EXPECT_EQ(id, Sha256Hex(bytes));
    EXPECT_EQ(resp.model().size_bytes(), bytes.size());
    EXPECT_EQ(ReadBack(*stub, id), bytes);
    EXPECT_EQ(k->Stop(), 0);
  }
  auto k = Start();
  auto stub = ModelService::NewStub(Channel(*k));
  grpc::ClientContext ctx;
  kiln::v1::ListModelsResponse list;
  ASSERT_TRUE(stub->ListModels(&ctx, {}, &list).ok());
  ASSERT_EQ(list.models_size(), 1);
  EXPECT_EQ(list.models(0).model_id(), id);
  EXPECT_EQ(list.models(0).names(0), "big");
  EXPECT_EQ(ReadBack(*stub, "big"), bytes);
  // Small models also come back inline from GetModel.
  std::string small = MakeOnnxBytes(1000, 3);
  kiln::v1::UploadModelResponse resp;
  ASSERT_TRUE(Upload(*stub, "small", small, &resp).ok());
  grpc::ClientContext gctx;
  kiln::v1::GetModelRequest greq;
  greq.set_model_id("small");
  greq.set_include_bytes(true);
  kiln::v1::GetModelResponse gresp;
  ASSERT_TRUE(stub->GetModel(&gctx, greq, &gresp).ok());
  EXPECT_EQ(gresp.model_bytes(), small);
  EXPECT_EQ(gresp.model().opset(), 13);
  EXPECT_EQ(k->Stop(), 0);
}

TEST_F(KilndE2E, BadUploadsGetClearErrors) {
  auto k = Start({"--max-model-bytes", "100000"});
  auto stub = ModelService::NewStub(Channel(*k));
  kiln::v1::UploadModelResponse resp;
  grpc::Status st = Upload(*stub, "junk", std::string(5000, 'j'), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("not an ONNX model"), std::string::npos) << st.error_message();
  st = Upload(*stub, "huge", MakeOnnxBytes(200000), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("max_model_bytes"), std::string::npos);
  grpc::ClientContext ctx;
  kiln::v1::GetModelRequest req;
  req.set_model_id("nope");
  kiln::v1::GetModelResponse gresp;
  EXPECT_EQ(stub->GetModel(&ctx, req, &gresp).error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::ClientContext lctx;
  kiln::v1::ListModelsResponse list;
  ASSERT_TRUE(stub->ListModels(&lctx, {}, &list).ok());
  EXPECT_EQ(list.models_size(), 0);
  EXPECT_EQ(k->Stop(), 0);
}

// Each refusal for a limit is counted once under its reason (store: server/daemon.cc wires
// store/model_store.h on_refused into kiln_rejected_requests_total).
TEST_F(KilndE2E, RefusedUploadsAreCountedByReason) {
  auto k = Start({"--max-model-bytes", "100000", "--max-store-bytes", "120000"});
  auto stub = ModelService::NewStub(Channel(*k));
  kiln::v1::UploadModelResponse resp;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(Upload(*stub, "huge", MakeOnnxBytes(200000), &resp).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  const std::string a = MakeOnnxBytes(80000, 1), b = MakeOnnxBytes(80000, 2);
  ASSERT_LT(a.size(), 100000u);
  ASSERT_NE(a, b);
  grpc::Status st = Upload(*stub, "a", a, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  st = Upload(*stub, "b", b, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("max_store_bytes"), std::string::npos) << st.error_message();
  auto m = Scrape(*k);
  EXPECT_EQ(m["kiln_rejected_requests_total{reason=\"model_too_large\"}"], 2);
  EXPECT_EQ(m["kiln_rejected_requests_total{reason=\"store_full\"}"], 1);
  double total = 0;
  for (const auto& [key, v] : m) {
    if (key.rfind("kiln_rejected_requests_total{", 0) == 0) total += v;
  }
  EXPECT_EQ(total, 3);
  EXPECT_EQ(k->Stop(), 0);
}

TEST_F(KilndE2E, TokenAuthentication) {
  auto k = Start({"--token", "s3cret"});
  auto channel = Channel(*k);
  auto stub = ModelService::NewStub(channel);
  std::string bytes = MakeOnnxBytes(1000);
  kiln::v1::UploadModelResponse resp;
  EXPECT_EQ(Upload(*stub, "m", bytes, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Upload(*stub, "m", bytes, &resp, "wrong").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Upload(*stub, "m", bytes, &resp, "s3cret").ok());
  {
    grpc::ClientContext ctx;
    kiln::v1::ListModelsResponse list;
    EXPECT_EQ(stub->ListModels(&ctx, {}, &list).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer s3cret");
    kiln::v1::ListModelsResponse list;
    ASSERT_TRUE(stub->ListModels(&ctx, {}, &list).ok());
    EXPECT_EQ(list.models_size(), 1);
  }
  // Server reflection is guarded too: without the token the call is cut off, with it the
  // services are listed.
  auto list_services = [&](const std::string& token, std::vector<std::string>* names) {
    auto refl = grpc::reflection::v1alpha::ServerReflection::NewStub(channel);
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    auto stream = refl->ServerReflectionInfo(&ctx);
    grpc::reflection::v1alpha::ServerReflectionRequest req;
    req.set_list_services("");
    stream->Write(req);
    stream->WritesDone();
    grpc::reflection::v1alpha::ServerReflectionResponse resp;
    while (stream->Read(&resp)) {
      for (const auto& s : resp.list_services_response().service()) names->push_back(s.name());
    }
    return stream->Finish();
  };
  std::vector<std::string> names;
  EXPECT_FALSE(list_services("", &names).ok());
  EXPECT_TRUE(names.empty());
  ASSERT_TRUE(list_services("s3cret", &names).ok());
  EXPECT_NE(std::find(names.begin(), names.end(), "kiln.v1.ModelService"), names.end());
  // Health needs no token.
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext hctx;
  grpc::health::v1::HealthCheckResponse hresp;
  ASSERT_TRUE(health->Check(&hctx, {}, &hresp).ok());
  EXPECT_EQ(hresp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(k->Stop(), 0);
}

TEST_F(KilndE2E, TlsWithSelfSignedCertificate) {
  std::string cert = (dir_ / "cert.pem").string(), key = (dir_ / "key.pem").string();
  std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
                    "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " + key +
                    " -out " + cert + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto k = Start({"--tls-cert", cert, "--tls-key", key});
  std::ifstream in(cert);
  std::stringstream pem;
  pem << in.rdbuf();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.str();
  auto channel = grpc::CreateChannel(k->grpc_address(), grpc::SslCredentials(ssl));
  auto stub = ModelService::NewStub(channel);
  kiln::v1::UploadModelResponse resp;
  std::string bytes = MakeOnnxBytes(3000);
  grpc::Status st = Upload(*stub, "tls", bytes, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.model().model_id(), Sha256Hex(bytes));
  // A plaintext client cannot talk to the TLS port.
  auto plain = ModelService::NewStub(Channel(*k));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  kiln::v1::ListModelsResponse list;
  EXPECT_FALSE(plain->ListModels(&ctx, {}, &list).ok());
  EXPECT_EQ(k->Stop(), 0);
}

TEST_F(KilndE2E, MetricsCountersRise) {
  auto k = Start();
  auto before = Scrape(*k);
  ASSERT_FALSE(before.empty());
  // kilnd is linked with mimalloc unless configured without (top-level CMakeLists.txt); the label
  // says whether mimalloc really interposes malloc in the running server.
  std::string build_info;
  for (const auto& [key, value] : before) {
    if (key.rfind("kiln_build_info{", 0) == 0) build_info = key;
  }
  const std::string allocator = KILN_EXPECT_MIMALLOC ? "allocator=\"mimalloc 2." : "allocator=\"system\"";
  EXPECT_EQ(build_info.rfind("kiln_build_info{" + allocator, 0), 0u) << build_info;
  EXPECT_NE(build_info.find(",version=\"" KILN_VERSION "\"}"), std::string::npos) << build_info;
  EXPECT_EQ(before[build_info], 1) << build_info;
  EXPECT_EQ(before["kiln_model_store_models"], 0);
  auto stub = ModelService::NewStub(Channel(*k));
  std::string bytes = MakeOnnxBytes(50000);
  kiln::v1::UploadModelResponse resp;
  ASSERT_TRUE(Upload(*stub, "m", bytes, &resp).ok());
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext ctx;
    kiln::v1::ListModelsResponse list;
    ASSERT_TRUE(stub->ListModels(&ctx, {}, &list).ok());
  }
  auto after = Scrape(*k);
  // grpc_service and grpc_method, split from gRPC's "/kiln.v1.ModelService/ListModels".
  const std::string list_ok =
      "kiln_grpc_requests_total{code=\"OK\",grpc_method=\"ListModels\",grpc_service=\"kiln.v1.ModelService\"}";
  EXPECT_EQ(after[list_ok] - before[list_ok], 3);
  EXPECT_EQ(after["kiln_grpc_requests_total{code=\"OK\",grpc_method=\"UploadModel\",grpc_service=\"kiln.v1.ModelService\"}"], 1);
  EXPECT_EQ(after["kiln_upload_bytes_total"], static_cast<double>(bytes.size()));
  EXPECT_EQ(after["kiln_model_store_models"], 1);
  EXPECT_EQ(after["kiln_model_store_bytes"], static_cast<double>(bytes.size()));
  EXPECT_EQ(after["kiln_grpc_request_duration_seconds_count{grpc_method=\"ListModels\",grpc_service=\"kiln.v1.ModelService\"}"], 3);
  for (const auto& [key, value] : after) {
    EXPECT_NE(key.rfind("exposer_", 0), 0u) << key;  // our own endpoint: no prometheus-cpp Exposer series
    EXPECT_EQ(key.find("method=\"/"), std::string::npos) << key;
  }
  EXPECT_EQ(k->Stop(), 0);
}

// The standard process_* series, read from /proc/self of the running kilnd.
TEST_F(KilndE2E, MetricsProcessSeries) {
  const double started = static_cast<double>(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  auto k = Start();
  auto m = Scrape(*k);
  for (const char* name : {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
                           "process_open_fds", "process_max_fds", "process_start_time_seconds"}) {
    EXPECT_EQ(m.count(name), 1u) << name;
  }
  // Start time: this second or the next (the clock-tick rounding of /proc/self/stat aside).
  EXPECT_GE(m["process_start_time_seconds"], started - 2);
  EXPECT_LE(m["process_start_time_seconds"], started + 20);
  // kilnd holds its listeners, the store and gRPC's pipes; the limit is RLIMIT_NOFILE's soft value.
  int fds = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/" + std::to_string(k->pid()) + "/fd")) ++fds;
  EXPECT_GT(m["process_open_fds"], 5);
  EXPECT_NEAR(m["process_open_fds"], fds, 8);
  EXPECT_GT(m["process_max_fds"], m["process_open_fds"]);
  EXPECT_GT(m["process_resident_memory_bytes"], 1 << 20);
  EXPECT_GE(m["process_virtual_memory_bytes"], m["process_resident_memory_bytes"]);
  EXPECT_GE(m["process_cpu_seconds_total"], 0);
  // The text format's TYPE lines say counter / gauge.
  const std::string text = HttpGet(k->metrics_address(), "/metrics");
  EXPECT_NE(text.find("# TYPE process_cpu_seconds_total counter"), std::string::npos);
  EXPECT_NE(text.find("# TYPE process_open_fds gauge"), std::string::npos);
  EXPECT_EQ(k->Stop(), 0);
}

// SIGTERM while clients that stopped reading (stopped processes: their sockets fill) hold model
// downloads: the calls are cancelled after the grace, and kilnd exits instead of waiting on their
// full sockets (a stopped curl once held its exit for 12 minutes).
TEST_F(KilndE2E, SigtermWithStoppedReadersExits) {
  const std::string bytes = MakeOnnxBytes(24 << 20, 9);
  auto k = Start();  // a grace of 2 s (StartKilnd)
  auto stub = ModelService::NewStub(Channel(*k));
  kiln::v1::UploadModelResponse resp;
  ASSERT_TRUE(Upload(*stub, "big", bytes, &resp).ok());
  // A ReadModel request as a gRPC frame (uncompressed flag, big-endian length, message), sent by
  // curl over cleartext HTTP/2.
  kiln::v1::ReadModelRequest req;
  req.set_model_id(resp.model().model_id());
  const std::string msg = req.SerializeAsString();
  std::string frame(5, '\0');
  frame[4] = static_cast<char>(msg.size());
  frame += msg;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("kiln_stopped_readers_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "req.bin", std::ios::binary) << frame;
  std::vector<pid_t> readers;
  for (int i = 0; i < 4; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::string url = "http://" + k->grpc_address() + "/kiln.v1.ModelService/ReadModel";
      const std::string data = "@" + (dir / "req.bin").string();
      execlp("curl", "curl", "-s", "--limit-rate", "2M", "--http2-prior-knowledge", "-X", "POST", "-H", "content-type: application/grpc",
             "-H", "te: trailers", "--data-binary", data.c_str(), "-o", "/dev/null", url.c_str(),
             static_cast<char*>(nullptr));
      _exit(127);
    }
    readers.push_back(pid);
  }
  // Let the downloads start (at 2 MB/s each: 12 s for the whole model), then stop the clients
  // mid-stream; the server's writes then fill their sockets.
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  for (pid_t p : readers) kill(p, SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = k->Stop(SIGTERM, std::chrono::seconds(20));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (pid_t p : readers) {
    kill(p, SIGKILL);
    waitpid(p, nullptr, 0);
  }
  std::filesystem::remove_all(dir);
  EXPECT_EQ(rc, 0) << "kilnd did not exit within 20 s of SIGTERM";
  EXPECT_LT(seconds, 9.0);  // the 2 s grace, the cancel, the sockets closed a second later
}

TEST_F(KilndE2E, SigtermDuringUploadStoresNothingAndExitsZero) {
  std::string stored = MakeOnnxBytes(1000, 5);
  std::string bytes = MakeOnnxBytes(8 << 20, 6);
  {
    auto k = Start();
    auto stub = ModelService::NewStub(Channel(*k));
    kiln::v1::UploadModelResponse resp;
    ASSERT_TRUE(Upload(*stub, "kept", stored, &resp).ok());

    grpc::ClientContext ctx;
    auto writer = stub->UploadModel(&ctx, &resp);
    kiln::v1::UploadModelRequest req;
    req.mutable_header()->set_name("interrupted");
    req.mutable_header()->set_size_bytes(bytes.size());
    req.mutable_header()->set_sha256(Sha256Hex(bytes));
    ASSERT_TRUE(writer->Write(req));
    req.set_chunk(bytes.substr(0, 1 << 20));
    ASSERT_TRUE(writer->Write(req));
    // Wait until the server has the upload open (it counts received bytes).
    for (int i = 0; i < 200 && Scrape(*k)["kiln_upload_bytes_total"] < (1 << 20); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(k->pid(), SIGTERM);
    for (size_t off = 1 << 20; off < bytes.size(); off += 1 << 20) {
      req.set_chunk(bytes.substr(off, 1 << 20));
      if (!writer->Write(req)) break;
    }
    writer->WritesDone();
    grpc::Status st = writer->Finish();
    EXPECT_FALSE(st.ok());
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
    EXPECT_EQ(k->Stop(SIGTERM), 0);
  }
  size_t tmp_files = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(dir_ / "data" / "tmp")) ++tmp_files;
  EXPECT_EQ(tmp_files, 0u);
  auto k = Start();
  auto stub = ModelService::NewStub(Channel(*k));
  grpc::ClientContext ctx;
  kiln::v1::ListModelsResponse list;
  ASSERT_TRUE(stub->ListModels(&ctx, {}, &list).ok());
  ASSERT_EQ(list.models_size(), 1);
  EXPECT_EQ(list.models(0).names(0), "kept");
  EXPECT_EQ(ReadBack(*stub, "kept"), stored);
  EXPECT_EQ(k->Stop(), 0);
}

TEST_F(KilndE2E, CliUploadListAndHealth) {
  auto k = Start();
  std::string model = (dir_ / "tiny.onnx").string();
  std::ofstream(model, std::ios::binary) << MakeOnnxBytes(2000);
  auto run = [&](const std::string& args, int* rc) {
    std::string cmd = std::string(KILN_BINARY) + " --server " + k->grpc_address() + " " + args + " 2>&1";
    return RunShell(cmd, rc);
  };
  int rc = -1;
  std::string out = run("upload " + model + " --name tiny", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("upload 100%"), std::string::npos) << out;
  out = run("models", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("tiny"), std::string::npos) << out;
  out = run("health", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "SERVING\n");
  out = run("rm nope", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("NOT_FOUND"), std::string::npos) << out;
  EXPECT_EQ(k->Stop(), 0);
}

// Runs `command` through the shell with stderr folded into the result; *rc is its exit status.
static std::string Shell(const std::string& command, int* rc) {
  return RunShell(command + " 2>&1", rc);
}

// Connection options after the subcommand, --version, and the token from a file (kilnd's and
// kiln's) or the environment, never from the command line.
TEST_F(KilndE2E, CliOptionsAfterTheSubcommandVersionAndTokenFile) {
  const std::string token_file = (dir_ / "token").string();
  std::ofstream(token_file) << "  s3cret\n";
  auto k = Start({"--token-file", token_file});
  // `env` clears the variables the test may inherit, then sets `vars`.
  auto kiln_with = [](const std::string& vars) {
    return "env -u KILN_TOKEN -u KILN_TOKEN_FILE -u KILN_SERVER " + vars + " " + std::string(KILN_BINARY);
  };
  const std::string kiln = kiln_with("");
  const std::string server = " --server " + k->grpc_address();
  int rc = -1;
  std::string out = Shell(kiln + " --version", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "kiln " KILN_VERSION "\n");
  out = Shell(kiln + " models" + server + " --token-file " + token_file, &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out.rfind("MODEL_ID", 0), 0u) << out;
  out = Shell(kiln + " --token-file " + token_file + " models" + server, &rc);
  EXPECT_EQ(rc, 0) << out;
  out = Shell(kiln + " models" + server, &rc);  // no token
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("UNAUTHENTICATED"), std::string::npos) << out;
  out = Shell(kiln_with("KILN_TOKEN_FILE=" + token_file) + " models" + server, &rc);
  EXPECT_EQ(rc, 0) << out;
  out = Shell(kiln_with("KILN_TOKEN=s3cret") + " models" + server, &rc);
  EXPECT_EQ(rc, 0) << out;
  out = Shell(kiln + " models" + server + " --token-file " + (dir_ / "nope").string(), &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("cannot read --token-file"), std::string::npos) << out;
  out = Shell(kiln + " models" + server + " --token s3cret --token-file " + token_file, &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("excludes"), std::string::npos) << out;
  EXPECT_EQ(k->Stop(), 0);
}

// `kiln health --service NAME` for every service kilnd registers; an unknown one is NOT_FOUND.
TEST_F(KilndE2E, CliHealthOfEachService) {
  auto k = Start();
  const std::string kiln = std::string(KILN_BINARY) + " health --server " + k->grpc_address();
  int rc = -1;
  for (const char* service : {"kiln.v1.ModelService", "kiln.v1.CompileService", "kiln.v1.DeviceService",
                              "kiln.v1.JobService"}) {
    std::string out = Shell(kiln + " --service " + service, &rc);
    EXPECT_EQ(rc, 0) << service << ": " << out;
    EXPECT_EQ(out, "SERVING\n") << service;
  }
  std::string out = Shell(kiln + " --service kiln.v1.NoSuchService", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("NOT_FOUND"), std::string::npos) << out;
  EXPECT_EQ(k->Stop(), 0);
}

// kilnd's YAML keys are its flags' names; a former key still works with a warning; an unknown key
// lists the known ones; --help shows every setting's type and default.
TEST_F(KilndE2E, ConfigKeysAreFlagNames) {
  const std::string cfg = (dir_ / "kiln.yaml").string();
  const std::string log = (dir_ / "kilnd.log").string();
  const std::vector<std::string> base = {"--config", cfg, "--listen", "127.0.0.1:0", "--metrics-listen",
                                         "127.0.0.1:0", "--data-dir", (dir_ / "data").string()};
  std::ofstream(cfg) << "shutdown_grace: 3\nupload_idle_timeout: 7\nconnection_idle_timeout: 60\n";
  {
    KilndProcess k(KILND_BINARY, base, log);
    EXPECT_EQ(k.Stop(), 0);
    EXPECT_NE(ReadFileBytes(log).find("draining for up to 3 s"), std::string::npos) << ReadFileBytes(log);
  }
  std::ofstream(cfg) << "shutdown_grace_seconds: 4\n";
  {
    KilndProcess k(KILND_BINARY, base, log);
    EXPECT_EQ(k.Stop(), 0);
    const std::string text = ReadFileBytes(log);
    EXPECT_NE(text.find("key 'shutdown_grace_seconds' is deprecated, use 'shutdown_grace'"), std::string::npos) << text;
    EXPECT_NE(text.find("draining for up to 4 s"), std::string::npos) << text;
  }
  std::string args;
  for (const auto& a : base) args += " " + a;
  int rc = -1;
  std::ofstream(cfg) << "shutdown_grace_secs: 4\n";
  std::string out = Shell(std::string(KILND_BINARY) + args, &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("unknown key 'shutdown_grace_secs'; the keys are listen, metrics_listen, data_dir,"),
            std::string::npos) << out;
  EXPECT_NE(out.find(", shutdown_grace,"), std::string::npos) << out;
  std::ofstream(cfg) << "shutdown_grace: 1\nshutdown_grace_seconds: 2\n";
  out = Shell(std::string(KILND_BINARY) + args, &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("both set --shutdown-grace"), std::string::npos) << out;
  out = Shell(std::string(KILND_BINARY) + " --config " + (dir_ / "no-such.yaml").string() + " --listen 127.0.0.1:0", &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("no-such.yaml: cannot read it (No such file or directory)"), std::string::npos) << out;

  out = Shell(std::string(KILND_BINARY) + " --help", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("--shutdown-grace SECONDS=10 (seconds)"), std::string::npos) << out;
  EXPECT_NE(out.find("--max-model-bytes BYTES="), std::string::npos) << out;
  EXPECT_NE(out.find("--listen HOST:PORT=127.0.0.1:50051"), std::string::npos) << out;
  EXPECT_NE(out.find("(env KILN_SHUTDOWN_GRACE)"), std::string::npos) << out;
}

// `kiln compile FILE` without --arch: the arch is the factory the ai8x-training export name
// names (api FactoryFromExportName), with and without a server; a name that names none is
// refused (exit 2: the izer would reject it); the table goes to stderr when the YAML goes to
// stdout; a failed compile never writes -o.
TEST_F(KilndE2E, CliCompileArchDefaultTableAndFailedOutput) {
  auto k = Start();
  const std::string data = std::string(KILN_TEST_DATA) + "/ai8x/models/";
  const std::string bytes = ReadFileBytes(data + "bayer-bayer2rgbnet.qat.onnx");
  const std::string first = (dir_ / "first.v1.qat.onnx").string();
  const std::string second = (dir_ / "bayer-bayer2rgbnet.qat.onnx").string();
  std::ofstream(first, std::ios::binary) << bytes;
  std::ofstream(second, std::ios::binary) << bytes;
  // stdout only (stderr discarded) or both.
  auto run = [&](const std::string& args, bool with_stderr, int* rc) {
    std::string cmd = std::string(KILN_BINARY) + " --server " + k->grpc_address() + " " + args +
                      (with_stderr ? " 2>&1" : " 2>/dev/null");
    return RunShell(cmd, rc);
  };
  auto slurp = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  int rc = -1;
  const std::string a = (dir_ / "a.yaml").string(), b = (dir_ / "b.yaml").string(), c = (dir_ / "c.yaml").string();
  std::string out = run("compile " + first + " --device MAX78000 -o " + a, true, &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--arch is required"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(a));
  out = run("compile " + second + " --device MAX78000 -o " + b, true, &rc);  // same bytes, an export's name
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("note: --arch bayer2rgbnet from the export name"), std::string::npos) << out;
  EXPECT_NE(slurp(b).find("\narch: bayer2rgbnet\n"), std::string::npos) << slurp(b);
  out = run("compile --local " + first + " --device MAX78000 -o " + c, true, &rc);
  EXPECT_EQ(rc, 2) << out;
  out = run("compile --local " + second + " --device MAX78000 -o " + c, true, &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(slurp(c).find("\narch: bayer2rgbnet\n"), std::string::npos) << slurp(c);
  out = run("compile " + first + " --device MAX78000 --arch bayer2rgbnet --dataset ImageNet --table", false, &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("arch: bayer2rgbnet"), std::string::npos) << out;  // the YAML on stdout ...
  EXPECT_EQ(out.find("OUTPUT_PROCESSORS"), std::string::npos) << out;   // ... without the table
  out = run("compile " + first + " --device MAX78000 --arch bayer2rgbnet --dataset ImageNet --table -o " + a, false, &rc);
  EXPECT_NE(out.find("OUTPUT_PROCESSORS"), std::string::npos) << out;  // with -o the table is stdout's
  EXPECT_EQ(out.find("\nnote:"), std::string::npos) << out;

  // The float export of simplenetwide2x needs quantization overrides: without them it fails.
  const std::string wide = data + "cifar100-ai85simplenetwide2x.float.onnx";
  std::ofstream(b) << "previous good YAML\n";
  out = run("compile --local " + wide + " --device MAX78000 --arch x --dataset y -o " + b, true, &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find(b + " not written"), std::string::npos) << out;
  EXPECT_EQ(slurp(b), "previous good YAML\n");
  out = run("compile --local " + wide + " --device MAX78000 --arch x --dataset y", false, &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(out.rfind("# KILN: COMPILE FAILED", 0), 0u) << out.substr(0, 200);
  EXPECT_EQ(k->Stop(), 0);
}

// An object corrupted on disk between two runs: ReadModel ends in DATA_LOSS (the last chunk is
// withheld), a compile of it is DATA_LOSS, and the intact model next to it is served as before.
TEST_F(KilndE2E, CorruptedObjectIsDataLossOverTheWire) {
  const std::string bytes = ReadFileBytes(std::string(KILN_TEST_DATA) + "/server/mnist-ai85net5.qat.onnx");
  const std::string other = MakeOnnxBytes(3000, 4);
  {
    auto k = Start();
    auto stub = ModelService::NewStub(Channel(*k));
    kiln::v1::UploadModelResponse resp;
    ASSERT_TRUE(Upload(*stub, "mnist", bytes, &resp).ok());
    ASSERT_TRUE(Upload(*stub, "other", other, &resp).ok());
    EXPECT_EQ(k->Stop(), 0);
  }
  {
    std::fstream f(dir_ / "data" / "objects" / (Sha256Hex(bytes) + ".onnx"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(bytes.size() / 2));
    f.put(static_cast<char>(bytes[bytes.size() / 2] ^ 0x01));
  }
  auto k = Start();
  auto stub = ModelService::NewStub(Channel(*k));
  grpc::ClientContext ctx;
  kiln::v1::ReadModelRequest req;
  req.set_model_id("mnist");
  auto reader = stub->ReadModel(&ctx, req);
  kiln::v1::ReadModelResponse chunk;
  size_t got = 0;
  while (reader->Read(&chunk)) got += chunk.chunk().size();
  grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DATA_LOSS) << st.error_message();
  EXPECT_LT(got, bytes.size());
  auto compiler = kiln::v1::CompileService::NewStub(Channel(*k));
  grpc::ClientContext cctx;
  kiln::v1::CompileAi8xRequest creq;
  creq.set_model_id("mnist");
  kiln::v1::CompileAi8xResponse cresp;
  st = compiler->CompileAi8x(&cctx, creq, &cresp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DATA_LOSS) << st.error_message();
  EXPECT_NE(st.error_message().find(Sha256Hex(bytes)), std::string::npos) << st.error_message();
  grpc::ClientContext gctx;
  kiln::v1::GetModelRequest greq;
  greq.set_model_id("mnist");
  greq.set_include_bytes(true);
  kiln::v1::GetModelResponse gresp;
  st = stub->GetModel(&gctx, greq, &gresp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DATA_LOSS) << st.error_message();
  EXPECT_EQ(ReadBack(*stub, "other"), other);
  // Uploading the same bytes again repairs the object.
  kiln::v1::UploadModelResponse resp;
  ASSERT_TRUE(Upload(*stub, "mnist-again", bytes, &resp).ok());
  EXPECT_EQ(ReadBack(*stub, "mnist"), bytes);
  grpc::ClientContext cctx2;
  kiln::v1::CompileAi8xResponse cresp2;
  st = compiler->CompileAi8x(&cctx2, creq, &cresp2);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(cresp2.ok());
  EXPECT_EQ(k->Stop(), 0);
}

TEST_F(KilndE2E, ConfigPrecedenceFlagsOverEnvOverFile) {
  std::string cfg = (dir_ / "kiln.yaml").string();
  std::ofstream(cfg) << "max_model_bytes: 10\nlisten: 127.0.0.1:1\n";
  // The file's listen address is overridden by the flag; its size limit by the environment.
  std::vector<std::string> args = {"--config", cfg, "--listen", "127.0.0.1:0", "--metrics-listen",
                                   "127.0.0.1:0", "--data-dir", (dir_ / "data").string()};
  KilndProcess k(KILND_BINARY, args, (dir_ / "kilnd.log").string(),
                 {"KILN_MAX_MODEL_BYTES=5000"});
  auto stub = ModelService::NewStub(Channel(k));
  kiln::v1::UploadModelResponse resp;
  EXPECT_TRUE(Upload(*stub, "small", MakeOnnxBytes(1000), &resp).ok());
  grpc::Status st = Upload(*stub, "big", MakeOnnxBytes(8000), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("5000"), std::string::npos) << st.error_message();
  EXPECT_EQ(k.Stop(), 0);
}

TEST_F(KilndE2E, CompileAi8xByIdAndInline) {
  // No compile cache: the concurrent compiles below must reach the one-worker compile lane.
  auto k = Start({"--compile-workers", "1", "--compile-queue", "0", "--compile-cache-bytes", "0"});
  auto channel = Channel(*k);
  auto models = ModelService::NewStub(channel);
  auto compiler = kiln::v1::CompileService::NewStub(channel);
  std::string bytes = ReadFileBytes(std::string(KILN_TEST_DATA) + "/server/mnist-ai85net5.qat.onnx");
  ASSERT_GT(bytes.size(), 100000u);
  kiln::v1::UploadModelResponse up;
  ASSERT_TRUE(Upload(*models, "mnist", bytes, &up).ok());

  auto compile = [&](kiln::v1::CompileAi8xRequest req, kiln::v1::CompileAi8xResponse* resp) {
    grpc::ClientContext ctx;
    req.mutable_options()->set_arch("ai85net5");
    req.mutable_options()->set_dataset("MNIST");
    return compiler->CompileAi8x(&ctx, req, resp);
  };
  kiln::v1::CompileAi8xRequest by_id;
  by_id.set_model_id("mnist");
  kiln::v1::CompileAi8xResponse r1;
  grpc::Status st = compile(by_id, &r1);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(r1.ok());
  EXPECT_EQ(r1.layers_size(), 5);
  EXPECT_NE(r1.yaml().find("arch: ai85net5"), std::string::npos);
  EXPECT_EQ(r1.model_id(), Sha256Hex(bytes));
  EXPECT_EQ(r1.kiln_version(), KILN_VERSION);
  EXPECT_EQ(r1.resolved_options().arch(), "ai85net5");
  ASSERT_GE(r1.izer_flags_size(), 2);
  EXPECT_EQ(r1.izer_flags(0), "--device");
  EXPECT_EQ(r1.izer_flags(1), "MAX78000");
  // The next step: the complete ai8xize.py command line.
  ASSERT_GE(r1.izer_command_size(), 11);
  EXPECT_EQ(r1.izer_command(0), "ai8xize.py");
  std::vector<std::string> cmd(r1.izer_command().begin(), r1.izer_command().end());
  auto value_of = [&cmd](const std::string& flag) {
    auto it = std::find(cmd.begin(), cmd.end(), flag);
    return it == cmd.end() || it + 1 == cmd.end() ? std::string("(absent)") : *(it + 1);
  };
  EXPECT_EQ(value_of("--device"), "MAX78000");
  EXPECT_EQ(value_of("--config-file"), "ai85net5.yaml");
  // a qat export: the izer's ONNX reader cannot follow its QAT chains
  EXPECT_TRUE(r1.needs_quantized_checkpoint());
  EXPECT_EQ(value_of("--checkpoint-file"), "ai85net5-q.pth.tar");
  EXPECT_EQ(value_of("--prefix"), "ai85net5");
  EXPECT_EQ(value_of("--test-dir"), "sdk/Examples/MAX78000/CNN");
  EXPECT_FALSE(r1.cache_hit());

  kiln::v1::CompileAi8xRequest inline_req;
  inline_req.set_model_bytes(bytes);
  kiln::v1::CompileAi8xResponse r2;
  ASSERT_TRUE(compile(inline_req, &r2).ok());
  EXPECT_EQ(r2.yaml(), r1.yaml());

  kiln::v1::CompileAi8xRequest junk;
  junk.set_model_bytes(std::string(3000, 'x'));
  kiln::v1::CompileAi8xResponse r3;
  EXPECT_EQ(compile(junk, &r3).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  kiln::v1::CompileAi8xRequest missing;
  missing.set_model_id("no-such-model");
  EXPECT_EQ(compile(missing, &r3).error_code(), grpc::StatusCode::NOT_FOUND);
  kiln::v1::CompileAi8xRequest bad_option = by_id;
  auto* ov = bad_option.mutable_options()->add_overrides();
  ov->set_layer("conv1");
  ov->set_key("no_such_key");
  ov->set_value("1");
  EXPECT_EQ(compile(bad_option, &r3).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // One worker, no queue: of concurrent compiles, each either runs or is refused with
  // RESOURCE_EXHAUSTED; nothing else happens.
  constexpr int kParallel = 6;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0}, exhausted{0};
  for (int i = 0; i < kParallel; ++i) {
    threads.emplace_back([&] {
      kiln::v1::CompileAi8xResponse r;
      grpc::Status s = compile(by_id, &r);
      if (s.ok()) ok++;
      if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) exhausted++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok + exhausted, kParallel);
  EXPECT_GE(ok.load(), 1);

  auto m = Scrape(*k);
  EXPECT_EQ(m["kiln_compile_total{result=\"ok\",target=\"ai8x\"}"], 2 + ok.load());
  EXPECT_EQ(m["kiln_compile_total{result=\"rejected\",target=\"ai8x\"}"], exhausted.load());
  // No compile queue: every refusal is the compile lane's full queue (sched/scheduler.h on_refused).
  EXPECT_EQ(m["kiln_rejected_requests_total{reason=\"queue_full\"}"], exhausted.load());
  // Timed: every request that reached the compiler (not the missing id, not the refused ones).
  EXPECT_EQ(m["kiln_compile_duration_seconds_count{target=\"ai8x\"}"], 4 + ok.load());
  EXPECT_EQ(k->Stop(), 0);
}

TEST_F(KilndE2E, RepeatedCompileIsAnsweredFromTheCompileCache) {
  auto k = Start({"--compile-cache-bytes", "1000000"});
  auto channel = Channel(*k);
  auto models = ModelService::NewStub(channel);
  auto compiler = kiln::v1::CompileService::NewStub(channel);
  std::string bytes = ReadFileBytes(std::string(KILN_TEST_DATA) + "/server/mnist-ai85net5.qat.onnx");
  kiln::v1::UploadModelResponse up;
  ASSERT_TRUE(Upload(*models, "mnist", bytes, &up).ok());
  auto compile = [&](const std::string& arch, kiln::v1::CompileAi8xResponse* resp) {
    grpc::ClientContext ctx;
    kiln::v1::CompileAi8xRequest req;
    req.set_model_id("mnist");
    req.mutable_options()->set_arch(arch);
    return compiler->CompileAi8x(&ctx, req, resp);
  };
  kiln::v1::CompileAi8xResponse first, again, other;
  ASSERT_TRUE(compile("ai85net5", &first).ok());
  ASSERT_TRUE(compile("ai85net5", &again).ok());
  ASSERT_TRUE(compile("other", &other).ok());  // other options: compiled
  EXPECT_FALSE(first.cache_hit());
  EXPECT_TRUE(again.cache_hit());
  EXPECT_FALSE(other.cache_hit());
  EXPECT_EQ(again.yaml(), first.yaml());
  EXPECT_EQ(again.layers_size(), first.layers_size());
  EXPECT_EQ(again.model_id(), first.model_id());
  EXPECT_NE(other.yaml(), first.yaml());
  // The same bytes inline: compiled under the name "inline" (its default arch and checkpoint name
  // in the izer command), so another key.
  kiln::v1::CompileAi8xResponse inline_resp;
  {
    grpc::ClientContext ctx;
    kiln::v1::CompileAi8xRequest req;
    req.set_model_bytes(bytes);
    req.mutable_options()->set_arch("ai85net5");
    ASSERT_TRUE(compiler->CompileAi8x(&ctx, req, &inline_resp).ok());
  }
  EXPECT_FALSE(inline_resp.cache_hit());  // stored under another name ("inline"): another key
  auto m = Scrape(*k);
  EXPECT_EQ(m["kiln_compile_cache_hits_total"], 1);
  EXPECT_EQ(m["kiln_compile_cache_misses_total"], 3);
  EXPECT_EQ(m["kiln_compile_total{result=\"ok\",target=\"ai8x\"}"], 4);
  EXPECT_EQ(k->Stop(), 0);
}

}  // namespace
}  // namespace kiln::testing
