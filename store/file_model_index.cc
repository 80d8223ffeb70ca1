#include "store/file_model_index.h"

#include <algorithm>

#include "store/index_file.h"
#include "store/store_files.h"

namespace fs = std::filesystem;

namespace kiln::store {

Result<std::unique_ptr<FileModelIndex>> FileModelIndex::Open(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir / "tmp", ec);
  if (ec) return Internal("creating " + (dir / "tmp").string() + ": " + ec.message());
  std::unique_ptr<FileModelIndex> index(new FileModelIndex(dir));
  if (fs::exists(dir / "index.yaml", ec)) {
    auto models = internal::ParseIndex(internal::ReadFile(dir / "index.yaml"));
    if (!models.ok()) return models.status().WithContext((dir / "index.yaml").string());
    index->models_ = std::move(models).value();
  }
  return index;
}

Status FileModelIndex::Write(const std::vector<ModelInfo>& models) {
  return internal::AtomicWriteFile(dir_ / "index.yaml", dir_ / "tmp", internal::SerializeIndex(models));
}

const ModelInfo* FileModelIndex::FindLocked(const std::string& id_or_name) const {
  if (IsModelId(id_or_name)) {
    auto it = std::lower_bound(models_.begin(), models_.end(), id_or_name,
                               [](const ModelInfo& m, const std::string& id) { return m.model_id < id; });
    return it != models_.end() && it->model_id == id_or_name ? &*it : nullptr;
  }
  for (const auto& m : models_) {
    if (std::find(m.names.begin(), m.names.end(), id_or_name) != m.names.end()) return &m;
  }
  return nullptr;
}

Result<ModelIndex::PutResult> FileModelIndex::Put(const ModelInfo& info, const std::string& name) {
  return PutImpl(info, name, /*move_name=*/true);
}

Result<ModelIndex::PutResult> FileModelIndex::PutIfNameFree(const ModelInfo& info, const std::string& name) {
  return PutImpl(info, name, /*move_name=*/false);
}

Result<ModelIndex::PutResult> FileModelIndex::PutImpl(const ModelInfo& info, const std::string& name,
                                                      bool move_name) {
  if (!IsModelId(info.model_id)) return InvalidArgument("model id '" + info.model_id.substr(0, 80) + "' is not a SHA-256");
  if (!name.empty()) {
    if (Status s = CheckModelName(name); !s.ok()) return s;
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ModelInfo> next = models_;
  PutResult result;
  if (!name.empty()) {
    for (auto& m : next) {
      if (std::find(m.names.begin(), m.names.end(), name) == m.names.end()) continue;
      if (m.model_id != info.model_id) {
        if (!move_name) return NameTaken(name, m.model_id);
        result.replaced_model_id = m.model_id;
      }
      std::erase(m.names, name);
    }
  }
  auto it = std::lower_bound(next.begin(), next.end(), info.model_id,
                             [](const ModelInfo& m, const std::string& id) { return m.model_id < id; });
  result.already_indexed = it != next.end() && it->model_id == info.model_id;
  if (!result.already_indexed) {
    ModelInfo fresh = info;
    fresh.names.clear();
    it = next.insert(it, std::move(fresh));
  }
  if (!name.empty()) {
    it->names.push_back(name);
    std::sort(it->names.begin(), it->names.end());
  }
  result.info = *it;
  KILN_RETURN_IF_ERROR(Write(next));
  models_.swap(next);
  return result;
}

Result<ModelInfo> FileModelIndex::Get(const std::string& id_or_name) {
  std::lock_guard<std::mutex> lock(mu_);
  const ModelInfo* m = FindLocked(id_or_name);
  if (m == nullptr) return NotFound("model '" + id_or_name.substr(0, 160) + "' not found");
  return *m;
}

Result<std::vector<ModelInfo>> FileModelIndex::ListAfter(const std::string& after_id, size_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::upper_bound(models_.begin(), models_.end(), after_id,
                             [](const std::string& id, const ModelInfo& m) { return id < m.model_id; });
  std::vector<ModelInfo> out;
  for (; it != models_.end() && (limit == 0 || out.size() < limit); ++it) out.push_back(*it);
  return out;
}

Result<ModelIndex::Removed> FileModelIndex::Remove(const std::string& id_or_name) {
  std::lock_guard<std::mutex> lock(mu_);
  const ModelInfo* m = FindLocked(id_or_name);
  if (m == nullptr) return NotFound("model '" + id_or_name.substr(0, 160) + "' not found");
  Removed removed;
  removed.model_id = m->model_id;
  std::vector<ModelInfo> next = models_;
  auto it = next.begin() + (m - models_.data());
  if (IsModelId(id_or_name)) {
    removed.model_removed = true;
  } else {
    std::erase(it->names, id_or_name);
    removed.model_removed = it->names.empty();
  }
  if (removed.model_removed) next.erase(it);
  KILN_RETURN_IF_ERROR(Write(next));
  models_.swap(next);
  return removed;
}

Result<ModelIndex::Totals> FileModelIndex::GetTotals() {
  std::lock_guard<std::mutex> lock(mu_);
  Totals t;
  t.models = models_.size();
  for (const auto& m : models_) t.bytes += m.size_bytes;
  return t;
}

}  // namespace kiln::store
