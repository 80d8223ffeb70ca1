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
    // Additive: the jobs themselves (store/pg/pg_job_store.h), beside the queue.
    {3, 1, R"sql(
CREATE TABLE kiln_jobs (
  job_id                 text COLLATE "C" PRIMARY KEY,
  state                  smallint NOT NULL CHECK (state BETWEEN 1 AND 5),
  created_ms             bigint NOT NULL DEFAULT 0,
  started_ms             bigint NOT NULL DEFAULT 0,
  finished_ms            bigint NOT NULL DEFAULT 0,
  model_id               text NOT NULL DEFAULT '',
  backend                text NOT NULL DEFAULT '',
  device                 text NOT NULL DEFAULT '',
  client                 text NOT NULL DEFAULT '',
  idempotency_key        text UNIQUE,
  attempt                int NOT NULL DEFAULT 0,
  error_code             int NOT NULL DEFAULT 0,
  error_message          text NOT NULL DEFAULT '',
  configurations         int NOT NULL DEFAULT 1,
  configurations_done    int NOT NULL DEFAULT 0,
  layers_done            bigint NOT NULL DEFAULT 0,
  layers_total           bigint NOT NULL DEFAULT 0,
  current_layer          text NOT NULL DEFAULT '',
  layers_below_threshold bigint NOT NULL DEFAULT 0,
  results_expired        boolean NOT NULL DEFAULT false,
  bytes                  bigint NOT NULL DEFAULT 0,
  events                 bigint NOT NULL DEFAULT 0,
  dropped_events         bigint NOT NULL DEFAULT 0,
  request                bytea NOT NULL,
  kind                   smallint NOT NULL DEFAULT 0,
  cancel_requested       boolean NOT NULL DEFAULT false
);
CREATE INDEX kiln_jobs_unfinished ON kiln_jobs (state) WHERE state IN (1, 2);
CREATE INDEX kiln_jobs_model ON kiln_jobs (model_id, job_id);
CREATE TABLE kiln_job_labels (
  job_id text COLLATE "C" NOT NULL REFERENCES kiln_jobs (job_id) ON DELETE CASCADE,
  key    text NOT NULL,
  value  text NOT NULL,
  PRIMARY KEY (job_id, key)
);
CREATE TABLE kiln_job_inputs (
  job_id text COLLATE "C" NOT NULL REFERENCES kiln_jobs (job_id) ON DELETE CASCADE,
  k      int NOT NULL,
  bytes  bytea NOT NULL,
  PRIMARY KEY (job_id, k)
);
CREATE TABLE kiln_job_events (
  job_id   text COLLATE "C" NOT NULL REFERENCES kiln_jobs (job_id) ON DELETE CASCADE,
  sequence bigint NOT NULL,
  time_ms  bigint NOT NULL,
  blob     bytea NOT NULL,
  PRIMARY KEY (job_id, sequence)
);
CREATE TABLE kiln_job_results (
  job_id        text COLLATE "C" NOT NULL REFERENCES kiln_jobs (job_id) ON DELETE CASCADE,
  configuration int NOT NULL,
  report        bytea NOT NULL,
  outputs       int NOT NULL DEFAULT 0,
  PRIMARY KEY (job_id, configuration)
);
CREATE TABLE kiln_job_outputs (
  job_id        text COLLATE "C" NOT NULL REFERENCES kiln_jobs (job_id) ON DELETE CASCADE,
  configuration int NOT NULL,
  k             int NOT NULL,
  bytes         bytea NOT NULL,
  PRIMARY KEY (job_id, configuration, k)
);
-- Uncompressed out-of-line storage: GetJobResult reads an output in 1 MiB slices (substring),
-- which then fetches only the slice's TOAST chunks.
ALTER TABLE kiln_job_outputs ALTER COLUMN bytes SET STORAGE EXTERNAL;
)sql"},
    // Additive: the farm's worker registry (store/pg/pg_job_queue.h ReportWorker) and fair claims
    // (each queue entry's client; when each client was last served per backend).
    {4, 1, R"sql(
ALTER TABLE kiln_job_queue ADD COLUMN client text NOT NULL DEFAULT '';
CREATE TABLE kiln_job_turns (
  backend text NOT NULL,
  client  text NOT NULL,
  served  bigint NOT NULL,
  PRIMARY KEY (backend, client)
);
CREATE SEQUENCE kiln_job_turn_seq;
CREATE TABLE kiln_workers (
  worker       text COLLATE "C" PRIMARY KEY,
  devices      text NOT NULL DEFAULT '',
  running      int NOT NULL DEFAULT 0,
  jobs_done    bigint NOT NULL DEFAULT 0,
  draining     boolean NOT NULL DEFAULT false,
  started_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
  heartbeat_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
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
