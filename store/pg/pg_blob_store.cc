#include "store/pg/pg_blob_store.h"

#include <algorithm>
#include <optional>

#include "common/sha256.h"

namespace kiln::store::pg {
namespace {

class PgBlobWriter : public BlobWriter {
 public:
  // `lease` empty: the key is stored already; the writer only checks the bytes.
  PgBlobWriter(PgBlobStore* store, std::optional<PgPool::Lease> lease, std::string key, uint64_t size)
      : store_(store), lease_(std::move(lease)), key_(std::move(key)), size_(size) {}
  ~PgBlobWriter() override { Discard(); }

  Status Begin() {
    if (!lease_) return Status::Ok();
    try {
      tx_ = std::make_unique<pqxx::work>(lease_->conn());
      // The transaction waits on the uploader between chunks: no idle bound (PgPoolOptions).
      tx_->exec("SET LOCAL idle_in_transaction_session_timeout = 0");
      lo_ = std::make_unique<pqxx::largeobjectaccess>(*tx_, std::ios::out);
      buf_.reserve(std::min<uint64_t>(size_, PgBlobStore::kChunkBytes));
      return Status::Ok();
    } catch (const std::exception& e) {
      return Fail(e, "creating a large object");
    }
  }

  Status Append(const void* data, size_t size) override {
    if (done_) return FailedPrecondition("blob " + key_ + ": upload already finished");
    if (size > size_ - received_) {
      Discard();
      return InvalidArgument("blob " + key_ + ": more than the declared " + std::to_string(size_) + " bytes");
    }
    hash_.Update(data, size);
    received_ += size;
    if (!lo_) return Status::Ok();
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const size_t n = std::min(size, PgBlobStore::kChunkBytes - buf_.size());
      buf_.append(p, n);
      p += n;
      size -= n;
      if (buf_.size() == PgBlobStore::kChunkBytes) KILN_RETURN_IF_ERROR(Flush());
    }
    return Status::Ok();
  }

  Status Commit(bool* already_stored) override {
    if (done_) return FailedPrecondition("blob " + key_ + ": upload already finished");
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
    if (!lo_) {  // stored at Begin: still there?
      done_ = true;
      auto size = store_->Size(key_);
      if (!size.ok() && size.status().code() == StatusCode::kNotFound) {
        return {StatusCode::kAborted, "blob " + key_ + " was removed during the upload; upload it again"};
      }
      if (!size.ok()) return size.status();
      if (already_stored) *already_stored = true;
      return Status::Ok();
    }
    KILN_RETURN_IF_ERROR(Flush());
    try {
      const pqxx::oid oid = lo_->id();
      lo_.reset();  // lo_close before the commit
      pqxx::result r = tx_->exec_prepared("kiln_blob_insert", key_, static_cast<int64_t>(size_), oid);
      const bool existed = r.affected_rows() == 0;
      if (existed) {
        tx_->abort();  // another upload of the same bytes won: this object goes with the rollback
      } else {
        tx_->commit();
      }
      tx_.reset();
      lease_.reset();
      done_ = true;
      if (already_stored) *already_stored = existed;
      return Status::Ok();
    } catch (const std::exception& e) {
      return Fail(e, "committing");
    }
  }

 private:
  Status Flush() {
    if (buf_.empty()) return Status::Ok();
    try {
      lo_->write(buf_.data(), buf_.size());
      buf_.clear();
      return Status::Ok();
    } catch (const std::exception& e) {
      return Fail(e, "writing");
    }
  }
  Status Fail(const std::exception& e, const char* what) {
    const bool lost = lease_ && ConnectionLost(e, lease_->conn());
    Status s = PgErrorStatus(e, std::string(what) + " blob " + key_);
    if (lost) s = Unavailable(s.message());
    Close();  // before the connection goes: both refer to it
    if (lost) lease_->Discard();
    Discard();
    return s;
  }
  void Close() noexcept {
    try {
      lo_.reset();
      tx_.reset();  // rolls back: the large object goes with it
    } catch (...) {
    }
  }
  void Discard() {
    done_ = true;
    Close();
    lease_.reset();
  }

  PgBlobStore* store_;
  std::optional<PgPool::Lease> lease_;
  std::unique_ptr<pqxx::work> tx_;
  std::unique_ptr<pqxx::largeobjectaccess> lo_;
  std::string key_;
  uint64_t size_;
  uint64_t received_ = 0;
  std::string buf_;
  Sha256 hash_;
  bool done_ = false;
};

class PgBlobReader final : public VerifyingBlobReader {
 public:
  PgBlobReader(PgPool::Lease lease, std::string key) : VerifyingBlobReader(std::move(key)), lease_(std::move(lease)) {}
  ~PgBlobReader() override { Close(); }

  // NOT_FOUND when there is no such blob.
  Status Open() {
    try {
      tx_ = std::make_unique<pqxx::read_transaction>(lease_.conn());
      // The transaction waits on the reader between chunks: no idle bound (PgPoolOptions).
      tx_->exec("SET LOCAL idle_in_transaction_session_timeout = 0");
      pqxx::result r = tx_->exec_prepared("kiln_blob_get", key());
      if (r.empty()) return NotFound("blob " + key() + " not found");
      set_size(r[0][0].as<uint64_t>());
      lo_ = std::make_unique<pqxx::largeobjectaccess>(*tx_, r[0][1].as<pqxx::oid>(), std::ios::in);
      return Status::Ok();
    } catch (const std::exception& e) {
      return Broken(e, "opening blob " + key());
    }
  }

