// Durable, content-addressed store of uploaded ONNX models: the interface (ModelStore, Upload,
// ModelReader) and the embedded store's rules.
//
// Embedded on-disk layout under the store directory:
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
  /// Shared store only (store/shared_model_store.h): bytes of this replica's local blob cache in
  /// DIR/blob-cache (store/blob_cache.h). 0 = no cache: every read goes to the shared store.
  uint64_t blob_cache_bytes = 0;
};

/// One upload in progress; Commit() verifies and publishes it. Destroying an Upload that was not
/// committed discards it (nothing is stored).
class Upload {
 public:
  virtual ~Upload() = default;
  /// Appends bytes. INVALID_ARGUMENT when more than the declared size arrives (the header lied;
  /// kiln.v1.UploadModelRequest says so); RESOURCE_EXHAUSTED when the disk is full; INTERNAL on
  /// another write error (the upload is then dead). Local file I/O only (may run on a reactor).
  virtual Status Append(const void* data, size_t size) = 0;
  virtual uint64_t received_bytes() const = 0;
  virtual uint64_t declared_bytes() const = 0;

  /// An upload that ended after its header (no bytes) names the stored model with the declared
  /// sha256 and size: the bytes need not be sent again (already_stored is then true);
  /// INVALID_ARGUMENT when no such model is stored.
  /// Otherwise verifies size (INVALID_ARGUMENT on mismatch), SHA-256 (DATA_LOSS on mismatch), that the
  /// bytes parse as an onnx ModelProto (INVALID_ARGUMENT) and that its metadata fits
  /// max_metadata_bytes (INVALID_ARGUMENT), then stores the object and maps the
  /// name to it. `already_stored` is set when identical bytes were stored before;
  /// `replaced_model_id` to the model the name pointed at before, when it was another one.
  /// Blocks (fsync, parse, index write or database): never on a reactor.
  virtual Result<ModelInfo> Commit(bool* already_stored = nullptr, std::string* replaced_model_id = nullptr) = 0;

  /// Discards the upload now (idempotent).
  virtual void Abort() = 0;
};

/// Bytes of one model, read while the model existed; a concurrent delete does not cut a reader
/// short. Content-addressed: the bytes are checked against their id (SHA-256); a mismatch is
/// DATA_LOSS (the embedded store checks once per object and process, store/embedded_model_store.h).
class ModelReader {
 public:
  virtual ~ModelReader() = default;
  uint64_t size() const { return info().size_bytes; }
  /// The model id (SHA-256 of the bytes, lowercase hex).
  const std::string& model_id() const { return info().model_id; }
  /// What the store knew of the model when it was opened (same lookup as the bytes: a name that
  /// moves to another model afterwards changes neither).
  virtual const ModelInfo& info() const = 0;
  /// The next up to `max` (> 0) bytes into `out` (replacing its content); empty at the end. The
  /// call that returns the last bytes checks all of them against the id: DATA_LOSS on mismatch
  /// (the caller must not hand out what it read).
  virtual Status Read(size_t max, std::string* out) = 0;
  /// Reads the whole model (from the start; a fresh reader), checked against its id.
  virtual Result<std::string> ReadAll() = 0;
};

/// The model store that api/ and server/ use (kiln.v1.ModelService, compiles and runs of stored
/// models). Two implementations, chosen in one place (server/daemon.cc):
///   embedded  ModelStore::Open: one kilnd owns a data dir (layout above,
///             store/embedded_model_store.h); its index is in memory.
///   shared    SharedModelStore (store/shared_model_store.h) over a ModelIndex and a BlobStore
///             (store/model_index.h, store/blob_store.h), e.g. PostgreSQL's (store/pg/): any
///             number of kilnd replicas on one database see the same models.
/// Thread-safe.
class ModelStore {
 public:
  virtual ~ModelStore() = default;

  /// Opens (creating if needed) the embedded store in options.dir: removes leftover temp files, loads the
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
  /// Embedded store: rebuilds index.yaml from objects/ and orphans/: every file that hashes to its name and
  /// parses as ONNX becomes a model; names come from the old index where it still parses and the
  /// name is valid and unique. The old index is kept beside it (index.yaml.damaged-<unix time>).
  /// Nothing is deleted. Needs the LOCK (FAILED_PRECONDITION while kilnd runs on the store).
  static Result<RepairReport> Repair(const ModelStoreOptions& options);

