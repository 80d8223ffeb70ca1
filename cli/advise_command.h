// `kiln advise MODEL`: the precision advisor (api/advisor/advise.h) — the cheapest per-layer TT-NN
// precision (by the estimate of api/advisor/cost_model.h) whose chained
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
// Without --local the search is an advise job on kilnd (JobService.SubmitAdvise, proto/kiln/v1/job.proto;
// MODEL a file, stored first, or a stored model's id, name or id prefix): its steps on stderr as it
// runs, then the same table or kiln.advise/1 JSON as --local (--report-html: the run on kilnd).
// --detach prints the job id and returns 0. Ctrl-C ends the watch, not the job (kiln cancel JOB_ID);
// a FAILED or CANCELLED job is exit 1.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/client.h"
#include "kiln/v1/job.pb.h"

namespace kiln::cli {

void AddAdviseCommand(CLI::App& app, ClientOptions& options, int* exit_code);

/// An advise job's answer (`kiln result` / `kiln watch` of an advise job) as `kiln advise` prints
/// it: the table, or kiln.advise/1 JSON with `json` (model.file is then the model id, input files
/// `{}`). Returns `kiln advise`'s exit status (0, 3, 4; 1 for an answer it cannot read).
int PrintAdviceResult(const kiln::v1::AdviseResult& advice, bool json);

}  // namespace kiln::cli
