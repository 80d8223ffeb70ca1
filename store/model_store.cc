#include "store/embedded_model_store.h"

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
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <unordered_set>
#include <random>
#include <sstream>

#include "common/reactor.h"
#include "compiler/onnx/summary.h"
#include "store/index_file.h"
#include "store/store_files.h"

namespace fs = std::filesystem;

namespace kiln::store {

using namespace internal;  // store/store_files.h

namespace {

std::string RandomSuffix() {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::ostringstream os;
  os << std::hex << rng() << "-" << counter.fetch_add(1);
  return os.str();
}

}  // namespace

bool IsModelId(const std::string& s) { return IsHexSha256(s); }

bool IsValidModelName(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.' || IsHexSha256(name)) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
  });
}

Status CheckModelName(const std::string& name) {
  if (IsValidModelName(name)) return Status::Ok();
  const std::string shown = "model name '" + name.substr(0, 160) + (name.size() > 160 ? "...'" : "'");
  if (name.empty()) return InvalidArgument("model name is empty; a name has 1-128 characters");
  // The byte first: a name of other characters is refused for them, not for its length in bytes.
  const auto bad = std::find_if(name.begin(), name.end(), [](char c) {
    return !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
             c == '-');
  });
  if (bad != name.end()) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned>(static_cast<unsigned char>(*bad)));
    return InvalidArgument(shown + " has the byte " + hex + " at offset " + std::to_string(bad - name.begin()) +
                           "; use [A-Za-z0-9._-]");
  }
  if (name.size() > 128) {
    return InvalidArgument(shown + " has " + std::to_string(name.size()) + " characters; a name has 1-128");
  }
  if (name[0] == '.') return InvalidArgument(shown + " starts with '.'");
  return InvalidArgument(shown + " is 64 lowercase hex digits, which reads as a model id; choose another name");
}

namespace internal {

Result<ModelInfo> DescribeUpload(int fd, const fs::path& path, uint64_t size, const std::string& name,
                                 uint64_t max_metadata_bytes, bool* metadata_too_large) {
  AssertNotOnReactor("DescribeUpload");
  if (size == 0) return InvalidArgument("model '" + name + "' is empty");
  // Parse through a read-only mapping: the bytes are in the page cache already.
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) return ErrnoStatus("mmap", path);
  auto summary = onnx_fe::SummarizeOnnx(map, size);
  ::munmap(map, size);
  if (!summary.ok()) return summary.status().WithContext("model '" + name + "'");
  ModelInfo info;
  info.opset = summary->opset;
  info.inputs = summary->inputs;
  info.outputs = summary->outputs;
  info.node_count = summary->node_count;
  info.producer_name = summary->producer_name;
  uint64_t meta = info.producer_name.size();
  for (const auto& v : info.inputs) meta += v.size();
  for (const auto& v : info.outputs) meta += v.size();
  if (max_metadata_bytes > 0 && meta > max_metadata_bytes) {
    *metadata_too_large = true;
    return InvalidArgument("model '" + name + "' carries " + std::to_string(meta) +
                           " bytes of metadata (producer_name and input and output names); the "
                           "limit (max_metadata_bytes) is " + std::to_string(max_metadata_bytes));
  }
  info.names = {name};
  info.size_bytes = size;
  info.created_unix_seconds = NowUnixSeconds();
  return info;
}

}  // namespace internal

// ---------------------------------------------------------------------------------------------
// Upload

FileUpload::FileUpload(EmbeddedModelStore* store, std::string name, uint64_t size, std::string sha256,
               fs::path tmp_path, int fd)
    : store_(store),
      name_(std::move(name)),
      declared_size_(size),
      declared_sha256_(std::move(sha256)),
      tmp_path_(std::move(tmp_path)),
      fd_(fd) {}

FileUpload::~FileUpload() { Abort(); }

void FileUpload::Abort() {
  if (finished_) return;
  finished_ = true;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_path_.c_str());
  store_->ReleaseReservation(declared_size_);
}

