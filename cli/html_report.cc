#include "cli/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <vector>

#include "device/backends/builtin.h"

namespace kiln::cli {
namespace {

std::string Escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Escaped and bounded (model-supplied names can be arbitrarily long).
std::string Text(const std::string& s) { return Escape(CutMiddle(s, kMaxHtmlText)); }

const char* DTypeLabel(kiln::v1::DataType d) {
  switch (d) {
    case kiln::v1::FLOAT32: return "float32";
    case kiln::v1::BFLOAT16: return "bfloat16";
    case kiln::v1::BFLOAT8_B: return "bfloat8_b";
    case kiln::v1::BFLOAT4_B: return "bfloat4_b";
    default: return "-";
  }
}

// A section: one configuration, or a chained and a per_layer run of the same configuration.
struct Section {
  std::vector<size_t> runs;  // indices into the configurations, chained first
};

bool SameLayers(const kiln::v1::RunConvLayersResponse& a, const kiln::v1::RunConvLayersResponse& b) {
  if (a.layers_size() != b.layers_size()) return false;
  for (int i = 0; i < a.layers_size(); ++i) {
    if (a.layers(i).name() != b.layers(i).name()) return false;
  }
  return true;
}

std::vector<Section> Sections(const std::vector<RunConfiguration>& configs) {
  std::vector<Section> out;
  std::vector<bool> used(configs.size(), false);
  for (size_t i = 0; i < configs.size(); ++i) {
    if (used[i]) continue;
    used[i] = true;
    Section s{{i}};
    const auto& a = configs[i];
    for (size_t j = i + 1; j < configs.size(); ++j) {
      const auto& b = configs[j];
      if (used[j] || b.response.mode() == a.response.mode() || b.response.model_id() != a.response.model_id() ||
          b.response.backend() != a.response.backend() ||
          b.requested.SerializeAsString() != a.requested.SerializeAsString() || !SameLayers(a.response, b.response)) {
        continue;
      }
      used[j] = true;
      s.runs.push_back(j);
      if (a.response.mode() == kiln::v1::PER_LAYER) std::swap(s.runs[0], s.runs[1]);
      break;
    }
    out.push_back(s);
  }
  return out;
}

const char* kColors[] = {"#1f6fb4", "#e07b00"};  // chained, per_layer

// PCC per layer (one path per run, the threshold as a dashed step line, failing layers as red
// dots) or log10 of the max abs error per layer.
std::string Chart(const std::vector<const kiln::v1::RunConvLayersResponse*>& runs, bool pcc) {
  const int W = 960, H = 240, L = 60, R = 12, T = 22, B = 28;
  const int n = runs[0]->layers_size();
  double lo = pcc ? 1.0 : 0.0, hi = pcc ? 1.0 : 0.0;
  bool any = false;
  auto value = [&](const kiln::v1::LayerReport& l, double* v) {
    if (!l.compared()) return false;
    if (pcc) {
      *v = l.pcc();
    } else {
      if (!(l.max_abs_error() > 0)) return false;
      *v = std::log10(l.max_abs_error());
    }
    return std::isfinite(*v);
  };
  for (const auto* r : runs) {
    for (const auto& l : r->layers()) {
      double v;
      if (!value(l, &v)) continue;
      if (!any) lo = hi = v;
      any = true;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      if (pcc && l.pcc_threshold() > 0) lo = std::min(lo, l.pcc_threshold());
    }
  }
  if (pcc) {
    hi = 1.0;
    lo = std::max(-1.0, lo - (hi - lo) * 0.08 - 1e-4);
  } else {
    lo = std::floor(lo);
    hi = std::max(lo + 1, std::ceil(hi));
  }
  auto x = [&](int i) { return L + (n <= 1 ? (W - L - R) / 2.0 : (W - L - R) * static_cast<double>(i) / (n - 1)); };
  auto y = [&](double v) { return T + (H - T - B) * (hi - v) / (hi - lo); };
  std::ostringstream o;
  o << "<svg class=\"chart " << (pcc ? "pcc" : "error") << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W
    << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H << "\" role=\"img\"><title>"
    << (pcc ? "PCC per layer against its threshold" : "max abs error per layer (log10)") << "</title>";
  o << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << W - L - R << "\" height=\"" << H - T - B
    << "\" fill=\"#fafafa\" stroke=\"#999\"/>";
  // Y axis: 5 ticks for PCC; one per decade for the error (at most 6 labels).
  std::vector<double> ticks;
  if (pcc) {
    for (int k = 0; k <= 4; ++k) ticks.push_back(lo + (hi - lo) * k / 4);
  } else {
    const int step = std::max(1, static_cast<int>(std::ceil((hi - lo) / 5)));
    for (double e = lo; e <= hi + 1e-9; e += step) ticks.push_back(e);
  }
  for (double v : ticks) {
    o << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << Fmt("%.1f", y(v)) << "\" y2=\"" << Fmt("%.1f", y(v))
      << "\" stroke=\"#e3e3e3\"/><text x=\"" << L - 4 << "\" y=\"" << Fmt("%.1f", y(v) + 4)
      << "\" font-size=\"11\" text-anchor=\"end\">" << (pcc ? Fmt("%.4f", v) : "1e" + std::to_string(std::lround(v)))
      << "</text>";
  }
  o << "<text x=\"" << L << "\" y=\"14\" font-size=\"12\">"
    << (pcc ? "PCC per layer (dashed: threshold; red: below it)" : "max abs error per layer (log scale)")
    << "</text><text x=\"" << W - R << "\" y=\"" << H - 8 << "\" font-size=\"11\" text-anchor=\"end\">layer 0.." << n - 1
    << "</text>";
  if (pcc) {
    // Each layer's threshold as a segment one layer wide (layers without one leave a gap).
    const double half = n <= 1 ? 6.0 : (W - L - R) / (2.0 * (n - 1));
    std::string d;
    for (int i = 0; i < n; ++i) {
      const double t = runs[0]->layers(i).pcc_threshold();
      if (!(t > 0)) continue;
      d += "M" + Fmt("%.1f", std::max<double>(L, x(i) - half)) + " " + Fmt("%.1f", y(t)) + "H" +
           Fmt("%.1f", std::min<double>(W - R, x(i) + half));
    }
    if (!d.empty()) {
      o << "<path class=\"threshold\" d=\"" << d << "\" fill=\"none\" stroke=\"#c00\" stroke-dasharray=\"5 3\"/>";
    }
  }
  for (size_t r = 0; r < runs.size(); ++r) {
    std::string d;
    bool pen = false;
    for (int i = 0; i < n; ++i) {
      double v;
      if (!value(runs[r]->layers(i), &v)) {
        pen = false;
        continue;
      }
      d += (pen ? "L" : "M") + Fmt("%.1f", x(i)) + " " + Fmt("%.1f", y(v));
      pen = true;
    }
    o << "<path class=\"series\" d=\"" << d << "\" fill=\"none\" stroke=\"" << kColors[r % 2]
      << "\" stroke-width=\"1.5\"/>";
    // Every point as a small dot on short series; red dots for failing layers always.
    for (int i = 0; i < n; ++i) {
      double v;
      const auto& l = runs[r]->layers(i);
      if (!value(l, &v)) continue;
      const bool fail = LayerFails(l);
      if (!fail && n > 60) continue;
      o << "<circle cx=\"" << Fmt("%.1f", x(i)) << "\" cy=\"" << Fmt("%.1f", y(v)) << "\" r=\"" << (fail ? 3.5 : 2)
        << "\" fill=\"" << (fail ? "#d00" : kColors[r % 2]) << "\"" << (fail ? " class=\"fail\"" : "") << "/>";
    }
  }
  // Legend.
  for (size_t r = 0; r < runs.size(); ++r) {
    const int lx = W - R - 120 * static_cast<int>(runs.size() - r);
    o << "<rect x=\"" << lx << "\" y=\"6\" width=\"12\" height=\"4\" fill=\"" << kColors[r % 2] << "\"/><text x=\""
      << lx + 16 << "\" y=\"13\" font-size=\"11\">" << ModeName(runs[r]->mode()) << "</text>";
  }
  o << "</svg>\n";
  return o.str();
}

std::string Verdict(const kiln::v1::RunConvLayersResponse& r) {
  const LayerCounts n = CountLayers(r);
  if (n.compared == 0) return NothingComparedVerdict(r);
  if (n.failed == 0) return std::to_string(n.compared) + " compared, all layers pass";
  return std::to_string(n.compared) + " compared, " + std::to_string(n.failed) + " below threshold";
}

std::string RequestedLabel(const kiln::v1::Precision& p) {
  std::string s = PrecisionText(p, true);
  return s == "{}" ? "TT-NN defaults" : s;
}

void SectionHtml(std::ostringstream& o, const std::vector<RunConfiguration>& configs, const Section& s, size_t index) {
  std::vector<const kiln::v1::RunConvLayersResponse*> runs;
  for (size_t i : s.runs) runs.push_back(&configs[i].response);
  const auto& first = *runs[0];
  o << "<section class=\"configuration\" id=\"configuration-" << index << "\">\n<h2>Configuration " << index << ": "
    << Escape(RequestedLabel(configs[s.runs[0]].requested)) << "</h2>\n<ul>";
  for (const auto* r : runs) {
    const LayerCounts n = CountLayers(*r);
    o << "<li><b>" << ModeName(r->mode()) << "</b>: backend " << Escape(r->backend());
    if (!r->device().empty()) o << " on " << Escape(r->device());
    o << ", precision <code>"
      << (device::IsFp32Reference(r->backend()) ? "fp32 (reference)" : Escape(r->resolved_precision()))
      << "</code>, run " << Fmt("%.3f", r->run_seconds()) << " s (host emulation): <span class=\""
      << (n.failed > 0 ? "verdict fail" : "verdict") << "\">" << Verdict(*r) << "</span></li>";
  }
  o << "</ul>\n";
  o << Chart(runs, true) << Chart(runs, false);
  const bool both = runs.size() > 1;
  auto per_run = [&](const char* what) {
    for (const auto* r : runs) o << "<th>" << what << (both ? std::string("<br>") + ModeName(r->mode()) : "") << "</th>";
  };
  o << "<table class=\"layers\"><thead><tr><th>#</th><th class=l>layer</th><th class=l>op</th><th class=l>output "
       "shape</th>";
  per_run("PCC");
  o << "<th>threshold</th>";
  per_run("max abs err");
  per_run("host emulation ms");
  o << "<th class=l>pass</th><th class=l>formats (act / partials / pack)</th><th class=l>tt-emu program</th></tr>"
       "</thead>\n<tbody>\n";
  for (int i = 0; i < first.layers_size(); ++i) {
    bool fail = false, compared = false;
    for (const auto* r : runs) {
      fail = fail || LayerFails(r->layers(i));
      compared = compared || r->layers(i).compared();
    }
    const auto& l = first.layers(i);
    o << "<tr class=\"layer" << (fail ? " fail" : "") << "\" data-pass=\"" << (!compared ? "none" : fail ? "false" : "true")
      << "\"><td>" << i << "</td><td class=l>" << Text(l.name());
    // A layer the request gave its own precision (layer_precision): what it ran with.
    if (l.layer_precision_set()) o << "<br><small class=lp>" << Text(l.resolved_precision()) << "</small>";
    o << "</td><td class=l>" << Text(l.op()) << "</td><td class=l>" << ShapeString(l.output_shape()) << "</td>";
    for (const auto* r : runs) {
      const auto& m = r->layers(i);
      o << "<td" << (LayerFails(m) ? " class=fail" : "") << ">" << (m.compared() ? Fmt("%.6f", m.pcc()) : "-") << "</td>";
    }
    o << "<td>" << (l.pcc_threshold() > 0 ? Fmt("%.4f", l.pcc_threshold()) : "-") << "</td>";
    for (const auto* r : runs) {
      const auto& m = r->layers(i);
      o << "<td>" << (m.compared() ? Fmt("%.3g", m.max_abs_error()) : "-") << "</td>";
    }
    for (const auto* r : runs) o << "<td>" << Fmt("%.3f", r->layers(i).device_seconds() * 1e3) << "</td>";
    o << "<td class=l>" << (!compared ? "-" : l.pcc_threshold() > 0 ? (fail ? "NO" : "yes") : "")
      << "</td><td class=\"l fmt\">";
    if (l.has_program()) {
      const auto& p = l.program();
      o << DTypeLabel(p.act_dtype()) << " / " << DTypeLabel(p.partials_dtype()) << " / " << DTypeLabel(p.pack_src_dtype());
    } else {
      o << "-";
    }
    o << "</td><td class=\"l prog\">";
    if (l.has_program()) o << Text(ProgramSummary(l.program()));
    const int notes = l.has_program() ? std::min(4, l.program().notes_size()) : 0;
    if (notes > 0 || !l.detail().empty()) {
      // Folded (no script needed): the blocking detail and the program's notes are long.
      o << "<details><summary>details</summary>";
      if (!l.detail().empty()) o << "<small>" << Text(l.detail()) << "</small><br>";
      for (int k = 0; k < notes; ++k) o << "<small>" << Text(l.program().notes(k)) << "</small><br>";
      o << "</details>";
    }
    o << "</td></tr>\n";
  }
  o << "</tbody></table>\n</section>\n";
}

}  // namespace

std::string RunReportHtml(const std::vector<RunConfiguration>& configs, const ReportOptions& a) {
  std::ostringstream o;
  const std::string model = configs.empty() ? "" : configs[0].response.model_id();
  int failed = 0, compared = 0;
  for (const auto& c : configs) {
    const LayerCounts n = CountLayers(c.response);
    failed += n.failed;
    compared += n.compared;
  }
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Kiln run report "
    << Escape(model.substr(0, 12)) << "</title>\n<style>"
       "body{font-family:sans-serif;margin:1em;color:#222}table{border-collapse:collapse;font-size:13px}"
       "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right;vertical-align:top}td.l,th.l{text-align:left}"
       "thead th{background:#eee;position:sticky;top:0}tr.fail{background:#fdd}td.fail{color:#b00;font-weight:bold}"
       ".verdict{font-weight:bold;color:#070}.verdict.fail{color:#b00}svg.chart{display:block;margin:.5em 0}"
       "code{font-size:12px}td.prog{min-width:24em}td.fmt{white-space:nowrap}</style></head><body>\n";
  o << "<h1>Kiln run report</h1>\n<p>model <code>" << (model.empty() ? "(local file)" : Escape(model)) << "</code>";
  if (!configs.empty() && !configs[0].response.kiln_version().empty()) {
    o << ", kiln " << Escape(configs[0].response.kiln_version());
  }
  if (!a.job_ids.empty()) {
    o << ", job";
    for (const auto& j : a.job_ids) o << " <code>" << Escape(j) << "</code>";
  }
  o << "</p>\n";
  if (a.inputs.known) {
    o << "<p>inputs: ";
    for (const auto& [name, path] : a.inputs.files) o << Escape(name) << " from <code>" << Escape(path) << "</code>; ";
    o << (a.inputs.files.empty() ? "every input" : "any other input") << " random uniform [-1, 1), seed "
      << a.inputs.seed << "</p>\n";
  }
  for (const auto& j : a.unfinished) {
    o << "<p class=\"verdict fail incomplete\">INCOMPLETE: " << Escape(UnfinishedLine(j)) << "</p>\n";
  }
  const bool incomplete = !a.unfinished.empty();
  o << "<p class=\"summary\">" << configs.size() << " run(s), " << compared << " layer comparison(s), "
    << "<span class=\"" << (failed > 0 || incomplete ? "verdict fail" : "verdict") << "\">"
    << (compared == 0 ? "nothing compared" : failed == 0 ? "all layers pass" : std::to_string(failed) + " below threshold")
    << (incomplete ? " in the finished configurations of an incomplete job" : "")
    << "</span>. Times are host emulation time, not Tensix latency.</p>\n";
  const auto sections = Sections(configs);
  for (size_t i = 0; i < sections.size(); ++i) SectionHtml(o, configs, sections[i], i);
  o << "</body></html>\n";
  return o.str();
}

}  // namespace kiln::cli
