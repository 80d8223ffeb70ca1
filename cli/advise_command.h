// `kiln advise MODEL --local`: the precision advisor (api/advisor/advise.h) in process — the
// cheapest per-layer TT-NN precision (by the estimate of api/advisor/cost_model.h) whose chained
// end-to-end PCC on the given inputs (worst input) meets --target-pcc. Prints a table, or JSON
// (--json, docs/cli-json.md kiln.advise/1), each with a ready-to-use snippet: TT-NN's Python
// compute / Conv2dConfig values per layer and the same as `kiln run --layer-precision` flags.
// --report-html FILE: the advised assignment run once more (chained, fp32 reference alongside,
// first input set) and written as the HTML run report (cli/html_report.h).
// --per-layer-threshold: every layer of the chained run must also pass its tt-metal PCC threshold.
// Inputs: --input NAME=FILE.npy (repeatable); naming an input a second time starts another input
// set (several sets: the worst one counts); absent inputs are generated with --seed.
// Exit status: 0 target met (complete search), 1 error, 2 bad command line, 3 no assignment in the
// space meets the target (the most accurate one is printed), 4 the --budget ran out (the best
// answer so far is printed, flagged partial).
// Without --local: exit 2 (an AdviseJob on kilnd is not built yet).
#pragma once

#include <CLI/CLI.hpp>

#include "cli/client.h"

namespace kiln::cli {

void AddAdviseCommand(CLI::App& app, ClientOptions& options, int* exit_code);

}  // namespace kiln::cli
