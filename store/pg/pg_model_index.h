// kiln::store::pg::PgModelIndex — the shared ModelIndex (store/model_index.h) in PostgreSQL:
//   kiln_models(model_id PK, size_bytes, opset, node_count, producer_name, inputs jsonb,
//               outputs jsonb, created_unix_seconds)
//   kiln_model_names(name PK, model_id → kiln_models ON DELETE CASCADE)
// (schema: store/pg/pg_schema.cc). Every call is one transaction through prepared statements.
// Concurrency across replicas: Put takes a transaction-scoped advisory lock on the name (two Puts
// of one name serialize, so `replaced_model_id` is exact) and both Put and a Remove by name lock
// the model's row before they look at its names, so a Remove never drops a model that a
// concurrent Put just named.
#pragma once

#include <memory>

#include "store/model_index.h"
#include "store/pg/pg_pool.h"

namespace kiln::store::pg {

class PgModelIndex : public ModelIndex {
 public:
  /// The pool must reach a database migrated by Migrate (store/pg/pg_schema.h).
  explicit PgModelIndex(PgPool* pool);

  Result<PutResult> Put(const ModelInfo& info, const std::string& name) override;
  Result<PutResult> PutIfNameFree(const ModelInfo& info, const std::string& name) override;
  Result<ModelInfo> Get(const std::string& id_or_name) override;
  Result<std::vector<ModelInfo>> ListAfter(const std::string& after_id, size_t limit) override;
  Result<Removed> Remove(const std::string& id_or_name) override;
  Result<Totals> GetTotals() override;

 private:
  Result<PutResult> PutImpl(const ModelInfo& info, const std::string& name, bool move_name);
  PgPool* pool_;
};

}  // namespace kiln::store::pg
