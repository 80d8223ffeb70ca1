// kiln::store::EmbeddedSnapshot — an embedded store's data dir (layout: store/model_store.h),
// opened read-only, for tools that copy it elsewhere (`kilnd migrate --from-data-dir`,
// store/pg/pg_migrate.h). Unlike ModelStore::Open it writes nothing: no LOCK file created, no
// tmp/ cleanup, no orphans moved, no index rewritten or reserve allocated.
//
// While open it holds a shared flock on DIR/LOCK, so no kilnd can start on the dir (kilnd takes
// it exclusively, store/store_files.cc TakeLock) and a running kilnd makes Open fail. A dir
// without a LOCK file (never opened by kilnd, or copied without it) is read without one.
// The models are those a kilnd starting on the dir would serve: index.yaml's entries (format 1 or
// 2, checked as at start-up, store/index_file.h), less the entries whose object is gone (a delete
// that did not get to rewrite the index; listed in missing()). tmp/ and orphans/ are not models.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/blob_store.h"
#include "store/model_store.h"

namespace kiln::store {

class EmbeddedSnapshot {
 public:
  /// FAILED_PRECONDITION when DIR has no index.yaml (not a data dir, or one whose index kilnd
  /// would rebuild: start kilnd on it once, or run `kilnd --repair`), when the index is damaged or
  /// an object's size disagrees with its entry (both name `kilnd --repair`), and while another
  /// process (kilnd) holds DIR/LOCK. INTERNAL for other I/O errors.
  static Result<std::unique_ptr<EmbeddedSnapshot>> Open(const std::filesystem::path& dir);
  ~EmbeddedSnapshot();
  EmbeddedSnapshot(const EmbeddedSnapshot&) = delete;
  EmbeddedSnapshot& operator=(const EmbeddedSnapshot&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  /// Sorted by id, names sorted.
  const std::vector<ModelInfo>& models() const { return models_; }
  /// Index entries whose object is gone (kilnd drops them at start).
  const std::vector<ModelInfo>& missing() const { return missing_; }
  /// The bytes of model `id`, streamed and checked against the id (store/blob_store.h
  /// VerifyingBlobReader: DATA_LOSS at the end when they differ). NOT_FOUND when absent.
  Result<std::unique_ptr<BlobReader>> OpenBytes(const std::string& id) const;

 private:
  explicit EmbeddedSnapshot(std::filesystem::path dir) : dir_(std::move(dir)) {}
  std::filesystem::path dir_;
  int lock_fd_ = -1;
  std::vector<ModelInfo> models_;
  std::vector<ModelInfo> missing_;
};

}  // namespace kiln::store