// The file errors of an upload are RESOURCE_EXHAUSTED exactly when the file system is full
// (store_files.cc ErrnoStatus): those are refusals, counted as "disk_full".
Status FileUpload::DiskFullCounted(Status st) const {
  if (st.code() == StatusCode::kResourceExhausted) store_->Refused("disk_full");
  return st;
}

Status FileUpload::Append(const void* data, size_t size) {
  if (finished_) return FailedPrecondition("upload already finished");
  if (size > declared_size_ - received_) {  // received_ <= declared_size_: no wrap
    // The caller (ModelServiceImpl's upload reactor) names the model.
    return InvalidArgument("the upload sent more than the declared size_bytes " + std::to_string(declared_size_));
  }
  Status st = WriteAll(fd_, data, size, tmp_path_);
  if (!st.ok()) return DiskFullCounted(std::move(st));
  hash_.Update(data, size);
  received_ += size;
  return Status::Ok();
}

Result<ModelInfo> FileUpload::Commit(bool* already_stored, std::string* replaced_model_id) {
  AssertNotOnReactor("Upload::Commit");
  if (finished_) return FailedPrecondition("upload already finished");
  if (received_ == 0 && declared_size_ > 0) {
    // Header only: the name goes to bytes already stored under that sha256 and size, which the
    // client need not send again (kiln.v1.UploadHeader; `kiln upload` asks LookupModel first).
    auto named = store_->PublishName(this, already_stored, replaced_model_id);
    Abort();  // the temp file holds nothing either way; frees the reservation
    return named;
  }
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
    return DiskFullCounted(std::move(st));
  }
  bool metadata_too_large = false;
  auto described = DescribeUpload(fd_, tmp_path_, declared_size_, name_, store_->options_.max_metadata_bytes,
                                  &metadata_too_large);
  if (!described.ok()) {
    Abort();
    if (metadata_too_large) store_->Refused("metadata_too_large");
    return described.status();
  }
  ModelInfo info = std::move(described).value();
  info.model_id = digest;
  ::close(fd_);
  fd_ = -1;
  auto published = store_->Publish(this, std::move(info), already_stored, replaced_model_id);
  if (!published.ok()) {
    Abort();
    return DiskFullCounted(published.status());
  }
  finished_ = true;
  store_->ReleaseReservation(declared_size_);
  return published;
}

// ---------------------------------------------------------------------------------------------
// ModelReader

FileModelReader::~FileModelReader() {
  if (fd_ >= 0) ::close(fd_);
}

