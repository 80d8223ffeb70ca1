// SharedModelStore (store/shared_model_store.h) over the embedded ModelIndex and BlobStore
// (store/file_model_index.h, store/file_blob_store.h): the facade's rules without a database
// (kilnd's PostgreSQL pair is tests/server/pg_replicas_e2e_test.cc), and the replica's blob cache
// (store/blob_cache.h): hits, LRU bound, damaged copies dropped, oversized blobs not cached.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/sha256.h"
#include "store/blob_cache.h"
#include "store/file_blob_store.h"
#include "store/file_model_index.h"
#include "store/shared_model_store.h"
#include "tests/server/onnx_bytes.h"

namespace fs = std::filesystem;

namespace kiln::store {
namespace {

class SharedStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln-shared-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    auto index = FileModelIndex::Open(dir_ / "shared");
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    index_ = std::move(index).value();
    auto blobs = FileBlobStore::OpenDir(dir_ / "shared");
    ASSERT_TRUE(blobs.ok());
    blobs_ = std::move(blobs).value();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<SharedModelStore> Replica(const std::string& name, uint64_t cache_bytes = 0,
                                            uint64_t max_store = 0) {
    ModelStoreOptions o;
    o.dir = dir_ / name;
    o.blob_cache_bytes = cache_bytes;
    o.max_store_bytes = max_store;
    auto s = SharedModelStore::Open(index_.get(), blobs_.get(), o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  static Result<ModelInfo> Put(ModelStore& s, const std::string& name, const std::string& bytes,
                               bool* already = nullptr, std::string* replaced = nullptr) {
    auto up = s.BeginUpload(name, bytes.size(), Sha256Hex(bytes));
    if (!up.ok()) return up.status();
    for (size_t off = 0; off < bytes.size(); off += 1000) {
      KILN_RETURN_IF_ERROR((*up)->Append(bytes.data() + off, std::min<size_t>(1000, bytes.size() - off)));
    }
    return (*up)->Commit(already, replaced);
  }
  static std::string ReadAll(ModelStore& s, const std::string& ref) {
    auto r = s.OpenReader(ref);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return "";
    auto all = (*r)->ReadAll();
    EXPECT_TRUE(all.ok()) << all.status().ToString();
    return all.ok() ? *all : "";
  }

  fs::path dir_;
  std::unique_ptr<FileModelIndex> index_;
  std::unique_ptr<FileBlobStore> blobs_;
};

TEST_F(SharedStoreTest, TwoReplicasShareModelsNamesAndDeletes) {
  auto a = Replica("a"), b = Replica("b");
  const std::string one = testing::MakeOnnxBytes(3000, 1), two = testing::MakeOnnxBytes(3000, 2);
  auto put = Put(*a, "m", one);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->model_id, Sha256Hex(one));
  EXPECT_EQ(put->names, std::vector<std::string>{"m"});
  EXPECT_EQ(put->inputs, std::vector<std::string>{"x"});  // summarized: DescribeUpload's rule
  EXPECT_EQ(b->Get("m")->model_id, Sha256Hex(one));
  EXPECT_EQ(ReadAll(*b, "m"), one);
  EXPECT_EQ((*b->WithIdPrefix(Sha256Hex(one).substr(0, 10), 5)).size(), 1u);
  bool already = false;
  std::string replaced;
  ASSERT_TRUE(Put(*b, "m", two, &already, &replaced).ok());
  EXPECT_FALSE(already);
  EXPECT_EQ(replaced, Sha256Hex(one));
  EXPECT_EQ(a->Get("m")->model_id, Sha256Hex(two));
  // Header only: names bytes that are stored.
  auto named = b->BeginUpload("alias", two.size(), Sha256Hex(two));
  ASSERT_TRUE(named.ok());
  ASSERT_TRUE((*named)->Commit(&already, nullptr).ok());
  EXPECT_TRUE(already);
  EXPECT_EQ(a->Get("alias")->model_id, Sha256Hex(two));
  ASSERT_TRUE(a->Delete(Sha256Hex(two)).ok());
  EXPECT_EQ(b->Get("m").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(b->OpenReader(Sha256Hex(two)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*blobs_->List(), std::vector<std::string>{Sha256Hex(one)});  // the blob went with its model
  ASSERT_TRUE(b->RefreshTotals().ok());
  EXPECT_EQ(b->model_count(), 1u);
  EXPECT_TRUE(fs::is_empty(dir_ / "a" / "tmp"));
}

TEST_F(SharedStoreTest, BadUploadsLeaveNothingAndTheStoreLimitIsTheSharedOne) {
  auto a = Replica("a", 0, 10000), b = Replica("b", 0, 10000);
  const std::string m = testing::MakeOnnxBytes(6000, 1);
  std::string lie = m;
  lie[100] ^= 1;
  auto up = a->BeginUpload("lie", m.size(), Sha256Hex(m));
  ASSERT_TRUE(up.ok());
  ASSERT_TRUE((*up)->Append(lie.data(), lie.size()).ok());
  EXPECT_EQ((*up)->Commit().status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(Put(*a, "junk", std::string(500, 'x')).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(blobs_->List()->empty());
  EXPECT_TRUE(fs::is_empty(dir_ / "a" / "tmp"));
  ASSERT_TRUE(Put(*a, "first", m).ok());
  // Through the other replica: the farm's bytes count.
  auto full = Put(*b, "second", testing::MakeOnnxBytes(6000, 2));
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("max_store_bytes"), std::string::npos);
  EXPECT_TRUE(Put(*b, "again", m).ok());  // bytes already stored add nothing
}

TEST_F(SharedStoreTest, BlobCacheServesHitsEvictsLruAndDropsDamagedCopies) {
  const std::string m1 = testing::MakeOnnxBytes(4000, 1), m2 = testing::MakeOnnxBytes(4000, 2),
                    m3 = testing::MakeOnnxBytes(4000, 3), huge = testing::MakeOnnxBytes(20000, 4);
  auto writer = Replica("w");
  for (const auto* m : {&m1, &m2, &m3, &huge}) ASSERT_TRUE(Put(*writer, Sha256Hex(*m).substr(0, 8) + "x", *m).ok());
  auto r = Replica("r", 10000);  // room for two of the 4 KB models
  const CachingBlobStore& cache = *r->blob_cache();
  EXPECT_EQ(ReadAll(*r, Sha256Hex(m1)), m1);
  EXPECT_EQ(cache.stats().misses, 1u);
  EXPECT_EQ(ReadAll(*r, Sha256Hex(m1)), m1);
  EXPECT_EQ(cache.stats().hits, 1u);
  // A hit does not touch the shared store: its file can go behind the cache's back.
  const fs::path shared_m1 = blobs_->PathOf(Sha256Hex(m1));
  fs::rename(shared_m1, dir_ / "m1.aside");
  EXPECT_EQ(ReadAll(*r, Sha256Hex(m1)), m1);
  fs::rename(dir_ / "m1.aside", shared_m1);
  // LRU: m2 then m3 fill it; m1 (used last before them) is the one evicted when m3 comes.
  EXPECT_EQ(ReadAll(*r, Sha256Hex(m2)), m2);
  EXPECT_EQ(ReadAll(*r, Sha256Hex(m1)), m1);  // m1 is now the most recent
  EXPECT_EQ(ReadAll(*r, Sha256Hex(m3)), m3);
  EXPECT_LE(cache.stats().bytes, 10000u);
  EXPECT_EQ(cache.stats().blobs, 2u);
  EXPECT_TRUE(fs::exists(dir_ / "r" / "blob-cache" / Sha256Hex(m1)));
  EXPECT_FALSE(fs::exists(dir_ / "r" / "blob-cache" / Sha256Hex(m2)));
  EXPECT_EQ(cache.stats().evictions, 1u);
  // Larger than the cache: read through, not kept.
  EXPECT_EQ(ReadAll(*r, Sha256Hex(huge)), huge);
  EXPECT_FALSE(fs::exists(dir_ / "r" / "blob-cache" / Sha256Hex(huge)));
  // A damaged cached copy: DATA_LOSS once (verified on read), dropped, fetched again after.
  {
    std::fstream f(dir_ / "r" / "blob-cache" / Sha256Hex(m1), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000);
    f.put(static_cast<char>(m1[1000] ^ 0x40));
  }
  auto bad = r->OpenReader(Sha256Hex(m1));
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ((*bad)->ReadAll().status().code(), StatusCode::kDataLoss);
  EXPECT_FALSE(fs::exists(dir_ / "r" / "blob-cache" / Sha256Hex(m1)));
  EXPECT_EQ(ReadAll(*r, Sha256Hex(m1)), m1);
  EXPECT_TRUE(fs::exists(dir_ / "r" / "blob-cache" / Sha256Hex(m1)));
  // A restarted replica keeps its cache (bounded as before).
  r.reset();
  auto again = Replica("r", 10000);
  EXPECT_EQ(again->blob_cache()->stats().blobs, 2u);
  EXPECT_EQ(ReadAll(*again, Sha256Hex(m1)), m1);
  EXPECT_EQ(again->blob_cache()->stats().hits, 1u);
}

}  // namespace
}  // namespace kiln::store
