// DeviceService overhead and device scaling:
//  1. End-to-end RunConvLayers through kilnd (gRPC, model load + plan, queueing, tensor
//     serialization both ways) against calling the executor directly on a tt-emu backend in
//     process, for the same job (target: overhead <= 10%).
//  2. Throughput of kilnd with 2 tt-emu devices against 1, 8 concurrent clients.
// Usage: bench_device_service [MODEL.onnx] [REPS]   (default: conv-cases convtranspose_s2_outpad1, a
// ~40 ms job on tt-emu exact)
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <atomic>
#include <vector>

#include "common/sha256.h"
#include "compiler/onnx/loader.h"
#include "device/backends/builtin.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "kiln/v1/device.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "runtime/executor.h"
#include "runtime/host_kernels/registry.h"
#include "tests/server/kilnd_process.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string Upload(kiln::v1::ModelService::Stub& stub, const std::string& bytes) {
  grpc::ClientContext ctx;
  kiln::v1::UploadModelResponse resp;
  auto writer = stub.UploadModel(&ctx, &resp);
  kiln::v1::UploadModelRequest req;
  req.mutable_header()->set_name("bench");
  req.mutable_header()->set_size_bytes(bytes.size());
  req.mutable_header()->set_sha256(kiln::Sha256Hex(bytes));
  writer->Write(req);
  for (size_t off = 0; off < bytes.size(); off += 1 << 20) {
    req.set_chunk(bytes.substr(off, 1 << 20));
    writer->Write(req);
  }
  writer->WritesDone();
  if (!writer->Finish().ok()) return "";
  return resp.model().model_id();
}

struct Server {
  std::unique_ptr<kiln::testing::KilndProcess> kilnd;
  std::unique_ptr<kiln::v1::DeviceService::Stub> devices;
  std::unique_ptr<kiln::v1::ModelService::Stub> models;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;
  std::string model_id;
};

Server StartServer(const fs::path& dir, const std::string& devices, const std::string& model) {
  Server s;
  fs::remove_all(dir);
  s.kilnd = std::make_unique<kiln::testing::KilndProcess>(
      KILND_BINARY,
      std::vector<std::string>{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                               "--data-dir", (dir / "store").string(), "--devices", devices,
                               "--log-level", "warn"},
      (dir.string() + ".log"));
  auto channel = grpc::CreateChannel(s.kilnd->grpc_address(), grpc::InsecureChannelCredentials());
  s.devices = kiln::v1::DeviceService::NewStub(channel);
  s.models = kiln::v1::ModelService::NewStub(channel);
  s.health = grpc::health::v1::Health::NewStub(channel);
  s.model_id = Upload(*s.models, model);
  return s;
}

struct RemoteTimes {
  double run = 0, queue = 0;
};

bool RunRemote(Server& s, double* seconds, RemoteTimes* times = nullptr, const std::string& model_id = "",
               const std::string& client = "") {
  kiln::v1::RunConvLayersRequest req;
  req.set_model_id(model_id.empty() ? s.model_id : model_id);
  req.set_backend("tt-emu");
  req.set_skip_reference(true);
  grpc::ClientContext ctx;
  if (!client.empty()) ctx.AddMetadata("x-kiln-client", client);
  kiln::v1::RunConvLayersResponse resp;
  auto t0 = Clock::now();
  grpc::Status st = s.devices->RunConvLayers(&ctx, req, &resp);
  if (seconds) *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!st.ok()) std::fprintf(stderr, "RunConvLayers: %s\n", st.error_message().c_str());
  if (times) *times = {resp.run_seconds(), resp.queue_seconds()};
  return st.ok();
}

double Throughput(Server& s, int clients, int jobs_per_client) {
  auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      for (int j = 0; j < jobs_per_client; ++j) RunRemote(s, nullptr);
    });
  }
  for (auto& t : threads) t.join();
  return clients * jobs_per_client / std::chrono::duration<double>(Clock::now() - t0).count();
}