Status FileModelReader::ReadAt(uint64_t offset, size_t max, std::string* out) const {
  if (max > (1u << 20)) AssertNotOnReactor("ModelReader::Read over 1 MiB");
  const uint64_t total = size();
  size_t n = offset >= total ? 0 : static_cast<size_t>(std::min<uint64_t>(max, total - offset));
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

Status FileModelReader::Read(size_t max, std::string* out) {
  KILN_RETURN_IF_ERROR(ReadAt(offset_, max, out));
  if (out->empty()) return Status::Ok();
  hash_.Update(out->data(), out->size());
  offset_ += out->size();
  // The last chunk goes out only if all the bytes match the id (the streaming reader of
  // kiln.v1.ModelService.ReadModel ends with DATA_LOSS instead of completing).
  if (offset_ == size()) return Verify(hash_.HexDigest());
  return Status::Ok();
}

Result<std::string> FileModelReader::ReadAll() {
  AssertNotOnReactor("ModelReader::ReadAll");
  std::string out;
  Status st = ReadAt(0, size(), &out);
  if (!st.ok()) return st;
  if (store_ != nullptr && !store_->IsVerified(model_id())) {
    Sha256 hash;
    hash.Update(out.data(), out.size());
    KILN_RETURN_IF_ERROR(Verify(hash.HexDigest()));
  }
  return out;
}

Status FileModelReader::Verify(const std::string& sha256_hex) const {
  if (sha256_hex != model_id()) {
    spdlog::error("model store: object {} has sha256 {} on disk: corrupted", model_id(), sha256_hex);
    return DataLoss("model " + model_id() + ": the stored bytes no longer match their sha256 (" + sha256_hex +
                    "); the object is corrupted on disk: upload the model again");
  }
  if (store_ != nullptr) store_->MarkVerified(model_id());
  return Status::Ok();
}

bool EmbeddedModelStore::IsVerified(const std::string& id) const {
  std::lock_guard<std::mutex> lock(verified_mu_);
  return verified_.count(id) > 0;
}

void EmbeddedModelStore::MarkVerified(const std::string& id) const {
  std::lock_guard<std::mutex> lock(verified_mu_);
  verified_.insert(id);
}

// ---------------------------------------------------------------------------------------------
// ModelStore

fs::path EmbeddedModelStore::ObjectPath(const std::string& id) const { return ObjectPathIn(options_.dir, id); }

EmbeddedModelStore::~EmbeddedModelStore() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

Result<std::unique_ptr<ModelStore>> ModelStore::Open(const ModelStoreOptions& options) {
  auto store = EmbeddedModelStore::OpenDir(options);
  if (!store.ok()) return store.status();
  return std::unique_ptr<ModelStore>(std::move(store).value());
}

Result<std::unique_ptr<EmbeddedModelStore>> EmbeddedModelStore::OpenDir(const ModelStoreOptions& options) {
  KILN_RETURN_IF_ERROR(MakeDirs(options.dir));
  ModelStoreOptions opts = options;
  opts.max_model_bytes = std::min<uint64_t>(opts.max_model_bytes, kMaxModelBytes);
  std::unique_ptr<EmbeddedModelStore> store(new EmbeddedModelStore(opts));
  // One process per store: a second kilnd on the same directory would overwrite the index.
  auto lock = TakeLock(options.dir);
  if (!lock.ok()) return lock.status();
  store->lock_fd_ = *lock;
  std::error_code ec;
  // Leftovers of a crash: uploads and index writes that never reached their rename.
  for (const auto& e : fs::directory_iterator(options.dir / "tmp", ec)) fs::remove(e.path(), ec);
  bool have_index = fs::exists(options.dir / "index.yaml");
  Status st = have_index ? store->LoadIndex() : store->RebuildIndexFromObjects();
  if (!st.ok()) return st;
  // Objects renamed into place whose index write never happened, and stray files, are not part
  // of the store; they move aside instead of being deleted.
  std::unordered_set<std::string> ids;
  for (const auto& m : store->models_) ids.insert(m.model_id);
  for (const auto& e : fs::directory_iterator(options.dir / "objects", ec)) {
    bool known = e.path().extension() == ".onnx" && ids.count(e.path().stem().string()) > 0;
    if (known) continue;
    fs::path dest = options.dir / "orphans" / e.path().filename();
    fs::rename(e.path(), dest, ec);
    spdlog::warn("model store: {} is in no index entry; moved to {}", e.path().string(), dest.string());
  }
  // An entry whose object is gone is a delete that unlinked the object and did not get to
  // rewrite the index (EmbeddedModelStore::Delete); an object of another size than its entry means the
  // index cannot be trusted.
  size_t before = store->models_.size();
  std::vector<ModelInfo> kept;
  for (auto& m : store->models_) {
    std::error_code sec;
    uint64_t size = fs::file_size(store->ObjectPath(m.model_id), sec);
    if (sec) {
      spdlog::warn("model store: object of model {} (names: {}) is gone (a delete that did not rewrite "
                   "the index); entry dropped", m.model_id, fmt::join(m.names, ","));
      continue;
    }
    if (size != m.size_bytes) {
      return FailedPrecondition("model store index " + (options.dir / "index.yaml").string() +
                                " is damaged: model " + m.model_id + " has size_bytes " +
                                std::to_string(m.size_bytes) + " but its object is " + std::to_string(size) +
                                " bytes; nothing was changed. Run `kilnd --repair --data-dir " +
                                options.dir.string() + "` to rebuild the index from the objects");
    }
    kept.push_back(std::move(m));
  }
  store->models_ = std::move(kept);
  store->total_bytes_ = 0;
  for (const auto& m : store->models_) store->total_bytes_ += m.size_bytes;
  std::lock_guard<std::mutex> wlock(store->write_mu_);
  if (store->models_.size() != before || !have_index || store->index_legacy_) {
    KILN_RETURN_IF_ERROR(store->WriteIndex(store->models_));
  } else {
    (void)store->EnsureIndexReserve(fs::file_size(options.dir / "index.yaml", ec));
  }
  return store;
}

Status EmbeddedModelStore::LoadIndex() {
  fs::path path = options_.dir / "index.yaml";
  std::string text = ReadFile(path);
  auto models = internal::ParseIndex(text);
  if (!models.ok()) {
    return FailedPrecondition("model store index " + path.string() + ": " + models.status().message() +
                              "; kilnd does not start on it and changed nothing. Run `kilnd --repair "
                              "--data-dir " + options_.dir.string() +
                              "` to rebuild the index from the objects (README, \"Repairing the store\")");
  }
  index_legacy_ = text.find(internal::kChecksumPrefix) == std::string::npos;
  models_ = std::move(models).value();
  return Status::Ok();
}

// Room kept for one index rewrite: the index, a page of slack, rounded up to 64 KiB steps so
// that a growing index does not reallocate on every write.
static uint64_t ReserveBytes(uint64_t index_bytes) {
  constexpr uint64_t kStep = 64 << 10;
  return (index_bytes + 4096 + kStep - 1) / kStep * kStep;
}

bool EmbeddedModelStore::EnsureIndexReserve(uint64_t index_bytes) {
  const uint64_t want = ReserveBytes(index_bytes);
  if (index_reserve_bytes_ >= want) {
    index_reserve_short_ = false;
    return true;
  }
  fs::path path = options_.dir / "index.reserve";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  // posix_fallocate allocates the blocks (tmpfs and ext4/xfs natively; glibc writes zeros
  // elsewhere), so the room is really taken now and really freed by the unlink.
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(want));
  ::close(fd);
  if (rc != 0) {
    struct stat st{};
    index_reserve_bytes_ = ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
    return false;
  }
  index_reserve_bytes_ = want;
  index_reserve_short_ = false;
  return true;
}

