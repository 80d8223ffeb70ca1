#include "store/model_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "common/reactor.h"
#include "compiler/onnx/summary.h"

namespace fs = std::filesystem;

namespace kiln::store {
namespace {

Status ErrnoStatus(const std::string& what, const fs::path& path) {
  return Internal(what + " " + path.string() + ": " + std::strerror(errno));
}

Status FsyncPath(const fs::path& path, int flags) {
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

std::string RandomSuffix() {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::ostringstream os;
  os << std::hex << rng() << "-" << counter.fetch_add(1);
  return os.str();
}

int64_t NowUnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool IsValidModelName(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.' || IsHexSha256(name)) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
  });
}

// ---------------------------------------------------------------------------------------------
// Upload

Upload::Upload(ModelStore* store, std::string name, uint64_t size, std::string sha256,
               fs::path tmp_path, int fd)
    : store_(store),
      name_(std::move(name)),
      declared_size_(size),
      declared_sha256_(std::move(sha256)),
      tmp_path_(std::move(tmp_path)),
      fd_(fd) {}

Upload::~Upload() { Abort(); }

void Upload::Abort() {
  if (finished_) return;
  finished_ = true;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_path_.c_str());
  store_->ReleaseReservation(declared_size_);
}

Status Upload::Append(const void* data, size_t size) {
  if (finished_) return FailedPrecondition("upload already finished");
  if (received_ + size > declared_size_) {
    return ResourceExhausted("upload of '" + name_ + "' sent more than the declared size_bytes " +
                             std::to_string(declared_size_));
  }
  Status st = WriteAll(fd_, data, size, tmp_path_);
  if (!st.ok()) return st;
  hash_.Update(data, size);
  received_ += size;
  return Status::Ok();
}

Result<ModelInfo> Upload::Commit(bool* already_stored, std::string* replaced_model_id) {
  AssertNotOnReactor("Upload::Commit");
  if (finished_) return FailedPrecondition("upload already finished");
  if (received_ != declared_size_) {
    std::string msg = "upload of '" + name_ + "' ended after " + std::to_string(received_) +
                      " bytes; header declared size_bytes " + std::to_string(declared_size_);
    Abort();
    return InvalidArgument(msg);
  }
  std::string digest = hash_.HexDigest();
  if (digest != declared_sha256_) {
    Abort();
    return DataLoss("upload of '" + name_ + "': sha256 of the received bytes is " + digest +
                    ", header declared " + declared_sha256_);
  }
  if (::fsync(fd_) != 0) {
    Status st = ErrnoStatus("fsync", tmp_path_);
    Abort();
    return st;
  }
  // Parse through a read-only mapping: the bytes are in the page cache already.
  ModelInfo info;
  if (declared_size_ > 0) {
    void* map = ::mmap(nullptr, declared_size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (map == MAP_FAILED) {
      Status st = ErrnoStatus("mmap", tmp_path_);
      Abort();
      return st;
    }
    auto summary = onnx_fe::SummarizeOnnx(map, declared_size_);
    ::munmap(map, declared_size_);
    if (!summary.ok()) {
      Abort();
      return summary.status().WithContext("model '" + name_ + "'");
    }
    info.opset = summary->opset;
    info.inputs = summary->inputs;
    info.outputs = summary->outputs;
    info.node_count = summary->node_count;
    info.producer_name = summary->producer_name;
  } else {
    Abort();
    return InvalidArgument("model '" + name_ + "' is empty");
  }
  info.model_id = digest;
  info.names = {name_};
  info.size_bytes = declared_size_;
  info.created_unix_seconds = NowUnixSeconds();
  ::close(fd_);
  fd_ = -1;
  auto published = store_->Publish(this, std::move(info), already_stored, replaced_model_id);
  if (!published.ok()) {
    Abort();
    return published;
  }
  finished_ = true;
  store_->ReleaseReservation(declared_size_);
  return published;
}

// ---------------------------------------------------------------------------------------------
// ModelReader

ModelReader::~ModelReader() {
  if (fd_ >= 0) ::close(fd_);
}

Status ModelReader::ReadAt(uint64_t offset, size_t max, std::string* out) const {
  if (max > (1u << 20)) AssertNotOnReactor("ModelReader::ReadAt over 1 MiB");
  size_t n = offset >= size_ ? 0 : static_cast<size_t>(std::min<uint64_t>(max, size_ - offset));
  out->resize(n);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd_, out->data() + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Internal(std::string("read model: ") + std::strerror(errno));
    }
    if (r == 0) return DataLoss("model file shorter than its recorded size");
    done += static_cast<size_t>(r);
  }
  return Status::Ok();
}

