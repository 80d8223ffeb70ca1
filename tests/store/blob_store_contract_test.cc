// The BlobStore contract (store/blob_store.h), one suite run against every implementation:
// the embedded FileBlobStore and PostgreSQL's PgBlobStore (tests/store/contract_backends.h).
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "common/sha256.h"
#include "store/blob_store.h"
#include "tests/store/contract_backends.h"

namespace kiln::store::contract {
namespace {

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// Writes `bytes` in appends of `step` bytes; returns Commit's status.
Status Put(BlobStore& store, const std::string& bytes, size_t step, bool* already = nullptr,
           const std::string& key = "") {
  auto w = store.Begin(key.empty() ? Sha256Hex(bytes) : key, bytes.size());
  if (!w.ok()) return w.status();
  for (size_t off = 0; off < bytes.size(); off += step) {
    KILN_RETURN_IF_ERROR((*w)->Append(bytes.data() + off, std::min(step, bytes.size() - off)));
  }
  return (*w)->Commit(already);
}

// Reads a whole blob in chunks of `chunk`; the status of the first failing Read, else the bytes.
Result<std::string> ReadAllChunks(BlobStore& store, const std::string& key, size_t chunk, size_t* reads = nullptr) {
  auto r = store.Open(key);
  if (!r.ok()) return r.status();
  std::string all, part;
  size_t n = 0;
  for (;;) {
    KILN_RETURN_IF_ERROR((*r)->Read(chunk, &part));
    if (part.empty()) break;
    EXPECT_LE(part.size(), chunk);
    all += part;
    ++n;
  }
  if (reads) *reads = n;
  EXPECT_EQ(all.size(), (*r)->size());
  return all;
}

template <typename B>
class BlobStoreContract : public ::testing::Test {
 protected:
  B backend_;
};
TYPED_TEST_SUITE(BlobStoreContract, Backends, BackendNames);

TYPED_TEST(BlobStoreContract, StreamsBothWaysInChunks) {
  BlobStore* store = this->backend_.OpenBlobs();
  // Over 3 chunks of PgBlobStore's write buffer, in appends that do not divide it.
  const std::string bytes = RandomBytes(3 * (1 << 20) + 12345, 1);
  bool already = true;
  ASSERT_TRUE(Put(*store, bytes, 100 * 1024 + 7, &already).ok());
  EXPECT_FALSE(already);
  const std::string key = Sha256Hex(bytes);
  auto size = store->Size(key);
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(*size, bytes.size());
  size_t reads = 0;
  auto back = ReadAllChunks(*store, key, 64 * 1024, &reads);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, bytes);
  EXPECT_EQ(reads, (bytes.size() + 64 * 1024 - 1) / (64 * 1024));
  auto keys = store->List();
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(*keys, std::vector<std::string>{key});
  // Another instance (a replica, a restart) sees the same blob.
  BlobStore* other = this->backend_.OpenBlobs();
  auto again = ReadAllChunks(*other, key, 1 << 20);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, bytes);
}

TYPED_TEST(BlobStoreContract, CommitChecksSizeAndDigestAndStoresNothingOnFailure) {
  BlobStore* store = this->backend_.OpenBlobs();
  const std::string bytes = RandomBytes(200000, 2);
  const std::string other_key = Sha256Hex("something else");
  // Bytes that do not hash to the key.
  Status s = Put(*store, bytes, 4096, nullptr, other_key);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  // Fewer bytes than declared.
  auto w = store->Begin(Sha256Hex(bytes), bytes.size());
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Append(bytes.data(), bytes.size() - 1).ok());
  EXPECT_EQ((*w)->Commit().code(), StatusCode::kInvalidArgument);
  // More bytes than declared.
  auto w2 = store->Begin(Sha256Hex(bytes), bytes.size() - 10);
  ASSERT_TRUE(w2.ok());
  EXPECT_EQ((*w2)->Append(bytes.data(), bytes.size()).code(), StatusCode::kInvalidArgument);
  w->reset();
  w2->reset();
  EXPECT_EQ(store->Size(other_key).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->Size(Sha256Hex(bytes)).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store->List()->empty());
  EXPECT_EQ(this->backend_.Leftovers(), 0);
}

TYPED_TEST(BlobStoreContract, AbandonedUploadLeavesNothing) {
  BlobStore* store = this->backend_.OpenBlobs();
  const std::string bytes = RandomBytes(2500000, 3);
  {
    auto w = store->Begin(Sha256Hex(bytes), bytes.size());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append(bytes.data(), 2000000).ok());  // past one write chunk
    // Not visible before Commit, from this instance or another.
    EXPECT_EQ(store->Size(Sha256Hex(bytes)).status().code(), StatusCode::kNotFound);
    EXPECT_EQ(this->backend_.OpenBlobs()->Open(Sha256Hex(bytes)).status().code(), StatusCode::kNotFound);
  }
  EXPECT_TRUE(store->List()->empty());
  EXPECT_EQ(this->backend_.Leftovers(), 0);
}

