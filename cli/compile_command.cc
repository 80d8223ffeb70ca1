#include "cli/compile_command.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/model_commands.h"
#include "cli/options.h"
#include "cli/run_report.h"
#include "common/echo.h"
#include "kiln/v1/compile.grpc.pb.h"
#include "api/compile_ai8x.h"
#include "kiln/v1/model.grpc.pb.h"

namespace kiln::cli {
namespace {

struct CompileArgs {
  std::string model;  // FILE or stored id/name
  api::CompileFlags flags;
  std::string output;
  std::string name;  // upload name for a FILE (default: the file stem)
  bool local = false;
  bool table = false;
  bool json = false;
  std::string arch_from;  // where an inferred --arch came from ("" = given)
};

const char* SeverityWord(kiln::v1::Severity s) {
  switch (s) {
    case kiln::v1::ERROR: return "error";
    case kiln::v1::WARNING: return "warning";
    default: return "info";
  }
}

// Highest data-memory byte a layer touches, per instance: the larger end of its input and output
// (compiler/ai8x/compile.cc, resources.data_bytes_peak is the maximum over the layers).
int64_t DataPeak(const kiln::v1::Ai8xLayer& l) {
  return std::max<int64_t>(l.in_offset() + l.data_in_bytes(), l.out_offset() + l.data_out_bytes());
}

// The per-layer plan table with each layer's resources (kernel words per processor, bias bytes,
// data-memory peak); columns widen to the longest layer name and op.
void PrintTable(const kiln::v1::CompileAi8xResponse& r, std::FILE* to) {
  int name_w = 16, op_w = 14;
  for (const auto& l : r.layers()) {
    name_w = std::max(name_w, static_cast<int>(EscapeControls(l.name()).size()));
    op_w = std::max(op_w, static_cast<int>(l.op().size()));
  }
  std::fprintf(to, "%-3s %-*s %-*s %18s %18s %7s %7s %8s %6s %9s\n", "#", name_w, "LAYER", op_w, "OP", "PROCESSORS",
               "OUTPUT_PROCESSORS", "IN_OFF", "OUT_OFF", "KWORDS", "BIAS", "DATA_PEAK");
  for (const auto& l : r.layers()) {
    std::fprintf(to, "%-3d %-*s %-*s 0x%016llx 0x%016llx 0x%04x  0x%04x %8lld %6lld %9lld%s\n", l.index(), name_w,
                 EscapeControls(l.name()).c_str(), op_w, l.op().c_str(), static_cast<unsigned long long>(l.processors()),
                 static_cast<unsigned long long>(l.output_processors()), l.in_offset(), l.out_offset(),
                 static_cast<long long>(l.kernel_words()), static_cast<long long>(l.bias_bytes()),
                 static_cast<long long>(DataPeak(l)), l.streaming() ? " streaming" : "");
  }
  const auto& res = r.resources();
  std::fprintf(to,
               "resources: %d of %d layers; kernel words %lld of %lld per processor; bias %lld of %lld bytes; "
               "data memory peak %lld of %lld bytes per instance; %d streaming layers\n",
               res.layers(), res.max_layers(), static_cast<long long>(res.max_kernel_words_used()),
               static_cast<long long>(res.kernel_words_per_processor()), static_cast<long long>(res.bias_bytes_used()),
               static_cast<long long>(res.bias_bytes_capacity()), static_cast<long long>(res.data_bytes_peak()),
               static_cast<long long>(res.data_instance_bytes()), res.streaming_layers());
}

// A shell word: quoted when it holds anything but [A-Za-z0-9_./=:+-].
std::string ShellWord(const std::string& s) {
  bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) || std::strchr("_./=:+-", c) != nullptr;
  });
  if (plain) return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The next step: the ai8xize.py command line (api IzerCommand) with this invocation's files:
