#include "store/model_store.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "common/sha256.h"
#include "tests/server/onnx_bytes.h"

namespace fs = std::filesystem;

namespace kiln::store {
namespace {

std::string testing_read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class ModelStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln-store-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<ModelStore> OpenStore(uint64_t max_model = (2ull << 30) - 1,
                                        uint64_t max_store = 0) {
    ModelStoreOptions o;
    o.dir = dir_;
    o.max_model_bytes = max_model;
    o.max_store_bytes = max_store;
    auto s = ModelStore::Open(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  Result<ModelInfo> Put(ModelStore& store, const std::string& name, const std::string& bytes,
                        bool* already = nullptr, size_t chunk = 4096) {
    auto up = store.BeginUpload(name, bytes.size(), Sha256Hex(bytes));
    if (!up.ok()) return up.status();
    for (size_t off = 0; off < bytes.size(); off += chunk) {
      Status st = (*up)->Append(bytes.data() + off, std::min(chunk, bytes.size() - off));
      if (!st.ok()) return st;
    }
    return (*up)->Commit(already);
  }

  size_t FilesIn(const char* sub) {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_ / sub)) ++n;
    return n;
  }

  fs::path dir_;
};

TEST_F(ModelStoreTest, StoresAndDescribesModel) {
  auto store = OpenStore();
  std::string bytes = testing::MakeOnnxBytes(1000);
  auto info = Put(*store, "relu", bytes);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->model_id, Sha256Hex(bytes));
  EXPECT_EQ(info->size_bytes, bytes.size());
  EXPECT_EQ(info->opset, 13);
  EXPECT_EQ(info->node_count, 1);
  ASSERT_EQ(info->inputs.size(), 1u);
  EXPECT_EQ(info->inputs[0], "x");
  EXPECT_EQ(store->model_count(), 1u);
  EXPECT_EQ(store->total_bytes(), bytes.size());
  auto reader = store->OpenReader("relu");
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->ReadAll().value(), bytes);
  EXPECT_EQ(FilesIn("tmp"), 0u);
}

TEST_F(ModelStoreTest, CrashBeforeRenameLeavesNothingAfterRestart) {
  std::string bytes = testing::MakeOnnxBytes(5000);
  {
    auto store = OpenStore();
    auto up = store->BeginUpload("crashy", bytes.size(), Sha256Hex(bytes));
    ASSERT_TRUE(up.ok());
    ASSERT_TRUE((*up)->Append(bytes.data(), bytes.size()).ok());
    // A crash: the Upload is never committed nor destroyed, its temp file stays behind.
    (void)std::move(up).value().release();
    EXPECT_EQ(FilesIn("tmp"), 1u);
  }
  // A crash after the object rename but before the index write leaves an unindexed object.
  std::string other = testing::MakeOnnxBytes(3000, 7);
  {
    std::ofstream(dir_ / "objects" / (Sha256Hex(other) + ".onnx"), std::ios::binary) << other;
  }
  auto store = OpenStore();
  EXPECT_EQ(store->model_count(), 0u);
  EXPECT_EQ(store->total_bytes(), 0u);
  EXPECT_EQ(FilesIn("tmp"), 0u);
  EXPECT_EQ(FilesIn("objects"), 0u);
  EXPECT_EQ(store->Get("crashy").status().code(), StatusCode::kNotFound);
  // Not visible, but not destroyed either: the unindexed object waits in orphans/.
  EXPECT_EQ(FilesIn("orphans"), 1u);
  EXPECT_EQ(testing_read(dir_ / "orphans" / (Sha256Hex(other) + ".onnx")), other);
}

