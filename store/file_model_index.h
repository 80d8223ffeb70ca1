// kiln::store::FileModelIndex — the embedded ModelIndex (store/model_index.h): the models in
// memory, persisted as DIR/index.yaml in the model store's format (store/index_file.h: format
// version, model count, sha256 checksum line), rewritten atomically (temp file in DIR/tmp, fsync,
// rename, fsync of DIR) on every change, under one mutex. One process per directory (the caller
// holds the data dir's LOCK, store/model_store.h).
#pragma once

#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

#include "store/model_index.h"

namespace kiln::store {

class FileModelIndex : public ModelIndex {
 public:
  /// Loads DIR/index.yaml (an empty index when it does not exist). FAILED_PRECONDITION for a
  /// damaged or unknown-format index (ParseIndex names the problem).
  static Result<std::unique_ptr<FileModelIndex>> Open(const std::filesystem::path& dir);

  Result<PutResult> Put(const ModelInfo& info, const std::string& name) override;
  Result<PutResult> PutIfNameFree(const ModelInfo& info, const std::string& name) override;
  Result<ModelInfo> Get(const std::string& id_or_name) override;
  Result<std::vector<ModelInfo>> ListAfter(const std::string& after_id, size_t limit) override;
  Result<Removed> Remove(const std::string& id_or_name) override;
  Result<Totals> GetTotals() override;

 private:
  Result<PutResult> PutImpl(const ModelInfo& info, const std::string& name, bool move_name);
  explicit FileModelIndex(std::filesystem::path dir) : dir_(std::move(dir)) {}
  Status Write(const std::vector<ModelInfo>& models);  // mu_ held
  const ModelInfo* FindLocked(const std::string& id_or_name) const;

  std::filesystem::path dir_;
  std::mutex mu_;
  std::vector<ModelInfo> models_;  // sorted by id
};

}  // namespace kiln::store
