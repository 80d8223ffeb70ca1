// kiln::store::pg::PgBlobStore — the shared BlobStore (store/blob_store.h) in PostgreSQL large
// objects: table kiln_blobs(sha256 PK, size_bytes, loid, created_at) names one large object per
// blob (schema: store/pg/pg_schema.cc).
//
// Writing: Begin takes a pooled connection and opens a transaction that creates the large object;
// Append buffers up to kChunkBytes and writes them with lo_write (pqxx::largeobjectaccess); Commit
// checks size and SHA-256 and inserts the kiln_blobs row in the same transaction, so the object and
// its row appear together or not at all: an abandoned upload, a killed kilnd or a lost connection
// rolls the transaction back and the object with it. When the key is stored already at Begin, the
// writer only hashes (nothing is written) and Commit reports already_stored; when another upload of
// the same key commits first, this one rolls back (ON CONFLICT DO NOTHING).
// Reading: Open takes a pooled connection and a read-only transaction and opens the object for
// reading, which reads it as of that snapshot: a concurrent Remove does not cut a reader short.
// Chunks go straight from lo_read to the caller's buffer; the digest is checked at the end.
// Every open writer and reader holds one connection of the pool until it is destroyed, so the pool
// bounds concurrent streams (size the pool above the upload limit).
#pragma once

#include <cstddef>
#include <memory>

#include "store/blob_store.h"
#include "store/pg/pg_pool.h"

namespace kiln::store::pg {

class PgBlobStore : public BlobStore {
 public:
  /// Bytes buffered by a writer before one lo_write.
  static constexpr size_t kChunkBytes = 1 << 20;

  /// The pool must reach a database migrated by Migrate (store/pg/pg_schema.h).
  explicit PgBlobStore(PgPool* pool);

  Result<std::unique_ptr<BlobWriter>> Begin(const std::string& sha256_hex, uint64_t size_bytes) override;
  Result<std::unique_ptr<BlobReader>> Open(const std::string& sha256_hex) override;
  Result<uint64_t> Size(const std::string& sha256_hex) override;
  Status Remove(const std::string& sha256_hex) override;
  Result<std::vector<std::string>> List() override;

 private:
  PgPool* pool_;
};

}  // namespace kiln::store::pg