TEST_F(ModelStoreTest, MissingIndexIsRebuiltFromObjectsNotWiped) {
  std::string a = testing::MakeOnnxBytes(1000, 1), b = testing::MakeOnnxBytes(2000, 2);
  {
    auto store = OpenStore();
    ASSERT_TRUE(Put(*store, "a", a).ok());
    ASSERT_TRUE(Put(*store, "b", b).ok());
  }
  std::filesystem::remove(dir_ / "index.yaml");
  std::ofstream(dir_ / "objects" / "stray.txt") << "not a model";
  auto store = OpenStore();
  EXPECT_EQ(store->model_count(), 2u);
  EXPECT_EQ(store->total_bytes(), a.size() + b.size());
  EXPECT_EQ((*store->OpenReader(Sha256Hex(a)))->ReadAll().value(), a);
  EXPECT_EQ(store->Get(Sha256Hex(b))->node_count, 1);
  EXPECT_EQ(store->Get("a").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(FilesIn("orphans"), 1u);  // the stray file, moved aside
  EXPECT_TRUE(std::filesystem::exists(dir_ / "index.yaml"));
}

TEST_F(ModelStoreTest, SecondProcessOnTheSameDirectoryIsRefused) {
  auto first = OpenStore();
  ModelStoreOptions o;
  o.dir = dir_;
  auto second = ModelStore::Open(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("in use by another process"), std::string::npos);
  first.reset();
  EXPECT_TRUE(ModelStore::Open(o).ok());
}

TEST_F(ModelStoreTest, DeleteByNameRemovesOnlyThatName) {
  auto store = OpenStore();
  std::string bytes = testing::MakeOnnxBytes(3000);
  ASSERT_TRUE(Put(*store, "n1", bytes).ok());
  ASSERT_TRUE(Put(*store, "n2", bytes).ok());
  ASSERT_TRUE(store->Delete("n1").ok());
  EXPECT_EQ(store->Get("n1").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store->Get("n2").ok());
  EXPECT_EQ((*store->OpenReader("n2"))->ReadAll().value(), bytes);
  // The last name takes the model with it.
  ASSERT_TRUE(store->Delete("n2").ok());
  EXPECT_EQ(store->model_count(), 0u);
  EXPECT_EQ(FilesIn("objects"), 0u);
  // By id: the model and all its names.
  ASSERT_TRUE(Put(*store, "x", bytes).ok());
  ASSERT_TRUE(Put(*store, "y", bytes).ok());
  ASSERT_TRUE(store->Delete(Sha256Hex(bytes)).ok());
  EXPECT_EQ(store->Get("y").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->model_count(), 0u);
}

// index.reserve (store/model_store.h): allocated room for one index rewrite, at least the index
// plus 4 KiB in 64 KiB steps, grown with the index and re-created at start-up.
TEST_F(ModelStoreTest, IndexReserveFollowsTheIndexSize) {
  auto allocated = [&] {
    struct stat st{};
    return ::stat((dir_ / "index.reserve").c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
  };
  auto store = OpenStore();
  ASSERT_TRUE(Put(*store, "first", testing::MakeOnnxBytes(1000, 1)).ok());
  EXPECT_EQ(fs::file_size(dir_ / "index.reserve"), 64u << 10);
  EXPECT_GE(allocated(), 64u << 10) << "the reserve's blocks are allocated, not a sparse file";
  // Three models with a 30 kB producer_name each (under max_metadata_bytes) take the index past
  // the first 64 KiB step.
  for (unsigned i = 0; i < 3; ++i) {
    onnx::ModelProto m;
    ASSERT_TRUE(m.ParseFromString(testing::MakeOnnxBytes(100, 100 + i)));
    m.set_producer_name(std::string(30000, 'p'));
    auto put = Put(*store, "big-metadata-" + std::to_string(i), m.SerializeAsString());
    ASSERT_TRUE(put.ok()) << put.status().ToString();
  }
  const uint64_t index = fs::file_size(dir_ / "index.yaml");
  const uint64_t reserve = fs::file_size(dir_ / "index.reserve");
  EXPECT_GT(index, 64u << 10);
  EXPECT_GE(reserve, index + 4096);
  EXPECT_EQ(reserve % (64u << 10), 0u);
  EXPECT_LT(reserve, index + 4096 + (64u << 10));
  // Removed behind the store's back: the next start-up allocates it again.
  store.reset();
  fs::remove(dir_ / "index.reserve");
  store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(fs::file_size(dir_ / "index.reserve"), reserve);
}

TEST_F(ModelStoreTest, RenamingReportsTheReplacedModelAndDedupIgnoresStoreLimit) {
  std::string a = testing::MakeOnnxBytes(6000, 1), b = testing::MakeOnnxBytes(6000, 2);
  auto store = OpenStore(/*max_model=*/1 << 20, /*max_store=*/10000);
  ASSERT_TRUE(Put(*store, "m", a).ok());
  // The store is nearly full, but the same bytes under a new name add nothing.
  bool already = false;
  ASSERT_TRUE(Put(*store, "alias", a, &already).ok());
  EXPECT_TRUE(already);
  store.reset();
  auto big = OpenStore(1 << 20, 0);
  auto up = big->BeginUpload("m", b.size(), Sha256Hex(b));
  ASSERT_TRUE(up.ok());
  ASSERT_TRUE((*up)->Append(b.data(), b.size()).ok());
  std::string replaced;
  ASSERT_TRUE((*up)->Commit(nullptr, &replaced).ok());
  EXPECT_EQ(replaced, Sha256Hex(a));
  EXPECT_EQ(big->Get("m")->model_id, Sha256Hex(b));
  EXPECT_EQ(big->Get("alias")->model_id, Sha256Hex(a));
}

TEST_F(ModelStoreTest, Sha256MismatchStoresNothing) {
  auto store = OpenStore();
  std::string bytes = testing::MakeOnnxBytes(2000);
  auto up = store->BeginUpload("m", bytes.size(), Sha256Hex("something else"));
  ASSERT_TRUE(up.ok());
  ASSERT_TRUE((*up)->Append(bytes.data(), bytes.size()).ok());
  auto info = (*up)->Commit();
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(info.status().message().find("sha256"), std::string::npos);
  EXPECT_EQ(store->model_count(), 0u);
  EXPECT_EQ(FilesIn("tmp"), 0u);
  EXPECT_EQ(FilesIn("objects"), 0u);
}

TEST_F(ModelStoreTest, SizeMismatchStoresNothing) {
  auto store = OpenStore();
  std::string bytes = testing::MakeOnnxBytes(2000);
  // Fewer bytes than declared.
  auto up = store->BeginUpload("short", bytes.size() + 10, Sha256Hex(bytes));
  ASSERT_TRUE(up.ok());
  ASSERT_TRUE((*up)->Append(bytes.data(), bytes.size()).ok());
  auto info = (*up)->Commit();
  EXPECT_EQ(info.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(info.status().message().find("size_bytes"), std::string::npos);
  // More bytes than declared: the header lied, INVALID_ARGUMENT as kiln/v1/model.proto says
  // (not RESOURCE_EXHAUSTED, which the protos reserve for "retry later").
  auto up2 = store->BeginUpload("long", bytes.size() - 10, Sha256Hex(bytes));
  ASSERT_TRUE(up2.ok());
  EXPECT_EQ((*up2)->Append(bytes.data(), bytes.size()).code(), StatusCode::kInvalidArgument);
  up2.value().reset();
  EXPECT_EQ(store->model_count(), 0u);
  EXPECT_EQ(FilesIn("tmp"), 0u);
}

TEST_F(ModelStoreTest, NotOnnxIsInvalidArgument) {
  auto store = OpenStore();
  std::string junk(1024, '\xff');
  auto info = Put(*store, "junk", junk);
  EXPECT_EQ(info.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(info.status().message().find("not an ONNX model"), std::string::npos);
  EXPECT_EQ(store->model_count(), 0u);
  EXPECT_EQ(FilesIn("objects"), 0u);
  // A truncated model says what and where, as the loader does (compiler/onnx/wire_scan.h).
  const std::string whole = testing::MakeOnnxBytes(5000);
  auto cut = Put(*store, "cut", whole.substr(0, whole.size() / 2));
  EXPECT_EQ(cut.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cut.status().message().find("the protobuf data is truncated or corrupt: length-delimited field runs past "
                                        "the end of the data at byte offset"),
            std::string::npos)
      << cut.status().message();
}

TEST_F(ModelStoreTest, DuplicateUploadStoredOnce) {
  auto store = OpenStore();
  std::string bytes = testing::MakeOnnxBytes(4000);
  bool already = true;
  ASSERT_TRUE(Put(*store, "a", bytes, &already).ok());
  EXPECT_FALSE(already);
  auto second = Put(*store, "b", bytes, &already);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(already);
  EXPECT_EQ(store->model_count(), 1u);
  EXPECT_EQ(store->total_bytes(), bytes.size());
  EXPECT_EQ(FilesIn("objects"), 1u);
  EXPECT_EQ(second->names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(store->Get("b")->model_id, store->Get("a")->model_id);
}

TEST_F(ModelStoreTest, IndexSurvivesRestart) {
  std::string a = testing::MakeOnnxBytes(1000, 1), b = testing::MakeOnnxBytes(2000, 2);
  {
    auto store = OpenStore();
    ASSERT_TRUE(Put(*store, "a", a).ok());
    ASSERT_TRUE(Put(*store, "b", b).ok());
    ASSERT_TRUE(store->Delete("a").ok());
    ASSERT_TRUE(Put(*store, "c", a).ok());
  }
  auto store = OpenStore();
  EXPECT_EQ(store->model_count(), 2u);
  EXPECT_EQ(store->total_bytes(), a.size() + b.size());
  EXPECT_EQ(store->Get("c")->model_id, Sha256Hex(a));
  EXPECT_EQ(store->Get("b")->model_id, Sha256Hex(b));
  EXPECT_EQ(store->Get("a").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*store->OpenReader("b"))->ReadAll().value(), b);
}

// Bytes that rot on disk are DATA_LOSS on the first read of a process, never served as the model;
// the object stays for inspection and the other models are unaffected.
TEST_F(ModelStoreTest, CorruptedObjectIsDataLossAndKept) {
  std::string a = testing::MakeOnnxBytes(5000, 1), b = testing::MakeOnnxBytes(3000, 2);
  {
    auto store = OpenStore();
    ASSERT_TRUE(Put(*store, "a", a).ok());
    ASSERT_TRUE(Put(*store, "b", b).ok());
  }
  const fs::path object = dir_ / "objects" / (Sha256Hex(a) + ".onnx");
  {
    std::fstream f(object, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2500);
    f.put('\x5a' ^ a[2500]);  // one byte changed, size unchanged
  }
  auto store = OpenStore();
  auto reader = store->OpenReader("a");
  ASSERT_TRUE(reader.ok());
  auto bytes = (*reader)->ReadAll();
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bytes.status().message().find(Sha256Hex(a)), std::string::npos) << bytes.status().ToString();
  EXPECT_EQ((*store->OpenReader("a"))->ReadAll().status().code(), StatusCode::kDataLoss);  // still
  EXPECT_TRUE(fs::exists(object));
  EXPECT_EQ((*store->OpenReader("b"))->ReadAll().value(), b);
  // A streaming reader checks the digest of what it read: the chunk that ends the model fails.
  auto streaming = store->OpenReader("a");
  ASSERT_TRUE(streaming.ok());
  std::string chunk;
  ASSERT_TRUE((*streaming)->Read(2000, &chunk).ok());
  EXPECT_EQ(chunk.size(), 2000u);
  Status last = Status::Ok();
  while (last.ok()) {
    last = (*streaming)->Read(2000, &chunk);
    if (last.ok() && chunk.empty()) break;
  }
  EXPECT_EQ(last.code(), StatusCode::kDataLoss);
}

// Uploading the model again repairs an object that rotted on disk: the upload's bytes hash to the
// id and replace it (an object this process has checked is not rewritten).
TEST_F(ModelStoreTest, UploadingAgainRepairsACorruptedObject) {
  std::string a = testing::MakeOnnxBytes(5000, 1);
  { ASSERT_TRUE(Put(*OpenStore(), "a", a).ok()); }
  const fs::path object = dir_ / "objects" / (Sha256Hex(a) + ".onnx");
  {
    std::fstream f(object, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put(static_cast<char>(a[100] ^ 0x10));
  }
  auto store = OpenStore();
  EXPECT_EQ((*store->OpenReader("a"))->ReadAll().status().code(), StatusCode::kDataLoss);
  bool already = false;
  auto again = Put(*store, "a2", a, &already);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(already);
  EXPECT_EQ((*store->OpenReader("a"))->ReadAll().value(), a);
  EXPECT_EQ(testing_read(object), a);
  EXPECT_EQ(store->Get("a")->names, (std::vector<std::string>{"a", "a2"}));
  EXPECT_EQ(FilesIn("tmp"), 0u);
}

TEST_F(ModelStoreTest, RejectsIndexOfUnknownFormatVersion) {
  { auto store = OpenStore(); }
  std::ofstream(dir_ / "index.yaml") << "format_version: 99\nmodels: []\n";
  ModelStoreOptions o;
  o.dir = dir_;
  auto s = ModelStore::Open(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("format_version 99"), std::string::npos);
}

TEST_F(ModelStoreTest, ConcurrentUploadsOfDifferentModels) {
  auto store = OpenStore();
  constexpr int kThreads = 8;
  std::vector<std::string> models;
  for (int i = 0; i < kThreads; ++i) models.push_back(testing::MakeOnnxBytes(50000 + i * 100, i + 1));
  std::vector<std::thread> threads;
  std::vector<int> ok(kThreads, 0);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] { ok[i] = Put(*store, "m" + std::to_string(i), models[i], nullptr, 777).ok(); });
  }
  for (auto& t : threads) t.join();
  uint64_t total = 0;
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_TRUE(ok[i]) << i;
    total += models[i].size();
    EXPECT_EQ((*store->OpenReader("m" + std::to_string(i)))->ReadAll().value(), models[i]);
  }
  EXPECT_EQ(store->model_count(), static_cast<size_t>(kThreads));
  EXPECT_EQ(store->total_bytes(), total);
  store.reset();
  auto reopened = OpenStore();
  EXPECT_EQ(reopened->model_count(), static_cast<size_t>(kThreads));
}

