// The store's limits and its answers under hostile input (store/model_store.h): quota bypass by
// re-uploads, metadata size, the in-flight bounds, one model-size limit, damaged indexes, and
// readers never waiting for an index write. Uses only the store's API as of before these limits
// where it can, so that each test also shows the old behaviour failing.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "common/sha256.h"
#include "compiler/onnx/loader.h"
#include "compiler/onnx/summary.h"
#include "store/model_store.h"
#include "tests/server/onnx_bytes.h"

namespace fs = std::filesystem;

namespace kiln::store {
namespace {

std::string ReadText(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string WithProducer(const std::string& producer, unsigned seed = 1) {
  onnx::ModelProto m;
  m.ParseFromString(testing::MakeOnnxBytes(100, seed));
  m.set_producer_name(producer);
  return m.SerializeAsString();
}

class StoreLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln-store-limits-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<ModelStore> Open(uint64_t max_store = 0) {
    ModelStoreOptions o;
    o.dir = dir_;
    o.max_store_bytes = max_store;
    auto s = ModelStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  Result<std::unique_ptr<ModelStore>> TryOpen() {
    ModelStoreOptions o;
    o.dir = dir_;
    return ModelStore::Open(o);
  }
  Result<ModelInfo> Put(ModelStore& store, const std::string& name, const std::string& bytes) {
    auto up = store.BeginUpload(name, bytes.size(), Sha256Hex(bytes));
    if (!up.ok()) return up.status();
    KILN_RETURN_IF_ERROR((*up)->Append(bytes.data(), bytes.size()));
    return (*up)->Commit();
  }
  // Three models a, b, c in a closed store; returns the index text.
  std::string ThreeModels() {
    auto store = Open();
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(Put(*store, std::string(1, static_cast<char>('a' + i)), testing::MakeOnnxBytes(500, i + 1)).ok());
    }
    return ReadText(dir_ / "index.yaml");
  }

  fs::path dir_;
};

// Re-uploads of a stored model's sha256 and size skip the store limit (they add nothing once
// committed) but each holds a temp file meanwhile: the count of uploads in flight is bounded
// (default 16) whatever they upload.
TEST_F(StoreLimitsTest, ReuploadsOfAStoredModelAreBoundedInFlight) {
  std::string bytes = testing::MakeOnnxBytes(4000);
  auto store = Open(/*max_store=*/bytes.size());
  ASSERT_TRUE(Put(*store, "m", bytes).ok());
  std::vector<std::unique_ptr<Upload>> open;
  Status refused;
  for (int i = 0; i < 64 && refused.ok(); ++i) {
    auto up = store->BeginUpload("m" + std::to_string(i), bytes.size(), Sha256Hex(bytes));
    if (up.ok()) {
      open.push_back(std::move(up).value());
    } else {
      refused = up.status();
    }
  }
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(open.size(), 16u);
  EXPECT_NE(refused.message().find("reserved"), std::string::npos) << refused.message();
  open.clear();  // aborted: the bound frees up
  EXPECT_TRUE(store->BeginUpload("again", bytes.size(), Sha256Hex(bytes)).ok());
}

// The refusal names the bytes that in-flight uploads hold, so "store full" can be told apart
// from "someone is holding reservations".
TEST_F(StoreLimitsTest, StoreFullMessageGivesReservedBytes) {
  auto store = Open(/*max_store=*/10000);
  auto held = store->BeginUpload("held", 8000, std::string(64, 'a'));
  ASSERT_TRUE(held.ok());
  auto up = store->BeginUpload("next", 4000, std::string(64, 'b'));
  ASSERT_FALSE(up.ok());
  EXPECT_EQ(up.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(up.status().message().find("8000 bytes are reserved"), std::string::npos) << up.status().message();
}

// A 90 MiB producer_name made the index 270 MiB in three uploads; metadata is capped (64 KiB).
TEST_F(StoreLimitsTest, HugeProducerNameIsRefused) {
  auto store = Open();
  auto info = Put(*store, "big-meta", WithProducer(std::string(200 << 10, 'p')));
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(info.status().message().find("max_metadata_bytes"), std::string::npos) << info.status().message();
  EXPECT_EQ(store->model_count(), 0u);
  EXPECT_TRUE(Put(*store, "small-meta", WithProducer(std::string(1000, 'p'))).ok());
}

// Readers never wait for an index write: the write below blocks in open() of its temp file (a
// FIFO put there, which blocks until a reader opens it), and Get/List must still answer.
TEST_F(StoreLimitsTest, ReadsDoNotWaitForAnIndexWrite) {
  auto store = Open();
  ASSERT_TRUE(Put(*store, "keep", testing::MakeOnnxBytes(500, 1)).ok());
  ASSERT_TRUE(Put(*store, "other", testing::MakeOnnxBytes(500, 2)).ok());
  ASSERT_TRUE(Put(*store, "other2", testing::MakeOnnxBytes(500, 2)).ok());  // 2 names on one model
  fs::path fifo = dir_ / "tmp" / "index.yaml.tmp";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  auto writer = std::async(std::launch::async, [&] { return store->Delete("other2"); });
  // The writer is now blocked (or about to block) in the index write.
  auto reader = std::async(std::launch::async, [&] {
    bool ok = store->Get("keep").ok() && store->List().size() == 2 && store->OpenReader("other").ok();
    return ok;
  });
  bool answered = reader.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  // Unblock the writer whatever happened (drain the FIFO so its write completes).
  std::thread drain([&] {
    int fd = ::open(fifo.c_str(), O_RDONLY);
    char buf[4096];
    while (fd >= 0 && ::read(fd, buf, sizeof buf) > 0) {
    }
    if (fd >= 0) ::close(fd);
  });
  EXPECT_TRUE(answered) << "Get/List waited for the index write";
  // fsync of a FIFO fails, so the delete fails; either way the store stays consistent.
  Status deleted = writer.get();
  drain.join();
  if (answered) {
    EXPECT_TRUE(reader.get());
  }
  EXPECT_EQ(store->Get("other2").ok(), !deleted.ok()) << deleted.ToString();
  EXPECT_TRUE(store->Get("other").ok());
}

// One limit: what the store accepts by default, the loader and the summary can parse.
TEST_F(StoreLimitsTest, StoreLoaderAndSummaryShareOneModelSizeLimit) {
  EXPECT_EQ(ModelStoreOptions{}.max_model_bytes, onnx_fe::LoaderLimits{}.max_model_bytes);
  // A model of exactly the store's default limit reaches the parser in both (zero bytes are no
  // ONNX, so both fail at parsing, not at a size limit). MAP_NORESERVE: never touched beyond the
  // first page.
  const size_t size = ModelStoreOptions{}.max_model_bytes;
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  auto summary = onnx_fe::SummarizeOnnx(p, size);
  auto loaded = onnx_fe::LoadModel(std::string_view(static_cast<const char*>(p), size));
  ::munmap(p, size);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().message().find("2 GiB"), std::string::npos) << summary.status().message();
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().code(), StatusCode::kResourceExhausted) << loaded.status().message();
}

TEST_F(StoreLimitsTest, IndexTruncatedAtALineBoundaryRefusesToOpen) {
  std::string text = ThreeModels();
  size_t cut = text.find("\n  - id:", text.find("- id:") + 1);  // keep the first entry only
  ASSERT_NE(cut, std::string::npos);
  std::ofstream(dir_ / "index.yaml", std::ios::trunc) << text.substr(0, cut + 1);
  auto s = TryOpen();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("--repair"), std::string::npos) << s.status().message();
  EXPECT_EQ(fs::directory_iterator(dir_ / "orphans") == fs::directory_iterator(), true)
      << "refusing must not move objects aside";
}

