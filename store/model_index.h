// kiln::store::ModelIndex — what is known of the stored models: ids, names, metadata (README
// "Shared state on PostgreSQL"). The bytes live in a BlobStore (store/blob_store.h) under the same id.
//
// Implementations:
//   FileModelIndex (store/file_model_index.h)   embedded: index.yaml (store/index_file.h format)
//   PgModelIndex   (store/pg/pg_model_index.h)  shared: tables kiln_models, kiln_model_names
// Both pass the same contract suite (tests/store/model_index_contract_test.cc).
//
// Rules (the same as ModelStore's, store/model_store.h): a model id is the SHA-256 of its bytes;
// a name points at one model and moves when it is put on another; a name that looks like an id is
// refused (IsValidModelName). Removing by id removes the model and all its names; removing by name
// removes that name, and the model with it when it has no other name left. Every change is atomic
// (one transaction / one index rewrite): a reader never sees half of a Put or a Remove.
// Errors: INVALID_ARGUMENT (bad id or name), NOT_FOUND, UNAVAILABLE (shared store unreachable),
// RESOURCE_EXHAUSTED (disk / database full), INTERNAL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/model_store.h"

namespace kiln::store {

class ModelIndex {
 public:
  virtual ~ModelIndex() = default;

  struct PutResult {
    ModelInfo info;                 ///< the entry as stored (an existing one keeps its metadata)
    bool already_indexed = false;   ///< the id was indexed before
    std::string replaced_model_id;  ///< the model `name` pointed at before, when another one
  };
  /// Indexes `info` (unless its id is indexed) and points `name` at it ("" = no name).
  virtual Result<PutResult> Put(const ModelInfo& info, const std::string& name) = 0;
  /// As Put, but never moves a name: ALREADY_EXISTS (naming the name and the model it points at)
  /// when `name` points at another model; nothing is changed then. Checked in the same atomic
  /// change as the write (`kilnd migrate`, store/pg/pg_migrate.h, must not take a farm's names).
  virtual Result<PutResult> PutIfNameFree(const ModelInfo& info, const std::string& name) = 0;
  /// By id or by name.
  virtual Result<ModelInfo> Get(const std::string& id_or_name) = 0;
  /// Up to `limit` (0 = all) models with id > `after_id`, ordered by id; names sorted.
  virtual Result<std::vector<ModelInfo>> ListAfter(const std::string& after_id, size_t limit) = 0;

  struct Removed {
    std::string model_id;        ///< the model the id or name resolved to
    bool model_removed = false;  ///< the model went (its blob can go too)
  };
  virtual Result<Removed> Remove(const std::string& id_or_name) = 0;

  struct Totals {
    uint64_t models = 0;
    uint64_t bytes = 0;  ///< sum of size_bytes
  };
  virtual Result<Totals> GetTotals() = 0;
};

/// PutIfNameFree's refusal: ALREADY_EXISTS, naming `name` and the model `owner_id` it points at.
inline Status NameTaken(const std::string& name, const std::string& owner_id) {
  return {StatusCode::kAlreadyExists,
          "name '" + name.substr(0, 160) + "' already points at another model (" + owner_id + ")"};
}

}  // namespace kiln::store
