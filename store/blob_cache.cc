#include "store/blob_cache.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <vector>

#include "store/file_blob_store.h"
#include "store/store_files.h"

namespace fs = std::filesystem;

namespace kiln::store {

namespace {
std::atomic<uint64_t> g_fill_seq{0};
}  // namespace

// A hit: the cached copy; one that fails its check leaves the cache.
class CachedReader final : public BlobReader {
 public:
  CachedReader(CachingBlobStore* cache, std::string key, std::unique_ptr<BlobReader> inner)
      : cache_(cache), key_(std::move(key)), inner_(std::move(inner)) {}
  uint64_t size() const override { return inner_->size(); }
  Status Read(size_t max, std::string* out) override {
    Status st = inner_->Read(max, out);
    if (st.code() == StatusCode::kDataLoss) {
      spdlog::warn("blob cache: cached copy of {} is damaged ({}); dropped", key_, st.message());
      cache_->Drop(key_);
    }
    return st;
  }

 private:
  CachingBlobStore* cache_;
  std::string key_;
  std::unique_ptr<BlobReader> inner_;
};

// A miss: the upstream reader's chunks, written to a temp file as they pass.
class CacheFillReader final : public BlobReader {
 public:
  CacheFillReader(CachingBlobStore* cache, std::string key, std::unique_ptr<BlobReader> inner, fs::path tmp, int fd)
      : cache_(cache), key_(std::move(key)), inner_(std::move(inner)), tmp_(std::move(tmp)), fd_(fd) {}
  ~CacheFillReader() override { Abandon(); }
  uint64_t size() const override { return inner_->size(); }
  Status Read(size_t max, std::string* out) override {
    Status st = inner_->Read(max, out);
    if (!st.ok()) {
      Abandon();
      return st;
    }
    if (fd_ < 0 || out->empty()) return st;
    if (!internal::WriteAll(fd_, out->data(), out->size(), tmp_).ok()) {
      Abandon();  // a full cache disk costs the cache, never the read
      return st;
    }
    written_ += out->size();
    if (written_ == inner_->size()) {  // the upstream reader checked the digest with this chunk
      ::close(fd_);
      fd_ = -1;
      cache_->Insert(key_, tmp_, written_);
    }
    return st;
  }

 private:
  void Abandon() {
    if (fd_ < 0) return;
    ::close(fd_);
    fd_ = -1;
    ::unlink(tmp_.c_str());
  }
  CachingBlobStore* cache_;
  std::string key_;
  std::unique_ptr<BlobReader> inner_;
  fs::path tmp_;
  int fd_;
  uint64_t written_ = 0;
};

Result<std::unique_ptr<CachingBlobStore>> CachingBlobStore::Open(BlobStore* upstream, const fs::path& dir,
                                                                 uint64_t max_bytes) {
  std::error_code ec;
  fs::create_directories(dir / "tmp", ec);
  if (ec) return Internal("create " + (dir / "tmp").string() + ": " + ec.message());
  for (const auto& e : fs::directory_iterator(dir / "tmp", ec)) fs::remove(e.path(), ec);
  std::unique_ptr<CachingBlobStore> cache(new CachingBlobStore(upstream, dir, max_bytes));
  struct Found {
    fs::file_time_type mtime;
    std::string key;
    uint64_t size;
  };
  std::vector<Found> found;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || !internal::IsHexSha256(name)) continue;
    found.push_back({e.last_write_time(), name, e.file_size()});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime > b.mtime; });
  std::lock_guard<std::mutex> lock(cache->mu_);
  for (const auto& f : found) {
    cache->lru_.push_back(f.key);
    cache->entries_[f.key] = {f.size, std::prev(cache->lru_.end())};
    cache->stats_.bytes += f.size;
  }
  cache->EvictLocked();
  return cache;
}

Result<std::unique_ptr<BlobReader>> CachingBlobStore::Open(const std::string& sha256_hex) {
  KILN_RETURN_IF_ERROR(CheckBlobKey(sha256_hex, 1));
  const fs::path path = dir_ / sha256_hex;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(sha256_hex);
    if (it != entries_.end()) {
      // Opened under mu_: an eviction unlinks under it too, so the file is there (an open fd
      // keeps reading after a later eviction).
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        lru_.splice(lru_.begin(), lru_, it->second.lru);
        ++stats_.hits;
        auto local = NewFileBlobReader(fd, it->second.size, sha256_hex, path);
        return std::unique_ptr<BlobReader>(new CachedReader(this, sha256_hex, std::move(local)));
      }
      stats_.bytes -= it->second.size;
      lru_.erase(it->second.lru);
      entries_.erase(it);
    }
    ++stats_.misses;
  }
  auto upstream = upstream_->Open(sha256_hex);
  if (!upstream.ok()) return upstream.status();
  if ((*upstream)->size() > max_bytes_) return upstream;  // would evict everything: not cached
  const fs::path tmp = dir_ / "tmp" / (sha256_hex + "." + std::to_string(++g_fill_seq));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return upstream;  // the read goes on without the cache
  return std::unique_ptr<BlobReader>(new CacheFillReader(this, sha256_hex, std::move(upstream).value(), tmp, fd));
}

void CachingBlobStore::Insert(const std::string& key, const fs::path& tmp, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.count(key) > 0) {  // another reader filled it first
    ::unlink(tmp.c_str());
    return;
  }
  if (::rename(tmp.c_str(), (dir_ / key).c_str()) != 0) {
    ::unlink(tmp.c_str());
    return;
  }
  lru_.push_front(key);
  entries_[key] = {size, lru_.begin()};
  stats_.bytes += size;
  EvictLocked();
}

void CachingBlobStore::Drop(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  ::unlink((dir_ / key).c_str());
  stats_.bytes -= it->second.size;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

void CachingBlobStore::EvictLocked() {
  while (stats_.bytes > max_bytes_ && !lru_.empty()) {
    const std::string key = lru_.back();
    auto it = entries_.find(key);
    ::unlink((dir_ / key).c_str());
    stats_.bytes -= it->second.size;
    entries_.erase(it);
    lru_.pop_back();
    ++stats_.evictions;
  }
  stats_.blobs = entries_.size();
}

Status CachingBlobStore::Remove(const std::string& sha256_hex) {
  Drop(sha256_hex);
  return upstream_->Remove(sha256_hex);
}

CachingBlobStore::Stats CachingBlobStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.blobs = entries_.size();
  return s;
}

}  // namespace kiln::store
