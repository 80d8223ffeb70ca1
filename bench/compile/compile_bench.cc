// The server path of an ai8x compile against the in-process compile, for every qat model of
// tests/data/ai8x/models/manifest.json, in one run (ratios, not absolute times: the machine may be
// loaded). Per model, medians of N calls:
//   in-process   api::CompileAi8x (what `kiln compile --local` runs), and its parts: SHA-256 of
//                the bytes, onnx_fe::LoadModel, ai8x::CompileAi8x, serializing the response;
//   server       CompileAi8x by stored id through a real kilnd with the compile cache off
//                (client wall time), and kilnd's own kiln_compile_duration_seconds (the job:
//                store read + api::CompileAi8x), so that wall - job = gRPC + scheduler;
//   cached       the same through a kilnd with the cache on (--compile-cache-bytes), after one
//                warming call. Target: a repeated compile < 1 ms.
// Usage: bench_compile [N] [DATA_DIR]
#include <grpcpp/grpcpp.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "api/compile_ai8x.h"
#include "common/sha256.h"
#include "compiler/ai8x/compile.h"
#include "compiler/onnx/loader.h"
#include "kiln/v1/compile.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "tests/server/kilnd_test_util.h"
#include "tests/server/kilnd_process.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

template <typename F>
double MedianMs(int n, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < n; ++i) {
    auto a = Clock::now();
    f();
    t.push_back(Ms(a, Clock::now()));
  }
  return Median(t);
}

struct Model {
  std::string name, file, device, arch, dataset;
  std::string bytes;
};

bool Upload(kiln::v1::ModelService::Stub& stub, const Model& m) {
  grpc::ClientContext ctx;
  kiln::v1::UploadModelResponse resp;
  auto writer = stub.UploadModel(&ctx, &resp);
  kiln::v1::UploadModelRequest req;
  req.mutable_header()->set_name(m.name);
  req.mutable_header()->set_size_bytes(m.bytes.size());
  req.mutable_header()->set_sha256(kiln::Sha256Hex(m.bytes));
  writer->Write(req);
  for (size_t off = 0; off < m.bytes.size(); off += 1 << 20) {
    req.set_chunk(m.bytes.data() + off, std::min<size_t>(1 << 20, m.bytes.size() - off));
    if (!writer->Write(req)) break;
  }
  writer->WritesDone();
  return writer->Finish().ok();
}

kiln::v1::CompileAi8xOptions Options(const Model& m) {
  kiln::api::CompileFlags f;
  f.device = m.device;
  f.arch = m.arch;
  f.dataset = m.dataset;
  return *kiln::api::ParseCompileFlags(f);
}

// kilnd's histogram sum (seconds) of the job part of the compiles so far.
double JobSecondsSum(const kiln::testing::KilndProcess& k) {
  auto m = kiln::testing::ScrapeMetrics(k.metrics_address());
  return m["kiln_compile_duration_seconds_sum{target=\"ai8x\"}"];
}

}  // namespace

