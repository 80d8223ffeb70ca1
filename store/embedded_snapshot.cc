#include "store/embedded_snapshot.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "store/file_blob_store.h"
#include "store/index_file.h"
#include "store/store_files.h"

namespace fs = std::filesystem;

namespace kiln::store {

Result<std::unique_ptr<EmbeddedSnapshot>> EmbeddedSnapshot::Open(const fs::path& dir) {
  std::unique_ptr<EmbeddedSnapshot> snap(new EmbeddedSnapshot(dir));
  const fs::path lock_path = dir / "LOCK";
  // Read-only and never created: the dir must not change. Shared, so two readers may run at once
  // while kilnd (LOCK_EX) can neither hold it now nor take it until the snapshot closes.
  snap->lock_fd_ = ::open(lock_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (snap->lock_fd_ < 0 && errno != ENOENT) return internal::ErrnoStatus("open", lock_path);
  if (snap->lock_fd_ >= 0 && ::flock(snap->lock_fd_, LOCK_SH | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return internal::ErrnoStatus("flock", lock_path);
    return FailedPrecondition("data dir " + dir.string() + " is in use by another process (" + lock_path.string() +
                              " is locked): stop the kilnd that runs on it first");
  }
  const fs::path index_path = dir / "index.yaml";
  std::error_code ec;
  if (!fs::exists(index_path, ec)) {
    return FailedPrecondition(index_path.string() + " does not exist: " + dir.string() +
                              " is not a kilnd data dir, or one whose index kilnd rebuilds at start "
                              "(start kilnd on it once, or run `kilnd --repair --data-dir " + dir.string() + "`)");
  }
  auto models = internal::ParseIndex(internal::ReadFile(index_path));
  if (!models.ok()) {
    return FailedPrecondition("model store index " + index_path.string() + ": " + models.status().message() +
                              "; run `kilnd --repair --data-dir " + dir.string() + "` first");
  }
  // The start-up checks of ModelStore::Open (store/model_store.cc), without its fixes.
  for (auto& m : *models) {
    std::sort(m.names.begin(), m.names.end());
    const fs::path object = internal::ObjectPathIn(dir, m.model_id);
    struct stat st {};
    if (::stat(object.c_str(), &st) != 0) {
      if (errno != ENOENT) return internal::ErrnoStatus("stat", object);
      snap->missing_.push_back(std::move(m));
      continue;
    }
    if (static_cast<uint64_t>(st.st_size) != m.size_bytes) {
      return FailedPrecondition("model store index " + index_path.string() + " is damaged: model " + m.model_id +
                                " has size_bytes " + std::to_string(m.size_bytes) + " but its object is " +
                                std::to_string(st.st_size) + " bytes; run `kilnd --repair --data-dir " +
                                dir.string() + "` first");
    }
    snap->models_.push_back(std::move(m));
  }
  return snap;
}

EmbeddedSnapshot::~EmbeddedSnapshot() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

Result<std::unique_ptr<BlobReader>> EmbeddedSnapshot::OpenBytes(const std::string& id) const {
  auto it = std::lower_bound(models_.begin(), models_.end(), id,
                             [](const ModelInfo& m, const std::string& key) { return m.model_id < key; });
  if (it == models_.end() || it->model_id != id) return NotFound("model " + id.substr(0, 80) + " is not in " + dir_.string());
  const fs::path path = internal::ObjectPathIn(dir_, id);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return NotFound("object " + path.string() + " is gone");
  if (fd < 0) return internal::ErrnoStatus("open", path);
  return NewFileBlobReader(fd, it->size_bytes, id, path);
}

}  // namespace kiln::store
