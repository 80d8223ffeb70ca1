#include "store/blob_store.h"

#include "store/store_files.h"

namespace kiln::store {

Status CheckBlobKey(const std::string& sha256_hex, uint64_t size_bytes) {
  if (!internal::IsHexSha256(sha256_hex)) {
    return InvalidArgument("blob key '" + sha256_hex.substr(0, 80) + "' is not 64 lowercase hex digits (SHA-256)");
  }
  if (size_bytes == 0) return InvalidArgument("blob " + sha256_hex + ": size 0");
  return Status::Ok();
}

}  // namespace kiln::store