TYPED_TEST(BlobStoreContract, ImmutableSecondCommitKeepsTheStoredBlob) {
  BlobStore* store = this->backend_.OpenBlobs();
  const std::string bytes = RandomBytes(300000, 4);
  bool already = true;
  ASSERT_TRUE(Put(*store, bytes, 65536, &already).ok());
  EXPECT_FALSE(already);
  ASSERT_TRUE(Put(*store, bytes, 1000, &already).ok());
  EXPECT_TRUE(already);
  // Wrong bytes under the stored key are still refused.
  EXPECT_EQ(Put(*store, RandomBytes(300000, 5), 65536, nullptr, Sha256Hex(bytes)).code(), StatusCode::kDataLoss);
  EXPECT_EQ(*ReadAllChunks(*store, Sha256Hex(bytes), 7777), bytes);
  EXPECT_EQ(store->List()->size(), 1u);
  EXPECT_EQ(this->backend_.Leftovers(), 0);
}

TYPED_TEST(BlobStoreContract, ConcurrentUploadsOfOneKeyStoreItOnce) {
  BlobStore* a = this->backend_.OpenBlobs();
  BlobStore* b = this->backend_.OpenBlobs();
  const std::string bytes = RandomBytes(1500000, 6);
  auto wa = a->Begin(Sha256Hex(bytes), bytes.size());
  auto wb = b->Begin(Sha256Hex(bytes), bytes.size());
  ASSERT_TRUE(wa.ok() && wb.ok());
  ASSERT_TRUE((*wa)->Append(bytes.data(), bytes.size()).ok());
  ASSERT_TRUE((*wb)->Append(bytes.data(), bytes.size()).ok());
  bool already_a = true, already_b = true;
  ASSERT_TRUE((*wa)->Commit(&already_a).ok());
  ASSERT_TRUE((*wb)->Commit(&already_b).ok());
  EXPECT_FALSE(already_a);
  EXPECT_TRUE(already_b);
  EXPECT_EQ(*ReadAllChunks(*b, Sha256Hex(bytes), 1 << 20), bytes);
  EXPECT_EQ(this->backend_.Leftovers(), 0);
}

TYPED_TEST(BlobStoreContract, ReadVerifiesTheDigest) {
  BlobStore* store = this->backend_.OpenBlobs();
  const std::string bytes = RandomBytes(100000, 7);
  ASSERT_TRUE(Put(*store, bytes, 100000).ok());
  this->backend_.Corrupt(Sha256Hex(bytes));
  auto back = ReadAllChunks(*store, Sha256Hex(bytes), 4096);
  EXPECT_EQ(back.status().code(), StatusCode::kDataLoss) << back.status().ToString();
  EXPECT_NE(back.status().message().find(Sha256Hex(bytes)), std::string::npos);
}

TYPED_TEST(BlobStoreContract, ReaderOpenedBeforeRemoveReadsToTheEnd) {
  BlobStore* store = this->backend_.OpenBlobs();
  const std::string bytes = RandomBytes(1200000, 8);
  ASSERT_TRUE(Put(*store, bytes, 1 << 20).ok());
  auto r = store->Open(Sha256Hex(bytes));
  ASSERT_TRUE(r.ok());
  std::string part, all;
  ASSERT_TRUE((*r)->Read(1000, &part).ok());
  all = part;
  // Removed through another instance (replica) while the reader is open.
  ASSERT_TRUE(this->backend_.OpenBlobs()->Remove(Sha256Hex(bytes)).ok());
  for (;;) {
    Status s = (*r)->Read(300000, &part);
    ASSERT_TRUE(s.ok()) << s.ToString();
    if (part.empty()) break;
    all += part;
  }
  EXPECT_EQ(all, bytes);
  EXPECT_EQ(store->Size(Sha256Hex(bytes)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->Remove(Sha256Hex(bytes)).code(), StatusCode::kNotFound);
  r->reset();
  EXPECT_TRUE(store->List()->empty());
  EXPECT_EQ(this->backend_.Leftovers(), 0);
}

TYPED_TEST(BlobStoreContract, RefusesBadKeysAndFindsNothingUnknown) {
  BlobStore* store = this->backend_.OpenBlobs();
  EXPECT_EQ(store->Begin("abc", 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Begin(std::string(64, 'A'), 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Begin(Sha256Hex("x"), 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Open("../etc/passwd").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Open(Sha256Hex("x")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->Remove(Sha256Hex("x")).code(), StatusCode::kNotFound);
}

TYPED_TEST(BlobStoreContract, ManyWritersAtOnce) {
  BlobStore* store = this->backend_.OpenBlobs();
  constexpr int kThreads = 4, kEach = 5;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::string bytes = RandomBytes(50000 + i * 1000, 100 + t * kEach + i);
        if (!Put(*store, bytes, 8192).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(store->List()->size(), static_cast<size_t>(kThreads * kEach));
}

}  // namespace
}  // namespace kiln::store::contract