// --config-file is -o, --checkpoint-file is the FILE itself unless the izer's ONNX reader cannot
// take it (needs_quantized_checkpoint; then the quantized checkpoint of the arch).
api::IzerCommandLine IzerCommandFor(const kiln::v1::CompileAi8xResponse& r, const CompileArgs& a) {
  api::IzerPaths paths;
  paths.config_file = a.output;  // empty: <arch>.yaml
  bool is_file = std::filesystem::is_regular_file(a.model);
  if (is_file && !r.needs_quantized_checkpoint()) paths.checkpoint_file = a.model;
  std::string name = is_file ? StoredName(a.model, a.name) : a.model;
  return api::IzerCommand(r, name, paths);
}

// The whole command line, quoted for a shell, and one line per flag saying why it is there. On
// stderr, so that stdout stays the YAML.
void PrintIzerCommand(const kiln::v1::CompileAi8xResponse& r, const CompileArgs& a) {
  api::IzerCommandLine cmd = IzerCommandFor(r, a);
  std::string line;
  for (const auto& w : cmd.argv) line += (line.empty() ? "" : " ") + ShellWord(w);
  std::cerr << "next: turn the YAML into C code with ai8x-synthesis (from its checkout):\n  " << line << "\n";
  for (const auto& f : cmd.why) std::cerr << "    " << f.flag() << ": " << EscapeControls(f.reason()) << "\n";
  if (a.output.empty()) {
    // The command names a file this invocation did not write: say where the YAML is.
    std::string config;
    for (size_t i = 0; i + 1 < cmd.argv.size(); ++i) {
      if (cmd.argv[i] == "--config-file") config = cmd.argv[i + 1];
    }
    std::cerr << "    (the YAML went to stdout: save it as " << ShellWord(config) << ", or compile with -o FILE)\n";
  }
}

// "(C, H, W)" as numbers ([] when it does not parse).
nlohmann::ordered_json ShapeNumbers(const std::string& shape) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  std::string digits;
  for (char c : shape + ",") {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digits += c;
    } else if (c == ',' || c == ')') {
      if (!digits.empty()) out.push_back(std::stoll(digits));
      digits.clear();
    }
  }
  return out;
}

const char* InputFormatWord(kiln::v1::InputFormat f) {
  switch (f) {
    case kiln::v1::INPUT_FORMAT_HWC: return "HWC";
    case kiln::v1::INPUT_FORMAT_CHW: return "CHW";
    default: return "auto";
  }
}

