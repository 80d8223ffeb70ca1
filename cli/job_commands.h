// `kiln jobs | job | watch | cancel | result`: kiln.v1.JobService from the command line, and the
// submit-and-watch path of `kiln run` (cli/run_command.cc).
//
// `kiln run` (remote) submits a job — with a fresh idempotency key, so that gRPC's retry policy
// (client.cc: SubmitRun is retried on RESOURCE_EXHAUSTED after the server's pushback) can never
// submit it twice — then, unless --detach, watches it: progress on stderr (a redrawn bar on a
// terminal, a line per layer otherwise), then the report of every configuration. Ctrl-C while
// watching asks whether to cancel the job or detach from it when stdin and stderr are a
// terminal, and cancels it otherwise.
// Exit status: 0 done and every compared layer passed, 1 error / FAILED / CANCELLED, 2 bad
// command line (an unusable --out or --report-file included), 3 a layer is below its threshold,
// 4 nothing compared (cli/run_report.h), 130 interrupted (the job cancelled or detached).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "api/convert.h"
#include "cli/client.h"
#include "cli/run_report.h"
#include "kiln/v1/job.pb.h"

namespace kiln::cli {

void AddJobCommands(CLI::App& app, ClientOptions& options, int* exit_code);
/// A job that did not succeed, as its watch reports it: "STATE", then ": CODE: message" of its
/// error, the code left out where it only repeats the state (a cancelled job's CANCELLED).
std::string JobEndText(const kiln::v1::Job& job);

/// Submits each request (one job each, e.g. a chained and a per_layer run); with `detach` prints
/// the job ids and returns 0, else watches them in order and prints their results as one report
/// (see the header comment). `report` must have passed CheckReportDestinations.
int SubmitAndWatch(const ClientOptions& options, std::vector<kiln::v1::SubmitRunRequest> requests, bool detach,
                   const ReportOptions& report);

/// --out, --report and --report-file of `kiln run | watch | result`.
void AddReportOptions(CLI::App& cmd, ReportOptions& report);

/// The sweep of `--sweep FIELD=V1,V2,...` (repeatable): the cross product of the given fields'
/// values, in the order given, each point on top of `base` (the run's precision flags). Fields:
/// math_fidelity, weights_dtype, input_dtype, output_dtype, fp32_dest_acc_en, packer_l1_acc,
/// math_approx_mode, arch. INVALID_ARGUMENT naming the bad spec.
Result<std::vector<kiln::v1::Precision>> ParseSweep(const std::vector<std::string>& specs,
                                                    const api::PrecisionFlags& base);

/// One `--label KEY=VALUE` (`kiln run`, `kiln jobs`): INVALID_ARGUMENT without a '=' after a key.
Result<std::pair<std::string, std::string>> ParseLabel(const std::string& spec);

}  // namespace kiln::cli