Status EmbeddedModelStore::WriteIndex(const std::vector<ModelInfo>& models, bool use_reserve) {
  AssertNotOnReactor("ModelStore::WriteIndex");
  const std::string text = internal::SerializeIndex(models);
  Status st = AtomicWriteFile(options_.dir / "index.yaml", options_.dir / "tmp", text);
  if (st.code() == StatusCode::kResourceExhausted && use_reserve && index_reserve_bytes_ > 0) {
    fs::path reserve = options_.dir / "index.reserve";
    spdlog::warn("model store: {} is full; a delete gives up {} ({} bytes) to rewrite the index",
                 options_.dir.string(), reserve.string(), index_reserve_bytes_);
    ::unlink(reserve.c_str());
    index_reserve_bytes_ = 0;
    (void)FsyncDir(options_.dir);  // ext4 reuses freed blocks only once the unlink is committed
    st = AtomicWriteFile(options_.dir / "index.yaml", options_.dir / "tmp", text);
  }
  if (st.ok() && !EnsureIndexReserve(text.size()) && !index_reserve_short_) {
    index_reserve_short_ = true;  // logged once per shortage
    spdlog::warn("model store: cannot allocate {} bytes for {} (file system full?); deleting a name "
                 "on a full disk may fail until space is freed", ReserveBytes(text.size()),
                 (options_.dir / "index.reserve").string());
  }
  return st;
}

