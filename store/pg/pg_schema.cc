#include "store/pg/pg_schema.h"

#include <algorithm>
#include <string>
#include <vector>

namespace kiln::store::pg {
namespace {

struct Migration {
  int version;
  int compatible_with;  // oldest schema version whose binaries still work after this one
  const char* sql;
};

// Additive only (see pg_schema.h). Model ids and blob keys are lowercase hex SHA-256.
const Migration kMigrations[] = {
    {1, 1, R"sql(
CREATE TABLE kiln_models (
  model_id             text COLLATE "C" PRIMARY KEY CHECK (model_id ~ '^[0-9a-f]{64}$'),
  size_bytes           bigint NOT NULL CHECK (size_bytes > 0),
  opset                bigint NOT NULL DEFAULT 0,
  node_count           bigint NOT NULL DEFAULT 0,
  producer_name        text NOT NULL DEFAULT '',
  inputs               jsonb NOT NULL DEFAULT '[]',
  outputs              jsonb NOT NULL DEFAULT '[]',
  created_unix_seconds bigint NOT NULL DEFAULT 0
);
CREATE TABLE kiln_model_names (
  name     text COLLATE "C" PRIMARY KEY,
  model_id text COLLATE "C" NOT NULL REFERENCES kiln_models (model_id) ON DELETE CASCADE
);
CREATE INDEX kiln_model_names_model_id ON kiln_model_names (model_id);
CREATE TABLE kiln_blobs (
  sha256     text COLLATE "C" PRIMARY KEY CHECK (sha256 ~ '^[0-9a-f]{64}$'),
  size_bytes bigint NOT NULL CHECK (size_bytes > 0),
  loid       oid NOT NULL UNIQUE,
  created_at timestamptz NOT NULL DEFAULT now()
);
)sql"},
    // Additive: binaries of version 1 never touch it.
    {2, 1, R"sql(
CREATE TABLE kiln_job_queue (
  job_id        text COLLATE "C" PRIMARY KEY,
  backend       text NOT NULL,
  state         smallint NOT NULL DEFAULT 1 CHECK (state BETWEEN 1 AND 4),
  attempt       int NOT NULL DEFAULT 0,
  payload       bytea NOT NULL,
  result        bytea,
  worker        text NOT NULL DEFAULT '',
  lease_token   text,
  lease_expires timestamptz,
  seq           bigserial NOT NULL,
  enqueued_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX kiln_job_queue_claimable ON kiln_job_queue (backend, seq) WHERE state IN (1, 2);
)sql"},
};
constexpr int kKnown = static_cast<int>(sizeof kMigrations / sizeof kMigrations[0]);

// pg_advisory_xact_lock key: "kiln" in ASCII, then 1 (schema).
constexpr long long kSchemaLockKey = 0x6b696c6e00000001LL;

Result<SchemaState> Run(PgPool& pool, std::vector<Migration> migrations) {
  const int known = migrations.empty() ? 0 : migrations.back().version;
  SchemaState state;
  Status st = pool.Transact("migrating the schema", [&](pqxx::work& tx) -> Status {
    tx.exec_params("SELECT pg_advisory_xact_lock($1)", kSchemaLockKey);
    tx.exec0(
        "CREATE TABLE IF NOT EXISTS kiln_schema_version ("
        " version int PRIMARY KEY, compatible_with int NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())");
    pqxx::row top = tx.exec1(
        "SELECT coalesce(max(version), 0), coalesce((SELECT compatible_with FROM kiln_schema_version"
        " ORDER BY version DESC LIMIT 1), 0) FROM kiln_schema_version");
    state.before = top[0].as<int>();
    const int compatible_with = top[1].as<int>();
    state.after = state.before;
    if (state.before > known) {
      if (compatible_with > known) {
        return FailedPrecondition("the database schema is version " + std::to_string(state.before) +
                                  ", which needs a kilnd that knows version " + std::to_string(compatible_with) +
                                  " or newer; this one knows up to " + std::to_string(known) +
                                  ": upgrade kilnd (it never downgrades a schema)");
      }
      return Status::Ok();  // newer, but additive over what this build knows
    }
    for (const Migration& m : migrations) {
      if (m.version <= state.before) continue;
      tx.exec0(m.sql);
      tx.exec_params0("INSERT INTO kiln_schema_version (version, compatible_with) VALUES ($1, $2)", m.version,
                      m.compatible_with);
      state.after = m.version;
    }
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return state;
}

}  // namespace

int KnownSchemaVersion() { return kKnown; }

Result<SchemaState> Migrate(PgPool& pool) {
  return Run(pool, std::vector<Migration>(std::begin(kMigrations), std::end(kMigrations)));
}

namespace internal {
Result<SchemaState> MigrateForTesting(PgPool& pool, int known, const ExtraMigration* extra) {
  std::vector<Migration> ms(std::begin(kMigrations), std::begin(kMigrations) + std::min(known, kKnown));
  if (extra) ms.push_back({known + 1, extra->compatible_with, extra->sql});
  return Run(pool, std::move(ms));
}
}  // namespace internal

}  // namespace kiln::store::pg