  /// Starts an upload. INVALID_ARGUMENT for a bad name or sha256 string; RESOURCE_EXHAUSTED
  /// when `size_bytes` exceeds max_model_bytes, would push the store past max_store_bytes (bytes
  /// already stored under that sha256 and size add nothing), or would exceed
  /// max_uploads_in_flight or max_upload_bytes_in_flight (which count every upload); the message
  /// gives the stored and reserved bytes. Never blocks on the network (runs on a reactor).
  virtual Result<std::unique_ptr<Upload>> BeginUpload(const std::string& name, uint64_t size_bytes,
                                                      const std::string& sha256_hex) = 0;

  /// Looks a model up by id or by name. NOT_FOUND if neither matches.
  virtual Result<ModelInfo> Get(const std::string& id_or_name) const = 0;
  /// Opens a model's bytes for reading; the reader carries the ModelInfo of the same lookup, so
  /// a caller that needs both resolves the name once. NOT_FOUND if absent.
  virtual Result<std::unique_ptr<ModelReader>> OpenReader(const std::string& id_or_name) const = 0;
  /// Up to `limit` models whose id starts with `prefix`, ordered by id (api::ResolveModelRef
  /// turns a short id into the model id with it).
  virtual Result<std::vector<ModelInfo>> WithIdPrefix(const std::string& prefix, size_t limit) const = 0;
  /// Up to `limit` models (0 = all) whose id is greater than `after_id` ("" = from the start),
  /// ordered by id: one page of ListModels.
  virtual Result<std::vector<ModelInfo>> ListAfter(const std::string& after_id, size_t limit) const = 0;
  /// All models, ordered by id (tests and tools; empty when the store cannot be read).
  std::vector<ModelInfo> List() const {
    auto all = ListAfter("", 0);
    return all.ok() ? std::move(all).value() : std::vector<ModelInfo>{};
  }
  /// By model id: removes the model and all its names. By name: removes that name, and the model
  /// with it when no other name is left. NOT_FOUND if neither matches. Deleting works on a full
  /// disk: removing a model frees its bytes first; the embedded store rewrites its index in the
  /// room of index.reserve (store/embedded_model_store.h), and only when it has none left is a
  /// name-only delete RESOURCE_EXHAUSTED, naming the file system and saying that deleting by
  /// model id frees space (nothing is changed then).
  virtual Status Delete(const std::string& id_or_name) = 0;
  /// Declared bytes of this process's uploads in flight.
  virtual uint64_t reserved_bytes() const = 0;
  /// Models and their bytes (a shared store: as of this process's last change or RefreshTotals).
  virtual size_t model_count() const = 0;
  virtual uint64_t total_bytes() const = 0;
  /// Re-reads model_count / total_bytes (a shared store asks the database; blocks).
  virtual Status RefreshTotals() { return Status::Ok(); }
  virtual const ModelStoreOptions& options() const = 0;
  /// Bytes other stores of the data dir hold (the job store's inputs and results,
  /// store/job_store.h), counted against max_store_bytes with the models. Called under the
  /// store's lock: it must not call back into this store. Set once, before uploads start.
  virtual void SetOtherBytes(std::function<uint64_t()> fn) = 0;
  /// True when lookups (Get, ListAfter, WithIdPrefix, OpenReader, Read) may wait on the network:
  /// callers then make them off the reactor (server/model_service.cc). The embedded index is in
  /// memory and its reads are local files.
  virtual bool reads_block() const = 0;

  /// Index file format written by the embedded store.
  static constexpr int kIndexFormatVersion = 2;
};

/// True for a valid model name: 1..128 of [A-Za-z0-9._-], not starting with '.', and not 64
/// lowercase hex digits (which would read as a model id).
bool IsValidModelName(const std::string& name);

/// INVALID_ARGUMENT naming what is wrong with an invalid model name (its length, its first
/// character, a character outside [A-Za-z0-9._-], or that it reads as a model id), or OK.
Status CheckModelName(const std::string& name);

/// True for a model id: 64 lowercase hex digits.
bool IsModelId(const std::string& s);

}  // namespace kiln::store
