// `kiln compile`: ai8x compile of a file (uploaded first) or a stored model, or in process with
// --local. Writes the YAML (-o), prints diagnostics and the izer flags; exits 1 on errors.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/client.h"

namespace kiln::cli {

void AddCompileCommand(CLI::App& app, ClientOptions& options, int* exit_code);

}  // namespace kiln::cli
