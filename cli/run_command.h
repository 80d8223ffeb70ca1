// `kiln run`: run a model's conv layers on a device backend (tt-emu, reference) through kilnd, or
// in process with --local; .npy inputs and outputs; per-layer accuracy report as a table, JSON
// (docs/cli-json.md) or HTML (cli/html_report.h).
// `kiln devices`: the server's devices and queues.
// Exit status of `kiln run`: 0 layers were compared and every one passed its PCC threshold,
// 1 error, 2 bad command line (an unusable --out or --report-file: checked before the upload),
// 3 the run finished but a layer is below its threshold, 4 nothing was compared
// (--skip-reference), 130 interrupted (cli/job_commands.h).
#pragma once

#include <CLI/CLI.hpp>

#include "cli/client.h"

namespace kiln::cli {

void AddRunCommands(CLI::App& app, ClientOptions& options, int* exit_code);

}  // namespace kiln::cli
