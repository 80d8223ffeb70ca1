// Two real kilnd replicas on loopback against one real PostgreSQL (tests/support/pg_server.h, a
// throwaway server for this binary, a fresh database per test): what one replica stores the other
// serves (README "Shared state on PostgreSQL"), a replica killed mid-upload leaves nothing partial
// anywhere, no replica keeps jobs in its data dir, and a schema newer than kilnd can use is
// refused at start.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <pqxx/pqxx>

#include <algorithm>
#include <chrono>
#include <random>
#include <filesystem>
#include <thread>

#include "common/sha256.h"
#include "kiln/v1/compile.grpc.pb.h"
#include "kiln/v1/device.grpc.pb.h"
#include "kiln/v1/job.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "store/pg/pg_schema.h"
#include "tests/server/kilnd_process.h"
#include "tests/server/kilnd_test_util.h"
#include "tests/server/onnx_bytes.h"
#include "tests/server/pg_kilnd_test.h"
#include "tests/support/pg_server.h"

namespace fs = std::filesystem;

namespace kiln::testing {
namespace {

using kiln::v1::ModelService;

class PgReplicasE2E : public PgKilndTest {
 protected:
  std::string DatabaseName() const override { return "replicas"; }

  // A replica with its own data dir (its upload spool) on the shared database.
  std::unique_ptr<KilndProcess> Replica(const std::string& name, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                                     "--data-dir", (dir_ / name).string(), "--shutdown-grace", "2",
                                     "--log-level", "warn"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<KilndProcess>(KILND_BINARY, args, (dir_ / "kilnd.log").string(),
                                          std::vector<std::string>{"KILN_DATABASE=" + url_});
  }
  static std::shared_ptr<grpc::Channel> Channel(const KilndProcess& k) {
    grpc::ChannelArguments ch;
    ch.SetMaxReceiveMessageSize(64 << 20);
    return grpc::CreateCustomChannel(k.grpc_address(), grpc::InsecureChannelCredentials(), ch);
  }
  static std::unique_ptr<ModelService::Stub> Models(const KilndProcess& k) { return ModelService::NewStub(Channel(k)); }

