#include "store/shared_model_store.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/reactor.h"
#include "common/sha256.h"
#include "store/store_files.h"

namespace fs = std::filesystem;

namespace kiln::store {

using namespace internal;  // store/store_files.h

namespace {

std::atomic<uint64_t> g_spool_seq{0};

// Bytes moved from the spool file into the blob per write (the BlobStore's chunking is its own).
constexpr size_t kCopyChunkBytes = 1 << 20;

class SharedModelReader final : public ModelReader {
 public:
  SharedModelReader(ModelInfo info, std::unique_ptr<BlobReader> blob) : info_(std::move(info)), blob_(std::move(blob)) {}
  const ModelInfo& info() const override { return info_; }
  Status Read(size_t max, std::string* out) override {
    AssertNotOnReactor("ModelReader::Read (shared store)");
    return blob_->Read(max, out);  // checks the SHA-256 with the last bytes (store/blob_store.h)
  }
  Result<std::string> ReadAll() override {
    AssertNotOnReactor("ModelReader::ReadAll");
    std::string all;
    all.reserve(info_.size_bytes);
    std::string chunk;
    for (;;) {
      KILN_RETURN_IF_ERROR(blob_->Read(4u << 20, &chunk));
      if (chunk.empty()) break;
      all += chunk;
    }
    if (all.size() != info_.size_bytes) {
      return DataLoss("model " + info_.model_id + ": " + std::to_string(all.size()) + " bytes stored, " +
                      std::to_string(info_.size_bytes) + " indexed");
    }
    return all;
  }

 private:
  ModelInfo info_;
  std::unique_ptr<BlobReader> blob_;
};

}  // namespace

class SharedUpload final : public Upload {
 public:
  SharedUpload(SharedModelStore* store, std::string name, uint64_t size, std::string sha256, fs::path path, int fd)
      : store_(store), name_(std::move(name)), size_(size), sha256_(std::move(sha256)), path_(std::move(path)), fd_(fd) {}
  ~SharedUpload() override { Abort(); }

  Status Append(const void* data, size_t size) override {
    if (finished_) return FailedPrecondition("upload already finished");
    if (size > size_ - received_) {
      // The caller (ModelServiceImpl's upload reactor) names the model.
      return InvalidArgument("the upload sent more than the declared size_bytes " + std::to_string(size_));
    }
    Status st = WriteAll(fd_, data, size, path_);
    if (!st.ok()) {
      if (st.code() == StatusCode::kResourceExhausted) store_->Refused("disk_full");
      return st;
    }
    hash_.Update(data, size);
    received_ += size;
    return Status::Ok();
  }
  uint64_t received_bytes() const override { return received_; }
  uint64_t declared_bytes() const override { return size_; }

  Result<ModelInfo> Commit(bool* already_stored, std::string* replaced_model_id) override {
    AssertNotOnReactor("Upload::Commit");
    if (finished_) return FailedPrecondition("upload already finished");
    auto result = Publish(already_stored, replaced_model_id);
    Abort();  // the spool file and the reservation go either way
    return result;
  }

  void Abort() override {
    if (finished_) return;
    finished_ = true;
    ::close(fd_);
    ::unlink(path_.c_str());
    store_->ReleaseReservation(size_);
  }

 private:
  Result<ModelInfo> Publish(bool* already_stored, std::string* replaced_model_id) {
    ModelIndex& index = *store_->index_;
    ModelInfo info;
    if (received_ == 0) {
      // Header only: the name goes to bytes already stored (kiln.v1.UploadHeader).
      auto stored = index.Get(sha256_);
      if (!stored.ok() && stored.status().code() != StatusCode::kNotFound) return stored.status();
      if (!stored.ok() || stored->size_bytes != size_) {
        return InvalidArgument("upload of '" + name_ + "' ended after its header, and no stored model has sha256 " +
                               sha256_ + " and size_bytes " + std::to_string(size_) +
                               ": send the bytes (only bytes already stored may be named without them)");
      }
      info = std::move(stored).value();
    } else {
      if (received_ != size_) {
        return InvalidArgument("upload of '" + name_ + "' ended after " + std::to_string(received_) +
                               " bytes; header declared size_bytes " + std::to_string(size_));
      }
      const std::string digest = hash_.HexDigest();
      if (digest != sha256_) {
        return DataLoss("upload of '" + name_ + "': sha256 of the received bytes is " + digest +
                        ", header declared " + sha256_);
      }
      bool metadata_too_large = false;
      auto described = DescribeUpload(fd_, path_, size_, name_, store_->options_.max_metadata_bytes, &metadata_too_large);
      if (!described.ok()) {
        if (metadata_too_large) store_->Refused("metadata_too_large");
        return described.status();
      }
      info = std::move(described).value();
      info.model_id = digest;
      KILN_RETURN_IF_ERROR(CheckStoreLimit());
      KILN_RETURN_IF_ERROR(CopyToBlob());
    }
    auto put = index.Put(info, name_);
    if (!put.ok()) return put.status().WithContext("indexing model '" + name_ + "'");
    (void)store_->RefreshTotals();  // metrics only: a failure leaves the last totals
    if (already_stored) *already_stored = put->already_indexed;
    if (replaced_model_id) *replaced_model_id = put->replaced_model_id;
    return put->info;
  }