Result<std::string> ModelReader::ReadAll() const {
  AssertNotOnReactor("ModelReader::ReadAll");
  std::string out;
  Status st = ReadAt(0, size_, &out);
  if (!st.ok()) return st;
  if (store_ != nullptr && !store_->IsVerified(id_)) {
    Sha256 hash;
    hash.Update(out.data(), out.size());
    KILN_RETURN_IF_ERROR(Verify(hash.HexDigest()));
  }
  return out;
}

Status ModelReader::Verify(const std::string& sha256_hex) const {
  if (sha256_hex != id_) {
    spdlog::error("model store: object {} has sha256 {} on disk: corrupted", id_, sha256_hex);
    return DataLoss("model " + id_ + ": the stored bytes no longer match their sha256 (" + sha256_hex +
                    "); the object is corrupted on disk: upload the model again");
  }
  if (store_ != nullptr) store_->MarkVerified(id_);
  return Status::Ok();
}

bool ModelStore::IsVerified(const std::string& id) const {
  std::lock_guard<std::mutex> lock(verified_mu_);
  return verified_.count(id) > 0;
}

void ModelStore::MarkVerified(const std::string& id) const {
  std::lock_guard<std::mutex> lock(verified_mu_);
  verified_.insert(id);
}

// ---------------------------------------------------------------------------------------------
// ModelStore

fs::path ModelStore::ObjectPath(const std::string& id) const {
  return options_.dir / "objects" / (id + ".onnx");
}

ModelStore::~ModelStore() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