Result<std::unique_ptr<Upload>> EmbeddedModelStore::BeginUpload(const std::string& name,
                                                        uint64_t size_bytes,
                                                        const std::string& sha256_hex) {
  if (Status s = CheckModelName(name); !s.ok()) return s;
  if (!IsHexSha256(sha256_hex)) {
    return InvalidArgument("sha256 must be 64 lowercase hex characters, got '" + sha256_hex.substr(0, 80) + "'");
  }
  if (size_bytes == 0) return InvalidArgument("size_bytes must be > 0");
  if (size_bytes > options_.max_model_bytes) {
    Refused("model_too_large");
    return ResourceExhausted("model '" + name + "' is " + std::to_string(size_bytes) +
                             " bytes; the limit (max_model_bytes) is " +
                             std::to_string(options_.max_model_bytes));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto state = [&] {
      return std::to_string(total_bytes_) + " bytes are stored and " + std::to_string(reserved_bytes_) +
             " bytes are reserved by " + std::to_string(uploads_in_flight_) + " uploads in flight";
    };
    // Every upload holds a temp file, whatever it uploads: bounded by count and bytes.
    if (options_.max_uploads_in_flight > 0 && uploads_in_flight_ >= options_.max_uploads_in_flight) {
      Refused("uploads_in_flight");
      return ResourceExhausted("too many uploads in flight (max_uploads_in_flight is " +
                               std::to_string(options_.max_uploads_in_flight) + "); " + state() +
                               "; retry after ~1 s, when one has finished");
    }
    if (options_.max_upload_bytes_in_flight > 0 &&
        reserved_bytes_ + size_bytes > options_.max_upload_bytes_in_flight) {
      Refused("upload_bytes_in_flight");
      return ResourceExhausted("uploading model '" + name + "' (" + std::to_string(size_bytes) +
                               " bytes) would exceed max_upload_bytes_in_flight (" +
                               std::to_string(options_.max_upload_bytes_in_flight) + "); " + state());
    }
    // Bytes already stored add nothing to the store: a re-upload (new name, same model) is not
    // refused by the store limit.
    auto it = std::lower_bound(models_.begin(), models_.end(), sha256_hex,
                               [](const ModelInfo& m, const std::string& id) { return m.model_id < id; });
    bool stored = it != models_.end() && it->model_id == sha256_hex && it->size_bytes == size_bytes;
    const uint64_t other = other_bytes_ ? other_bytes_() : 0;
    if (!stored && options_.max_store_bytes > 0 &&
        total_bytes_ + reserved_bytes_ + other + size_bytes > options_.max_store_bytes) {
      Refused("store_full");
      return ResourceExhausted("storing model '" + name + "' (" + std::to_string(size_bytes) +
                               " bytes) would exceed the store limit (max_store_bytes) of " +
                               std::to_string(options_.max_store_bytes) + " bytes; " + state() + "; job inputs and results hold " +
                               std::to_string(other) + " bytes");
    }
    reserved_bytes_ += size_bytes;
    ++uploads_in_flight_;
  }
  fs::path tmp = options_.dir / "tmp" / ("upload-" + RandomSuffix());
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    Status st = ErrnoStatus("create", tmp);
    ReleaseReservation(size_bytes);
    return st;
  }
  return std::unique_ptr<Upload>(new FileUpload(this, name, size_bytes, sha256_hex, tmp, fd));
}

void EmbeddedModelStore::ReleaseReservation(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  reserved_bytes_ -= std::min(bytes, reserved_bytes_);
  if (uploads_in_flight_ > 0) --uploads_in_flight_;
}