// Health-check latency while `runs` first runs of distinct models (each planned on the plan lane,
// then run) are in flight: reactions never block, so health answers stay fast. Prints p50/p99.
void HealthUnderLoad(Server& s, const std::string& bytes, int runs) {
  std::vector<std::string> ids;
  for (int i = 0; i < runs; ++i) {
    // A distinct model: ModelProto.doc_string (field 6, length-delimited) appended; the last wins.
    std::string doc = "copy " + std::to_string(i);
    std::string copy = bytes + static_cast<char>(0x32) + static_cast<char>(doc.size()) + doc;
    ids.push_back(Upload(*s.models, copy));
  }
  std::atomic<int> left{runs};
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ids.size(); ++i) {
    threads.emplace_back([&, i] {
      // One client each, as 64 users would be (one client may queue half a lane).
      RunRemote(s, nullptr, nullptr, ids[i], "client" + std::to_string(i));
      --left;
    });
  }
  std::vector<double> health;
  while (left.load() > 0) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckResponse resp;
    auto t0 = Clock::now();
    grpc::Status st = s.health->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp);
    if (st.ok()) health.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (auto& t : threads) t.join();
  if (health.empty()) return;
  std::sort(health.begin(), health.end());
  std::printf("health under %d first runs           p50 %.2f ms, p99 %.2f ms, max %.2f ms (%zu checks)\n", runs,
              health[health.size() / 2] * 1e3, health[std::min(health.size() - 1, health.size() * 99 / 100)] * 1e3,
              health.back() * 1e3, health.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = argc > 1 ? argv[1]
                              : std::string(KILN_TEST_DATA) + "/conv-cases/convtranspose_s2_outpad1.onnx";
  int reps = argc > 2 ? std::stoi(argv[2]) : 15;
  std::string bytes = ReadFile(path);

  // Direct: the same plan and executor options the service uses, on a local tt-emu backend.
  auto model = kiln::onnx_fe::LoadModel(bytes);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  auto plan = kiln::convplan::BuildConvPlan(*model, kiln::runtime::HostKernels());
  auto backend = kiln::device::DefaultBackendRegistry().Create("tt-emu", {});
  if (!plan.ok() || !backend.ok()) return 1;
  kiln::runtime::RunOptions options;
  options.compare_to_reference = false;
  std::vector<double> direct;
  for (int i = 0; i < reps + 2; ++i) {
    auto t0 = Clock::now();
    auto r = kiln::runtime::RunConvPlan(*plan, {}, **backend, options);
    if (!r.ok()) return 1;
    if (i >= 2) direct.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }

  fs::path dir = fs::path(KILN_BENCH_DIR) / "device-service-bench";
  Server one = StartServer(dir / "one", "tt-emu:1", bytes);
  std::vector<double> remote, server_run, server_queue;
  for (int i = 0; i < reps + 2; ++i) {
    double s = 0;
    RemoteTimes t;
    if (!RunRemote(one, &s, &t)) return 1;
    if (i >= 2) {
      remote.push_back(s);
      server_run.push_back(t.run);
      server_queue.push_back(t.queue);
    }
  }
  double d = Median(direct), r = Median(remote);
  std::printf("job: %s on tt-emu (exact), reference comparison off, median of %d\n",
              fs::path(path).filename().c_str(), reps);
  std::printf("direct RunConvPlan (in process)      %8.2f ms\n", d * 1e3);
  std::printf("RunConvLayers through kilnd          %8.2f ms\n", r * 1e3);
  std::printf("  of which executor run on the device  %8.2f ms, queue wait %.2f ms\n",
              Median(server_run) * 1e3, Median(server_queue) * 1e3);
  std::printf("overhead                             %8.1f %% (target <= 10%%) %s\n", (r / d - 1) * 100,
              r / d - 1 <= 0.10 ? "PASS" : "ABOVE TARGET");

  const int clients = 8, jobs = std::max(2, reps / 3);
  double tp1 = Throughput(one, clients, jobs);
  one.kilnd->Stop();
  Server two = StartServer(dir / "two", "tt-emu:2", bytes);
  double tp2 = Throughput(two, clients, jobs);
  HealthUnderLoad(two, bytes, 64);
  two.kilnd->Stop();
  fs::remove_all(dir);
  std::printf("throughput, 1 tt-emu device          %8.2f jobs/s (%d clients)\n", tp1, clients);
  std::printf("throughput, 2 tt-emu devices         %8.2f jobs/s (ratio %.2f on %u cores)\n", tp2,
              tp2 / tp1, std::thread::hardware_concurrency());
  return 0;
}
