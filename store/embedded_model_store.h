// The embedded ModelStore (store/model_store.h: layout, crash rules, names): one kilnd owns a
// data dir. Internal to kiln_store: api/ and server/ use the ModelStore interface, created by
// ModelStore::Open.
// Locking: mu_ guards the in-memory index and is never held across file I/O; writers (commit,
// delete) are serialized by write_mu_, which is held across the index rewrite, so readers (Get,
// List, OpenReader) never wait for the disk. Thread-safe; one process per store (LOCK).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/sha256.h"
#include "store/model_store.h"

namespace kiln::store {

class EmbeddedModelStore;

/// Bytes go to a temp file in tmp/; Commit() verifies and publishes them.
class FileUpload final : public Upload {
 public:
  ~FileUpload() override;
  FileUpload(const FileUpload&) = delete;
  FileUpload& operator=(const FileUpload&) = delete;

  Status Append(const void* data, size_t size) override;
  uint64_t received_bytes() const override { return received_; }
  uint64_t declared_bytes() const override { return declared_size_; }
  Result<ModelInfo> Commit(bool* already_stored = nullptr, std::string* replaced_model_id = nullptr) override;
  void Abort() override;

 private:
  friend class EmbeddedModelStore;
  Status DiskFullCounted(Status st) const;
  FileUpload(EmbeddedModelStore* store, std::string name, uint64_t size, std::string sha256,
             std::filesystem::path tmp_path, int fd);

  EmbeddedModelStore* store_;
  std::string name_;
  uint64_t declared_size_;
  std::string declared_sha256_;
  std::filesystem::path tmp_path_;
  int fd_;
  uint64_t received_ = 0;
  Sha256 hash_;
  bool finished_ = false;
};

/// Reading is unaffected by a concurrent delete: the file descriptor keeps the unlinked inode
/// alive until the reader closes it. The bytes are checked against their id once per object and
/// process (an upload counts as checked, and an upload of bytes already stored but not yet
/// checked replaces the object), then trusted, because hashing costs as much as parsing
/// (~1.8 GB/s here). A mismatch is DATA_LOSS; the object stays on disk until uploaded again.
class FileModelReader final : public ModelReader {
 public:
  ~FileModelReader() override;
  FileModelReader(const FileModelReader&) = delete;
  FileModelReader& operator=(const FileModelReader&) = delete;
  const ModelInfo& info() const override { return info_; }
  Status Read(size_t max, std::string* out) override;
  Result<std::string> ReadAll() override;

 private:
  friend class EmbeddedModelStore;
  FileModelReader(int fd, ModelInfo info, const EmbeddedModelStore* store)
      : fd_(fd), info_(std::move(info)), store_(store) {}
  // Up to `max` bytes at `offset`, unchecked.
  Status ReadAt(uint64_t offset, size_t max, std::string* out) const;
  // Compares `sha256_hex` (of all the bytes) with the id; DATA_LOSS on mismatch.
  Status Verify(const std::string& sha256_hex) const;
  int fd_;
  ModelInfo info_;
  const EmbeddedModelStore* store_;
  uint64_t offset_ = 0;  // Read's position
  Sha256 hash_;          // of what Read handed out
};

class EmbeddedModelStore final : public ModelStore {
 public:
  static Result<std::unique_ptr<EmbeddedModelStore>> OpenDir(const ModelStoreOptions& options);

  Result<std::unique_ptr<Upload>> BeginUpload(const std::string& name, uint64_t size_bytes,
                                              const std::string& sha256_hex) override;
  Result<ModelInfo> Get(const std::string& id_or_name) const override;
  Result<std::unique_ptr<ModelReader>> OpenReader(const std::string& id_or_name) const override;
  Result<std::vector<ModelInfo>> WithIdPrefix(const std::string& prefix, size_t limit) const override;
  Result<std::vector<ModelInfo>> ListAfter(const std::string& after_id, size_t limit) const override;
  /// Removing a model unlinks its object first (that frees the space, and makes the delete
  /// durable: start-up drops an entry without object), then rewrites the index; a failed rewrite
  /// is logged and retried by the next write, so deleting works on a full disk. Removing a name
  /// only needs the rewrite (RESOURCE_EXHAUSTED on a full disk, nothing changed).
  Status Delete(const std::string& id_or_name) override;
  uint64_t reserved_bytes() const override;
  size_t model_count() const override;
  uint64_t total_bytes() const override;
  const ModelStoreOptions& options() const override { return options_; }
  void SetOtherBytes(std::function<uint64_t()> fn) override { other_bytes_ = std::move(fn); }
  bool reads_block() const override { return false; }

  ~EmbeddedModelStore() override;
  EmbeddedModelStore(const EmbeddedModelStore&) = delete;
  EmbeddedModelStore& operator=(const EmbeddedModelStore&) = delete;

 private:
  friend class FileUpload;
  friend class FileModelReader;
  explicit EmbeddedModelStore(ModelStoreOptions options) : options_(std::move(options)) {}
  Status LoadIndex();
  // Writes `models` as the index; the caller holds write_mu_ (never mu_). With `use_reserve`
  // (deletes only: their index is never larger than the one on disk), a write that finds the
  // file system full removes index.reserve and tries once more. Each successful write then
  // grows or re-creates the reserve to fit the new index (best effort: a full disk may refuse).
  Status WriteIndex(const std::vector<ModelInfo>& models, bool use_reserve = false);
  // Makes index.reserve at least ReserveBytes(index_bytes) long; false if the disk refused.
  bool EnsureIndexReserve(uint64_t index_bytes);
  Status RebuildIndexFromObjects();
  Result<ModelInfo> Publish(FileUpload* upload, ModelInfo info, bool* already_stored,
                            std::string* replaced_model_id);
  // An upload that ended after its header: maps its name to the stored model with its declared
  // sha256 and size (INVALID_ARGUMENT when there is none).
  Result<ModelInfo> PublishName(FileUpload* upload, bool* already_stored, std::string* replaced_model_id);
  void ReleaseReservation(uint64_t bytes);
  const ModelInfo* FindLocked(const std::string& id_or_name) const;
  void Refused(std::string_view reason) const {
    if (options_.on_refused) options_.on_refused(reason);
  }
  std::filesystem::path ObjectPath(const std::string& id) const;
  bool IsVerified(const std::string& id) const;
  void MarkVerified(const std::string& id) const;

  ModelStoreOptions options_;
  std::mutex write_mu_;            // serializes index writers; taken before mu_, held across I/O
  mutable std::mutex mu_;          // guards the fields below; never held across file I/O
  std::vector<ModelInfo> models_;  // sorted by id; changed only with write_mu_ held too
  uint64_t total_bytes_ = 0;
  uint64_t reserved_bytes_ = 0;    // declared sizes of uploads in flight
  std::function<uint64_t()> other_bytes_;  // SetOtherBytes
  uint64_t uploads_in_flight_ = 0;
  int lock_fd_ = -1;
  bool index_legacy_ = false;      // index.yaml was format 1 (no checksum): rewritten at Open
  uint64_t index_reserve_bytes_ = 0;  // allocated length of index.reserve; write_mu_
  bool index_reserve_short_ = false;  // the last EnsureIndexReserve failed (logged once); write_mu_
  mutable std::mutex verified_mu_;
  mutable std::unordered_set<std::string> verified_;  // ids whose bytes this process has checked
};

}  // namespace kiln::store