std::string Hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// `kiln compile --json` (docs/cli-json.md): one object on stdout; shapes as numbers,
// enums spelled as on the command line.
nlohmann::ordered_json CompileJson(const kiln::v1::CompileAi8xResponse& r, const CompileArgs& a,
                           const api::IzerCommandLine& izer, const std::string& written) {
  const auto& ro = r.resolved_options();
  nlohmann::ordered_json j;
  j["schema"] = "kiln.compile/1";
  j["model"] = a.model;
  j["model_id"] = r.model_id();
  j["ok"] = r.ok();
  j["device"] = ro.device() == kiln::v1::MAX78002 ? "MAX78002" : "MAX78000";
  j["arch"] = ro.arch();
  j["arch_from"] = a.arch_from.empty() ? "--arch" : a.arch_from;
  j["dataset"] = ro.dataset();
  j["input_format"] = InputFormatWord(ro.input_format());
  j["fifo"] = ro.use_fifos();
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const auto& l : r.layers()) {
    nlohmann::ordered_json o;
    o["index"] = l.index();
    o["name"] = l.name();
    o["op"] = l.op();
    o["onnx_nodes"] = nlohmann::ordered_json(std::vector<std::string>(l.onnx_nodes().begin(), l.onnx_nodes().end()));
    o["in_channels"] = l.in_channels();
    o["out_channels"] = l.out_channels();
    o["in_shape"] = ShapeNumbers(l.in_shape());
    o["out_shape"] = ShapeNumbers(l.out_shape());
    o["processors"] = Hex64(l.processors());
    o["output_processors"] = Hex64(l.output_processors());
    o["in_offset"] = l.in_offset();
    o["out_offset"] = l.out_offset();
    o["data_in_bytes"] = l.data_in_bytes();
    o["data_out_bytes"] = l.data_out_bytes();
    o["data_peak_bytes"] = DataPeak(l);
    o["kernel_words"] = l.kernel_words();
    o["bias_bytes"] = l.bias_bytes();
    o["streaming"] = l.streaming();
    layers.push_back(std::move(o));
  }
  j["layers"] = std::move(layers);
  const auto& res = r.resources();
  j["resources"] = {{"layers", res.layers()},
                    {"max_layers", res.max_layers()},
                    {"max_kernel_words_used", res.max_kernel_words_used()},
                    {"kernel_words_per_processor", res.kernel_words_per_processor()},
                    {"bias_bytes_used", res.bias_bytes_used()},
                    {"bias_bytes_capacity", res.bias_bytes_capacity()},
                    {"data_bytes_peak", res.data_bytes_peak()},
                    {"data_instance_bytes", res.data_instance_bytes()},
                    {"streaming_layers", res.streaming_layers()}};
  nlohmann::ordered_json diags = nlohmann::ordered_json::array();
  for (const auto& d : r.diagnostics()) {
    diags.push_back({{"severity", SeverityWord(d.severity())},
                     {"code", d.code()},
                     {"layer", d.layer()},
                     {"layer_name", d.layer_name()},
                     {"onnx_node", d.onnx_node()},
                     {"message", d.message()}});
  }
  j["diagnostics"] = std::move(diags);
  j["izer_command"] = izer.argv;
  nlohmann::ordered_json why = nlohmann::ordered_json::array();
  for (const auto& f : izer.why) why.push_back({{"flag", f.flag()}, {"reason", f.reason()}});
  j["izer_flags"] = std::move(why);
  j["yaml"] = r.yaml();
  j["output"] = written.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(written);
  j["cache_hit"] = r.cache_hit();
  j["compile_seconds"] = r.compile_seconds();
  j["kiln_version"] = r.kiln_version();
  return j;
}

// Writes the YAML to -o (only after a successful compile). False (with the message on stderr)
// when it cannot be written.
bool WriteYaml(const kiln::v1::CompileAi8xResponse& r, const CompileArgs& a) {
  std::ofstream out(a.output, std::ios::binary);
  if (!out || !(out << r.yaml()) || !out.flush()) {
    std::cerr << "kiln: compile: cannot write '" << a.output << "': " << std::strerror(errno) << "\n";
    return false;
  }
  return true;
}

