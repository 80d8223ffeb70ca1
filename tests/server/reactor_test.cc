// Reactions never block: an in-process kilnd (server::Daemon) whose plan stage is held on a latch
// (api::SetPlanStageHookForTesting) for 64 concurrent first runs of 64 distinct models. While
// every plan worker is held and the rest of the runs wait in the plan lane, a health check,
// ListModels and an upload each complete; released, all 64 runs finish. No blocking call ran on a
// reactor thread meanwhile (common/reactor.h counts them).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "api/run_conv.h"
#include "common/reactor.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "kiln/v1/device.grpc.pb.h"
#include "server/daemon.h"
#include "tests/server/kilnd_test_util.h"

namespace kiln::testing {
namespace {

struct Latch {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  int waiting = 0;
};

TEST(ReactorsNeverBlock, HeldPlanStagesDoNotStopHealthListOrUpload) {
  const auto dir = std::filesystem::temp_directory_path() / ("kiln_reactor_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  server::Config config;
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "127.0.0.1:0";
  config.data_dir = dir.string();
  config.devices = "reference:1";
  config.compile_workers = 2;  // also the plan lane's workers
  config.device_queue = 64;
  config.device_queue_per_client = 64;  // the 64 runs below come from one principal (loopback)
  config.reference_threads = 1;
  server::Daemon daemon(config);
  ASSERT_TRUE(daemon.Start().ok());
  auto channel = grpc::CreateChannel(daemon.grpc_address(), grpc::InsecureChannelCredentials());
  auto models = kiln::v1::ModelService::NewStub(channel);
  auto devices = kiln::v1::DeviceService::NewStub(channel);
  auto health = grpc::health::v1::Health::NewStub(channel);

  // 64 distinct models: the same conv, each with its own doc_string (so its own id and plan).
  onnx::ModelProto base;
  ASSERT_TRUE(base.ParseFromString(ReadFileBytes(std::string(KILN_TEST_DATA) + "/conv-cases/conv_relu.onnx")));
  constexpr int kRuns = 64;
  std::vector<std::string> ids;
  for (int i = 0; i < kRuns; ++i) {
    onnx::ModelProto m = base;
    m.set_doc_string("copy " + std::to_string(i));
    kiln::v1::UploadModelResponse up;
    ASSERT_TRUE(UploadBytes(*models, "m" + std::to_string(i), m.SerializeAsString(), &up).ok());
    ids.push_back(up.model().model_id());
  }

  Latch latch;
  api::SetPlanStageHookForTesting([&](const std::string&) {
    std::unique_lock<std::mutex> l(latch.mu);
    ++latch.waiting;
    latch.cv.notify_all();
    latch.cv.wait(l, [&] { return latch.open; });
  });
  const uint64_t violations_before = ReactorViolations();
  std::vector<grpc::Status> results(kRuns);
  std::vector<std::thread> runs;
  for (int i = 0; i < kRuns; ++i) {
    runs.emplace_back([&, i] {
      kiln::v1::RunConvLayersRequest req;
      req.set_model_id(ids[i]);
      req.set_backend("reference");
      req.set_omit_outputs(true);
      grpc::ClientContext ctx;
      ctx.AddMetadata("x-kiln-client", "client" + std::to_string(i));
      kiln::v1::RunConvLayersResponse resp;
      results[i] = devices->RunConvLayers(&ctx, req, &resp);
    });
  }
  {
    std::unique_lock<std::mutex> l(latch.mu);
    latch.cv.wait(l, [&] { return latch.waiting == 2; });  // both plan workers are held
  }
  // Everything below answers although every plan worker is blocked.
  {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
  {
    grpc::ClientContext ctx;
    kiln::v1::ListModelsResponse resp;
    ASSERT_TRUE(models->ListModels(&ctx, kiln::v1::ListModelsRequest(), &resp).ok());
    EXPECT_EQ(resp.models_size(), kRuns);
  }
  {
    onnx::ModelProto m = base;
    m.set_doc_string("uploaded while plans are held");
    kiln::v1::UploadModelResponse up;
    grpc::Status st = UploadBytes(*models, "late", m.SerializeAsString(), &up);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(up.model().names(0), "late");
  }
  {
    std::lock_guard<std::mutex> l(latch.mu);
    EXPECT_EQ(latch.waiting, 2);  // no plan stage got past the held ones
    latch.open = true;
  }
  latch.cv.notify_all();
  for (auto& t : runs) t.join();
  api::SetPlanStageHookForTesting(nullptr);
  int ok = 0;
  for (const auto& r : results) {
    EXPECT_TRUE(r.ok()) << r.error_message();
    ok += r.ok();
  }
  EXPECT_EQ(ok, kRuns);
  EXPECT_EQ(latch.waiting, kRuns);  // every run was planned (64 distinct models)
  EXPECT_EQ(ReactorViolations(), violations_before);
  daemon.Shutdown();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::testing