  // max_store_bytes over the whole farm: the indexed bytes as the database has them now, plus
  // this replica's uploads in flight. Bytes already indexed add nothing.
  Status CheckStoreLimit() {
    const uint64_t cap = store_->options_.max_store_bytes;
    if (cap == 0) return Status::Ok();
    auto existing = store_->index_->Get(sha256_);
    if (existing.ok()) return Status::Ok();
    if (existing.status().code() != StatusCode::kNotFound) return existing.status();
    auto totals = store_->index_->GetTotals();
    if (!totals.ok()) return totals.status();
    const uint64_t reserved = store_->reserved_bytes();  // includes this upload
    const uint64_t other = store_->other_bytes_ ? store_->other_bytes_() : 0;
    if (totals->bytes + reserved + other > cap) {
      store_->Refused("store_full");
      return ResourceExhausted("storing model '" + name_ + "' (" + std::to_string(size_) +
                               " bytes) would exceed the store limit (max_store_bytes) of " + std::to_string(cap) +
                               " bytes; " + std::to_string(totals->bytes) + " bytes are stored and " +
                               std::to_string(reserved) + " bytes are reserved by uploads in flight on this replica");
    }
    return Status::Ok();
  }

  // The spool file into the blob store, chunk by chunk.
  Status CopyToBlob() {
    auto writer = store_->blobs_->Begin(sha256_, size_);
    if (!writer.ok()) return writer.status().WithContext("storing model '" + name_ + "'");
    std::string buf(static_cast<size_t>(std::min<uint64_t>(size_, kCopyChunkBytes)), '\0');
    uint64_t offset = 0;
    while (offset < size_) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size_ - offset));
      ssize_t r = ::pread(fd_, buf.data(), n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return ErrnoStatus("read", path_);
      if (r == 0) return Internal("spool file " + path_.string() + " shorter than the upload");
      KILN_RETURN_IF_ERROR((*writer)->Append(buf.data(), static_cast<size_t>(r)));
      offset += static_cast<uint64_t>(r);
    }
    return (*writer)->Commit(nullptr);  // checks size and SHA-256 again, on what it stored
  }

  SharedModelStore* store_;
  std::string name_;
  uint64_t size_;
  std::string sha256_;
  fs::path path_;
  int fd_;
  uint64_t received_ = 0;
  Sha256 hash_;
  bool finished_ = false;
};

Result<std::unique_ptr<SharedModelStore>> SharedModelStore::Open(ModelIndex* index, BlobStore* blobs,
                                                                 const ModelStoreOptions& options) {
  std::error_code ec;
  fs::create_directories(options.dir / "tmp", ec);
  if (ec) return Internal("create " + (options.dir / "tmp").string() + ": " + ec.message());
  ModelStoreOptions opts = options;
  opts.max_model_bytes = std::min<uint64_t>(opts.max_model_bytes, kMaxModelBytes);
  std::unique_ptr<SharedModelStore> store(new SharedModelStore(index, blobs, opts));
  auto lock = TakeLock(options.dir);
  if (!lock.ok()) return lock.status();
  store->lock_fd_ = *lock;
  // Spool files of uploads a crash cut short: nothing of them reached the shared store.
  for (const auto& e : fs::directory_iterator(options.dir / "tmp", ec)) fs::remove(e.path(), ec);
  if (opts.blob_cache_bytes > 0) {
    auto cache = CachingBlobStore::Open(blobs, options.dir / "blob-cache", opts.blob_cache_bytes);
    if (!cache.ok()) return cache.status();
    store->cache_ = std::move(cache).value();
    store->blobs_ = store->cache_.get();
  }
  KILN_RETURN_IF_ERROR(store->RefreshTotals());
  return store;
}

SharedModelStore::~SharedModelStore() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Status SharedModelStore::RefreshTotals() {
  auto t = index_->GetTotals();
  if (!t.ok()) return t.status();
  model_count_ = t->models;
  total_bytes_ = t->bytes;
  return Status::Ok();
}

