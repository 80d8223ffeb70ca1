// `kiln upload | models | model | rm | health`: the model-store and health subcommands.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/client.h"

namespace kiln::cli {

/// Registers the subcommands on `app`; each sets `*exit_code` when it runs (0 = success).
void AddModelCommands(CLI::App& app, ClientOptions& options, int* exit_code);

}  // namespace kiln::cli
