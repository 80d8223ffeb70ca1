// kiln::store::MigrateEmbeddedStore — copies an embedded store (a data dir, opened read-only as
// an EmbeddedSnapshot, store/embedded_snapshot.h) into a shared one: a ModelIndex and a BlobStore
// (store/model_index.h, store/blob_store.h), which `kilnd migrate --from-data-dir DIR`
// (server/kilnd_main.cc) opens on PostgreSQL as kilnd does for a database (store/pg/pg_store.h).
//
// What it guarantees
// * Every model of the data dir ends up in the target with its id (the SHA-256 of its bytes, so
//   clients' ids keep working), its names and its metadata (created time included). Bytes are
//   streamed in 1 MiB chunks and checked against the id twice: by the data dir's reader and by the
//   target's BlobWriter::Commit.
// * Idempotent: a model the target already has (index entry and blob) is only verified, so a
//   second run changes nothing and reports every model as already present. A model indexed
//   without its blob gets its blob (README: a delete racing an upload can leave one).
// * Nothing is overwritten and no name is moved. Before anything is written every model is
//   checked against the target: an id whose entry or blob there has another size, or whose blob
//   does not hash to it (it holds other bytes), and a name of the data dir that the target gives
//   to another model, are conflicts; with any, nothing is written and the result is
//   FAILED_PRECONDITION listing each (ids and names). A name taken by another model between that
//   check and the write (a replica's upload during the migration) is still refused
//   (ModelIndex::PutIfNameFree; the models before it stay migrated; run again after fixing).
// * The data dir is never written (EmbeddedSnapshot).
// Errors: FAILED_PRECONDITION (conflicts, see above), DATA_LOSS (an object of the data dir that
// does not hash to its id), the target's errors (UNAVAILABLE, RESOURCE_EXHAUSTED, INTERNAL) with
// the model's id in the message. Blocks (file and database I/O) for as long as the copy takes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "store/blob_store.h"
#include "store/embedded_snapshot.h"
#include "store/model_index.h"

namespace kiln::store {

struct MigrateOptions {
  /// Check everything (the data dir's bytes too), write nothing; the report says what a real run
  /// would do.
  bool dry_run = false;
  /// One line per model as it is decided or copied ("moved <id> ..."); optional.
  std::function<void(std::string_view line)> on_model;
};

struct MigrateReport {
  size_t models_moved = 0;       ///< models the target did not index before (with a dry run: would be)
  size_t models_present = 0;     ///< models the target had already, entry and bytes (verified)
  size_t blobs_restored = 0;     ///< of the present ones: indexed without their bytes, bytes copied
  size_t names_added = 0;        ///< names given in the target (to moved and to present models)
  uint64_t bytes_moved = 0;      ///< bytes copied into the blob store (with a dry run: would be)
  uint64_t bytes_present = 0;    ///< bytes the blob store held already (an unindexed blob too), verified in place
  size_t missing_objects = 0;    ///< index entries of the data dir without object (not models: skipped)
};

Result<MigrateReport> MigrateEmbeddedStore(const EmbeddedSnapshot& from, ModelIndex* index, BlobStore* blobs,
                                           const MigrateOptions& options = {});

}  // namespace kiln::store