  static std::vector<std::string> ListIds(ModelService::Stub& stub) {
    std::vector<std::string> ids;
    for (const auto& m : ListAll(stub)) ids.push_back(m.model_id());
    return ids;
  }
  static Result<kiln::v1::Model> Get(ModelService::Stub& stub, const std::string& ref) {
    grpc::ClientContext ctx;
    kiln::v1::GetModelRequest req;
    req.set_model_id(ref);
    kiln::v1::GetModelResponse resp;
    grpc::Status st = stub.GetModel(&ctx, req, &resp);
    if (!st.ok()) return Status(static_cast<StatusCode>(st.error_code()), st.error_message());
    return resp.model();
  }
};

TEST_F(PgReplicasE2E, UploadThroughAIsListedReadCompiledAndRunThroughB) {
  auto a = Replica("a");
  auto b = Replica("b", {"--devices", "tt-emu:1"});
  auto ma = Models(*a);
  auto mb = Models(*b);
  const std::string mnist = ReadFileBytes(std::string(KILN_TEST_DATA) + "/server/mnist-ai85net5.qat.onnx");
  ASSERT_GT(mnist.size(), 500000u);
  const std::string id = Sha256Hex(mnist);
  kiln::v1::UploadModelResponse up;
  ASSERT_TRUE(UploadBytes(*ma, "mnist", mnist, &up).ok());
  EXPECT_EQ(up.model().model_id(), id);
  EXPECT_FALSE(up.already_stored());
  // More models than a ListModels page, through A too.
  for (unsigned i = 1; i <= 3; ++i) ASSERT_TRUE(UploadBytes(*ma, "small" + std::to_string(i), MakeOnnxBytes(2000, i), &up).ok());

  std::vector<std::string> listed = ListIds(*mb);
  EXPECT_EQ(listed.size(), 4u);
  EXPECT_NE(std::find(listed.begin(), listed.end(), id), listed.end());
  EXPECT_TRUE(std::is_sorted(listed.begin(), listed.end()));
  EXPECT_EQ(ListIds(*ma), listed);

  auto by_name = Get(*mb, "mnist");
  ASSERT_TRUE(by_name.ok()) << by_name.status().ToString();
  EXPECT_EQ(by_name->model_id(), id);
  EXPECT_EQ(by_name->size_bytes(), mnist.size());
  EXPECT_EQ(Get(*mb, id.substr(0, 12))->model_id(), id);  // a short id prefix resolves through B too
  {
    grpc::ClientContext ctx;
    kiln::v1::LookupModelRequest req;
    req.set_sha256(id);
    req.set_name("small2");
    kiln::v1::LookupModelResponse resp;
    ASSERT_TRUE(mb->LookupModel(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.by_sha256().model_id(), id);
    EXPECT_EQ(resp.by_name().model_id(), Sha256Hex(MakeOnnxBytes(2000, 2)));
  }
  // The bytes through B, streamed and inline, are A's upload.
  std::string streamed;
  ASSERT_TRUE(ReadAll(*mb, "mnist", &streamed).ok());
  EXPECT_TRUE(streamed == mnist);
  // B keeps the bytes in its local blob cache (store/blob_cache.h), checked again on every read.
  EXPECT_TRUE(fs::exists(dir_ / "b" / "blob-cache" / id));
  EXPECT_FALSE(fs::exists(dir_ / "a" / "blob-cache" / id));
  {
    grpc::ClientContext ctx;
    kiln::v1::GetModelRequest req;
    req.set_model_id(id);
    req.set_include_bytes(true);
    kiln::v1::GetModelResponse resp;
    ASSERT_TRUE(mb->GetModel(&ctx, req, &resp).ok());
    EXPECT_TRUE(resp.model_bytes() == mnist);
  }
  // Re-uploading the same bytes through B: already stored, a second name.
  ASSERT_TRUE(UploadBytes(*mb, "mnist-again", mnist, &up).ok());
  EXPECT_TRUE(up.already_stored());
  EXPECT_EQ(Get(*ma, "mnist-again")->model_id(), id);

  // Compile of the stored model through B.
  auto compiler = kiln::v1::CompileService::NewStub(Channel(*b));
  kiln::v1::CompileAi8xRequest creq;
  creq.set_model_id("mnist");
  creq.mutable_options()->set_arch("ai85net5");
  creq.mutable_options()->set_dataset("MNIST");
  kiln::v1::CompileAi8xResponse cresp;
  {
    grpc::ClientContext ctx;
    grpc::Status st = compiler->CompileAi8x(&ctx, creq, &cresp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  EXPECT_TRUE(cresp.ok());
  EXPECT_EQ(cresp.model_id(), id);
  EXPECT_EQ(cresp.layers_size(), 5);
  EXPECT_NE(cresp.yaml().find("arch: ai85net5"), std::string::npos);
  EXPECT_FALSE(cresp.cache_hit());
  {
    grpc::ClientContext ctx;
    kiln::v1::CompileAi8xResponse again;
    ASSERT_TRUE(compiler->CompileAi8x(&ctx, creq, &again).ok());
    EXPECT_TRUE(again.cache_hit());  // B's own compile cache, keyed by the shared model id
    EXPECT_EQ(again.yaml(), cresp.yaml());
  }

  // A run of a model stored through A, on B's device.
  const std::string conv = ReadFileBytes(std::string(KILN_TEST_DATA) + "/conv-cases/conv_bn_eps1e-3.onnx");
  ASSERT_TRUE(UploadBytes(*ma, "conv_bn", conv, &up).ok());
  auto devices = kiln::v1::DeviceService::NewStub(Channel(*b));
  kiln::v1::RunConvLayersRequest run;
  run.set_model_id("conv_bn");
  run.set_backend("tt-emu");
  run.set_mode(kiln::v1::PER_LAYER);
  kiln::v1::RunConvLayersResponse ran;
  {
    grpc::ClientContext ctx;
    grpc::Status st = devices->RunConvLayers(&ctx, run, &ran);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  EXPECT_EQ(ran.device(), "tt-emu:0");
  EXPECT_GT(ran.layers_size(), 0);
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

TEST_F(PgReplicasE2E, DeleteThroughBIsGoneInAAndAMovedNameResolvesToTheNewModelInB) {
  auto a = Replica("a");
  auto b = Replica("b");
  auto ma = Models(*a);
  auto mb = Models(*b);
  const std::string one = MakeOnnxBytes(5000, 1), two = MakeOnnxBytes(5000, 2), three = MakeOnnxBytes(5000, 3);
  kiln::v1::UploadModelResponse up;
  ASSERT_TRUE(UploadBytes(*ma, "current", one, &up).ok());
  ASSERT_TRUE(UploadBytes(*ma, "keep", three, &up).ok());
  EXPECT_EQ(Get(*mb, "current")->model_id(), Sha256Hex(one));

  // The name moves in A; B resolves it to the new model at once (no per-replica index).
  ASSERT_TRUE(UploadBytes(*ma, "current", two, &up).ok());
  EXPECT_EQ(up.replaced_model_id(), Sha256Hex(one));
  EXPECT_EQ(Get(*mb, "current")->model_id(), Sha256Hex(two));
  std::string bytes;
  ASSERT_TRUE(ReadAll(*mb, "current", &bytes).ok());
  EXPECT_TRUE(bytes == two);
  // `one` lost its only name: it stays by id (a name move never deletes a model).
  EXPECT_TRUE(Get(*mb, Sha256Hex(one)).ok());

  // Delete through B (by id, and a model by its last name): gone in A, bytes and all.
  for (const std::string& ref : {Sha256Hex(one), std::string("current")}) {
    grpc::ClientContext ctx;
    kiln::v1::DeleteModelRequest req;
    req.set_model_id(ref);
    kiln::v1::DeleteModelResponse resp;
    grpc::Status st = mb->DeleteModel(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << ref << ": " << st.error_message();
  }
  for (const std::string& gone : {Sha256Hex(one), Sha256Hex(two), std::string("current")}) {
    EXPECT_EQ(Get(*ma, gone).status().code(), StatusCode::kNotFound) << gone;
    EXPECT_EQ(ReadAll(*ma, gone, &bytes).error_code(), grpc::StatusCode::NOT_FOUND) << gone;
  }
  EXPECT_EQ(ListIds(*ma), std::vector<std::string>{Sha256Hex(three)});
  // The bytes went with the models: one blob (and one large object) left.
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_blobs"), 1);
  EXPECT_EQ(Count(url_, "SELECT count(*) FROM pg_largeobject_metadata"), 1);
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

TEST_F(PgReplicasE2E, KillOfAReplicaMidUploadLeavesNothingPartialAnywhere) {
  auto b = Replica("b");
  auto mb = Models(*b);
  const std::string big = MakeOnnxBytes(24u << 20, 7);  // 24 MiB: its commit takes a while
  const std::string id = Sha256Hex(big);
  std::mt19937 rng(19);
  int visible = 0;
  for (int round = 0; round < 6; ++round) {
    auto a = Replica("a");
    auto ma = Models(*a);
    grpc::ClientContext ctx;
    kiln::v1::UploadModelResponse resp;
    auto writer = ma->UploadModel(&ctx, &resp);
    kiln::v1::UploadModelRequest req;
    req.mutable_header()->set_name("big");
    req.mutable_header()->set_size_bytes(big.size());
    req.mutable_header()->set_sha256(id);
    ASSERT_TRUE(writer->Write(req));
    // Even rounds: killed while the stream still sends (half the bytes sent); rounds 1 and 3:
    // after the last byte, at a random point of the commit (spool → large object → index);
    // round 5: after the commit answered (the model must then be there, whole).
    const size_t stop = round % 2 == 0 ? big.size() / 2 : big.size();
    for (size_t off = 0; off < stop; off += 1 << 20) {
      req.set_chunk(big.substr(off, std::min<size_t>(1 << 20, stop - off)));
      ASSERT_TRUE(writer->Write(req));
    }
    bool answered = false;
    if (round == 5) {
      writer->WritesDone();
      ASSERT_TRUE(writer->Finish().ok());
      answered = true;
    } else if (round % 2 == 1) {
      writer->WritesDone();
      std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 400)(rng)));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the chunks reach A's spool
    }
    a->Stop(SIGKILL);
    if (!answered) (void)writer->Finish();

    // Through B: the model is either whole (bytes identical) or absent, never partial.
    auto got = Get(*mb, id);
    if (got.ok()) {
      ++visible;
      std::string bytes;
      ASSERT_TRUE(ReadAll(*mb, id, &bytes).ok());
      EXPECT_TRUE(bytes == big) << "round " << round;
      EXPECT_EQ(Get(*mb, "big")->model_id(), id);
    } else {
      EXPECT_EQ(got.status().code(), StatusCode::kNotFound) << got.status().ToString();
      EXPECT_TRUE(ListIds(*mb).empty());
    }
    if (round % 2 == 0) {
      EXPECT_FALSE(got.ok()) << "a half-sent upload was stored (round " << round << ")";
    }
    if (answered) {
      EXPECT_TRUE(got.ok()) << "an answered upload is not stored: " << got.status().ToString();
    }
    // In the database: every large object belongs to a committed blob of the right size (the
    // upload's transaction took an unfinished one with it), no model without its blob.
    EXPECT_EQ(Count(url_, "SELECT count(*) FROM pg_largeobject_metadata m"
                          " WHERE NOT EXISTS (SELECT 1 FROM kiln_blobs b WHERE b.loid = m.oid)"), 0);
    EXPECT_EQ(Count(url_, "SELECT count(*) FROM kiln_models m"
                          " WHERE NOT EXISTS (SELECT 1 FROM kiln_blobs b WHERE b.sha256 = m.model_id)"), 0);
    EXPECT_LE(Count(url_, "SELECT count(*) FROM kiln_blobs"), 1);
    // The restarted replica A sweeps its spool and serves the same state.
    auto again = Replica("a");
    auto m2 = Models(*again);
    EXPECT_EQ(ListIds(*m2), ListIds(*mb));
    EXPECT_TRUE(fs::is_empty(dir_ / "a" / "tmp"));
    if (got.ok()) {
      // Delete it for the next round.
      grpc::ClientContext dctx;
      kiln::v1::DeleteModelRequest dreq;
      dreq.set_model_id(id);
      kiln::v1::DeleteModelResponse dresp;
      ASSERT_TRUE(m2->DeleteModel(&dctx, dreq, &dresp).ok());
    }
    EXPECT_EQ(again->Stop(), 0);
  }
  std::cerr << visible << " of 6 killed uploads had committed\n";
  EXPECT_EQ(b->Stop(), 0);
}

TEST_F(PgReplicasE2E, NoJobStoreInADataDirAndNoRepairOnADatabase) {
  auto a = Replica("a");
  auto jobs = kiln::v1::JobService::NewStub(Channel(*a));
  {
    // Jobs are the farm's (tests/server/pg_farm_e2e_test.cc): listed from the database.
    grpc::ClientContext ctx;
    kiln::v1::ListJobsResponse resp;
    EXPECT_TRUE(jobs->ListJobs(&ctx, kiln::v1::ListJobsRequest(), &resp).ok());
    EXPECT_EQ(resp.jobs_size(), 0);
  }
  // No job store in the replica's data dir: nothing another replica would need.
  EXPECT_FALSE(fs::exists(dir_ / "a" / "jobs"));
  EXPECT_EQ(a->Stop(), 0);
  // --repair is the embedded store's: refused with a database, nothing started.
  int rc = 0;
  const std::string out = RunShell("KILN_DATABASE='" + url_ + "' " + KILND_BINARY + " --repair --data-dir " +
                                       (dir_ / "a").string() + " 2>&1",
                                   &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("embedded store"), std::string::npos) << out;
}

TEST_F(PgReplicasE2E, ASchemaNewerThanKilndCanUseIsRefusedAtStart) {
  {
    auto a = Replica("a");  // migrates the empty database
    EXPECT_EQ(a->Stop(), 0);
  }
  const int known = store::pg::KnownSchemaVersion();
  EXPECT_EQ(Count(url_, "SELECT max(version) FROM kiln_schema_version"), known);
  auto add_version = [&](int version, int compatible_with) {
    pqxx::connection c(url_);
    pqxx::work tx(c);
    tx.exec_params0("INSERT INTO kiln_schema_version (version, compatible_with) VALUES ($1, $2)", version,
                    compatible_with);
    tx.commit();
  };
  // A newer, additive schema (compatible with this kilnd's): kilnd serves on it (a rolling update).
  add_version(known + 1, known);
  {
    auto a = Replica("a");
    kiln::v1::UploadModelResponse up;
    EXPECT_TRUE(UploadBytes(*Models(*a), "m", MakeOnnxBytes(100), &up).ok());
    EXPECT_EQ(a->Stop(), 0);
  }
  // A newer schema that needs a newer kilnd: refused, with the versions in the message.
  add_version(known + 2, known + 2);
  int rc = 0;
  const std::string out = RunShell("KILN_DATABASE='" + url_ + "' " + KILND_BINARY + " --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --data-dir " +
                                       (dir_ / "a").string() + " 2>&1",
                                   &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("schema is version " + std::to_string(known + 2)), std::string::npos) << out;
  EXPECT_NE(out.find("upgrade kilnd"), std::string::npos) << out;
  EXPECT_EQ(out.find("listening"), std::string::npos) << out;
}

}  // namespace
}  // namespace kiln::testing