 private:
  Status ReadChunk(uint64_t, size_t n, std::string* out) override {
    out->resize(n);
    try {
      size_t got = 0;
      while (got < n) {
        const auto r = lo_->read(out->data() + got, n - got);
        if (r <= 0) break;  // shorter than its size: VerifyingBlobReader says DATA_LOSS
        got += static_cast<size_t>(r);
      }
      out->resize(got);
      return Status::Ok();
    } catch (const std::exception& e) {
      return Broken(e, "reading blob " + key());
    }
  }
  void Close() noexcept {
    try {
      lo_.reset();
      tx_.reset();
    } catch (...) {
    }
  }
  Status Broken(const std::exception& e, const std::string& what) {
    const bool lost = ConnectionLost(e, lease_.conn());
    Status st = PgErrorStatus(e, what);
    if (lost) st = Unavailable(st.message());
    Close();  // before the connection goes: both refer to it
    if (lost) lease_.Discard();
    return st;
  }
  PgPool::Lease lease_;
  std::unique_ptr<pqxx::read_transaction> tx_;
  std::unique_ptr<pqxx::largeobjectaccess> lo_;
};

}  // namespace

PgBlobStore::PgBlobStore(PgPool* pool) : pool_(pool) {
  pool_->Prepare("kiln_blob_insert",
                 "INSERT INTO kiln_blobs (sha256, size_bytes, loid) VALUES ($1, $2, $3) ON CONFLICT (sha256) DO NOTHING");
  pool_->Prepare("kiln_blob_get", "SELECT size_bytes, loid FROM kiln_blobs WHERE sha256 = $1");
  pool_->Prepare("kiln_blob_delete", "DELETE FROM kiln_blobs WHERE sha256 = $1 RETURNING loid");
  pool_->Prepare("kiln_blob_unlink", "SELECT lo_unlink($1)");
  pool_->Prepare("kiln_blob_list", "SELECT sha256 FROM kiln_blobs ORDER BY sha256");
}

Result<std::unique_ptr<BlobWriter>> PgBlobStore::Begin(const std::string& sha256_hex, uint64_t size_bytes) {
  KILN_RETURN_IF_ERROR(CheckBlobKey(sha256_hex, size_bytes));
  auto stored = Size(sha256_hex);
  std::optional<PgPool::Lease> lease;
  if (!stored.ok()) {
    if (stored.status().code() != StatusCode::kNotFound) return stored.status();
    auto l = pool_->Acquire();
    if (!l.ok()) return l.status().WithContext("uploading blob " + sha256_hex);
    lease.emplace(std::move(l).value());
  }
  auto w = std::make_unique<PgBlobWriter>(this, std::move(lease), sha256_hex, size_bytes);
  KILN_RETURN_IF_ERROR(w->Begin());
  return std::unique_ptr<BlobWriter>(std::move(w));
}

Result<std::unique_ptr<BlobReader>> PgBlobStore::Open(const std::string& sha256_hex) {
  KILN_RETURN_IF_ERROR(CheckBlobKey(sha256_hex, 1));
  auto lease = pool_->Acquire();
  if (!lease.ok()) return lease.status().WithContext("reading blob " + sha256_hex);
  auto r = std::make_unique<PgBlobReader>(std::move(lease).value(), sha256_hex);
  KILN_RETURN_IF_ERROR(r->Open());
  return std::unique_ptr<BlobReader>(std::move(r));
}

Result<uint64_t> PgBlobStore::Size(const std::string& sha256_hex) {
  KILN_RETURN_IF_ERROR(CheckBlobKey(sha256_hex, 1));
  std::optional<uint64_t> size;
  Status st = pool_->Transact("looking up blob " + sha256_hex, [&](pqxx::work& tx) -> Status {
    pqxx::result r = tx.exec_prepared("kiln_blob_get", sha256_hex);
    if (!r.empty()) size = r[0][0].as<uint64_t>();
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (!size) return NotFound("blob " + sha256_hex + " not found");
  return *size;
}

Status PgBlobStore::Remove(const std::string& sha256_hex) {
  KILN_RETURN_IF_ERROR(CheckBlobKey(sha256_hex, 1));
  bool found = false;
  Status st = pool_->Transact("removing blob " + sha256_hex, [&](pqxx::work& tx) -> Status {
    pqxx::result r = tx.exec_prepared("kiln_blob_delete", sha256_hex);
    found = !r.empty();
    if (found) tx.exec_prepared("kiln_blob_unlink", r[0][0].as<pqxx::oid>());
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (!found) return NotFound("blob " + sha256_hex + " not found");
  return Status::Ok();
}

Result<std::vector<std::string>> PgBlobStore::List() {
  std::vector<std::string> keys;
  Status st = pool_->Transact("listing blobs", [&](pqxx::work& tx) -> Status {
    keys.clear();
    for (const auto& row : tx.exec_prepared("kiln_blob_list")) keys.push_back(row[0].as<std::string>());
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return keys;
}

}  // namespace kiln::store::pg