Result<ModelInfo> EmbeddedModelStore::Publish(FileUpload* upload, ModelInfo info, bool* already_stored,
                                      std::string* replaced_model_id) {
  std::lock_guard<std::mutex> wlock(write_mu_);
  const std::string& name = upload->name_;
  // Only holders of write_mu_ change models_, so it is read here without mu_.
  std::vector<ModelInfo> next = models_;
  std::string replaced;
  // A name points at one model: re-uploading under a name moves the name.
  for (auto& m : next) {
    if (std::erase(m.names, name) > 0 && m.model_id != info.model_id) replaced = m.model_id;
  }
  auto it = std::lower_bound(next.begin(), next.end(), info.model_id,
                             [](const ModelInfo& m, const std::string& id) { return m.model_id < id; });
  bool exists = it != next.end() && it->model_id == info.model_id;
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
    it = next.insert(it, info);
    MarkVerified(info.model_id);  // the upload hashed exactly the bytes now stored
  }
  ModelInfo result = *it;
  // The index write is the commit; mu_ is not held, so reads go on meanwhile.
  Status st = WriteIndex(next);
  if (!st.ok()) {
    if (!exists) ::unlink(object.c_str());  // back to the state that is on disk
    return st;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    models_.swap(next);
    if (!exists) total_bytes_ += info.size_bytes;
  }
  if (already_stored) *already_stored = exists;
  if (replaced_model_id) *replaced_model_id = replaced;
  return result;
}

Result<ModelInfo> EmbeddedModelStore::PublishName(FileUpload* upload, bool* already_stored,
                                          std::string* replaced_model_id) {
  std::lock_guard<std::mutex> wlock(write_mu_);
  const std::string& name = upload->name_;
  const std::string& id = upload->declared_sha256_;
  std::vector<ModelInfo> next = models_;  // read without mu_: only write_mu_ holders change it
  auto it = std::lower_bound(next.begin(), next.end(), id,
                             [](const ModelInfo& m, const std::string& x) { return m.model_id < x; });
  if (it == next.end() || it->model_id != id || it->size_bytes != upload->declared_size_) {
    return InvalidArgument("upload of '" + name + "' ended after its header, and no stored model has sha256 " +
                           id + " and size_bytes " + std::to_string(upload->declared_size_) +
                           ": send the bytes (only bytes already stored may be named without them)");
  }
  std::string replaced;
  for (auto& m : next) {
    if (std::erase(m.names, name) > 0 && m.model_id != id) replaced = m.model_id;
  }
  it->names.push_back(name);
  ModelInfo result = *it;
  KILN_RETURN_IF_ERROR(WriteIndex(next));
  {
    std::lock_guard<std::mutex> lock(mu_);
    models_.swap(next);
  }
  if (already_stored) *already_stored = true;
  if (replaced_model_id) *replaced_model_id = replaced;
  return result;
}

Result<std::vector<ModelInfo>> EmbeddedModelStore::WithIdPrefix(const std::string& prefix, size_t limit) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ModelInfo> out;
  auto it = std::lower_bound(models_.begin(), models_.end(), prefix,
                             [](const ModelInfo& m, const std::string& p) { return m.model_id < p; });
  for (; it != models_.end() && out.size() < limit && it->model_id.compare(0, prefix.size(), prefix) == 0; ++it) {
    out.push_back(*it);
  }
  return out;
}

const ModelInfo* EmbeddedModelStore::FindLocked(const std::string& id_or_name) const {
  auto it = std::lower_bound(models_.begin(), models_.end(), id_or_name,
                             [](const ModelInfo& m, const std::string& id) { return m.model_id < id; });
  if (it != models_.end() && it->model_id == id_or_name) return &*it;
  for (const auto& m : models_) {
    if (std::find(m.names.begin(), m.names.end(), id_or_name) != m.names.end()) return &m;
  }
  return nullptr;
}

namespace {
Status NoModel(const std::string& id_or_name) {
  return NotFound("no model with id or name '" + id_or_name.substr(0, 160) + "'");
}
}  // namespace

Result<ModelInfo> EmbeddedModelStore::Get(const std::string& id_or_name) const {
  std::lock_guard<std::mutex> lock(mu_);
  const ModelInfo* m = FindLocked(id_or_name);
  if (!m) return NoModel(id_or_name);
  return *m;
}

