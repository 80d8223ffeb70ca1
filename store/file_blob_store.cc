#include "store/file_blob_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "common/sha256.h"
#include "store/store_files.h"

namespace fs = std::filesystem;

namespace kiln::store {

namespace {

std::atomic<uint64_t> g_upload_seq{0};

class FileBlobWriter : public BlobWriter {
 public:
  FileBlobWriter(fs::path tmp, fs::path target, std::string key, uint64_t size, int fd)
      : tmp_(std::move(tmp)), target_(std::move(target)), key_(std::move(key)), size_(size), fd_(fd) {}
  ~FileBlobWriter() override { Discard(); }

  Status Append(const void* data, size_t size) override {
    if (fd_ < 0) return FailedPrecondition("blob " + key_ + ": upload already finished");
    if (size > size_ - received_) {
      Discard();
      return InvalidArgument("blob " + key_ + ": more than the declared " + std::to_string(size_) + " bytes");
    }
    Status s = internal::WriteAll(fd_, data, size, tmp_);
    if (!s.ok()) {
      Discard();
      return s;
    }
    hash_.Update(data, size);
    received_ += size;
    return Status::Ok();
  }

  Status Commit(bool* already_stored) override {
    if (fd_ < 0) return FailedPrecondition("blob " + key_ + ": upload already finished");
    if (received_ != size_) {
      Discard();
      return InvalidArgument("blob " + key_ + ": " + std::to_string(received_) + " bytes received, " +
                             std::to_string(size_) + " declared");
    }
    const std::string digest = hash_.HexDigest();
    if (digest != key_) {
      Discard();
      return DataLoss("blob " + key_ + ": the bytes hash to " + digest);
    }
    if (::fsync(fd_) != 0) {
      Status s = internal::ErrnoStatus("fsync", tmp_);
      Discard();
      return s;
    }
    ::close(fd_);
    fd_ = -1;
    std::error_code ec;
    const bool existed = fs::exists(target_, ec);
    if (already_stored) *already_stored = existed;
    if (existed) {  // immutable: the stored file stays (its bytes are the same, by their key)
      fs::remove(tmp_, ec);
      return Status::Ok();
    }
    if (::rename(tmp_.c_str(), target_.c_str()) != 0) {
      Status s = internal::ErrnoStatus("rename to " + target_.string(), tmp_);
      fs::remove(tmp_, ec);
      return s;
    }
    return internal::FsyncDir(target_.parent_path());
  }

 private:
  void Discard() {
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
      std::error_code ec;
      fs::remove(tmp_, ec);
    }
  }
  fs::path tmp_, target_;
  std::string key_;
  uint64_t size_;
  int fd_;
  uint64_t received_ = 0;
  Sha256 hash_;
};

class FileBlobReader final : public VerifyingBlobReader {
 public:
  FileBlobReader(int fd, uint64_t size, std::string key, fs::path path)
      : VerifyingBlobReader(std::move(key), size), fd_(fd), path_(std::move(path)) {}
  ~FileBlobReader() override { ::close(fd_); }

 private:
  Status ReadChunk(uint64_t offset, size_t n, std::string* out) override {
    out->resize(n);
    size_t got = 0;
    while (got < n) {
      ssize_t r = ::pread(fd_, out->data() + got, n - got, static_cast<off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return internal::ErrnoStatus("read", path_);
      if (r == 0) break;  // shorter than its size: VerifyingBlobReader says DATA_LOSS
      got += static_cast<size_t>(r);
    }
    out->resize(got);
    return Status::Ok();
  }

  int fd_;
  fs::path path_;
};

}  // namespace

std::unique_ptr<BlobReader> NewFileBlobReader(int fd, uint64_t size, std::string key, fs::path path) {
  return std::make_unique<FileBlobReader>(fd, size, std::move(key), std::move(path));
}

Result<std::unique_ptr<FileBlobStore>> FileBlobStore::OpenDir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir / "objects", ec);
  if (!ec) fs::create_directories(dir / "tmp", ec);
  if (ec) return Internal("creating " + dir.string() + "/{objects,tmp}: " + ec.message());
  for (const auto& e : fs::directory_iterator(dir / "tmp", ec)) fs::remove(e.path(), ec);
  return std::unique_ptr<FileBlobStore>(new FileBlobStore(dir));
}

fs::path FileBlobStore::PathOf(const std::string& sha256_hex) const {
  return internal::ObjectPathIn(dir_, sha256_hex);
}

Result<std::unique_ptr<BlobWriter>> FileBlobStore::Begin(const std::string& sha256_hex, uint64_t size_bytes) {
  KILN_RETURN_IF_ERROR(CheckBlobKey(sha256_hex, size_bytes));
  fs::path tmp = dir_ / "tmp" /
                 (sha256_hex + "." + std::to_string(::getpid()) + "." + std::to_string(++g_upload_seq));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return internal::ErrnoStatus("create", tmp);
  return std::unique_ptr<BlobWriter>(new FileBlobWriter(tmp, PathOf(sha256_hex), sha256_hex, size_bytes, fd));
}

Result<std::unique_ptr<BlobReader>> FileBlobStore::Open(const std::string& sha256_hex) {
  KILN_RETURN_IF_ERROR(CheckBlobKey(sha256_hex, 1));
  const fs::path path = PathOf(sha256_hex);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return NotFound("blob " + sha256_hex + " not found");
  if (fd < 0) return internal::ErrnoStatus("open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Status s = internal::ErrnoStatus("stat", path);
    ::close(fd);
    return s;
  }
  return NewFileBlobReader(fd, static_cast<uint64_t>(st.st_size), sha256_hex, path);
}

Result<uint64_t> FileBlobStore::Size(const std::string& sha256_hex) {
  KILN_RETURN_IF_ERROR(CheckBlobKey(sha256_hex, 1));
  struct stat st {};
  const fs::path path = PathOf(sha256_hex);
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound("blob " + sha256_hex + " not found");
    return internal::ErrnoStatus("stat", path);
  }
  return static_cast<uint64_t>(st.st_size);
}

Status FileBlobStore::Remove(const std::string& sha256_hex) {
  KILN_RETURN_IF_ERROR(CheckBlobKey(sha256_hex, 1));
  const fs::path path = PathOf(sha256_hex);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return NotFound("blob " + sha256_hex + " not found");
    return internal::ErrnoStatus("unlink", path);
  }
  return internal::FsyncDir(path.parent_path());
}

Result<std::vector<std::string>> FileBlobStore::List() {
  std::vector<std::string> keys;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_ / "objects", ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() == 64 + 5 && name.ends_with(".onnx") && internal::IsHexSha256(name.substr(0, 64))) {
      keys.push_back(name.substr(0, 64));
    }
  }
  if (ec) return Internal("listing " + (dir_ / "objects").string() + ": " + ec.message());
  std::sort(keys.begin(), keys.end());
  return keys;
}

}  // namespace kiln::store
