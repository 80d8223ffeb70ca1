#include "server/migrate_command.h"

#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "server/config.h"
#include "store/embedded_snapshot.h"
#include "store/file_blob_store.h"
#include "store/file_model_index.h"
#include "store/migrate.h"
#include "store/pg/pg_store.h"

namespace kiln::server {

namespace {

// Whether the database has the tables of schema version 1 (store/pg/pg_schema.h).
Result<bool> HasKilnSchema(store::pg::PgPool& pool) {
  bool has = false;
  Status st = pool.ReadOne("looking for Kiln's schema", [&](pqxx::nontransaction& tx) -> Status {
    has = tx.exec1("SELECT to_regclass('kiln_models') IS NOT NULL AND to_regclass('kiln_blobs') IS NOT NULL")[0]
              .as<bool>();
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return has;
}

int RunMigrate(int argc, char** argv) {
  std::string from;
  bool dry_run = false;
  std::vector<char*> rest{argv[0]};
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--from-data-dir" && i + 1 < argc) {
      from = argv[++i];
    } else if (arg.rfind("--from-data-dir=", 0) == 0) {
      from = arg.substr(std::strlen("--from-data-dir="));
    } else if (arg == "--dry-run") {
      dry_run = true;
    } else {
      rest.push_back(argv[i]);
    }
  }
  auto config = LoadConfig(static_cast<int>(rest.size()), rest.data());
  if (!config.ok()) {
    if (config.status().code() == StatusCode::kCancelled) return 0;  // --help
    std::fprintf(stderr, "kilnd migrate: %s\n", config.status().message().c_str());
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(config->log_level));
  if (from.empty()) {
    std::fprintf(stderr, "kilnd migrate: --from-data-dir DIR is required (the data dir of the embedded store)\n");
    return 2;
  }
  if (config->database_url.empty()) {
    std::fprintf(stderr, "kilnd migrate: no database: name it with --database-url-file FILE or KILN_DATABASE, "
                         "as for kilnd on PostgreSQL\n");
    return 2;
  }
  const std::string db = store::pg::RedactUrl(config->database_url);
  auto snapshot = store::EmbeddedSnapshot::Open(from);
  if (!snapshot.ok()) {
    std::fprintf(stderr, "kilnd migrate: %s\n", snapshot.status().ToString().c_str());
    return 1;
  }

  store::MigrateOptions options;
  options.dry_run = dry_run;
  options.on_model = [](std::string_view line) { std::printf("%.*s\n", static_cast<int>(line.size()), line.data()); };
  // A real run opens the database as kilnd does (the schema migrated); a dry run reads it as it
  // is, and plans against an empty store where it has no Kiln schema yet (what such a database
  // amounts to), so that it changes nothing.
  std::unique_ptr<store::pg::PgSharedState> shared;
  std::unique_ptr<store::pg::PgPool> pool;
  std::unique_ptr<store::ModelIndex> own_index;
  std::unique_ptr<store::BlobStore> own_blobs;
  std::filesystem::path empty_dir;
  store::ModelIndex* index = nullptr;
  store::BlobStore* blobs = nullptr;
  store::pg::PgPoolOptions pg;
  pg.url = config->database_url;
  pg.size = 4;  // an index lookup beside an open blob reader or writer
  if (!dry_run) {
    auto opened = store::pg::PgSharedState::Open(pg);
    if (!opened.ok()) {
      std::fprintf(stderr, "kilnd migrate: database %s: %s\n", db.c_str(), opened.status().ToString().c_str());
      return 1;
    }
    shared = std::move(opened).value();
    index = &shared->models();
    blobs = &shared->blobs();
  } else {
    auto opened = store::pg::PgPool::Open(pg);
    auto has_schema = opened.ok() ? HasKilnSchema(**opened) : Result<bool>(opened.status());
    if (!has_schema.ok()) {
      std::fprintf(stderr, "kilnd migrate: database %s: %s\n", db.c_str(), has_schema.status().ToString().c_str());
      return 1;
    }
    pool = std::move(opened).value();
    if (*has_schema) {
      own_index = std::make_unique<store::pg::PgModelIndex>(pool.get());
      own_blobs = std::make_unique<store::pg::PgBlobStore>(pool.get());
    } else {
      char tmpl[] = "/tmp/kilnd-migrate-XXXXXX";
      if (::mkdtemp(tmpl) == nullptr) {
        std::perror("kilnd migrate: mkdtemp");
        return 1;
      }
      empty_dir = tmpl;
      auto i = store::FileModelIndex::Open(empty_dir);
      auto b = store::FileBlobStore::OpenDir(empty_dir);
      if (!i.ok() || !b.ok()) {
        std::fprintf(stderr, "kilnd migrate: %s\n", (i.ok() ? b.status() : i.status()).ToString().c_str());
        return 1;
      }
      own_index = std::move(i).value();
      own_blobs = std::move(b).value();
      std::printf("database %s has no Kiln schema yet: every model would be moved\n", db.c_str());
    }
    index = own_index.get();
    blobs = own_blobs.get();
  }
  auto report = store::MigrateEmbeddedStore(**snapshot, index, blobs, options);
  if (!empty_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(empty_dir, ec);
  }
  if (!report.ok()) {
    std::fprintf(stderr, "kilnd migrate: %s: %s\n", from.c_str(), report.status().ToString().c_str());
    return 1;
  }
  std::printf("kilnd migrate%s: %s -> %s: %zu models %s (%llu bytes), %zu already present (%llu bytes verified%s), "
              "%zu names added, %zu index entries without object skipped\n",
              dry_run ? " (dry run: nothing written)" : "", from.c_str(), db.c_str(), report->models_moved,
              dry_run ? "to move" : "moved", static_cast<unsigned long long>(report->bytes_moved),
              report->models_present, static_cast<unsigned long long>(report->bytes_present),
              report->blobs_restored > 0
                  ? (", " + std::to_string(report->blobs_restored) + (dry_run ? " to restore" : " restored")).c_str()
                  : "",
              report->names_added, report->missing_objects);
  return 0;
}

}  // namespace

int RunMigrateCommand(int argc, char** argv) {
  // libpqxx and the standard library may throw (bad_alloc, a libpq failure outside PgPool::Run):
  // a message and exit 1, not an abort.
  try {
    return RunMigrate(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kilnd migrate: %s\n", e.what());
    return 1;
  }
}

}  // namespace kiln::server
