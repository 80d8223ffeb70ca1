// kiln::store::CachingBlobStore — a replica's local, content-addressed cache in front of a
// shared BlobStore (store/blob_store.h; kilnd: PostgreSQL's, on a database): a blob read once is
// kept in DIR/<sha256> and read from there while it stays, the least recently used blobs going
// first when the cache is over its byte budget. Blobs are immutable, so a cached one is never
// stale; it is verified by SHA-256 on every read like any blob (VerifyingBlobReader), and a cached
// file that fails the check is dropped (the next read fetches it again).
// Filling: a miss reads through — each chunk the upstream reader hands out is also written to
// DIR/tmp; when the upstream reader has checked the last one, the file is renamed into place. A
// blob larger than the budget is not cached. Writes (Begin), Size, List go to the upstream store;
// Remove removes there and here. Whether a model exists is the index's decision
// (store/shared_model_store.h), so the cache may keep a blob that another replica removed until
// it is evicted: it serves it only to a caller that still found it in the index.
// Start-up keeps what DIR holds (oldest modification first to go), empties DIR/tmp.
// Thread-safe; one process per DIR (the caller's data dir holds the LOCK).
#pragma once

#include <cstdint>
#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "store/blob_store.h"

namespace kiln::store {

class CachingBlobStore final : public BlobStore {
 public:
  /// `upstream` must outlive the cache. `max_bytes` > 0.
  static Result<std::unique_ptr<CachingBlobStore>> Open(BlobStore* upstream, const std::filesystem::path& dir,
                                                        uint64_t max_bytes);

  Result<std::unique_ptr<BlobWriter>> Begin(const std::string& sha256_hex, uint64_t size_bytes) override {
    return upstream_->Begin(sha256_hex, size_bytes);
  }
  Result<std::unique_ptr<BlobReader>> Open(const std::string& sha256_hex) override;
  Result<uint64_t> Size(const std::string& sha256_hex) override { return upstream_->Size(sha256_hex); }
  Status Remove(const std::string& sha256_hex) override;
  Result<std::vector<std::string>> List() override { return upstream_->List(); }

  struct Stats {
    uint64_t hits = 0, misses = 0, bytes = 0, blobs = 0, evictions = 0;
  };
  Stats stats() const;

 private:
  friend class CacheFillReader;
  friend class CachedReader;
  CachingBlobStore(BlobStore* upstream, std::filesystem::path dir, uint64_t max_bytes)
      : upstream_(upstream), dir_(std::move(dir)), max_bytes_(max_bytes) {}
  // A fully read and verified temp file becomes the cached copy of `key`.
  void Insert(const std::string& key, const std::filesystem::path& tmp, uint64_t size);
  void Drop(const std::string& key);
  void EvictLocked();

  BlobStore* upstream_;
  std::filesystem::path dir_;
  uint64_t max_bytes_;
  mutable std::mutex mu_;
  struct Entry {
    uint64_t size;
    std::list<std::string>::iterator lru;
  };
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // most recently used first
  Stats stats_;
};

}  // namespace kiln::store
