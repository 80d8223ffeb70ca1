// Durable, content-addressed store of uploaded ONNX models.
//
// On-disk layout under the store directory:
//   objects/<sha256>.onnx   model bytes, named by the lowercase hex SHA-256 of their content
//   tmp/                    uploads in progress (removed at start-up: leftovers of a crash)
//   orphans/                objects no index entry names, moved aside at start-up (never deleted)
//   index.yaml              format_version + model_count + models (id, names, metadata), then a
//                           last line "# kiln-index-sha256: <hex>" over everything before it
//                           (store/index_file.h); replaced atomically
//   LOCK                    flock'ed by the one process that owns the store
//   index.reserve           preallocated room for one index rewrite (the index's size + 4 KiB,
//                           in 64 KiB steps), given up only by a delete that finds the disk full,
//                           so that deletes by name work on a full disk (ModelStore::Delete)
// Every write goes to a temp file in the same file system, is fsync'ed, renamed over its target,
// and the directory is fsync'ed, so a crash at any point leaves either the old or the new state.
// Start-up never deletes model data: objects that no index entry names (a crash between rename
// and index write, stray files) move to orphans/; when index.yaml is missing altogether the index
// is rebuilt from the objects (verified by SHA-256; names are lost, ids stay). A damaged index
// (checksum, duplicate entries, a size that disagrees with its object) refuses to open with
// FAILED_PRECONDITION; ModelStore::Repair (`kilnd --repair`) rebuilds it from the objects.
// Names: a name points at one model; uploading under a taken name moves it (the response says
// from which id). A name that looks like a model id (64 hex digits) is refused.
// Locking: mu_ guards the in-memory index and is never held across file I/O; writers (commit,
// delete) are serialized by write_mu_, which is held across the index rewrite, so readers (Get,
// List, OpenReader) never wait for the disk. Thread-safe; one process per store (LOCK).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string_view>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/limits.h"
#include "common/sha256.h"
#include "common/status.h"

namespace kiln::store {

/// What the store knows of one model (also what ListModels returns).
struct ModelInfo {
  std::string model_id;            ///< lowercase hex SHA-256 of the bytes
  std::vector<std::string> names;  ///< names it was uploaded under
  uint64_t size_bytes = 0;
  int64_t opset = 0;               ///< default-domain opset import (0 if absent)
  std::vector<std::string> inputs;   ///< graph inputs that are not initializers
  std::vector<std::string> outputs;
  int64_t node_count = 0;
  std::string producer_name;
  int64_t created_unix_seconds = 0;
};

struct ModelStoreOptions {
  std::filesystem::path dir;
  /// Largest accepted model, bytes; clamped to kMaxModelBytes (common/limits.h), which the loader
  /// and the summary share, so whatever the store accepts can also be compiled and run.
  uint64_t max_model_bytes = kMaxModelBytes;
  /// Sum of all stored model sizes (in-flight uploads of new bytes reserve their declared size).
  /// 0 = no limit.
  uint64_t max_store_bytes = 64ull << 30;
  /// Uploads in flight (each holds a file in tmp/), whatever they upload. 0 = no limit.
  uint64_t max_uploads_in_flight = 16;
  /// Sum of the declared sizes of the uploads in flight (what tmp/ may come to hold), including
  /// re-uploads of stored bytes, which the store limit does not count. 0 = no limit.
  uint64_t max_upload_bytes_in_flight = 8ull << 30;
  /// Bytes of metadata kept per model: producer_name plus all input and output names. They live
  /// in the index and in every ListModels answer, so they are bounded. 0 = no limit.
  uint64_t max_metadata_bytes = 64u << 10;
  /// Called once per upload refused for one of the limits above, with a fixed reason:
  /// "model_too_large", "uploads_in_flight", "upload_bytes_in_flight", "store_full",
  /// "metadata_too_large", and "disk_full" for an upload the file system had no room for. Optional; may run under the store's lock (keep it short, never call
  /// back). kilnd counts it in kiln_rejected_requests_total (server/daemon.cc).
  std::function<void(std::string_view reason)> on_refused;
};

class ModelStore;

/// One upload in progress: bytes go to a temp file; Commit() verifies and publishes them.
/// Destroying an Upload that was not committed removes its temp file (nothing is stored).
class Upload {
 public:
  ~Upload();
  Upload(const Upload&) = delete;
  Upload& operator=(const Upload&) = delete;

  /// Appends bytes. INVALID_ARGUMENT when more than the declared size arrives (the header lied;
  /// kiln.v1.UploadModelRequest says so); RESOURCE_EXHAUSTED when the disk is full; INTERNAL on
  /// another write error (the upload is then dead).
  Status Append(const void* data, size_t size);
  uint64_t received_bytes() const { return received_; }
  uint64_t declared_bytes() const { return declared_size_; }

