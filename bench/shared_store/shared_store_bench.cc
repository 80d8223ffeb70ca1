// The cost of the database path against the embedded one (README "Shared state on PostgreSQL"), through real
// kilnd processes on loopback: one kilnd on its data dir, one on a throwaway PostgreSQL
// (tests/support/pg_server.h; durability off there, as in the tests, so this measures Kiln's
// path, not PostgreSQL's fsync). For each:
//   upload   UploadModel of new bytes (1 MiB chunks) until the answer; median of N
//   compile  CompileAi8x of the stored mnist-ai85net5 model by name, compile cache off (every
//            call reads the model from the store and compiles it); median of N
// Prints each median and the ratio database / embedded. Target: compile ratio <= 1.5.
// The database replica's local blob cache is on (its default): a compile after the first reads
// the model from it; `--no-blob-cache` measures reads from PostgreSQL every time.
//   bench_shared_store [N=15] [--no-blob-cache]
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "common/sha256.h"
#include "kiln/v1/compile.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "tests/server/kilnd_process.h"
#include "tests/server/onnx_bytes.h"
#include "tests/support/pg_server.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::string ReadBytes(const std::string& path) {
  std::string out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

bool Upload(kiln::v1::ModelService::Stub& stub, const std::string& name, const std::string& bytes) {
  grpc::ClientContext ctx;
  kiln::v1::UploadModelResponse resp;
  auto w = stub.UploadModel(&ctx, &resp);
  kiln::v1::UploadModelRequest req;
  req.mutable_header()->set_name(name);
  req.mutable_header()->set_size_bytes(bytes.size());
  req.mutable_header()->set_sha256(kiln::Sha256Hex(bytes));
  w->Write(req);
  for (size_t off = 0; off < bytes.size(); off += 1 << 20) {
    req.set_chunk(bytes.substr(off, 1 << 20));
    if (!w->Write(req)) break;
  }
  w->WritesDone();
  grpc::Status st = w->Finish();
  if (!st.ok()) std::fprintf(stderr, "upload %s: %s\n", name.c_str(), st.error_message().c_str());
  return st.ok();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Figures {
  double upload_small = 0, upload_large = 0, compile = 0;
};

Figures Measure(const kiln::testing::KilndProcess& k, const std::string& mnist, int n, unsigned seed_base) {
  grpc::ChannelArguments ch;
  ch.SetMaxReceiveMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(k.grpc_address(), grpc::InsecureChannelCredentials(), ch);
  auto models = kiln::v1::ModelService::NewStub(channel);
  auto compiler = kiln::v1::CompileService::NewStub(channel);
  Figures f;
  auto time_uploads = [&](size_t size, unsigned seed0) {
    std::vector<std::string> bodies;
    for (int i = 0; i < n; ++i) bodies.push_back(kiln::testing::MakeOnnxBytes(size, seed0 + static_cast<unsigned>(i)));
    std::vector<double> t;
    for (int i = 0; i < n; ++i) {
      auto a = Clock::now();
      if (!Upload(*models, "u" + std::to_string(seed0 + static_cast<unsigned>(i)), bodies[static_cast<size_t>(i)])) std::exit(1);
      t.push_back(std::chrono::duration<double>(Clock::now() - a).count());
    }
    return Median(t);
  };
  f.upload_small = time_uploads(64u << 10, seed_base);
  f.upload_large = time_uploads(16u << 20, seed_base + 1000);
  if (!Upload(*models, "mnist", mnist)) std::exit(1);
  kiln::v1::CompileAi8xRequest req;
  req.set_model_id("mnist");
  req.mutable_options()->set_arch("ai85net5");
  req.mutable_options()->set_dataset("MNIST");
  std::vector<double> t;
  for (int i = 0; i < n + 1; ++i) {
    grpc::ClientContext ctx;
    kiln::v1::CompileAi8xResponse resp;
    auto a = Clock::now();
    grpc::Status st = compiler->CompileAi8x(&ctx, req, &resp);
    const double s = std::chrono::duration<double>(Clock::now() - a).count();
    if (!st.ok() || !resp.ok() || resp.cache_hit()) {
      std::fprintf(stderr, "compile: %s\n", st.error_message().c_str());
      std::exit(1);
    }
    if (i > 0) t.push_back(s);  // the first one warms the process (and fills the blob cache)
  }
  f.compile = Median(t);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  int n = 15;
  bool blob_cache = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-blob-cache") == 0) {
      blob_cache = false;
    } else {
      n = std::max(3, std::atoi(argv[i]));
    }
  }
  const std::string mnist = ReadBytes(std::string(KILN_TEST_DATA) + "/server/mnist-ai85net5.qat.onnx");
  if (mnist.empty()) {
    std::fprintf(stderr, "cannot read the mnist model\n");
    return 1;
  }
  auto pg = kiln::testing::PgServer::Start();
  if (!pg.ok()) {
    std::fprintf(stderr, "PostgreSQL: %s\n", pg.status().ToString().c_str());
    return 1;
  }
  auto url = (*pg)->CreateDatabase("bench");
  if (!url.ok()) return 1;
  const fs::path dir = fs::temp_directory_path() / ("kiln-bench-shared-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto args = [&](const std::string& data) {
    return std::vector<std::string>{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir",
                                    (dir / data).string(), "--compile-cache-bytes", "0", "--log-level", "warn",
                                    "--blob-cache-bytes", blob_cache ? "1073741824" : "0"};
  };
  Figures embedded, shared;
  {
    kiln::testing::KilndProcess k(KILND_BINARY, args("embedded"), (dir / "embedded.log").string());
    embedded = Measure(k, mnist, n, 1);
  }
  {
    kiln::testing::KilndProcess k(KILND_BINARY, args("shared"), (dir / "shared.log").string(), {"KILN_DATABASE=" + *url});
    shared = Measure(k, mnist, n, 1);
  }
  fs::remove_all(dir);
  std::printf("median of %d, kilnd on loopback; database: PostgreSQL 15, blob cache %s\n", n, blob_cache ? "on" : "off");
  std::printf("%-34s %12s %12s %8s\n", "", "embedded", "database", "ratio");
  auto row = [](const char* what, double e, double d, const char* target) {
    std::printf("%-34s %10.2f ms %10.2f ms %7.2fx %s\n", what, e * 1e3, d * 1e3, d / e, target);
  };
  row("upload 64 KiB (new bytes)", embedded.upload_small, shared.upload_small, "");
  row("upload 16 MiB (new bytes)", embedded.upload_large, shared.upload_large, "");
  row("compile stored mnist-ai85net5", embedded.compile, shared.compile,
      shared.compile / embedded.compile <= 1.5 ? "(target <= 1.5x: met)" : "(target <= 1.5x: NOT met)");
  return 0;
}