TEST_F(StoreLimitsTest, IndexWithModelsScalarRefusesToOpen) {
  ThreeModels();
  std::ofstream(dir_ / "index.yaml", std::ios::trunc) << "format_version: 1\nmodels: 5\n";
  auto s = TryOpen();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(fs::directory_iterator(dir_ / "orphans") == fs::directory_iterator(), true);
}

TEST_F(StoreLimitsTest, IndexWithADuplicateEntryRefusesToOpen) {
  std::string text = ThreeModels();
  // A format-1 index (no checksum) listing the first entry twice.
  size_t a = text.find("  - id:"), b = text.find("\n  - id:", a + 1);
  std::string entry = text.substr(a, b + 1 - a);
  std::string models = text.substr(a, text.find("# kiln-index-sha256") - a);
  std::ofstream(dir_ / "index.yaml", std::ios::trunc) << "format_version: 1\nmodels:\n" << entry << models;
  auto s = TryOpen();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("twice"), std::string::npos) << s.status().message();
}

TEST_F(StoreLimitsTest, IndexWithAWrongSizeRefusesToOpen) {
  std::string text = ThreeModels();
  size_t a = text.find("  - id:");
  std::string models = text.substr(a, text.find("# kiln-index-sha256") - a);
  size_t at = models.find("size_bytes: ") + 12;
  models.replace(at, models.find('\n', at) - at, "7");
  std::ofstream(dir_ / "index.yaml", std::ios::trunc) << "format_version: 1\nmodels:\n" << models;
  auto s = TryOpen();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("size_bytes 7"), std::string::npos) << s.status().message();
}

// Repair rebuilds from the objects (and orphans), keeping the names the damaged index still has.
TEST_F(StoreLimitsTest, RepairRebuildsTheIndexFromTheObjects) {
  std::string text = ThreeModels();
  size_t cut = text.find("\n  - id:", text.find("- id:") + 1);
  std::ofstream(dir_ / "index.yaml", std::ios::trunc) << text.substr(0, cut + 1);
  ASSERT_FALSE(TryOpen().ok());
  ModelStoreOptions o;
  o.dir = dir_;
  auto report = ModelStore::Repair(o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->models, 3u);
  EXPECT_EQ(report->names_kept, 1u);  // the surviving entry's name
  EXPECT_TRUE(fs::exists(report->damaged_index));
  auto store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->model_count(), 3u);
  EXPECT_TRUE(store->Get("a").ok());
  for (const auto& m : store->List()) EXPECT_TRUE((*store->OpenReader(m.model_id))->ReadAll().ok());
}

// Delete unlinks the object before rewriting the index, and a failed rewrite does not undo it:
// the index write is made to fail (its temp path is a directory), the delete still succeeds and
// start-up drops the stale entry.
TEST_F(StoreLimitsTest, DeleteWorksWhenTheIndexCannotBeWritten) {
  {
    auto store = Open();
    ASSERT_TRUE(Put(*store, "gone", testing::MakeOnnxBytes(500, 1)).ok());
    ASSERT_TRUE(Put(*store, "kept", testing::MakeOnnxBytes(500, 2)).ok());
    fs::create_directory(dir_ / "tmp" / "index.yaml.tmp");
    Status st = store->Delete("gone");
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_FALSE(store->Get("gone").ok());
    EXPECT_EQ(store->model_count(), 1u);
  }
  auto store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->Get("gone").ok());
  EXPECT_TRUE(store->Get("kept").ok());
}

}  // namespace
}  // namespace kiln::store
