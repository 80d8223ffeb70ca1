// Reactions never block on a shared store either: an in-process kilnd (server::Daemon) on a real
// PostgreSQL (tests/support/pg_server.h) answers every ModelService RPC, a compile and a run of
// stored models, a job's watch and result streams (run by an in-process worker), with each store lookup off the reactor (store::ModelStore::reads_block; the
// shared store's lookups call AssertNotOnReactor, common/reactor.h counts violations).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "common/reactor.h"
#include "common/sha256.h"
#include "kiln/v1/compile.grpc.pb.h"
#include "kiln/v1/device.grpc.pb.h"
#include "kiln/v1/job.grpc.pb.h"
#include "server/daemon.h"
#include "tests/server/kilnd_test_util.h"
#include "tests/support/pg_server.h"

namespace kiln::testing {
namespace {

TEST(SharedStoreReactors, EveryModelRpcCompileAndRunLookUpOffTheReactor) {
  auto pg = PgServer::Start();
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  auto url = (*pg)->CreateDatabase("reactor");
  ASSERT_TRUE(url.ok());
  const auto dir = std::filesystem::temp_directory_path() / ("kiln_pg_reactor_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  server::Config config;
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "127.0.0.1:0";
  config.data_dir = dir.string();
  config.devices = "reference:1";
  config.database_url = *url;
  config.compile_cache_bytes = 0;
  server::Daemon daemon(config);
  ASSERT_TRUE(daemon.Start().ok());
  const uint64_t violations_before = ReactorViolations();
  auto channel = grpc::CreateChannel(daemon.grpc_address(), grpc::InsecureChannelCredentials());
  auto models = kiln::v1::ModelService::NewStub(channel);

  const std::string conv = ReadFileBytes(std::string(KILN_TEST_DATA) + "/conv-cases/conv_relu.onnx");
  const std::string mnist = ReadFileBytes(std::string(KILN_TEST_DATA) + "/server/mnist-ai85net5.qat.onnx");
  kiln::v1::UploadModelResponse up;
  ASSERT_TRUE(UploadBytes(*models, "conv", conv, &up).ok());
  ASSERT_TRUE(UploadBytes(*models, "mnist", mnist, &up).ok());
  const std::string id = Sha256Hex(mnist);
  {
    grpc::ClientContext ctx;
    kiln::v1::ListModelsResponse resp;
    ASSERT_TRUE(models->ListModels(&ctx, kiln::v1::ListModelsRequest(), &resp).ok());
    EXPECT_EQ(resp.models_size(), 2);
  }
  {
    grpc::ClientContext ctx;
    kiln::v1::LookupModelRequest req;
    req.set_name("mnist");
    kiln::v1::LookupModelResponse resp;
    ASSERT_TRUE(models->LookupModel(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.by_name().model_id(), id);
  }
  for (bool bytes : {false, true}) {
    grpc::ClientContext ctx;
    kiln::v1::GetModelRequest req;
    req.set_model_id(id.substr(0, 10));  // a prefix: resolved off the reactor too
    req.set_include_bytes(bytes);
    kiln::v1::GetModelResponse resp;
    grpc::Status st = models->GetModel(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.model().model_id(), id);
    EXPECT_EQ(resp.model_bytes().size(), bytes ? mnist.size() : 0u);
  }
  {
    grpc::ClientContext ctx;
    kiln::v1::ReadModelRequest req;
    req.set_model_id("mnist");
    auto reader = models->ReadModel(&ctx, req);
    kiln::v1::ReadModelResponse chunk;
    std::string all;
    while (reader->Read(&chunk)) all += chunk.chunk();
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_TRUE(all == mnist);
  }
  {
    auto compiler = kiln::v1::CompileService::NewStub(channel);
    grpc::ClientContext ctx;
    kiln::v1::CompileAi8xRequest req;
    req.set_model_id("mnist");
    req.mutable_options()->set_arch("ai85net5");
    req.mutable_options()->set_dataset("MNIST");
    kiln::v1::CompileAi8xResponse resp;
    ASSERT_TRUE(compiler->CompileAi8x(&ctx, req, &resp).ok());
    EXPECT_TRUE(resp.ok());
  }
  {
    auto devices = kiln::v1::DeviceService::NewStub(channel);
    grpc::ClientContext ctx;
    kiln::v1::RunConvLayersRequest req;
    req.set_model_id("conv");
    req.set_backend("reference");
    req.set_omit_outputs(true);
    kiln::v1::RunConvLayersResponse resp;
    grpc::Status st = devices->RunConvLayers(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  {
    // A job through the farm: a worker (a second Daemon in this process, --role worker) runs it;
    // the replica's WatchJob and GetJobResult streams read the database off their reactors.
    server::Config wc = config;
    wc.role = "worker";
    wc.data_dir = (dir / "worker").string();
    server::Daemon worker(wc);
    ASSERT_TRUE(worker.Start().ok());
    auto jobs = kiln::v1::JobService::NewStub(channel);
    kiln::v1::Job job;
    {
      grpc::ClientContext ctx;
      kiln::v1::SubmitRunRequest req;
      req.mutable_run()->set_model_id("conv");
      req.mutable_run()->set_backend("reference");
      ASSERT_TRUE(jobs->SubmitRun(&ctx, req, &job).ok());
    }
    {
      grpc::ClientContext ctx;
      kiln::v1::WatchJobRequest req;
      req.set_job_id(job.job_id());
      auto reader = jobs->WatchJob(&ctx, req);
      kiln::v1::JobEvent ev;
      int last_state = 0;
      while (reader->Read(&ev)) {
        if (ev.has_state_change()) last_state = ev.state_change().state();
      }
      ASSERT_TRUE(reader->Finish().ok());
      EXPECT_EQ(last_state, kiln::v1::SUCCEEDED);
    }
    {
      grpc::ClientContext ctx;
      kiln::v1::GetJobResultRequest req;
      req.set_job_id(job.job_id());
      auto reader = jobs->GetJobResult(&ctx, req);
      kiln::v1::JobResultChunk c;
      int64_t output_bytes = 0;
      while (reader->Read(&c)) {
        if (!c.has_result()) output_bytes += static_cast<int64_t>(c.output().data().size());
      }
      grpc::Status st = reader->Finish();
      ASSERT_TRUE(st.ok()) << st.error_message();
      EXPECT_GT(output_bytes, 0);
    }
    worker.Shutdown();
  }
  {
    grpc::ClientContext ctx;
    kiln::v1::DeleteModelRequest req;
    req.set_model_id("conv");
    kiln::v1::DeleteModelResponse resp;
    ASSERT_TRUE(models->DeleteModel(&ctx, req, &resp).ok());
  }
  EXPECT_EQ(ReactorViolations(), violations_before);
  daemon.Shutdown();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::testing