  /// An upload that ended after its header (no bytes) names the stored model with the declared
  /// sha256 and size: the bytes need not be sent again (already_stored is then true);
  /// INVALID_ARGUMENT when no such model is stored.
  /// Otherwise verifies size (INVALID_ARGUMENT on mismatch), SHA-256 (DATA_LOSS on mismatch), that the
  /// bytes parse as an onnx ModelProto (INVALID_ARGUMENT) and that its metadata fits
  /// max_metadata_bytes (INVALID_ARGUMENT), then stores the object and maps the
  /// name to it. `already_stored` is set when identical bytes were stored before;
  /// `replaced_model_id` to the model the name pointed at before, when it was another one.
  Result<ModelInfo> Commit(bool* already_stored = nullptr, std::string* replaced_model_id = nullptr);

  /// Discards the upload now (idempotent).
  void Abort();

 private:
  friend class ModelStore;
  Status DiskFullCounted(Status st) const;
  Upload(ModelStore* store, std::string name, uint64_t size, std::string sha256,
         std::filesystem::path tmp_path, int fd);

  ModelStore* store_;
  std::string name_;
  uint64_t declared_size_;
  std::string declared_sha256_;
  std::filesystem::path tmp_path_;
  int fd_;
  uint64_t received_ = 0;
  Sha256 hash_;
  bool finished_ = false;
};

/// Bytes of one model, read while the model existed. Reading is unaffected by a concurrent
/// delete: the file descriptor keeps the unlinked inode alive until the reader closes it.
/// Objects are content-addressed, so the bytes are checked against their id (SHA-256): once per
/// object and process (an upload counts as checked, and an upload of bytes already stored but not
/// yet checked replaces the object), then trusted, because hashing costs as much as parsing
/// (~1.8 GB/s here). A mismatch is DATA_LOSS; the object stays on disk until uploaded again.
class ModelReader {
 public:
  ~ModelReader();
  ModelReader(const ModelReader&) = delete;
  ModelReader& operator=(const ModelReader&) = delete;
  uint64_t size() const { return size_; }
  /// The model id (SHA-256 of the bytes, lowercase hex).
  const std::string& model_id() const { return info_.model_id; }
  /// What the store knew of the model when it was opened (same lookup as the bytes: a name that
  /// moves to another model afterwards changes neither).
  const ModelInfo& info() const { return info_; }
  /// Reads up to `max` bytes at `offset` into `out` (replacing its content). Unchecked: a
  /// streaming reader hashes the chunks itself and calls Verify() at the end.
  Status ReadAt(uint64_t offset, size_t max, std::string* out) const;
  /// Reads the whole model, checked against its id unless this process already checked it.
  /// DATA_LOSS when the bytes on disk no longer match.
  Result<std::string> ReadAll() const;
  /// Compares the digest of all the bytes read with the id; DATA_LOSS on mismatch.
  Status Verify(const std::string& sha256_hex) const;

 private:
  friend class ModelStore;
  ModelReader(int fd, ModelInfo info, const ModelStore* store)
      : fd_(fd), size_(info.size_bytes), info_(std::move(info)), store_(store) {}
  int fd_;
  uint64_t size_;
  ModelInfo info_;
  const ModelStore* store_;
};

class ModelStore {
 public:
  /// Opens (creating if needed) the store in options.dir: removes leftover temp files, loads the
  /// index (or rebuilds it from the objects when index.yaml is missing), moves unindexed objects
  /// to orphans/, drops entries whose object is gone (a delete unlinks before it rewrites the
  /// index). FAILED_PRECONDITION for an index of an unknown format_version, or one that is
  /// damaged (store/index_file.h lists the checks; the message names `kilnd --repair`), and when
  /// another process holds the store's LOCK; INTERNAL for I/O errors.
  static Result<std::unique_ptr<ModelStore>> Open(const ModelStoreOptions& options);

  /// What Repair did.
  struct RepairReport {
    size_t models = 0;            ///< models in the rebuilt index
    size_t names_kept = 0;        ///< names salvaged from the damaged index
    size_t from_orphans = 0;      ///< verified objects moved back from orphans/
    size_t rejected = 0;          ///< files that do not hash to their name or do not parse (moved to orphans/)
    std::string damaged_index;    ///< where the old index.yaml was moved ("" if there was none)
  };
  /// Rebuilds index.yaml from objects/ and orphans/: every file that hashes to its name and
  /// parses as ONNX becomes a model; names come from the old index where it still parses and the
  /// name is valid and unique. The old index is kept beside it (index.yaml.damaged-<unix time>).
  /// Nothing is deleted. Needs the LOCK (FAILED_PRECONDITION while kilnd runs on the store).
  static Result<RepairReport> Repair(const ModelStoreOptions& options);