int Report(const kiln::v1::CompileAi8xResponse& r, const CompileArgs& a) {
  if (a.json) {
    bool wrote = false;
    if (!a.output.empty() && r.ok()) {
      if (!WriteYaml(r, a)) return 1;
      wrote = true;
    }
    std::cout << CompileJson(r, a, IzerCommandFor(r, a), wrote ? a.output : "").dump(2) << "\n";
    return r.ok() ? 0 : 1;
  }
  // stdout carries the YAML unless -o is given; the table then goes to stderr so that
  // `kiln compile ... --table > net.yaml` still captures a clean YAML.
  if (a.table) {
    std::fflush(stdout);
    PrintTable(r, a.output.empty() ? stderr : stdout);
    std::fflush(a.output.empty() ? stderr : stdout);
  }
  int errors = 0;
  for (const auto& d : r.diagnostics()) {
    if (d.severity() == kiln::v1::ERROR) ++errors;
    std::cerr << SeverityWord(d.severity()) << ": " << d.code();
    if (!d.layer_name().empty()) std::cerr << " layer " << d.layer() << " '" << EscapeControls(d.layer_name()) << "'";
    if (!d.onnx_node().empty()) std::cerr << " (ONNX node '" << EscapeControls(d.onnx_node()) << "')";
    std::cerr << ": " << EscapeControls(d.message()) << "\n";
  }
  // A failed compile's YAML is for inspection only (the izer must not get it): it never
  // replaces a file; on stdout it is marked as failed.
  bool wrote = false;
  if (!a.output.empty() && r.ok()) {
    if (!WriteYaml(r, a)) return 1;
    wrote = true;
  } else if (a.output.empty()) {
    if (!r.ok()) std::cout << "# KILN: COMPILE FAILED (see the errors): not for ai8xize.py\n";
    std::cout << r.yaml();
  }
  std::ostringstream flags;
  for (int i = 0; i < r.izer_flags_size(); ++i) flags << (i ? " " : "") << r.izer_flags(i);
  std::cerr << (r.ok() ? "ok" : "failed") << ": " << r.layers_size() << " layers, " << errors
            << " errors; izer flags: " << flags.str();
  if (wrote) std::cerr << "; wrote " << a.output;
  if (!a.output.empty() && !r.ok()) std::cerr << "; " << a.output << " not written";
  std::cerr << "\n";
  if (!a.arch_from.empty()) std::cerr << "note: --arch " << r.resolved_options().arch() << " from " << a.arch_from << "\n";
  if (r.ok()) PrintIzerCommand(r, a);
  if (a.flags.dataset.empty()) {
    const auto& ro = r.resolved_options();
    std::cerr << "note: no --dataset given: the YAML says dataset: "
              << (ro.dataset().empty() ? "(default)" : ro.dataset())
              << "; the izer looks for its sample input under that name (or give it --sample-input)\n";
  }
  return r.ok() ? 0 : 1;
}

// The --arch of a compile that gave none: the factory that the export's name names
// (api::FactoryFromExportName) of the FILE or stored model's reference, of --name, or of one of
// the stored model's names. Empty with the message on stderr when there is none (*exit_code 2:
// the izer refuses any other arch) or when the stored model cannot be looked up (*exit_code 1:
// `kiln compile nosuchname` is NOT_FOUND, not a missing --arch).
std::string InferArch(const ClientOptions& options, CompileArgs& a, bool is_file, int* exit_code) {
  std::vector<std::string> candidates = {a.model};
  if (!a.name.empty()) candidates.push_back(a.name);
  if (!is_file && !a.local) {
    kiln::v1::GetModelRequest req;
    req.set_model_id(a.model);
    kiln::v1::GetModelResponse resp;
    grpc::Status st = CallUnary(options, &kiln::v1::ModelService::Stub::GetModel, req, &resp);
    if (!st.ok()) {
      std::cerr << "kiln: compile " << a.model << ": " << Describe(st) << "\n";
      *exit_code = 1;
      return "";
    }
    for (const auto& n : resp.model().names()) candidates.push_back(n);
  }
  for (const auto& c : candidates) {
    std::string arch = api::FactoryFromExportName(c);
    if (!arch.empty()) {
      a.arch_from = "the export name '" + std::filesystem::path(c).filename().string() + "'";
      return arch;
    }
  }
  *exit_code = 2;
  std::cerr << "kiln: compile: --arch is required: '" << a.model
            << "' is not named like an ai8x-training export of a known model factory (<dataset>-<arch>.<form>.onnx, "
               "e.g. mnist-ai85net5.qat.onnx); pass the checkpoint's arch (its model factory name, e.g. --arch "
               "ai85net5), which ai8xize.py requires\n";
  return "";
}

