// `kilnd migrate --from-data-dir DIR [--dry-run] [settings]`: copies an embedded store (a data
// dir, read-only) into the PostgreSQL database named as kilnd names it (--database-url-file,
// KILN_DATABASE, or the --config file; never the command line), then exits. What it checks and
// guarantees: store/migrate.h; README "Moving an embedded store into PostgreSQL".
#pragma once

namespace kiln::server {

/// argv[1] is "migrate". Prints one line per model and a summary on stdout, errors on stderr.
/// Returns the exit code: 0 done (or dry run done), 1 refused or failed (a running kilnd on DIR,
/// a damaged index, conflicts with the database, database errors), 2 usage (no --from-data-dir,
/// no database, a bad setting). Never throws.
int RunMigrateCommand(int argc, char** argv);

}  // namespace kiln::server
