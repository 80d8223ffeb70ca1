// kiln::store::FileBlobStore — the embedded BlobStore (store/blob_store.h): one file per blob in
// DIR/objects/<sha256>.onnx (the model store's layout, store/model_store.h), uploads in DIR/tmp/.
// A writer fills a temp file, fsyncs it, renames it over the target and fsyncs the directory, so
// a crash leaves either no blob or the whole one; leftovers in tmp/ are removed by Open. A reader
// holds an open file descriptor, so a Remove (unlink) does not cut it short.
// Thread-safe: writers and readers are independent; the file system serializes renames.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "store/blob_store.h"

namespace kiln::store {

/// A verifying reader (VerifyingBlobReader) of the open file `fd` holding blob `key` of `size`
/// bytes; takes ownership of `fd`. `path` names the file in errors. Also the blob cache's reader
/// of its local copies (store/blob_cache.h).
std::unique_ptr<BlobReader> NewFileBlobReader(int fd, uint64_t size, std::string key, std::filesystem::path path);

class FileBlobStore : public BlobStore {
 public:
  /// Creates DIR/objects and DIR/tmp; removes leftovers in tmp/. INTERNAL on I/O errors. (Not
  /// "Open": that is BlobStore::Open, reading a blob.)
  static Result<std::unique_ptr<FileBlobStore>> OpenDir(const std::filesystem::path& dir);

  Result<std::unique_ptr<BlobWriter>> Begin(const std::string& sha256_hex, uint64_t size_bytes) override;
  Result<std::unique_ptr<BlobReader>> Open(const std::string& sha256_hex) override;
  Result<uint64_t> Size(const std::string& sha256_hex) override;
  Status Remove(const std::string& sha256_hex) override;
  Result<std::vector<std::string>> List() override;

  std::filesystem::path PathOf(const std::string& sha256_hex) const;

 private:
  explicit FileBlobStore(std::filesystem::path dir) : dir_(std::move(dir)) {}
  std::filesystem::path dir_;
};

}  // namespace kiln::store