Result<std::unique_ptr<ModelReader>> EmbeddedModelStore::OpenReader(const std::string& id_or_name) const {
  ModelInfo info;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const ModelInfo* m = FindLocked(id_or_name);
    if (!m) return NoModel(id_or_name);
    info = *m;
  }
  // Opened outside mu_: a delete may unlink the object in between (it leaves the index first),
  // which is then the same NOT_FOUND as a lookup after the delete.
  fs::path path = ObjectPath(info.model_id);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? NoModel(id_or_name) : ErrnoStatus("open", path);
  return std::unique_ptr<ModelReader>(new FileModelReader(fd, std::move(info), this));
}

Result<std::vector<ModelInfo>> EmbeddedModelStore::ListAfter(const std::string& after_id, size_t limit) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::upper_bound(models_.begin(), models_.end(), after_id,
                             [](const std::string& id, const ModelInfo& m) { return id < m.model_id; });
  size_t n = static_cast<size_t>(models_.end() - it);
  if (limit > 0) n = std::min(n, limit);
  return std::vector<ModelInfo>(it, it + static_cast<std::ptrdiff_t>(n));
}

Status EmbeddedModelStore::Delete(const std::string& id_or_name) {
  std::lock_guard<std::mutex> wlock(write_mu_);
  std::vector<ModelInfo> next = models_;  // read without mu_: only write_mu_ holders change it
  const ModelInfo* m = FindLocked(id_or_name);
  if (!m) return NoModel(id_or_name);
  auto it = next.begin() + (m - models_.data());
  bool by_name = it->model_id != id_or_name;
  if (by_name) std::erase(it->names, id_or_name);
  if (by_name && !it->names.empty()) {
    // Only a name goes: the index write is the commit. It frees no space, so on a full disk it
    // needs the reserve (WriteIndex); without one, say what does free space.
    Status st = WriteIndex(next, /*use_reserve=*/true);
    if (st.code() == StatusCode::kResourceExhausted) {
      Refused("disk_full");
      return ResourceExhausted("deleting name '" + id_or_name + "' of model " + it->model_id +
                               " (which keeps its other names) needs an index rewrite: " + st.message() +
                               ". Removing a name frees no space; delete the model by its id to free " +
                               std::to_string(it->size_bytes) + " bytes");
    }
    KILN_RETURN_IF_ERROR(st);
    std::lock_guard<std::mutex> lock(mu_);
    models_.swap(next);
    return Status::Ok();
  }
  ModelInfo removed = *it;
  next.erase(it);
  {
    std::lock_guard<std::mutex> lock(mu_);
    models_.swap(next);
    total_bytes_ -= removed.size_bytes;
  }
  // Object first: it frees the space a full disk needs for the index write, and once the unlink
  // is durable the delete is (start-up drops an entry without object).
  fs::path object = ObjectPath(removed.model_id);
  if (::unlink(object.c_str()) != 0 && errno != ENOENT) {
    Status st = ErrnoStatus("unlink", object);
    std::lock_guard<std::mutex> lock(mu_);  // still stored: put it back
    models_.insert(std::lower_bound(models_.begin(), models_.end(), removed.model_id,
                                    [](const ModelInfo& x, const std::string& id) { return x.model_id < id; }),
                   removed);
    total_bytes_ += removed.size_bytes;
    return st;
  }
  KILN_RETURN_IF_ERROR(FsyncDir(object.parent_path()));
  Status st = WriteIndex(models_, /*use_reserve=*/true);
  if (!st.ok()) {
    spdlog::warn("model store: model {} deleted, but the index rewrite failed ({}); the next write "
                 "or start-up drops its entry", removed.model_id, st.ToString());
  }
  return Status::Ok();
}

uint64_t EmbeddedModelStore::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reserved_bytes_;
}

size_t EmbeddedModelStore::model_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return models_.size();
}

uint64_t EmbeddedModelStore::total_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_bytes_;
}

}  // namespace kiln::store