int RunCompile(const ClientOptions& options, CompileArgs a) {
  auto opts = api::ParseCompileFlags(a.flags);
  if (!opts.ok()) {
    std::cerr << "kiln: compile: " << opts.status().message() << "\n";
    return 2;
  }
  bool is_file = std::filesystem::is_regular_file(a.model);
  if (!is_file && (a.local || LooksLikePath(a.model))) {
    std::error_code ec;
    std::cerr << "kiln: compile: "
              << (std::filesystem::exists(a.model, ec) ? "not a regular file: " : "no such file: ") << a.model << "\n";
    return 1;
  }
  // An -o that cannot be written is a command-line error, found before anything is uploaded or
  // compiled (as `kiln run --out`); WriteYaml replaces the file only after a successful compile.
  if (!a.output.empty()) {
    Status dest = CheckWritableFile("-o", a.output);
    if (!dest.ok()) {
      std::cerr << "kiln: compile: " << dest.message() << "\n";
      return 2;
    }
  }
  if (a.flags.arch.empty()) {
    int code = 2;
    std::string arch = InferArch(options, a, is_file, &code);
    if (arch.empty()) return code;
    opts->set_arch(arch);
  }
  if (a.local) {
    std::ifstream in(a.model, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    // The name `kiln upload` would store the file under, so that the messages are the same with
    // and without a server.
    auto r = api::CompileAi8x(ss.str(), StoredName(a.model, a.name), *opts);
    if (!r.ok()) {
      std::cerr << "kiln: compile " << a.model << ": " << r.status().ToString() << "\n";
      return 1;
    }
    return Report(*r, a);
  }
  // By id for a FILE: the name could be moved to other bytes by another client meanwhile.
  auto id = ModelRefForArg(options, a.model, a.name);
  if (!id.ok()) {
    std::cerr << "kiln: compile: " << id.status().message() << "\n";
    return 1;
  }
  kiln::v1::CompileAi8xRequest req;
  req.set_model_id(*id);
  *req.mutable_options() = *opts;
  kiln::v1::CompileAi8xResponse resp;
  grpc::Status st = CallUnary(options, &kiln::v1::CompileService::Stub::CompileAi8x, req, &resp);
  if (!st.ok()) {
    std::cerr << "kiln: compile " << a.model << ": " << Describe(st) << "\n";
    return 1;
  }
  return Report(resp, a);
}

}  // namespace

void AddCompileCommand(CLI::App& app, ClientOptions& options, int* exit_code) {
  static CompileArgs a;
  auto* cmd = app.add_subcommand("compile", "compile a model to ai8x izer YAML (MAX78000/MAX78002)");
  cmd->add_option("MODEL", a.model, "ONNX file (stored first, its bytes sent only when not stored yet) or a stored "
                                    "model id, name or id prefix (8+ hex digits)")->required();
  cmd->add_option("--device", a.flags.device, "MAX78000 or MAX78002")->capture_default_str();
  cmd->add_option("--arch", a.flags.arch,
                  "YAML arch: the checkpoint's model factory name (e.g. ai85net5); default: the factory an "
                  "ai8x-training export's name <dataset>-<arch>.<form>.onnx names, when Kiln knows it");
  cmd->add_option("--dataset", a.flags.dataset, "YAML dataset: name");
  cmd->add_option("--input-format", a.flags.input_format, "auto, HWC or CHW")->capture_default_str();
  cmd->add_option("--set", a.flags.sets, "per-layer override LAYER.KEY=VALUE (repeatable)");
  cmd->add_option("-o,--output", a.output,
                  "write the YAML here, only when the compile succeeds (default: stdout)");
  cmd->add_option("--name", a.name, "name to store a FILE under (default: the file stem)")->check(ModelName());
  cmd->add_flag("--local", a.local, "compile in process, no server");
  cmd->add_flag("--fifo", a.flags.use_fifos, "the izer will run with --fifo");
  cmd->add_flag("--move-l0", a.flags.move_l0, "allow moving layer 0's processors");
  cmd->add_flag("--verbose", a.flags.verbose, "shapes of every layer as YAML comments");
  cmd->add_flag("--table", a.table,
                "print the per-layer plan and resource table (to stderr when the YAML goes to stdout)");
  cmd->add_flag("--json", a.json,
                "print one JSON object on stdout instead (docs/cli-json.md); the YAML is in it, "
                "and written to -o as well when given");
  cmd->callback([&options, exit_code] { *exit_code = RunCompile(options, a); });
}

}  // namespace kiln::cli