Result<std::unique_ptr<Upload>> SharedModelStore::BeginUpload(const std::string& name, uint64_t size_bytes,
                                                              const std::string& sha256_hex) {
  if (Status s = CheckModelName(name); !s.ok()) return s;
  if (!IsHexSha256(sha256_hex)) {
    return InvalidArgument("sha256 must be 64 lowercase hex characters, got '" + sha256_hex.substr(0, 80) + "'");
  }
  if (size_bytes == 0) return InvalidArgument("size_bytes must be > 0");
  if (size_bytes > options_.max_model_bytes) {
    Refused("model_too_large");
    return ResourceExhausted("model '" + name + "' is " + std::to_string(size_bytes) +
                             " bytes; the limit (max_model_bytes) is " + std::to_string(options_.max_model_bytes));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto state = [&] {
      return std::to_string(reserved_bytes_) + " bytes are reserved by " + std::to_string(uploads_in_flight_) +
             " uploads in flight on this replica";
    };
    if (options_.max_uploads_in_flight > 0 && uploads_in_flight_ >= options_.max_uploads_in_flight) {
      Refused("uploads_in_flight");
      return ResourceExhausted("too many uploads in flight (max_uploads_in_flight is " +
                               std::to_string(options_.max_uploads_in_flight) + "); " + state() +
                               "; retry after ~1 s, when one has finished");
    }
    if (options_.max_upload_bytes_in_flight > 0 && reserved_bytes_ + size_bytes > options_.max_upload_bytes_in_flight) {
      Refused("upload_bytes_in_flight");
      return ResourceExhausted("uploading model '" + name + "' (" + std::to_string(size_bytes) +
                               " bytes) would exceed max_upload_bytes_in_flight (" +
                               std::to_string(options_.max_upload_bytes_in_flight) + "); " + state());
    }
    reserved_bytes_ += size_bytes;
    ++uploads_in_flight_;
  }
  fs::path path = options_.dir / "tmp" /
                  ("upload-" + std::to_string(::getpid()) + "-" + std::to_string(++g_spool_seq));
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    Status st = ErrnoStatus("create", path);
    ReleaseReservation(size_bytes);
    return st;
  }
  return std::unique_ptr<Upload>(new SharedUpload(this, name, size_bytes, sha256_hex, path, fd));
}

void SharedModelStore::ReleaseReservation(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  reserved_bytes_ -= std::min(bytes, reserved_bytes_);
  if (uploads_in_flight_ > 0) --uploads_in_flight_;
}

uint64_t SharedModelStore::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reserved_bytes_;
}

Result<ModelInfo> SharedModelStore::Get(const std::string& id_or_name) const {
  AssertNotOnReactor("ModelStore::Get (shared store)");
  auto m = index_->Get(id_or_name);
  if (!m.ok() && m.status().code() == StatusCode::kNotFound) {
    return NotFound("no model with id or name '" + id_or_name.substr(0, 160) + "'");
  }
  return m;
}

Result<std::unique_ptr<ModelReader>> SharedModelStore::OpenReader(const std::string& id_or_name) const {
  auto info = Get(id_or_name);
  if (!info.ok()) return info.status();
  auto blob = blobs_->Open(info->model_id);
  // Deleted between the two lookups: the same answer as a lookup after the delete.
  if (!blob.ok() && blob.status().code() == StatusCode::kNotFound) {
    return NotFound("no model with id or name '" + id_or_name.substr(0, 160) + "'");
  }
  if (!blob.ok()) return blob.status();
  if ((*blob)->size() != info->size_bytes) {
    return DataLoss("model " + info->model_id + ": its blob is " + std::to_string((*blob)->size()) + " bytes, " +
                    std::to_string(info->size_bytes) + " indexed");
  }
  return std::unique_ptr<ModelReader>(new SharedModelReader(std::move(info).value(), std::move(blob).value()));
}

Result<std::vector<ModelInfo>> SharedModelStore::WithIdPrefix(const std::string& prefix, size_t limit) const {
  AssertNotOnReactor("ModelStore::WithIdPrefix (shared store)");
  // Ids are ordered and every id that begins with `prefix` sorts after it: the first ones after it.
  auto after = index_->ListAfter(prefix, limit);
  if (!after.ok()) return after.status();
  std::vector<ModelInfo> out;
  for (auto& m : *after) {
    if (m.model_id.compare(0, prefix.size(), prefix) != 0) break;
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::vector<ModelInfo>> SharedModelStore::ListAfter(const std::string& after_id, size_t limit) const {
  AssertNotOnReactor("ModelStore::ListAfter (shared store)");
  return index_->ListAfter(after_id, limit);
}

Status SharedModelStore::Delete(const std::string& id_or_name) {
  AssertNotOnReactor("ModelStore::Delete (shared store)");
  auto removed = index_->Remove(id_or_name);
  if (!removed.ok() && removed.status().code() == StatusCode::kNotFound) {
    return NotFound("no model with id or name '" + id_or_name.substr(0, 160) + "'");
  }
  if (!removed.ok()) return removed.status();
  if (removed->model_removed) {
    Status st = blobs_->Remove(removed->model_id);
    if (!st.ok() && st.code() != StatusCode::kNotFound) {
      // The model is gone (the index is the truth); its bytes stay until uploaded and deleted again.
      spdlog::warn("model store: model {} deleted, its blob was not: {}", removed->model_id, st.ToString());
    }
  }
  (void)RefreshTotals();  // metrics only: a failure leaves the last totals
  return Status::Ok();
}

}  // namespace kiln::store
