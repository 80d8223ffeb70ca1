// The PostgreSQL schema of Kiln's shared state, versioned.
//
// Table kiln_schema_version(version, compatible_with, applied_at): one row per applied
// migration. Migrations (pg_schema.cc kMigrations) only ever add (tables, columns with defaults,
// indexes), so a kilnd of version N keeps working on schema N+1 during a rolling update: each
// migration records `compatible_with`, the oldest schema version whose binaries can still use the
// database after it. A binary refuses (FAILED_PRECONDITION) a database whose newest migration is
// newer than the binary knows and not compatible with it; it never downgrades.
// Migrate runs under a transaction-scoped advisory lock, so replicas that start together apply
// each migration once; DDL is transactional in PostgreSQL, so a failed migration leaves nothing.
//
// Version 1: kiln_models, kiln_model_names (store/pg/pg_model_index.h), kiln_blobs
// (store/pg/pg_blob_store.h). Version 2 (compatible with 1): kiln_job_queue
// (store/pg/pg_job_queue.h). Version 3 (compatible with 1): kiln_jobs, kiln_job_labels,
// kiln_job_inputs, kiln_job_events, kiln_job_results, kiln_job_outputs (store/pg/pg_job_store.h).
// Version 4 (compatible with 1): kiln_workers (store/pg/pg_job_queue.h, the worker registry),
// kiln_job_queue.client and kiln_job_turns (round-robin claims across clients).
#pragma once

#include "common/status.h"
#include "store/pg/pg_pool.h"

namespace kiln::store::pg {

/// The newest schema version this build knows.
int KnownSchemaVersion();

struct SchemaState {
  int before = 0;  ///< version found (0 = empty database)
  int after = 0;   ///< version now
};

/// Applies the migrations this build knows that the database lacks (see the header comment).
Result<SchemaState> Migrate(PgPool& pool);

namespace internal {
/// Tests: migrate as if this build knew `known` migrations (1..known) and declared `extra`, a
/// migration numbered known + 1, with `compatible_with`.
struct ExtraMigration {
  int compatible_with = 0;
  const char* sql = nullptr;
};
Result<SchemaState> MigrateForTesting(PgPool& pool, int known, const ExtraMigration* extra);
}  // namespace internal

}  // namespace kiln::store::pg
