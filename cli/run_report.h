// The run report of `kiln run`, `kiln watch` and `kiln result`: outputs as .npy files, and the
// per-layer report as a table, JSON (docs/cli-json.md) or one self-contained HTML page
// (cli/html_report.h).
//
// Exit status (README "kiln run"): 0 layers were compared and every one passed its PCC threshold,
// 1 an output or the report could not be written, or a reported job ended FAILED or CANCELLED
// (ReportOptions::unfinished), 3 a layer is below its threshold, 4 nothing was compared
// (--skip-reference, or no layer has a reference) — "all pass" over zero layers is no pass.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "kiln/v1/device.pb.h"

namespace kiln::cli {

inline constexpr int kExitNothingCompared = 4;

/// Where a run's inputs came from, as far as the client knows (`kiln result` does not: the job
/// keeps its inputs, not their origin).
struct InputSource {
  bool known = false;
  std::map<std::string, std::string> files;  ///< graph input name -> .npy path given with --input
  uint64_t seed = 0;                         ///< the seed of every other (generated) input
};

struct ReportOptions {
  std::string out_dir;          ///< write outputs as DIR/<graph output>.npy ("" = none); DIR/cK/ per configuration
  std::string report = "table"; ///< table | json | html
  std::string report_file;      ///< write the report here instead of stdout ("" = stdout)
  InputSource inputs;
  std::vector<std::string> job_ids;  ///< the jobs the configurations came from (JSON, HTML)
  /// A job that ended without succeeding (FAILED or CANCELLED): the configurations it finished are
  /// reported, every report format says so, and PrintRunReport returns 1 (`kiln result`).
  struct UnfinishedJob {
    std::string job_id, state, error;  ///< state "FAILED" / "CANCELLED"; error: the job's message
    int64_t done = 0, total = 0;       ///< configurations reported, and the job's
  };
  std::vector<UnfinishedJob> unfinished;
};

/// `v` printed with one printf conversion (`format`, e.g. "%.4f"; at most 63 characters).
std::string Fmt(const char* format, double v);

/// "job J ended CANCELLED after 4 of 12 configurations (message): only those are reported".
std::string UnfinishedLine(const ReportOptions::UnfinishedJob& job);

/// One configuration of a run: the precision as requested (a sweep point; unset fields = TT-NN's
/// defaults) and the server's response (which carries the mode and the resolved precision).
struct RunConfiguration {
  kiln::v1::Precision requested;
  kiln::v1::RunConvLayersResponse response;
};

/// --out and --report-file are usable: --out is (or can be made) a writable directory, the
/// report file's directory exists and is writable and the file, if present, is a writable regular
/// file. Checked before anything is uploaded or run, so that a typo does not cost a run.
/// INVALID_ARGUMENT naming the flag and the path.
Status CheckReportDestinations(const ReportOptions& options);

/// `path` (given with `flag`, e.g. "-o") can be written: its directory exists and is writable and
/// the file, if present, is not a directory and is writable (a regular file, or a device or pipe
/// such as /dev/stdout). INVALID_ARGUMENT naming the flag and the path.
Status CheckWritableFile(const std::string& flag, const std::string& path);

/// Writes the outputs and the report (stdout or options.report_file). Returns the exit status
/// (header comment).
int PrintRunReport(const std::vector<RunConfiguration>& configurations, const ReportOptions& options);

/// The table (what `--report table` prints).
std::string RunReportTable(const std::vector<RunConfiguration>& configurations, const ReportOptions& options);
/// The JSON document of docs/cli-json.md ("kiln.run/1").
std::string RunReportJson(const std::vector<RunConfiguration>& configurations, const ReportOptions& options);

/// A layer name cut to at most `width` characters by removing its middle ("/features/fe~.2/Conv"),
/// so that names differing only at the end (or the start) stay distinct.
std::string CutMiddle(const std::string& name, size_t width);

/// Compared layers, and those of them below their threshold.
struct LayerCounts {
  int compared = 0;
  int failed = 0;
};
LayerCounts CountLayers(const kiln::v1::RunConvLayersResponse& response);
/// The verdict of a run with no compared layer: "0 compared (...)", saying why (no layer ran, or
/// no reference was computed). The table's and the HTML report's wording.
std::string NothingComparedVerdict(const kiln::v1::RunConvLayersResponse& response);
/// A compared layer with a threshold that it does not meet.
bool LayerFails(const kiln::v1::LayerReport& layer);

/// A precision as JSON with the command line's spellings ({"math_fidelity":"LoFi",...}):
/// `only_set` = only the fields the message sets (a requested sweep point), else every field.
std::string PrecisionText(const kiln::v1::Precision& precision, bool only_set);

/// "chained" | "per_layer" (the --mode spelling).
const char* ModeName(kiln::v1::RunMode mode);

/// "[1,64,56,56]".
std::string ShapeString(const google::protobuf::RepeatedField<int64_t>& shape);

/// The program tt-emu emulated, compactly: "conv2d height(auto) k_blocks=3 cin_align=16 l1_acc".
std::string ProgramSummary(const kiln::v1::ConvProgram& program);

}  // namespace kiln::cli
