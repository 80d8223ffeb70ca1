// kiln::store::BlobStore — immutable, content-addressed bytes (model bytes), keyed by the
// lowercase hex SHA-256 of their content.
//
// Implementations:
//   FileBlobStore (store/file_blob_store.h)   embedded: files in a directory (objects/<sha256>.onnx)
//   PgBlobStore   (store/pg/pg_blob_store.h)  shared: PostgreSQL large objects
// Both pass the same contract suite (tests/store/blob_store_contract_test.cc).
//
// Contract
// * Streaming both ways: a writer takes bytes chunk by chunk, a reader hands them out chunk by
//   chunk; no implementation holds a whole blob in memory.
// * Immutable: a key, once committed, always names the same bytes. Committing bytes whose key is
//   already stored keeps the stored blob (already_stored), after checking the new bytes hash to it.
// * Verified: Commit checks the size and the SHA-256 of what was written (INVALID_ARGUMENT for a
//   size that differs from the declared one, DATA_LOSS for a digest that differs from the key),
//   so a blob is never stored under a wrong key. A reader hashes what it hands out and, with the
//   last chunk, compares the digest with the key: DATA_LOSS when the stored bytes were damaged
//   (the caller discards what it read).
// * Atomic: nothing of an upload is visible before Commit; an upload destroyed without Commit,
//   or a process killed mid-upload, leaves nothing behind that a reader can see.
// * A reader opened before a Remove reads the blob to the end.
// Errors: INVALID_ARGUMENT (a key that is not 64 lowercase hex digits, a size of 0), NOT_FOUND (no
// such blob), DATA_LOSS (see above), UNAVAILABLE (the shared store cannot be reached),
// RESOURCE_EXHAUSTED (disk / database full), INTERNAL (other I/O errors).
//
// An S3-compatible implementation would map Begin to CreateMultipartUpload of key
// `blobs/<sha256>` (parts of >= 5 MiB buffered by the writer), Commit to CompleteMultipartUpload
// after the digest check (a conditional put, If-None-Match: *, keeps blobs immutable; the object's
// checksum header carries the SHA-256), an abandoned upload to AbortMultipartUpload plus a bucket
// lifecycle rule for the ones a crash leaves, Open to a HEAD and ranged GETs, Remove to
// DeleteObject.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/sha256.h"
#include "common/status.h"

namespace kiln::store {

/// One blob being written. Destroying it without Commit discards everything written.
class BlobWriter {
 public:
  virtual ~BlobWriter() = default;
  /// Appends bytes. INVALID_ARGUMENT when more than the declared size arrives.
  virtual Status Append(const void* data, size_t size) = 0;
  /// Checks size and digest, then publishes the blob (see the contract). `already_stored` is set
  /// when the key was stored before (the stored blob is kept). The writer is finished afterwards.
  virtual Status Commit(bool* already_stored = nullptr) = 0;
};

/// Sequential reader of one blob.
class BlobReader {
 public:
  virtual ~BlobReader() = default;
  virtual uint64_t size() const = 0;
  /// Up to `max` (> 0) next bytes into `out` (replacing its content); empty at the end. The call
  /// that returns the last bytes checks the digest: DATA_LOSS on mismatch.
  virtual Status Read(size_t max, std::string* out) = 0;
};

/// The one digest check of every reader (FileBlobStore's, PgBlobStore's): an implementation
/// hands out raw chunks (ReadChunk); Read hashes them and, with the last one, compares the
/// digest with the key (DATA_LOSS on mismatch, and for a blob shorter than its size).
class VerifyingBlobReader : public BlobReader {
 public:
  uint64_t size() const final { return size_; }
  Status Read(size_t max, std::string* out) final;

 protected:
  explicit VerifyingBlobReader(std::string key, uint64_t size = 0) : key_(std::move(key)), size_(size) {}
  /// Once, before the first Read, when the size is known only after opening.
  void set_size(uint64_t size) { size_ = size; }
  const std::string& key() const { return key_; }
  /// Exactly `n` (> 0) bytes at `offset` (sequential: the previous call's end) into `out`;
  /// fewer is DATA_LOSS or the implementation's I/O error.
  virtual Status ReadChunk(uint64_t offset, size_t n, std::string* out) = 0;

 private:
  std::string key_;
  uint64_t size_;
  uint64_t offset_ = 0;
  Status failed_;
  Sha256 hash_;
};

class BlobStore {
 public:
  virtual ~BlobStore() = default;
  /// Starts writing the blob `sha256_hex` of `size_bytes` bytes.
  virtual Result<std::unique_ptr<BlobWriter>> Begin(const std::string& sha256_hex, uint64_t size_bytes) = 0;
  virtual Result<std::unique_ptr<BlobReader>> Open(const std::string& sha256_hex) = 0;
  /// Size of a stored blob; NOT_FOUND when absent.
  virtual Result<uint64_t> Size(const std::string& sha256_hex) = 0;
  /// Removes a blob; NOT_FOUND when absent.
  virtual Status Remove(const std::string& sha256_hex) = 0;
  /// Every stored key, sorted.
  virtual Result<std::vector<std::string>> List() = 0;
};

/// INVALID_ARGUMENT unless `sha256_hex` is 64 lowercase hex digits and 0 < size.
Status CheckBlobKey(const std::string& sha256_hex, uint64_t size_bytes);

}  // namespace kiln::store
