// kiln::store::pg::PgSharedState — the shared state of a farm in one PostgreSQL database (issue
// 19): the pool (store/pg/pg_pool.h), the schema migrated (store/pg/pg_schema.h), the model index
// the blob store, the job queue and the job store on it. Without a database URL kilnd keeps the embedded store (data dir).
#pragma once

#include <memory>
#include <string>

#include "store/pg/pg_blob_store.h"
#include "store/pg/pg_job_queue.h"
#include "store/pg/pg_job_store.h"
#include "store/pg/pg_model_index.h"
#include "store/pg/pg_pool.h"
#include "store/pg/pg_schema.h"

namespace kiln::store::pg {

class PgSharedState {
 public:
  /// Connects (UNAVAILABLE), migrates (FAILED_PRECONDITION for a newer, incompatible schema).
  static Result<std::unique_ptr<PgSharedState>> Open(PgPoolOptions options, int job_max_attempts = 3) {
    auto pool = PgPool::Open(std::move(options));
    if (!pool.ok()) return pool.status();
    auto schema = Migrate(**pool);
    if (!schema.ok()) return schema.status();
    return std::unique_ptr<PgSharedState>(new PgSharedState(std::move(pool).value(), *schema, job_max_attempts));
  }

  PgPool& pool() { return *pool_; }
  PgModelIndex& models() { return models_; }
  PgBlobStore& blobs() { return blobs_; }
  PgJobQueue& jobs() { return jobs_; }
  PgJobStore& job_store() { return job_store_; }
  const SchemaState& schema() const { return schema_; }

 private:
  PgSharedState(std::unique_ptr<PgPool> pool, SchemaState schema, int job_max_attempts)
      : pool_(std::move(pool)),
        models_(pool_.get()),
        blobs_(pool_.get()),
        jobs_(pool_.get(), job_max_attempts),
        job_store_(pool_.get()),
        schema_(schema) {}
  std::unique_ptr<PgPool> pool_;
  PgModelIndex models_;
  PgBlobStore blobs_;
  PgJobQueue jobs_;
  PgJobStore job_store_;
  SchemaState schema_;
};

}  // namespace kiln::store::pg
