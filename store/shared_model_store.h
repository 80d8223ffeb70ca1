// kiln::store::SharedModelStore — the ModelStore (store/model_store.h) of a farm: the index in a
// ModelIndex and the bytes in a BlobStore (store/model_index.h, store/blob_store.h; kilnd uses
// PostgreSQL's, store/pg/), so any number of kilnd replicas on one database serve the same
// models. No replica holds model state another needs: what is local is transient.
//
// Upload: chunks go to a spool file in this replica's DIR/tmp (local I/O, on the reactor like the
// embedded store's); Commit (store lane) checks size and SHA-256, summarizes the bytes
// (internal::DescribeUpload, the embedded store's rule), checks max_store_bytes against the
// database's totals, streams the spool file into a BlobWriter (1 MiB chunks: never the whole
// model in memory), commits the blob, then indexes the model and its name (ModelIndex::Put). A
// replica killed before that leaves nothing anywhere but its own spool file (removed when it
// starts again); the blob of a replica killed between the blob commit and the index Put stays
// unindexed (never listed as a model; reused by the next upload of the same bytes).
// Limits: max_model_bytes, max_metadata_bytes and max_store_bytes (the database's sum of
// model sizes, at Commit) are the farm's; max_uploads_in_flight and max_upload_bytes_in_flight
// bound this replica's spool (its disk and its connections).
// Delete: ModelIndex::Remove, then the blob when the model went.
// Reads: every lookup asks the index (reads_block() is true: callers stay off the reactor); a
// reader streams the blob and checks the SHA-256 at its end, from this replica's blob cache when
// options.blob_cache_bytes > 0 (DIR/blob-cache, store/blob_cache.h).
// Thread-safe. DIR holds a LOCK: one process per spool directory.
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>

#include "store/blob_cache.h"
#include "store/blob_store.h"
#include "store/model_index.h"
#include "store/model_store.h"

namespace kiln::store {

class SharedModelStore final : public ModelStore {
 public:
  /// `index` and `blobs` must outlive the store. options.dir: this replica's local directory
  /// (created; DIR/tmp emptied; FAILED_PRECONDITION while another process holds its LOCK).
  /// Reads the totals (UNAVAILABLE when the index cannot be reached).
  static Result<std::unique_ptr<SharedModelStore>> Open(ModelIndex* index, BlobStore* blobs,
                                                        const ModelStoreOptions& options);

  Result<std::unique_ptr<Upload>> BeginUpload(const std::string& name, uint64_t size_bytes,
                                              const std::string& sha256_hex) override;
  Result<ModelInfo> Get(const std::string& id_or_name) const override;
  Result<std::unique_ptr<ModelReader>> OpenReader(const std::string& id_or_name) const override;
  Result<std::vector<ModelInfo>> WithIdPrefix(const std::string& prefix, size_t limit) const override;
  Result<std::vector<ModelInfo>> ListAfter(const std::string& after_id, size_t limit) const override;
  Status Delete(const std::string& id_or_name) override;
  uint64_t reserved_bytes() const override;
  size_t model_count() const override { return model_count_.load(); }
  uint64_t total_bytes() const override { return total_bytes_.load(); }
  Status RefreshTotals() override;
  const ModelStoreOptions& options() const override { return options_; }
  void SetOtherBytes(std::function<uint64_t()> fn) override { other_bytes_ = std::move(fn); }
  bool reads_block() const override { return true; }
  /// The local blob cache (null without one).
  const CachingBlobStore* blob_cache() const { return cache_.get(); }

  ~SharedModelStore() override;

 private:
  friend class SharedUpload;
  SharedModelStore(ModelIndex* index, BlobStore* blobs, ModelStoreOptions options)
      : index_(index), blobs_(blobs), options_(std::move(options)) {}
  void Refused(std::string_view reason) const {
    if (options_.on_refused) options_.on_refused(reason);
  }
  void ReleaseReservation(uint64_t bytes);

  ModelIndex* index_;
  BlobStore* blobs_;  // the shared store's, or cache_ in front of it
  std::unique_ptr<CachingBlobStore> cache_;
  ModelStoreOptions options_;
  std::function<uint64_t()> other_bytes_;
  int lock_fd_ = -1;
  mutable std::mutex mu_;  // guards the two below
  uint64_t reserved_bytes_ = 0;
  uint64_t uploads_in_flight_ = 0;
  std::atomic<uint64_t> model_count_{0};
  std::atomic<uint64_t> total_bytes_{0};
};

}  // namespace kiln::store