Result<std::unique_ptr<ModelStore>> ModelStore::Open(const ModelStoreOptions& options) {
  std::error_code ec;
  for (const char* sub : {"objects", "tmp", "orphans"}) {
    fs::create_directories(options.dir / sub, ec);
    if (ec) return Internal("create " + (options.dir / sub).string() + ": " + ec.message());
  }
  std::unique_ptr<ModelStore> store(new ModelStore(options));
  // One process per store: a second kilnd on the same directory would overwrite the index.
  fs::path lock_path = options.dir / "LOCK";
  store->lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (store->lock_fd_ < 0) return ErrnoStatus("open", lock_path);
  if (::flock(store->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return FailedPrecondition("model store " + options.dir.string() +
                              " is in use by another process (" + lock_path.string() +
                              " is locked); give each kilnd its own --data-dir");
  }
  // Leftovers of a crash: uploads and index writes that never reached their rename.
  for (const auto& e : fs::directory_iterator(options.dir / "tmp", ec)) fs::remove(e.path(), ec);
  bool have_index = fs::exists(options.dir / "index.yaml");
  Status st = have_index ? store->LoadIndex() : store->RebuildIndexFromObjects();
  if (!st.ok()) return st;
  // Objects renamed into place whose index write never happened, and stray files, are not part
  // of the store; they move aside instead of being deleted.
  for (const auto& e : fs::directory_iterator(options.dir / "objects", ec)) {
    std::string id = e.path().stem().string();
    bool known = e.path().extension() == ".onnx" &&
                 std::any_of(store->models_.begin(), store->models_.end(),
                             [&](const ModelInfo& m) { return m.model_id == id; });
    if (known) continue;
    fs::path dest = options.dir / "orphans" / e.path().filename();
    fs::rename(e.path(), dest, ec);
    spdlog::warn("model store: {} is in no index entry; moved to {}", e.path().string(), dest.string());
  }
  // An indexed model whose object is gone cannot be served.
  size_t before = store->models_.size();
  std::erase_if(store->models_, [&](const ModelInfo& m) {
    bool missing = !fs::exists(store->ObjectPath(m.model_id));
    if (missing) {
      spdlog::error("model store: object of model {} (names: {}) is missing; entry dropped",
                    m.model_id, fmt::join(m.names, ","));
    }
    return missing;
  });
  store->total_bytes_ = 0;
  for (const auto& m : store->models_) store->total_bytes_ += m.size_bytes;
  if (store->models_.size() != before || !have_index) {
    std::lock_guard<std::mutex> lock(store->mu_);
    KILN_RETURN_IF_ERROR(store->WriteIndexLocked());
  }
  return store;
}

Status ModelStore::RebuildIndexFromObjects() {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(options_.dir / "objects", ec)) {
    std::string id = e.path().stem().string();
    if (e.path().extension() != ".onnx" || !IsHexSha256(id)) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (Sha256Hex(bytes) != id) continue;  // corrupt: left for the orphan sweep
    auto summary = onnx_fe::SummarizeOnnx(bytes.data(), bytes.size());
    if (!summary.ok()) continue;
    ModelInfo m;
    m.model_id = id;
    m.size_bytes = bytes.size();
    m.opset = summary->opset;
    m.inputs = summary->inputs;
    m.outputs = summary->outputs;
    m.node_count = summary->node_count;
    m.producer_name = summary->producer_name;
    auto mtime = fs::last_write_time(e.path(), ec);
    m.created_unix_seconds = ec ? NowUnixSeconds()
                                : std::chrono::duration_cast<std::chrono::seconds>(
                                      std::chrono::file_clock::to_sys(mtime).time_since_epoch())
                                      .count();
    models_.push_back(std::move(m));
  }
  std::sort(models_.begin(), models_.end(),
            [](const ModelInfo& a, const ModelInfo& b) { return a.model_id < b.model_id; });
  if (!models_.empty()) {
    spdlog::warn("model store {}: index.yaml was missing; rebuilt it from {} objects (names are "
                 "lost, ids kept)", options_.dir.string(), models_.size());
  }
  return Status::Ok();
}

Status ModelStore::LoadIndex() {
  fs::path path = options_.dir / "index.yaml";
  try {
    YAML::Node root = YAML::LoadFile(path.string());
    int version = root["format_version"].as<int>(0);
    if (version != kIndexFormatVersion) {
      return FailedPrecondition("model store index " + path.string() + " has format_version " +
                                std::to_string(version) + "; this kilnd reads version " +
                                std::to_string(kIndexFormatVersion));
    }
    for (const auto& n : root["models"]) {
      ModelInfo m;
      m.model_id = n["id"].as<std::string>();
      if (!IsHexSha256(m.model_id)) continue;
      for (const auto& name : n["names"]) m.names.push_back(name.as<std::string>());
      m.size_bytes = n["size_bytes"].as<uint64_t>();
      m.opset = n["opset"].as<int64_t>(0);
      for (const auto& s : n["inputs"]) m.inputs.push_back(s.as<std::string>());
      for (const auto& s : n["outputs"]) m.outputs.push_back(s.as<std::string>());
      m.node_count = n["node_count"].as<int64_t>(0);
      m.producer_name = n["producer_name"].as<std::string>("");
      m.created_unix_seconds = n["created_unix_seconds"].as<int64_t>(0);
      models_.push_back(std::move(m));
    }
  } catch (const std::exception& e) {
    return FailedPrecondition("model store index " + path.string() + " is unreadable: " + e.what());
  }
  std::sort(models_.begin(), models_.end(),
            [](const ModelInfo& a, const ModelInfo& b) { return a.model_id < b.model_id; });
  return Status::Ok();
}