TEST_F(ModelStoreTest, LimitsGiveResourceExhausted) {
  std::string bytes = testing::MakeOnnxBytes(10000);
  auto store = OpenStore(/*max_model=*/5000, /*max_store=*/0);
  auto up = store->BeginUpload("big", bytes.size(), Sha256Hex(bytes));
  EXPECT_EQ(up.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(up.status().message().find("max_model_bytes"), std::string::npos);
  store.reset();
  auto store2 = OpenStore(/*max_model=*/1 << 20, /*max_store=*/15000);
  ASSERT_TRUE(Put(*store2, "one", bytes).ok());
  auto second = Put(*store2, "two", testing::MakeOnnxBytes(10000, 9));
  EXPECT_EQ(second.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(second.status().message().find("max_store_bytes"), std::string::npos);
  EXPECT_EQ(store2->model_count(), 1u);
  EXPECT_EQ(FilesIn("tmp"), 0u);
}

TEST_F(ModelStoreTest, DeleteWhileReadingKeepsReaderWorking) {
  auto store = OpenStore();
  std::string bytes = testing::MakeOnnxBytes(100000);
  ASSERT_TRUE(Put(*store, "m", bytes).ok());
  auto reader = store->OpenReader("m");
  ASSERT_TRUE(reader.ok());
  std::string first;
  ASSERT_TRUE((*reader)->Read(1000, &first).ok());
  ASSERT_TRUE(store->Delete("m").ok());
  EXPECT_EQ(store->Get("m").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*reader)->ReadAll().value(), bytes);
  EXPECT_EQ(FilesIn("objects"), 0u);
}

TEST_F(ModelStoreTest, RejectsBadNamesAndDigests) {
  auto store = OpenStore();
  EXPECT_EQ(store->BeginUpload("../etc", 10, Sha256Hex("x")).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store->BeginUpload("ok", 10, "ABC").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->BeginUpload("ok", 0, Sha256Hex("")).status().code(), StatusCode::kInvalidArgument);
  // A name that reads as a model id would shadow lookups by id.
  EXPECT_EQ(store->BeginUpload(Sha256Hex("x"), 10, Sha256Hex("x")).status().code(),
            StatusCode::kInvalidArgument);
  // Each refusal says what is wrong with the name.
  auto message = [&](const std::string& name) { return store->BeginUpload(name, 10, Sha256Hex("x")).status().message(); };
  EXPECT_NE(message(Sha256Hex("x")).find("reads as a model id"), std::string::npos) << message(Sha256Hex("x"));
  EXPECT_NE(message("..etc").find("starts with '.'"), std::string::npos) << message("..etc");
  EXPECT_NE(message("../etc").find("byte 0x2F at offset 2"), std::string::npos) << message("../etc");
  EXPECT_NE(message("a/b").find("byte 0x2F at offset 1"), std::string::npos) << message("a/b");
  EXPECT_NE(message(std::string(60, '\xE4')).find("byte 0xE4 at offset 0"), std::string::npos);
  EXPECT_NE(message(std::string(129, 'a')).find("has 129 characters; a name has 1-128"), std::string::npos);
  EXPECT_TRUE(CheckModelName("resnet18_v1.2-a").ok());
}

}  // namespace
}  // namespace kiln::store
