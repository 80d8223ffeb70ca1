#include "cli/run_report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "api/convert.h"
#include "cli/html_report.h"
#include "common/echo.h"
#include "device/backends/builtin.h"
#include "device/npy.h"

namespace kiln::cli {
namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

namespace {

// Layer names longer than this are cut in the middle (CutMiddle); wide enough for the ONNX
// exporters' scope paths that differ only in their last component.
constexpr size_t kMaxNameColumn = 56;

// Proto enum -> the command-line spelling, by searching the device enum whose api::ToProto
// image it is (api/convert.cc is the one place that maps these enums).
std::string DTypeName(kiln::v1::DataType d) {
  for (auto v : {device::DeviceDType::kFloat32, device::DeviceDType::kBFloat16, device::DeviceDType::kBFloat8B,
                 device::DeviceDType::kBFloat4B}) {
    if (api::ToProto(v) == d) return device::DeviceDTypeName(v);
  }
  return "default";
}

// The proto and device enums of shard layout and board share their numbering (api/convert.cc pins it).
const char* ShardName(kiln::v1::ShardLayout s) {
  return device::ShardLayoutName(static_cast<device::ShardLayout>(s));
}
const char* BoardName(kiln::v1::Board b) { return device::BoardName(static_cast<device::Board>(b)); }

// The tree-version switches, as `--depthwise-program` etc. spell them (api/convert.cc ParsePrecisionFlags).
const char* SwitchName(int v, const char* first, const char* second) {
  return v == 1 ? first : v == 2 ? second : "recorded";
}

// A precision as the command line spells it. `only_set`: only the fields the request set (a
// sweep point); else every field (the resolved precision).
Json PrecisionJson(const kiln::v1::Precision& p, bool only_set) {
  Json j = Json::object();
  auto config = api::FromProto(p);
  if (!config.ok()) return j;
  const device::PrecisionConfig& c = *config;
  auto dtype = [&](const char* key, kiln::v1::DataType v) {
    if (!only_set || v != kiln::v1::DATA_TYPE_UNSPECIFIED) j[key] = DTypeName(v);
  };
  if (!only_set || p.math_fidelity() != kiln::v1::MATH_FIDELITY_UNSPECIFIED) {
    j["math_fidelity"] = device::MathFidelityName(c.math_fidelity);
  }
  dtype("weights_dtype", p.weights_dtype());
  dtype("input_dtype", p.input_dtype());
  dtype("output_dtype", p.output_dtype());
  if (!only_set || p.has_fp32_dest_acc_en()) j["fp32_dest_acc_en"] = p.fp32_dest_acc_en();
  if (!only_set || p.has_packer_l1_acc()) j["packer_l1_acc"] = c.packer_l1_acc;
  if (!only_set || p.has_math_approx_mode()) j["math_approx_mode"] = c.math_approx_mode;
  if (!only_set || p.arch() != kiln::v1::ARCH_UNSPECIFIED) j["arch"] = device::ArchName(c.arch);
  if (!only_set || p.act_block_w() != 0) j["act_block_w"] = p.act_block_w();
  if (!only_set || p.shard_layout() != kiln::v1::SHARD_LAYOUT_AUTO) j["shard_layout"] = ShardName(p.shard_layout());
  if (!only_set || p.act_block_w_div() > 1) j["act_block_w_div"] = c.act_block_w_div;
  if (!only_set || p.act_block_h_override() != 0) j["act_block_h_override"] = p.act_block_h_override();
  if (!only_set || p.full_inner_dim()) j["full_inner_dim"] = p.full_inner_dim();
  if (!only_set || p.enable_activation_reuse()) j["enable_activation_reuse"] = p.enable_activation_reuse();
  if (!only_set || p.input_layout() != kiln::v1::ROW_MAJOR) {
    j["input_layout"] = device::InputLayoutName(c.input_layout);
  }
  if (!only_set || p.bfp8_pack_precise()) j["bfp8_pack_precise"] = p.bfp8_pack_precise();
  if (!only_set || p.board() != kiln::v1::BOARD_UNSPECIFIED) j["board"] = BoardName(p.board());
  if (!only_set || p.host_add()) j["host_add"] = p.host_add();
  if (!only_set || p.depthwise_program() != 0) {
    j["depthwise_program"] = SwitchName(p.depthwise_program(), "pool_multiply", "dense_conv");
  }
  if (!only_set || p.fp32_partial_reload() != 0) {
    j["fp32_partial_reload"] = SwitchName(p.fp32_partial_reload(), "tf32", "lossless");
  }
  if (!only_set || p.fused_hardswish() != 0) {
    j["fused_hardswish"] = SwitchName(p.fused_hardswish(), "dropped", "applied");
  }
  if (!only_set || p.concat_k_split()) j["concat_k_split"] = p.concat_k_split();
  return j;
}

Json ShapeJson(const google::protobuf::RepeatedField<int64_t>& s) {
  Json j = Json::array();
  for (int64_t d : s) j.push_back(d);
  return j;
}

// NaN and infinities have no JSON spelling: null.
Json Number(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

Json ProgramJson(const kiln::v1::ConvProgram& p) {
  Json j;
  j["path"] = p.path();
  j["kernel_stride_folded"] = p.kernel_stride_folded();
  j["shard_layout"] = ShardName(p.shard_layout());
  j["shard_layout_auto"] = p.shard_layout_auto();
  j["board"] = BoardName(p.board());
  j["grid"] = Json::array({p.grid_x(), p.grid_y()});
  j["num_cores"] = p.num_cores();
  j["num_cores_nhw"] = p.num_cores_nhw();
  j["num_cores_c"] = p.num_cores_c();
  j["cin_align"] = p.cin_align();
  j["cin_padded"] = p.cin_padded();
  j["k_blocks"] = p.k_blocks();
  j["act_block_h_ntiles"] = p.act_block_h_ntiles();
  j["act_block_w_ntiles"] = p.act_block_w_ntiles();
  j["l1_acc_effective"] = p.l1_acc_effective();
  j["act_dtype"] = DTypeName(p.act_dtype());
  j["partials_dtype"] = DTypeName(p.partials_dtype());
  j["pack_src_dtype"] = DTypeName(p.pack_src_dtype());
  j["l1_bytes_per_core"] = p.l1_bytes_per_core();
  j["notes"] = Json::array();
  for (const auto& n : p.notes()) j["notes"].push_back(n);
  return j;
}

std::string OutputFileName(const std::string& output) {
  std::string file = output;
  for (char& c : file) {
    if (c == '/' || c == '\\' || c == ':') c = '_';
  }
  return file + ".npy";
}

std::string ConfigurationDir(const ReportOptions& a, size_t i, size_t n) {
  if (a.out_dir.empty()) return "";
  return n > 1 ? (fs::path(a.out_dir) / ("c" + std::to_string(i))).string() : a.out_dir;
}

std::string InputsLine(const InputSource& in) {
  if (!in.known) return "";
  std::string s = "inputs: ";
  for (const auto& [name, path] : in.files) s += name + " from " + path + "; ";
  s += (in.files.empty() ? "every input" : "any other input") + std::string(" random uniform [-1, 1), seed ") +
       std::to_string(in.seed);
  return s;
}

struct Table {
  std::vector<std::vector<std::string>> rows;  // rows[0] = header
  std::vector<bool> left;                      // per column: left aligned
  // Cells carry model-supplied names: control characters are escaped (common/echo.h EscapeControls).
  std::string Render() const {
    std::vector<std::vector<std::string>> rows = this->rows;
    for (auto& r : rows) {
      for (std::string& cell : r) cell = EscapeControls(cell);
    }
    std::vector<size_t> w(left.size(), 0);
    for (const auto& r : rows) {
      for (size_t c = 0; c < r.size(); ++c) w[c] = std::max(w[c], r[c].size());
    }
    std::string out;
    for (const auto& r : rows) {
      std::string line;
      for (size_t c = 0; c < r.size(); ++c) {
        const std::string pad(w[c] - r[c].size(), ' ');
        if (c) line += "  ";
        line += left[c] ? r[c] + (c + 1 == r.size() ? "" : pad) : pad + r[c];
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
    return out;
  }
};

std::string ConfigurationTable(const kiln::v1::RunConvLayersResponse& r) {
  std::string out;
  // The resolved precision first: what every layer below ran with (defaults resolved).
  if (!device::IsFp32Reference(r.backend())) out += "precision: " + r.resolved_precision() + "\n";
  if (!r.tt_emu_level().empty()) out += "tt-emu level: " + r.tt_emu_level() + "\n";
  out += std::string("mode: ") + ModeName(r.mode()) + "\n";
  // Names cut in the middle only when that keeps them distinct (else shown whole).
  std::set<std::string> full, cut;
  for (const auto& l : r.layers()) {
    full.insert(l.name());
    cut.insert(CutMiddle(l.name(), kMaxNameColumn));
  }
  const bool cut_names = cut.size() == full.size();
  Table t;
  t.left = {true, true, true, false, false, false, false, true, true};
  t.rows.push_back({"LAYER", "OP", "OUTPUT_SHAPE", "HOST_EMULATION_MS", "PCC", "MAX_ABS_ERR", "THRESHOLD", "PASS",
                    "PROGRAM"});
  for (const auto& l : r.layers()) {
    const bool threshold = l.pcc_threshold() > 0;
    t.rows.push_back({cut_names ? CutMiddle(l.name(), kMaxNameColumn) : l.name(), l.op(), ShapeString(l.output_shape()),
                      Fmt("%.3f", l.device_seconds() * 1e3), l.compared() ? Fmt("%.6f", l.pcc()) : "-",
                      l.compared() ? Fmt("%.3g", l.max_abs_error()) : "-",
                      threshold ? Fmt("%.4f", l.pcc_threshold()) : "-",
                      !l.compared() ? "-" : threshold ? (l.pass() ? "yes" : "NO") : "",
                      l.has_program() ? ProgramSummary(l.program()) : ""});
  }
  out += t.Render();
  // Layers the request gave their own precision (layer_precision): what each ran with.
  for (const auto& l : r.layers()) {
    if (l.layer_precision_set()) {
      out += "layer precision " + EscapeControls(l.name()) + ": " + l.resolved_precision() + "\n";
    }
  }
  if (r.folded_nodes() > 0) {
    out += std::to_string(r.folded_nodes()) + " node(s) evaluated when the plan was built (constant folding)\n";
  }
  const LayerCounts n = CountLayers(r);
  const std::string verdict =
      n.compared == 0 ? NothingComparedVerdict(r)
      : n.failed == 0 ? std::to_string(n.compared) + " compared, all layers pass"
                      : std::to_string(n.compared) + " compared, " + std::to_string(n.failed) +
                            " below threshold: SOME LAYERS BELOW THRESHOLD";
  out += "backend " + r.backend() + (r.device().empty() ? "" : " on " + r.device()) + ", precision " +
         (device::IsFp32Reference(r.backend()) ? "fp32 (reference ignores device precision)"
                                                : r.resolved_precision()) +
         ", run " + Fmt("%.3f", r.run_seconds()) + " s" +
         (r.queue_seconds() > 0 ? ", queued " + Fmt("%.3f", r.queue_seconds()) + " s" : "") +
         " (times are host emulation, not device latency): " + verdict + "\n";
  return out;
}

int ExitStatus(const std::vector<RunConfiguration>& configs) {
  int compared = 0, failed = 0;
  for (const auto& c : configs) {
    const LayerCounts n = CountLayers(c.response);
    compared += n.compared;
    failed += n.failed;
  }
  if (failed > 0) return 3;
  return compared == 0 ? kExitNothingCompared : 0;
}

}  // namespace

std::string PrecisionText(const kiln::v1::Precision& p, bool only_set) { return PrecisionJson(p, only_set).dump(); }

const char* ModeName(kiln::v1::RunMode mode) { return mode == kiln::v1::PER_LAYER ? "per_layer" : "chained"; }

std::string ShapeString(const google::protobuf::RepeatedField<int64_t>& s) {
  std::string out = "[";
  for (int i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

std::string CutMiddle(const std::string& name, size_t width) {
  if (name.size() <= width || width < 5) return name;
  // More of the end than of the start: ONNX scope paths share their prefix and differ at the end.
  const size_t head = (width - 1) / 3;
  const size_t tail = width - 1 - head;
  return name.substr(0, head) + "~" + name.substr(name.size() - tail);
}

bool LayerFails(const kiln::v1::LayerReport& l) { return l.compared() && l.pcc_threshold() > 0 && !l.pass(); }

LayerCounts CountLayers(const kiln::v1::RunConvLayersResponse& r) {
  LayerCounts n;
  for (const auto& l : r.layers()) {
    if (!l.compared()) continue;
    ++n.compared;
    if (LayerFails(l)) ++n.failed;
  }
  return n;
}

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string UnfinishedLine(const ReportOptions::UnfinishedJob& j) {
  return "job " + j.job_id + " ended " + j.state + " after " + std::to_string(j.done) + " of " +
         std::to_string(j.total) + " configuration(s)" + (j.error.empty() ? "" : " (" + j.error + ")") +
         ": only those are reported";
}

std::string NothingComparedVerdict(const kiln::v1::RunConvLayersResponse& r) {
  return r.layers().empty() ? "0 compared (the model has no layers: nothing ran)"
                            : "0 compared (no reference: nothing checked)";
}

std::string ProgramSummary(const kiln::v1::ConvProgram& p) {
  return p.path() + " " + ShardName(p.shard_layout()) + (p.shard_layout_auto() ? "(auto)" : "") +
         " k_blocks=" + std::to_string(p.k_blocks()) + " cin_align=" + std::to_string(p.cin_align()) +
         (p.l1_acc_effective() ? " l1_acc" : "");
}

Status CheckReportDestinations(const ReportOptions& a) {
  if (!a.out_dir.empty()) {
    std::error_code ec;
    fs::create_directories(a.out_dir, ec);
    if (!fs::is_directory(a.out_dir)) {
      return InvalidArgument("--out " + a.out_dir + ": not a directory and cannot be created" +
                             (ec ? " (" + ec.message() + ")" : ""));
    }
    if (::access(a.out_dir.c_str(), W_OK | X_OK) != 0) {
      return InvalidArgument("--out " + a.out_dir + ": directory not writable");
    }
  }
  if (!a.report_file.empty()) return CheckWritableFile("--report-file", a.report_file);
  return Status::Ok();
}

Status CheckWritableFile(const std::string& flag, const std::string& path) {
  const fs::path file(path);
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  if (!fs::is_directory(dir)) return InvalidArgument(flag + " " + path + ": no such directory");
  // An existing path may be a regular file or what a shell hands over (/dev/stdout, /dev/null, a
  // pipe): every writer here is an ofstream that truncates, never a rename over the path.
  if (fs::is_directory(file)) return InvalidArgument(flag + " " + path + ": is a directory");
  if (fs::exists(file) && ::access(file.c_str(), W_OK) != 0) {
    return InvalidArgument(flag + " " + path + ": not a writable file");
  }
  if (!fs::exists(file) && ::access(dir.c_str(), W_OK | X_OK) != 0) {
    return InvalidArgument(flag + " " + path + ": directory not writable");
  }
  return Status::Ok();
}

std::string RunReportTable(const std::vector<RunConfiguration>& configs, const ReportOptions& a) {
  std::string out;
  for (const auto& j : a.unfinished) out += "INCOMPLETE: " + EscapeControls(UnfinishedLine(j)) + "\n";
  const std::string inputs = InputsLine(a.inputs);
  if (!inputs.empty()) out += inputs + "\n";
  for (size_t i = 0; i < configs.size(); ++i) {
    if (configs.size() > 1) {
      out += "== configuration " + std::to_string(i) + ": " + PrecisionJson(configs[i].requested, true).dump() +
             " mode " + ModeName(configs[i].response.mode()) + "\n";
    }
    out += ConfigurationTable(configs[i].response);
  }
  return out;
}

std::string RunReportJson(const std::vector<RunConfiguration>& configs, const ReportOptions& a) {
  Json doc;
  doc["schema"] = "kiln.run/1";
  doc["jobs"] = a.job_ids;
  doc["unfinished_jobs"] = Json::array();
  for (const auto& j : a.unfinished) {
    doc["unfinished_jobs"].push_back({{"job_id", j.job_id},
                                      {"state", j.state},
                                      {"configurations_reported", j.done},
                                      {"configurations", j.total},
                                      {"error", j.error}});
  }
  if (a.inputs.known) {
    Json in;
    in["files"] = Json::object();
    for (const auto& [name, path] : a.inputs.files) in["files"][name] = path;
    in["random_seed"] = a.inputs.seed;
    doc["inputs"] = in;
  } else {
    doc["inputs"] = nullptr;
  }
  doc["configurations"] = Json::array();
  for (size_t i = 0; i < configs.size(); ++i) {
    const auto& r = configs[i].response;
    const LayerCounts n = CountLayers(r);
    Json c;
    c["requested"] = PrecisionJson(configs[i].requested, true);
    c["model_id"] = r.model_id();
    c["backend"] = r.backend();
    c["device"] = r.device();
    c["mode"] = ModeName(r.mode());
    const bool fp32_reference = device::IsFp32Reference(r.backend());
    c["precision"] = fp32_reference ? Json(nullptr) : PrecisionJson(r.precision(), false);
    c["resolved_precision"] = fp32_reference ? Json(nullptr) : Json(r.resolved_precision());
    c["tt_emu_level"] = r.tt_emu_level().empty() ? Json(nullptr) : Json(r.tt_emu_level());
    c["kiln_version"] = r.kiln_version();
    c["backend_sources"] = r.backend_sources();
    c["queue_seconds"] = Number(r.queue_seconds());
    c["run_seconds"] = Number(r.run_seconds());
    c["folded_nodes"] = r.folded_nodes();
    c["compared"] = n.compared;
    c["below_threshold"] = n.failed;
    c["passed"] = n.compared > 0 && n.failed == 0;
    c["layers"] = Json::array();
    for (const auto& l : r.layers()) {
      Json j;
      j["name"] = l.name();
      j["op"] = l.op();
      j["input_shape"] = ShapeJson(l.input_shape());
      j["output_shape"] = ShapeJson(l.output_shape());
      j["host_emulation_seconds"] = Number(l.device_seconds());
      j["compared"] = l.compared();
      j["pcc"] = l.compared() ? Number(l.pcc()) : Json(nullptr);
      j["max_abs_error"] = l.compared() ? Number(l.max_abs_error()) : Json(nullptr);
      j["pcc_threshold"] = l.pcc_threshold() > 0 ? Json(l.pcc_threshold()) : Json(nullptr);
      j["passed"] = l.compared() && l.pcc_threshold() > 0 ? Json(l.pass()) : Json(nullptr);
      j["detail"] = l.detail();
      j["program"] = l.has_program() ? ProgramJson(l.program()) : Json(nullptr);
      // The precision this layer ran with (device layers on tt-emu; null otherwise) and whether
      // the request's layer_precision named it.
      j["precision"] = l.has_precision() ? PrecisionJson(l.precision(), false) : Json(nullptr);
      j["resolved_precision"] = l.resolved_precision().empty() ? Json(nullptr) : Json(l.resolved_precision());
      j["layer_precision"] = l.layer_precision_set();
      c["layers"].push_back(std::move(j));
    }
    c["outputs"] = Json::array();
    const std::string dir = ConfigurationDir(a, i, configs.size());
    for (const auto& t : r.outputs()) {
      Json o;
      o["name"] = t.name();
      o["datatype"] = t.datatype().empty() ? "FP32" : t.datatype();
      o["shape"] = ShapeJson(t.shape());
      o["file"] = dir.empty() ? Json(nullptr) : Json((fs::path(dir) / OutputFileName(t.name())).string());
      c["outputs"].push_back(std::move(o));
    }
    doc["configurations"].push_back(std::move(c));
  }
  // Layer names come from the model and may hold any bytes: replace invalid UTF-8.
  return doc.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

int PrintRunReport(const std::vector<RunConfiguration>& configs, const ReportOptions& a) {
  for (size_t i = 0; i < configs.size(); ++i) {
    const std::string dir = ConfigurationDir(a, i, configs.size());
    if (dir.empty()) continue;
    std::error_code ec;
    fs::create_directories(dir, ec);
    for (const auto& t : configs[i].response.outputs()) {
      auto tensor = api::FromProto(t);
      if (!tensor.ok()) {
        std::cerr << "kiln: output '" << EscapeControls(t.name()) << "': " << EscapeControls(tensor.status().message())
                  << "\n";
        return 1;
      }
      const std::string path = (fs::path(dir) / OutputFileName(t.name())).string();
      Status st = device::WriteNpy(path, *tensor);
      if (!st.ok()) {
        std::cerr << "kiln: " << st.message() << "\n";
        return 1;
      }
      std::cerr << "wrote " << path << "\n";
    }
  }
  std::string text = a.report == "html" ? RunReportHtml(configs, a)
                     : a.report == "json" ? RunReportJson(configs, a)
                                          : RunReportTable(configs, a);
  if (a.report_file.empty()) {
    std::cout << text << std::flush;
  } else {
    std::ofstream f(a.report_file, std::ios::binary | std::ios::trunc);
    f << text;
    f.close();
    if (!f) {
      std::cerr << "kiln: cannot write the report to " << a.report_file << "\n";
      return 1;
    }
    std::cerr << "wrote " << a.report_file << " (" << text.size() << " bytes)\n";
  }
  // A job that did not succeed is an error whatever its finished configurations say (as `kiln
  // watch` of it): a gate on the exit status must not pass a cancelled sweep.
  for (const auto& j : a.unfinished) std::cerr << "kiln: result: " << UnfinishedLine(j) << "\n";
  if (!a.unfinished.empty()) return 1;
  return ExitStatus(configs);
}


}  // namespace kiln::cli
