#include "cli/run_report.h"

#include <google/protobuf/util/json_util.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "api/convert.h"
#include "device/backends/builtin.h"
#include "device/npy.h"

namespace kiln::cli {

std::string ShapeString(const google::protobuf::RepeatedField<int64_t>& s) {
  std::string out = "[";
  for (int i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

int PrintRunReport(const kiln::v1::RunConvLayersResponse& r, const ReportOptions& a) {
  if (!a.out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.out_dir, ec);
    for (const auto& t : r.outputs()) {
      auto tensor = api::FromProto(t);
      if (!tensor.ok()) {
        std::cerr << "kiln: output '" << t.name() << "': " << tensor.status().message() << "\n";
        return 1;
      }
      std::string file = t.name();
      for (char& c : file) {
        if (c == '/' || c == '\\' || c == ':') c = '_';
      }
      std::string path = (std::filesystem::path(a.out_dir) / (file + ".npy")).string();
      Status st = device::WriteNpy(path, *tensor);
      if (!st.ok()) {
        std::cerr << "kiln: " << st.message() << "\n";
        return 1;
      }
      std::cerr << "wrote " << path << "\n";
    }
  }
  if (a.report == "html") {
    std::cout << RunReportHtml(r);
  } else if (a.report == "json") {
    kiln::v1::RunConvLayersResponse copy = r;
    for (auto& t : *copy.mutable_outputs()) t.clear_raw_data();
    std::string json;
    google::protobuf::util::JsonPrintOptions opts;
    opts.add_whitespace = true;
    opts.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(copy, &json, opts);
    std::cout << json;
  } else {
    // The resolved precision first: what every layer below ran with (defaults resolved).
    if (!device::IsFp32Reference(r.backend())) std::printf("precision: %s\n", r.resolved_precision().c_str());
    if (!r.tt_emu_level().empty()) std::printf("tt-emu level: %s\n", r.tt_emu_level().c_str());
    std::printf("%-28s %-18s %-20s %10s %10s %12s %9s %-4s %s\n", "LAYER", "OP", "OUTPUT_SHAPE", "TIME_MS",
                "PCC", "MAX_ABS_ERR", "THRESHOLD", "PASS", "PROGRAM");
    for (const auto& l : r.layers()) {
      std::string name = l.name().size() > 28 ? l.name().substr(0, 27) + "~" : l.name();
      char pcc[32] = "-", err[32] = "-", thr[32] = "-";
      if (l.compared()) {
        std::snprintf(pcc, sizeof pcc, "%.6f", l.pcc());
        std::snprintf(err, sizeof err, "%.3g", l.max_abs_error());
      }
      if (l.pcc_threshold() > 0) std::snprintf(thr, sizeof thr, "%.4f", l.pcc_threshold());
      // The program tt-emu emulated, compactly: path, shard layout, K blocks, Cin alignment.
      std::string prog;
      if (l.has_program()) {
        const auto& p = l.program();
        // The proto and device enums share their numbering (api/convert.cc pins it).
        prog = p.path() + " " + device::ShardLayoutName(static_cast<device::ShardLayout>(p.shard_layout())) +
               (p.shard_layout_auto() ? "(auto)" : "") +
               " k_blocks=" + std::to_string(p.k_blocks()) + " cin_align=" + std::to_string(p.cin_align()) +
               (p.l1_acc_effective() ? " l1_acc" : "");
      }
      std::printf("%-28s %-18s %-20s %10.3f %10s %12s %9s %-4s %s\n", name.c_str(), l.op().c_str(),
                  ShapeString(l.output_shape()).c_str(), l.device_seconds() * 1e3, pcc, err, thr,
                  l.pcc_threshold() > 0 ? (l.pass() ? "yes" : "NO") : "", prog.c_str());
    }
    if (r.folded_nodes() > 0) {
      std::printf("%lld node(s) evaluated when the plan was built (constant folding)\n",
                  static_cast<long long>(r.folded_nodes()));
    }
    std::printf("backend %s%s%s, precision %s, run %.3f s%s: %s\n", r.backend().c_str(),
                r.device().empty() ? "" : " on ", r.device().c_str(),
                device::IsFp32Reference(r.backend()) ? "fp32 (reference ignores device precision)"
                                           : r.resolved_precision().c_str(),
                r.run_seconds(),
                r.queue_seconds() > 0 ? (", queued " + std::to_string(r.queue_seconds()) + " s").c_str() : "",
                r.pass() ? "all layers pass" : "SOME LAYERS BELOW THRESHOLD");
  }
  return r.pass() ? 0 : 3;
}


namespace {
std::string Escape(const std::string& s) {
  std::string out;
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
}  // namespace

std::string RunReportHtml(const kiln::v1::RunConvLayersResponse& r) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Kiln run report " << Escape(r.model_id().substr(0, 12))
    << "</title>\n<style>body{font-family:sans-serif}table{border-collapse:collapse}"
       "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td.l,th.l{text-align:left}"
       "tr.fail{background:#fdd}</style></head><body>\n";
  o << "<h1>Run report</h1>\n<p>model <code>" << Escape(r.model_id()) << "</code>, backend " << Escape(r.backend());
  if (!r.device().empty()) o << " on " << Escape(r.device());
  o << ", precision <code>" << Escape(r.resolved_precision()) << "</code>, run " << r.run_seconds() << " s: <b>"
    << (r.pass() ? "all layers pass" : "SOME LAYERS BELOW THRESHOLD") << "</b></p>\n";
  o << "<table><tr><th class=l>layer</th><th class=l>op</th><th class=l>output shape</th><th>time ms</th>"
       "<th>PCC</th><th>max abs err</th><th>threshold</th><th class=l>pass</th></tr>\n";
  for (const auto& l : r.layers()) {
    const bool fail = l.compared() && l.pcc_threshold() > 0 && !l.pass();
    o << "<tr" << (fail ? " class=fail" : "") << "><td class=l>" << Escape(l.name()) << "</td><td class=l>"
      << Escape(l.op()) << "</td><td class=l>" << ShapeString(l.output_shape()) << "</td><td>"
      << l.device_seconds() * 1e3 << "</td><td>";
    if (l.compared()) {
      o << l.pcc() << "</td><td>" << l.max_abs_error();
    } else {
      o << "-</td><td>-";
    }
    o << "</td><td>";
    if (l.pcc_threshold() > 0) o << l.pcc_threshold();
    o << "</td><td class=l>" << (l.pcc_threshold() > 0 ? (l.pass() ? "yes" : "NO") : "") << "</td></tr>\n";
  }
  o << "</table>\n</body></html>\n";
  return o.str();
}

}  // namespace kiln::cli
