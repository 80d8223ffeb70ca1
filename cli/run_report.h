// The run report of `kiln run` and `kiln result`: outputs as .npy files, the per-layer table, JSON
// or a self-contained HTML page.
#pragma once

#include <string>

#include "kiln/v1/device.pb.h"

namespace kiln::cli {

struct ReportOptions {
  std::string out_dir;          ///< write outputs as DIR/<graph output>.npy ("" = none)
  std::string report = "table"; ///< table | json | html
};

/// Writes the outputs and prints the report to stdout. Returns the exit status of `kiln run`: 0
/// every compared layer passed, 1 an output could not be written, 3 a layer is below threshold.
int PrintRunReport(const kiln::v1::RunConvLayersResponse& response, const ReportOptions& options);

/// The report as one HTML page (no scripts, no external resources; every string escaped).
std::string RunReportHtml(const kiln::v1::RunConvLayersResponse& response);

/// "[1,64,56,56]".
std::string ShapeString(const google::protobuf::RepeatedField<int64_t>& shape);

}  // namespace kiln::cli
