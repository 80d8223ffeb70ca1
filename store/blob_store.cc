#include "store/blob_store.h"

#include <algorithm>

#include "store/store_files.h"

namespace kiln::store {

Status CheckBlobKey(const std::string& sha256_hex, uint64_t size_bytes) {
  if (!internal::IsHexSha256(sha256_hex)) {
    return InvalidArgument("blob key '" + sha256_hex.substr(0, 80) + "' is not 64 lowercase hex digits (SHA-256)");
  }
  if (size_bytes == 0) return InvalidArgument("blob " + sha256_hex + ": size 0");
  return Status::Ok();
}

Status VerifyingBlobReader::Read(size_t max, std::string* out) {
  out->clear();
  if (!failed_.ok()) return failed_;
  if (offset_ >= size_ || max == 0) return Status::Ok();
  // At most 64 MiB per call, whatever the caller asks: a chunk is a buffer.
  const size_t n = static_cast<size_t>(std::min<uint64_t>({max, size_ - offset_, 64u << 20}));
  Status st = ReadChunk(offset_, n, out);
  if (st.ok() && out->size() != n) {
    st = DataLoss("blob " + key_ + ": stored bytes shorter than its " + std::to_string(size_) + " bytes");
  }
  if (!st.ok()) {
    out->clear();
    failed_ = st;  // every later Read returns it
    return st;
  }
  hash_.Update(out->data(), out->size());
  offset_ += out->size();
  if (offset_ == size_) {
    const std::string digest = hash_.HexDigest();
    if (digest != key_) {
      out->clear();
      failed_ = DataLoss("blob " + key_ + ": stored bytes hash to " + digest);
      return failed_;
    }
  }
  return Status::Ok();
}

}  // namespace kiln::store
