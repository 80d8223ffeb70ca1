#include "store/store_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

#include "common/sha256.h"
#include "compiler/onnx/summary.h"

namespace fs = std::filesystem;

namespace kiln::store::internal {


// A full file system (or quota) is RESOURCE_EXHAUSTED: the client can free space and retry;
// anything else is INTERNAL.
Status ErrnoStatus(const std::string& what, const fs::path& path) {
  int e = errno;
  std::string msg = what + " " + path.string() + ": " + std::strerror(e);
  if (e == ENOSPC || e == EDQUOT) {
    return ResourceExhausted(msg + " (the model store's file system is full; delete models to free space)");
  }
  return Internal(msg);
}

static Status FsyncPath(const fs::path& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open", path);
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoStatus("fsync", path);
  return Status::Ok();
}

Status FsyncDir(const fs::path& dir) { return FsyncPath(dir, O_RDONLY | O_DIRECTORY); }

Status WriteAll(int fd, const void* data, size_t size, const fs::path& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write", path);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

// Writes `content` to `target` atomically: temp file beside it, fsync, rename, fsync dir.
Status AtomicWriteFile(const fs::path& target, const fs::path& tmp_dir, const std::string& content) {
  fs::path tmp = tmp_dir / (target.filename().string() + ".tmp");
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("create", tmp);
  Status st = WriteAll(fd, content.data(), content.size(), tmp);
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoStatus("fsync", tmp);
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), target.c_str()) != 0) st = ErrnoStatus("rename", tmp);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  return FsyncDir(target.parent_path());
}

bool IsHexSha256(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

fs::path ObjectPathIn(const fs::path& dir, const std::string& id) {
  return dir / "objects" / (id + ".onnx");
}

int64_t NowUnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}


// Takes the store's LOCK; FAILED_PRECONDITION while another process holds it.
Result<int> TakeLock(const fs::path& dir) {
  fs::path lock_path = dir / "LOCK";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open", lock_path);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return FailedPrecondition("model store " + dir.string() + " is in use by another process (" +
                              lock_path.string() + " is locked); give each kilnd its own --data-dir");
  }
  return fd;
}

Status MakeDirs(const fs::path& dir) {
  std::error_code ec;
  for (const char* sub : {"objects", "tmp", "orphans"}) {
    fs::create_directories(dir / sub, ec);
    if (ec) return Internal("create " + (dir / sub).string() + ": " + ec.message());
  }
  return Status::Ok();
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The model in `path` if its bytes hash to `id` and parse as ONNX.
std::optional<ModelInfo> VerifiedObject(const fs::path& path, const std::string& id) {
  std::string bytes = ReadFile(path);
  if (bytes.empty() || Sha256Hex(bytes) != id) return std::nullopt;
  auto summary = onnx_fe::SummarizeOnnx(bytes.data(), bytes.size());
  if (!summary.ok()) return std::nullopt;
  ModelInfo m;
  m.model_id = id;
  m.size_bytes = bytes.size();
  m.opset = summary->opset;
  m.inputs = summary->inputs;
  m.outputs = summary->outputs;
  m.node_count = summary->node_count;
  m.producer_name = summary->producer_name;
  std::error_code ec;
  auto mtime = fs::last_write_time(path, ec);
  m.created_unix_seconds = ec ? NowUnixSeconds()
                              : std::chrono::duration_cast<std::chrono::seconds>(
                                    std::chrono::file_clock::to_sys(mtime).time_since_epoch())
                                    .count();
  return m;
}

void SortById(std::vector<ModelInfo>& models) {
  std::sort(models.begin(), models.end(),
            [](const ModelInfo& a, const ModelInfo& b) { return a.model_id < b.model_id; });
}

}  // namespace kiln::store::internal
