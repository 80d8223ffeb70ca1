// ModelStore::Repair and the rebuild of a missing index (store/model_store.h): everything that
// turns objects back into an index.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <unordered_set>

#include "store/index_file.h"
#include "store/embedded_model_store.h"
#include "store/store_files.h"

namespace fs = std::filesystem;

namespace kiln::store {

using namespace internal;

Result<ModelStore::RepairReport> ModelStore::Repair(const ModelStoreOptions& options) {
  KILN_RETURN_IF_ERROR(MakeDirs(options.dir));
  auto lock = TakeLock(options.dir);
  if (!lock.ok()) return lock.status();
  struct CloseLock {
    int fd;
    ~CloseLock() { ::close(fd); }
  } close_lock{*lock};
  RepairReport report;
  fs::path index = options.dir / "index.yaml";
  std::vector<ModelInfo> old;
  if (fs::exists(index)) old = internal::SalvageIndex(ReadFile(index));
  std::vector<ModelInfo> models;
  std::error_code ec;
  for (const char* sub : {"objects", "orphans"}) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(options.dir / sub, ec)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& path : files) {
      std::string id = path.stem().string();
      bool dup = std::any_of(models.begin(), models.end(), [&](const ModelInfo& m) { return m.model_id == id; });
      auto m = path.extension() == ".onnx" && IsHexSha256(id) && !dup ? VerifiedObject(path, id) : std::nullopt;
      if (!m) {
        if (std::string(sub) == "objects") {
          fs::rename(path, options.dir / "orphans" / path.filename(), ec);
          ++report.rejected;
        }
        continue;
      }
      if (std::string(sub) == "orphans") {
        if (::rename(path.c_str(), ObjectPathIn(options.dir, id).c_str()) != 0) return ErrnoStatus("rename", path);
        ++report.from_orphans;
      }
      models.push_back(std::move(*m));
    }
  }
  SortById(models);
  // Names from the old index, for verified objects only, each name at most once.
  std::unordered_set<std::string> taken;
  for (const auto& o : old) {
    auto it = std::lower_bound(models.begin(), models.end(), o.model_id,
                               [](const ModelInfo& m, const std::string& id) { return m.model_id < id; });
    if (it == models.end() || it->model_id != o.model_id) continue;
    if (o.created_unix_seconds > 0) it->created_unix_seconds = o.created_unix_seconds;
    for (const auto& name : o.names) {
      if (IsValidModelName(name) && taken.insert(name).second) {
        it->names.push_back(name);
        ++report.names_kept;
      }
    }
  }
  KILN_RETURN_IF_ERROR(FsyncDir(options.dir / "objects"));
  if (fs::exists(index)) {
    fs::path kept = options.dir / ("index.yaml.damaged-" + std::to_string(NowUnixSeconds()));
    if (::rename(index.c_str(), kept.c_str()) != 0) return ErrnoStatus("rename", index);
    report.damaged_index = kept.string();
  }
  KILN_RETURN_IF_ERROR(AtomicWriteFile(index, options.dir / "tmp", internal::SerializeIndex(models)));
  report.models = models.size();
  return report;
}

Status EmbeddedModelStore::RebuildIndexFromObjects() {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(options_.dir / "objects", ec)) {
    std::string id = e.path().stem().string();
    if (e.path().extension() != ".onnx" || !IsHexSha256(id)) continue;
    auto m = VerifiedObject(e.path(), id);  // corrupt: left for the orphan sweep
    if (m) models_.push_back(std::move(*m));
  }
  SortById(models_);
  if (!models_.empty()) {
    spdlog::warn("model store {}: index.yaml was missing; rebuilt it from {} objects (names are "
                 "lost, ids kept)", options_.dir.string(), models_.size());
  }
  return Status::Ok();
}

}  // namespace kiln::store
