// The store's hardening seen through a real kilnd on loopback (tests/server/kilnd_process.h):
// idle uploads, stalled read streams, ListModels pages, strings that are not UTF-8, one lookup per
// GetModel, the damaged-index refusal and `kilnd --repair`.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include "common/sha256.h"
#include "kiln/v1/job.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "tests/server/kilnd_process.h"
#include "tests/server/kilnd_test_util.h"
#include "tests/server/onnx_bytes.h"

namespace fs = std::filesystem;

namespace kiln::testing {
namespace {

using kiln::v1::ModelService;

std::string WithProducer(const std::string& producer, unsigned seed) {
  onnx::ModelProto m;
  m.ParseFromString(MakeOnnxBytes(100, seed));
  m.set_producer_name(producer);
  return m.SerializeAsString();
}

// Runs a command line, returns its exit status and stdout+stderr.
std::pair<int, std::string> RunCommand(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = p ? ::pclose(p) : -1;
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

class StoreE2E : public KilndTest {
 protected:
  static std::unique_ptr<ModelService::Stub> Stub(const KilndProcess& k) {
    return ModelService::NewStub(grpc::CreateChannel(k.grpc_address(), grpc::InsecureChannelCredentials()));
  }
};

// A header that declares a large model and then silence: the upload ends after the idle timeout
// and its reservation goes with it, so other uploads get through again.
TEST_F(StoreE2E, IdleUploadIsEndedAndFreesItsReservation) {
  // 3 s, not 1: under a loaded `make test` the idle stream could be ended before the loop below saw
  // its reservation, and the loop then ran out (11 s, once).
  auto k = StartKilnd({"--upload-idle-timeout", "3", "--max-store-bytes", "1000000"});
  auto stub = Stub(*k);
  grpc::ClientContext idle_ctx;
  kiln::v1::UploadModelResponse idle_resp;
  auto idle = stub->UploadModel(&idle_ctx, &idle_resp);
  kiln::v1::UploadModelRequest req;
  req.mutable_header()->set_name("idle");
  req.mutable_header()->set_size_bytes(900000);
  req.mutable_header()->set_sha256(std::string(64, 'a'));
  ASSERT_TRUE(idle->Write(req));
  // While the reservation is held, a second upload of 200 kB does not fit.
  std::string bytes = MakeOnnxBytes(200000);
  kiln::v1::UploadModelResponse resp;
  grpc::Status st;
  for (int i = 0; i < 100; ++i) {  // until the header has been processed (bounded: 10 s)
    st = UploadBytes(*stub, "m", bytes, &resp);
    if (!st.ok()) break;
    ASSERT_TRUE(UploadBytes(*stub, "m", bytes, &resp).ok());
    grpc::ClientContext dctx;
    kiln::v1::DeleteModelRequest del;
    del.set_model_id("m");
    kiln::v1::DeleteModelResponse dresp;
    stub->DeleteModel(&dctx, del, &dresp);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_NE(st.error_message().find("900000 bytes are reserved"), std::string::npos) << st.error_message();
  // The idle stream is ended by the server (no client deadline is set).
  grpc::Status idle_st = idle->Finish();
  EXPECT_EQ(idle_st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << idle_st.error_message();
  st = UploadBytes(*stub, "m", bytes, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
}

// An upload that trickles a byte every 100 ms is ended like a silent one (kUploadProgressBytes: it
// owes 200 kB, so 64 KiB per --upload-idle-timeout is progress), while one at 160 kB/s in 16 kB
// chunks, the same idle timeout, stays open across several timeouts and is stored.
TEST_F(StoreE2E, TricklingUploadIsEndedLikeAnIdleOne) {
  auto k = StartKilnd({"--upload-idle-timeout", "1"});
  auto stub = Stub(*k);
  const std::string bytes = MakeOnnxBytes(200000);
  // Sends `chunk` bytes every `every` until all is sent, the stream breaks or `stop` has passed,
  // then half-closes and returns the call's status.
  auto stream = [&](size_t chunk, std::chrono::milliseconds every, std::chrono::seconds stop, grpc::ClientContext* ctx,
                    kiln::v1::UploadModelResponse* resp, size_t* sent) {
    const auto end = std::chrono::steady_clock::now() + stop;
    auto w = stub->UploadModel(ctx, resp);
    kiln::v1::UploadModelRequest req;
    req.mutable_header()->set_name("slow");
    req.mutable_header()->set_size_bytes(bytes.size());
    req.mutable_header()->set_sha256(Sha256Hex(bytes));
    EXPECT_TRUE(w->Write(req));
    for (*sent = 0; *sent < bytes.size() && std::chrono::steady_clock::now() < end; *sent += chunk) {
      req.set_chunk(bytes.substr(*sent, chunk));
      if (!w->Write(req)) break;  // the server ended the stream
      std::this_thread::sleep_for(every);
    }
    w->WritesDone();
    return w->Finish();
  };
  // 1 byte every 100 ms (5.5 hours for the whole model), for 3 s: the server has ended it by then,
  // at the first timeout (under 64 KiB had come), with its own status; a client's Write may go on
  // succeeding for a while after that, so the client stops by itself and reads the status.
  grpc::ClientContext trickle_ctx;
  kiln::v1::UploadModelResponse trickle_resp;
  size_t trickled = 0;
  grpc::Status st =
      stream(1, std::chrono::milliseconds(100), std::chrono::seconds(3), &trickle_ctx, &trickle_resp, &trickled);
  ASSERT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_NE(st.error_message().find("of the 65536 bytes expected in 1000 ms (--upload-idle-timeout)"),
            std::string::npos)
      << st.error_message();
  // 200 kB at 16 kB every 100 ms: 64 KiB arrives within every timeout, so it is not idle.
  grpc::ClientContext ok_ctx;
  kiln::v1::UploadModelResponse ok_resp;
  size_t sent = 0;
  st = stream(16000, std::chrono::milliseconds(100), std::chrono::seconds(30), &ok_ctx, &ok_resp, &sent);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(ok_resp.model().model_id(), Sha256Hex(bytes));
}

// Streams of stored bytes whose clients stop reading (server/stream_guard.h): a client holds at
// most half of --max-read-streams, the next is refused before any message, and the server cancels
// a stream whose write has waited --stream-write-timeout, which frees its slot for the next reader.
TEST_F(StoreE2E, StalledReadStreamsAreCancelledAndFreeTheirSlots) {
  auto k = StartKilnd({"--max-read-streams", "4", "--stream-write-timeout", "1"});
  auto stub = Stub(*k);
  // Larger than what gRPC's flow control lets through to a client that does not read.
  const std::string bytes = MakeOnnxBytes(48u << 20);
  kiln::v1::UploadModelResponse up;
  ASSERT_TRUE(UploadBytes(*stub, "big", bytes, &up).ok());
  kiln::v1::ReadModelRequest req;
  req.set_model_id("big");
  // Two streams (this client's share) that read one message, so they are open on the server, and
  // then nothing.
  grpc::ClientContext c1, c2;
  auto r1 = stub->ReadModel(&c1, req);
  auto r2 = stub->ReadModel(&c2, req);
  kiln::v1::ReadModelResponse msg;
  ASSERT_TRUE(r1->Read(&msg));
  size_t got1 = msg.chunk().size();
  ASSERT_TRUE(r2->Read(&msg));
  // A third is refused at once, naming the limit.
  {
    grpc::ClientContext c3;
    auto r3 = stub->ReadModel(&c3, req);
    EXPECT_FALSE(r3->Read(&msg));
    grpc::Status st = r3->Finish();
    ASSERT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    EXPECT_NE(st.error_message().find("this client (ipv4:127.0.0.1) holds 2 streams of stored bytes, its share of "
                                      "the 4 (--max-read-streams)"),
              std::string::npos)
        << st.error_message();
    auto pushback = c3.GetServerTrailingMetadata().find("grpc-retry-pushback-ms");
    ASSERT_NE(pushback, c3.GetServerTrailingMetadata().end());
    EXPECT_EQ(std::string(pushback->second.data(), pushback->second.size()), "1000");
  }
  EXPECT_EQ(ScrapeMetrics(k->metrics_address())["kiln_read_streams"], 2);
  // GetJobResult shares the limit (it is refused before it looks the job up).
  {
    auto jobs = kiln::v1::JobService::NewStub(grpc::CreateChannel(k->grpc_address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext c3;
    kiln::v1::GetJobResultRequest jreq;
    jreq.set_job_id("no-such-job");
    auto r3 = jobs->GetJobResult(&c3, jreq);
    kiln::v1::JobResultChunk chunk;
    EXPECT_FALSE(r3->Read(&chunk));
    grpc::Status st = r3->Finish();
    ASSERT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    EXPECT_NE(st.error_message().find("GetJobResult refused"), std::string::npos) << st.error_message();
  }
  // After the write timeout (and the sweep, a tenth of it), the stalled streams are cancelled: what
  // is left to read ends CANCELLED, short of the model.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  while (r1->Read(&msg)) got1 += msg.chunk().size();
  grpc::Status st1 = r1->Finish();
  EXPECT_EQ(st1.error_code(), grpc::StatusCode::CANCELLED) << st1.error_message();
  EXPECT_LT(got1, bytes.size());
  while (r2->Read(&msg)) {
  }
  EXPECT_EQ(r2->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // Their slots are free: two readers that read get a whole model (a small one, which a loaded
  // machine sends well within the timeout).
  const std::string small = MakeOnnxBytes(3000);
  ASSERT_TRUE(UploadBytes(*stub, "small", small, &up).ok());
  req.set_model_id("small");
  grpc::ClientContext c4, c5;
  auto r4 = stub->ReadModel(&c4, req);
  auto r5 = stub->ReadModel(&c5, req);
  for (auto* r : {r4.get(), r5.get()}) {
    std::string all;
    while (r->Read(&msg)) all += msg.chunk();
    grpc::Status st = r->Finish();
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(all, small);
  }
  auto m = ScrapeMetrics(k->metrics_address());
  EXPECT_EQ(m["kiln_rejected_requests_total{reason=\"stream_write_timeout\"}"], 2);
  EXPECT_EQ(m["kiln_rejected_requests_total{reason=\"read_streams\"}"], 2);
  EXPECT_EQ(m["kiln_read_streams"], 0);
}

// A client that reads streams one after another never finds its own ended streams holding its
// share (one stream, with --max-read-streams 2): a stream's slot is released before its status is
// sent, not when gRPC later runs OnDone. Two busy threads compete with kilnd for the CPU while
// the 200 reads run (a fraction of a second), which delayed OnDone enough that 29–44 of them were
// refused when the slot went there.
TEST_F(StoreE2E, SequentialReadsNeverFindTheirEndedStreamsHoldingTheShare) {
  auto k = StartKilnd({"--max-read-streams", "2"});
  auto stub = Stub(*k);
  const std::string bytes = MakeOnnxBytes(3000);
  kiln::v1::UploadModelResponse up;
  ASSERT_TRUE(UploadBytes(*stub, "small", bytes, &up).ok());
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int i = 0; i < 2; ++i)
    busy.emplace_back([&stop] {
      volatile uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  int refused = 0, short_reads = 0;
  for (int i = 0; i < 200; ++i) {
    kiln::v1::ReadModelRequest req;
    req.set_model_id("small");
    grpc::ClientContext c;
    auto r = stub->ReadModel(&c, req);
    kiln::v1::ReadModelResponse msg;
    std::string got;
    while (r->Read(&msg)) got += msg.chunk();
    grpc::Status st = r->Finish();
    if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) ++refused;
    else if (!st.ok() || got != bytes) ++short_reads;
  }
  stop = true;
  for (auto& t : busy) t.join();
  EXPECT_EQ(refused, 0);
  EXPECT_EQ(short_reads, 0);
}

// ListModels pages: every model exactly once, pages no larger than asked, a bad token refused.
TEST_F(StoreE2E, ListModelsPagesThroughEveryModel) {
  auto k = StartKilnd({"--list-page-size", "7"});
  auto stub = Stub(*k);
  std::set<std::string> uploaded;
  for (int i = 0; i < 23; ++i) {
    kiln::v1::UploadModelResponse resp;
    ASSERT_TRUE(UploadBytes(*stub, "m" + std::to_string(i), MakeOnnxBytes(100, i + 1), &resp).ok());
    uploaded.insert(resp.model().model_id());
  }
  std::set<std::string> seen;
  kiln::v1::ListModelsRequest req;
  req.set_page_size(5);
  int pages = 0;
  do {
    grpc::ClientContext ctx;
    kiln::v1::ListModelsResponse resp;
    ASSERT_TRUE(stub->ListModels(&ctx, req, &resp).ok());
    EXPECT_LE(resp.models_size(), 5);
    for (const auto& m : resp.models()) EXPECT_TRUE(seen.insert(m.model_id()).second);
    req.set_page_token(resp.next_page_token());
    ASSERT_LT(++pages, 10);
  } while (!req.page_token().empty());
  EXPECT_EQ(pages, 5);
  EXPECT_EQ(seen, uploaded);
  // page_size 0: the server's list_page_size.
  grpc::ClientContext ctx;
  kiln::v1::ListModelsResponse first;
  ASSERT_TRUE(stub->ListModels(&ctx, kiln::v1::ListModelsRequest(), &first).ok());
  EXPECT_EQ(first.models_size(), 7);
  EXPECT_FALSE(first.next_page_token().empty());
  grpc::ClientContext bad_ctx;
  kiln::v1::ListModelsRequest bad;
  bad.set_page_token("not-a-token");
  kiln::v1::ListModelsResponse bad_resp;
  EXPECT_EQ(stub->ListModels(&bad_ctx, bad, &bad_resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // The CLI reads every page.
  auto [code, out] = RunCommand(std::string(KILN_BINARY) + " --server " + k->grpc_address() + " models");
  EXPECT_EQ(code, 0) << out;
  for (const auto& id : uploaded) EXPECT_NE(out.find(id), std::string::npos);
}

// producer_name "\xff\xfe" (onnx.checker accepts it) must not break ListModels or GetModel.
TEST_F(StoreE2E, InvalidUtf8InAModelDoesNotPoisonAnswers) {
  auto k = StartKilnd();
  auto stub = Stub(*k);
  kiln::v1::UploadModelResponse up;
  grpc::Status st = UploadBytes(*stub, "bad-utf8", WithProducer("\xff\xfe", 1), &up);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_TRUE(UploadBytes(*stub, "fine", MakeOnnxBytes(100, 2), &up).ok());
  grpc::ClientContext ctx;
  kiln::v1::ListModelsResponse list;
  st = stub->ListModels(&ctx, kiln::v1::ListModelsRequest(), &list);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(list.models_size(), 2);
  grpc::ClientContext gctx;
  kiln::v1::GetModelRequest get;
  get.set_model_id("bad-utf8");
  kiln::v1::GetModelResponse got;
  st = stub->GetModel(&gctx, get, &got);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(got.model().producer_name(), "\xEF\xBF\xBD\xEF\xBF\xBD");  // two U+FFFD
}

// GetModel(include_bytes) by a name that moves between two models: the bytes always hash to
// the id of the same answer (one lookup). A race: bounded to 1,500 reads.
TEST_F(StoreE2E, GetModelBytesAlwaysMatchTheirId) {
  auto k = StartKilnd();
  auto stub = Stub(*k);
  std::string a = MakeOnnxBytes(2000, 1), b = MakeOnnxBytes(2000, 2);
  kiln::v1::UploadModelResponse up;
  ASSERT_TRUE(UploadBytes(*stub, "a-keep", a, &up).ok());
  ASSERT_TRUE(UploadBytes(*stub, "b-keep", b, &up).ok());
  std::atomic<bool> stop{false};
  std::thread mover([&] {
    auto s = Stub(*k);
    for (int i = 0; !stop; ++i) {
      kiln::v1::UploadModelResponse r;
      UploadBytes(*s, "moving", i % 2 ? a : b, &r);
    }
  });
  int mismatches = 0, answered = 0;
  for (int i = 0; i < 1500; ++i) {
    grpc::ClientContext ctx;
    kiln::v1::GetModelRequest req;
    req.set_model_id("moving");
    req.set_include_bytes(true);
    kiln::v1::GetModelResponse resp;
    if (!stub->GetModel(&ctx, req, &resp).ok()) continue;
    ++answered;
    if (Sha256Hex(resp.model_bytes()) != resp.model().model_id()) ++mismatches;
  }
  stop = true;
  mover.join();
  EXPECT_GT(answered, 0);
  EXPECT_EQ(mismatches, 0);
}

// A damaged index stops kilnd with a message naming --repair; `kilnd --repair` rebuilds it and
// kilnd then serves every model again.
TEST_F(StoreE2E, DamagedIndexRefusesToStartAndRepairRebuildsIt) {
  std::vector<std::string> ids;
  {
    auto k = StartKilnd();
    auto stub = Stub(*k);
    for (int i = 0; i < 3; ++i) {
      kiln::v1::UploadModelResponse up;
      ASSERT_TRUE(UploadBytes(*stub, "m" + std::to_string(i), MakeOnnxBytes(300, i + 1), &up).ok());
      ids.push_back(up.model().model_id());
    }
    ASSERT_EQ(k->Stop(), 0);
  }
  fs::path index = dir_ / "data" / "index.yaml";
  std::string text = ReadFileBytes(index.string());
  std::ofstream(index, std::ios::trunc) << text.substr(0, text.find("\n  - id:", text.find("- id:") + 1) + 1);
  // Bounded: a kilnd that accepts the damaged index would serve forever.
  std::string base = "timeout 20 " + std::string(KILND_BINARY) + " --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --data-dir " +
                     (dir_ / "data").string();
  auto [code, out] = RunCommand(base);
  EXPECT_EQ(code, 1) << out;  // refused at start-up (124 would be: started and served)
  EXPECT_NE(out.find("kilnd --repair"), std::string::npos) << out;
  auto [rcode, rout] = RunCommand(base + " --repair");
  EXPECT_EQ(rcode, 0) << rout;
  EXPECT_NE(rout.find("3 models"), std::string::npos) << rout;
  auto k = StartKilnd();
  auto stub = Stub(*k);
  for (const auto& id : ids) {
    grpc::ClientContext ctx;
    kiln::v1::GetModelRequest req;
    req.set_model_id(id);
    req.set_include_bytes(true);
    kiln::v1::GetModelResponse resp;
    ASSERT_TRUE(stub->GetModel(&ctx, req, &resp).ok()) << id;
    EXPECT_EQ(Sha256Hex(resp.model_bytes()), id);
  }
}

}  // namespace
}  // namespace kiln::testing