  /// Starts an upload. INVALID_ARGUMENT for a bad name or sha256 string; RESOURCE_EXHAUSTED
  /// when `size_bytes` exceeds max_model_bytes, would push the store past max_store_bytes (bytes
  /// already stored under that sha256 and size add nothing), or would exceed
  /// max_uploads_in_flight or max_upload_bytes_in_flight (which count every upload); the message
  /// gives the stored and reserved bytes.
  Result<std::unique_ptr<Upload>> BeginUpload(const std::string& name, uint64_t size_bytes,
                                              const std::string& sha256_hex);

  /// Looks a model up by id or by name. NOT_FOUND if neither matches.
  Result<ModelInfo> Get(const std::string& id_or_name) const;
  /// Opens a model's bytes for reading; the reader carries the ModelInfo of the same lookup, so
  /// a caller that needs both resolves the name once. NOT_FOUND if absent.
  Result<std::unique_ptr<ModelReader>> OpenReader(const std::string& id_or_name) const;
  /// Up to `limit` models whose id starts with `prefix`, ordered by id (api::ResolveModelRef
  /// turns a short id into the model id with it).
  std::vector<ModelInfo> WithIdPrefix(const std::string& prefix, size_t limit) const;
  /// All models, ordered by id.
  std::vector<ModelInfo> List() const;
  /// Up to `limit` models (0 = all) whose id is greater than `after_id` ("" = from the start),
  /// ordered by id: one page of ListModels.
  std::vector<ModelInfo> ListAfter(const std::string& after_id, size_t limit) const;
  /// By model id: removes the model and all its names. By name: removes that name, and the model
  /// with it when no other name is left. NOT_FOUND if neither matches. Removing a model unlinks
  /// its object first (that frees the space, and makes the delete durable: start-up drops an
  /// entry without object), then rewrites the index; a failed rewrite is logged and retried by
  /// the next write, so deleting works on a full disk. Removing a name only needs the rewrite:
  /// when the disk is full, the delete gives up index.reserve, rewrites the index in its room
  /// and re-creates it (the index shrank, so it fits again); only when no reserve is left (it
  /// could not be allocated) is that RESOURCE_EXHAUSTED, naming the file system and saying that
  /// deleting by model id frees space; nothing is changed then.
  Status Delete(const std::string& id_or_name);
  /// Declared bytes of the uploads in flight.
  uint64_t reserved_bytes() const;

  size_t model_count() const;
  uint64_t total_bytes() const;
  const ModelStoreOptions& options() const { return options_; }
  /// Bytes other stores of the data dir hold (the job store's inputs and results,
  /// store/job_store.h), counted against max_store_bytes with the models. Called under the
  /// store's lock: it must not call back into this store. Set once, before uploads start.
  void SetOtherBytes(std::function<uint64_t()> fn) { other_bytes_ = std::move(fn); }

  /// Index file format written by this version.
  static constexpr int kIndexFormatVersion = 2;

  ~ModelStore();
  ModelStore(const ModelStore&) = delete;
  ModelStore& operator=(const ModelStore&) = delete;

 private:
  friend class Upload;
  explicit ModelStore(ModelStoreOptions options) : options_(std::move(options)) {}
  Status LoadIndex();
  // Writes `models` as the index; the caller holds write_mu_ (never mu_). With `use_reserve`
  // (deletes only: their index is never larger than the one on disk), a write that finds the
  // file system full removes index.reserve and tries once more. Each successful write then
  // grows or re-creates the reserve to fit the new index (best effort: a full disk may refuse).
  Status WriteIndex(const std::vector<ModelInfo>& models, bool use_reserve = false);
  // Makes index.reserve at least ReserveBytes(index_bytes) long; false if the disk refused.
  bool EnsureIndexReserve(uint64_t index_bytes);
  Status RebuildIndexFromObjects();
  Result<ModelInfo> Publish(Upload* upload, ModelInfo info, bool* already_stored,
                            std::string* replaced_model_id);
  // An upload that ended after its header: maps its name to the stored model with its declared
  // sha256 and size (INVALID_ARGUMENT when there is none).
  Result<ModelInfo> PublishName(Upload* upload, bool* already_stored, std::string* replaced_model_id);
  void ReleaseReservation(uint64_t bytes);
  const ModelInfo* FindLocked(const std::string& id_or_name) const;
  void Refused(std::string_view reason) const {
    if (options_.on_refused) options_.on_refused(reason);
  }
  std::filesystem::path ObjectPath(const std::string& id) const;
  friend class ModelReader;
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

/// True for a valid model name: 1..128 of [A-Za-z0-9._-], not starting with '.', and not 64
/// lowercase hex digits (which would read as a model id).
bool IsValidModelName(const std::string& name);

/// True for a model id: 64 lowercase hex digits.
bool IsModelId(const std::string& s);

}  // namespace kiln::store
