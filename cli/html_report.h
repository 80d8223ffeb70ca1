// The run report as one self-contained HTML page (`kiln run|watch|result --report html`): no
// scripts, no external resources (styles and SVG charts inline), every model-supplied string
// escaped.
//
// Layout: a header (model, jobs, inputs, each configuration's verdict), then one section per
// configuration. A chained and a per_layer run of the same precision and layers (`kiln run --mode
// both`, or `kiln result` of one job of each mode) share a section: their PCC, max abs error and
// host emulation time side by side. Each section has two inline SVG charts — PCC per layer with
// the threshold line (svg.chart.pcc) and max abs error per layer on a log scale (svg.chart.error)
// — and a table with one row per layer (tr.layer; a layer below its threshold in any mode is
// tr.layer.fail with data-pass="false"): PCC against the threshold, max abs error, host emulation
// ms, the formats the program ran in (activations, partials, pack source) and the tt-emu program
// (LayerReport.program).
//
// Size: a layer row is bounded (names and details cut in the middle at kMaxHtmlText characters, at
// most 4 program notes) and the charts are one path per series, so a page grows by under ~1.5 KiB
// per layer and configuration (tests/cli/run_report_test.cc checks 300 layers).
#pragma once

#include <string>
#include <vector>

#include "cli/run_report.h"

namespace kiln::cli {

inline constexpr size_t kMaxHtmlText = 160;

std::string RunReportHtml(const std::vector<RunConfiguration>& configurations, const ReportOptions& options);

}  // namespace kiln::cli