Status ModelStore::WriteIndexLocked() {
  AssertNotOnReactor("ModelStore::WriteIndexLocked");
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "format_version" << YAML::Value << kIndexFormatVersion;
  out << YAML::Key << "models" << YAML::Value << YAML::BeginSeq;
  for (const auto& m : models_) {
    out << YAML::BeginMap;
    out << YAML::Key << "id" << YAML::Value << m.model_id;
    out << YAML::Key << "names" << YAML::Value << YAML::Flow << m.names;
    out << YAML::Key << "size_bytes" << YAML::Value << m.size_bytes;
    out << YAML::Key << "opset" << YAML::Value << m.opset;
    out << YAML::Key << "inputs" << YAML::Value << YAML::Flow << m.inputs;
    out << YAML::Key << "outputs" << YAML::Value << YAML::Flow << m.outputs;
    out << YAML::Key << "node_count" << YAML::Value << m.node_count;
    out << YAML::Key << "producer_name" << YAML::Value << m.producer_name;
    out << YAML::Key << "created_unix_seconds" << YAML::Value << m.created_unix_seconds;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  std::string text = std::string(out.c_str()) + "\n";
  return AtomicWriteFile(options_.dir / "index.yaml", options_.dir / "tmp", text);
}

Result<std::unique_ptr<Upload>> ModelStore::BeginUpload(const std::string& name,
                                                        uint64_t size_bytes,
                                                        const std::string& sha256_hex) {
  if (!IsValidModelName(name)) {
    return InvalidArgument("model name '" + name +
                           "' is invalid: use 1-128 characters of [A-Za-z0-9._-], not starting "
                           "with '.'");
  }
  if (!IsHexSha256(sha256_hex)) {
    return InvalidArgument("sha256 must be 64 lowercase hex characters, got '" + sha256_hex + "'");
  }
  if (size_bytes == 0) return InvalidArgument("size_bytes must be > 0");
  if (size_bytes > options_.max_model_bytes) {
    return ResourceExhausted("model '" + name + "' is " + std::to_string(size_bytes) +
                             " bytes; the limit (max_model_bytes) is " +
                             std::to_string(options_.max_model_bytes));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Bytes already stored add nothing: a re-upload (new name, same model) is never refused.
    bool stored = std::any_of(models_.begin(), models_.end(), [&](const ModelInfo& m) {
      return m.model_id == sha256_hex && m.size_bytes == size_bytes;
    });
    const uint64_t other = other_bytes_ ? other_bytes_() : 0;
    if (!stored && options_.max_store_bytes > 0 &&
        total_bytes_ + reserved_bytes_ + other + size_bytes > options_.max_store_bytes) {
      return ResourceExhausted("storing model '" + name + "' (" + std::to_string(size_bytes) +
                               " bytes) would exceed the store limit (max_store_bytes) of " +
                               std::to_string(options_.max_store_bytes) + " bytes; " +
                               std::to_string(total_bytes_) + " bytes of models and " + std::to_string(other) +
                               " bytes of job inputs and results are stored");
    }
    reserved_bytes_ += size_bytes;
  }
  fs::path tmp = options_.dir / "tmp" / ("upload-" + RandomSuffix());
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    Status st = ErrnoStatus("create", tmp);
    ReleaseReservation(size_bytes);
    return st;
  }
  return std::unique_ptr<Upload>(new Upload(this, name, size_bytes, sha256_hex, tmp, fd));
}

void ModelStore::ReleaseReservation(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  reserved_bytes_ -= std::min(bytes, reserved_bytes_);
}