int main(int argc, char** argv) {
  int n = argc > 1 ? std::stoi(argv[1]) : 10;
  std::string data = argc > 2 ? argv[2] : std::string(KILN_SOURCE_DIR) + "/tests/data/ai8x";
  std::vector<Model> models;
  for (const auto& e : YAML::LoadFile(data + "/models/manifest.json")) {
    if (e["form"].as<std::string>() != "qat" || !e["file"] || e["file"].IsNull()) continue;
    Model m{e["name"].as<std::string>(), e["file"].as<std::string>(), e["device"].as<std::string>(),
            e["factory"].as<std::string>(), e["dataset"].as<std::string>(), ""};
    m.bytes = ReadFile(data + "/models/" + m.file);
    models.push_back(std::move(m));
  }
  fs::path dir = fs::path(KILN_BENCH_DIR) / "compile-bench";
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto start_kilnd = [&](const std::string& sub, const std::string& cache_bytes) {
    return std::make_unique<kiln::testing::KilndProcess>(
        KILND_BINARY,
        std::vector<std::string>{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir",
                                 (dir / sub).string(), "--log-level", "warn", "--compile-cache-bytes", cache_bytes},
        (dir / (sub + ".log")).string());
  };
  auto cold = start_kilnd("cold", "0");
  auto warm = start_kilnd("warm", "67108864");
  auto cold_ch = grpc::CreateChannel(cold->grpc_address(), grpc::InsecureChannelCredentials());
  auto warm_ch = grpc::CreateChannel(warm->grpc_address(), grpc::InsecureChannelCredentials());
  auto cold_compile = kiln::v1::CompileService::NewStub(cold_ch);
  auto warm_compile = kiln::v1::CompileService::NewStub(warm_ch);
  for (const Model& m : models) {
    if (!Upload(*kiln::v1::ModelService::NewStub(cold_ch), m) || !Upload(*kiln::v1::ModelService::NewStub(warm_ch), m)) {
      std::fprintf(stderr, "upload of %s failed\n", m.name.c_str());
      return 1;
    }
  }
  auto by_id = [](kiln::v1::CompileService::Stub& stub, const Model& m, kiln::v1::CompileAi8xResponse* resp) {
    grpc::ClientContext ctx;
    kiln::v1::CompileAi8xRequest req;
    req.set_model_id(m.name);
    *req.mutable_options() = Options(m);
    return stub.CompileAi8x(&ctx, req, resp).ok();
  };

  std::printf("ai8x compile, median of %d calls per model, ms (one process, machine possibly loaded)\n", n);
  std::printf("%-30s %7s | %7s %6s %6s %7s %6s | %7s %7s %7s | %7s %6s\n", "model", "MiB", "inproc", "sha", "load",
              "passes", "ser", "server", "job", "grpc", "cached", "ratio");
  bool all_fast = true;
  for (const Model& m : models) {
    auto opts = Options(m);
    double inproc = MedianMs(n, [&] { (void)kiln::api::CompileAi8x(m.bytes, m.name, opts); });
    double sha = MedianMs(n, [&] { (void)kiln::Sha256Hex(m.bytes); });
    kiln::onnx_fe::LoadOptions lo;  // as api::CompileAi8x loads
    lo.model_name = m.name;
    lo.bind_symbols = {};
    double load = MedianMs(n, [&] { (void)kiln::onnx_fe::LoadModel(m.bytes, lo); });
    auto model = kiln::onnx_fe::LoadModel(m.bytes, lo);
    kiln::ai8x::Ai8xOptions ao;
    ao.chip = *kiln::ai8x::ParseChip(m.device);
    ao.arch = m.arch;
    ao.dataset = m.dataset;
    double passes = MedianMs(n, [&] { (void)kiln::ai8x::CompileAi8x(**model, ao); });
    auto resp = kiln::api::CompileAi8x(m.bytes, m.name, opts);
    double ser = MedianMs(n, [&] { (void)resp->SerializeAsString(); });

    kiln::v1::CompileAi8xResponse r;
    by_id(*cold_compile, m, &r);  // first read of the stored file (verified once per process)
    double job0 = JobSecondsSum(*cold);
    double server = MedianMs(n, [&] { by_id(*cold_compile, m, &r); });
    double job = (JobSecondsSum(*cold) - job0) * 1000.0 / n;
    by_id(*warm_compile, m, &r);  // fills the cache
    double cached = MedianMs(n, [&] {
      by_id(*warm_compile, m, &r);
      if (!r.cache_hit()) std::fprintf(stderr, "%s: not a cache hit\n", m.name.c_str());
    });
    all_fast &= cached < 1.0;
    std::printf("%-30s %7.2f | %7.2f %6.2f %6.2f %7.2f %6.2f | %7.2f %7.2f %7.2f | %7.3f %6.2f\n", m.name.c_str(),
                m.bytes.size() / 1048576.0, inproc, sha, load, passes, ser, server, job, server - job, cached,
                server / inproc);
  }
  std::printf("columns: inproc = api::CompileAi8x; sha, load, passes, ser = its parts (SHA-256 of the bytes, ONNX "
              "load, the ai8x pipeline, response serialization); server = by id through kilnd, cache off; job = "
              "kilnd's kiln_compile_duration_seconds per call (store read + api::CompileAi8x); grpc = server - job "
              "(transport, scheduler, response copy); cached = with the compile cache; ratio = server / inproc\n");
  std::printf("repeated compile through kilnd < 1 ms for every model: %s\n", all_fast ? "PASS" : "NO");
  cold->Stop();
  warm->Stop();
  fs::remove_all(dir);
  return 0;
}
