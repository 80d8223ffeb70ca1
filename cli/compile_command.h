// `kiln compile`: ai8x compile of a file (stored first, its bytes sent only when not stored yet)
// or a stored model (id, name or id prefix), or in process with --local. Writes the YAML (-o),
// prints diagnostics, the per-layer plan and resources (--table), the whole ai8xize.py command
// line, or all of it as one JSON object (--json, docs/cli-json.md). --arch defaults to
// the factory an ai8x-training export's name names (api::FactoryFromExportName) and is otherwise
// required. Exits 0 ok, 1 on errors (rule violations, missing files, RPC errors), 2 on usage.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/client.h"

namespace kiln::cli {

void AddCompileCommand(CLI::App& app, ClientOptions& options, int* exit_code);

}  // namespace kiln::cli