Result<ModelInfo> ModelStore::Publish(Upload* upload, ModelInfo info, bool* already_stored,
                                      std::string* replaced_model_id) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string& name = upload->name_;
  // A name points at one model: re-uploading under a name moves the name.
  std::vector<ModelInfo> before = models_;
  for (auto& m : models_) {
    if (std::erase(m.names, name) > 0 && m.model_id != info.model_id && replaced_model_id) {
      *replaced_model_id = m.model_id;
    }
  }
  auto it = std::lower_bound(models_.begin(), models_.end(), info.model_id,
                             [](const ModelInfo& m, const std::string& id) { return m.model_id < id; });
  bool exists = it != models_.end() && it->model_id == info.model_id;
  if (already_stored) *already_stored = exists;
  fs::path object = ObjectPath(info.model_id);
  if (exists) {
    if (IsVerified(info.model_id)) {
      ::unlink(upload->tmp_path_.c_str());
    } else {
      // Not read (checked) since this process started: the object may have rotted on disk. The
      // upload's bytes hash to the id, so they replace it; readers keep the old inode open.
      if (::rename(upload->tmp_path_.c_str(), object.c_str()) != 0) {
        return ErrnoStatus("rename", upload->tmp_path_);
      }
      KILN_RETURN_IF_ERROR(FsyncDir(object.parent_path()));
      MarkVerified(info.model_id);
    }
    it->names.push_back(name);
  } else {
    if (::rename(upload->tmp_path_.c_str(), object.c_str()) != 0) {
      return ErrnoStatus("rename", upload->tmp_path_);
    }
    Status st = FsyncDir(object.parent_path());
    if (!st.ok()) {
      ::unlink(object.c_str());
      return st;
    }
    it = models_.insert(it, info);
    total_bytes_ += info.size_bytes;
    MarkVerified(info.model_id);  // the upload hashed exactly the bytes now stored
  }
  ModelInfo result = *it;
  Status st = WriteIndexLocked();
  if (!st.ok()) {
    // Roll back to the state that is on disk.
    if (!exists) {
      total_bytes_ -= info.size_bytes;
      ::unlink(object.c_str());
    }
    models_ = std::move(before);
    if (replaced_model_id) replaced_model_id->clear();
    return st;
  }
  return result;
}

const ModelInfo* ModelStore::FindLocked(const std::string& id_or_name) const {
  for (const auto& m : models_) {
    if (m.model_id == id_or_name) return &m;
  }
  for (const auto& m : models_) {
    if (std::find(m.names.begin(), m.names.end(), id_or_name) != m.names.end()) return &m;
  }
  return nullptr;
}

Result<ModelInfo> ModelStore::Get(const std::string& id_or_name) const {
  std::lock_guard<std::mutex> lock(mu_);
  const ModelInfo* m = FindLocked(id_or_name);
  if (!m) return NotFound("no model with id or name '" + id_or_name + "'");
  return *m;
}

Result<std::unique_ptr<ModelReader>> ModelStore::OpenReader(const std::string& id_or_name) const {
  std::lock_guard<std::mutex> lock(mu_);
  const ModelInfo* m = FindLocked(id_or_name);
  if (!m) return NotFound("no model with id or name '" + id_or_name + "'");
  fs::path path = ObjectPath(m->model_id);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open", path);
  return std::unique_ptr<ModelReader>(new ModelReader(fd, m->size_bytes, m->model_id, this));
}

std::vector<ModelInfo> ModelStore::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  return models_;
}

Status ModelStore::Delete(const std::string& id_or_name) {
  std::lock_guard<std::mutex> lock(mu_);
  const ModelInfo* m = FindLocked(id_or_name);
  if (!m) return NotFound("no model with id or name '" + id_or_name + "'");
  auto it = models_.begin() + (m - models_.data());
  std::vector<ModelInfo> before = models_;
  bool by_name = it->model_id != id_or_name;
  if (by_name) std::erase(it->names, id_or_name);
  bool remove_model = !by_name || it->names.empty();
  ModelInfo removed = *it;
  if (remove_model) models_.erase(it);
  // Index first: a crash after it leaves an unindexed object, which start-up moves aside.
  Status st = WriteIndexLocked();
  if (!st.ok()) {
    models_ = std::move(before);
    return st;
  }
  if (remove_model) {
    total_bytes_ -= removed.size_bytes;
    ::unlink(ObjectPath(removed.model_id).c_str());
  }
  return Status::Ok();
}

size_t ModelStore::model_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return models_.size();
}

uint64_t ModelStore::total_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_bytes_;
}

}  // namespace kiln::store
