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

#include "cli/model_commands.h"
#include "kiln/v1/compile.grpc.pb.h"
#include "api/compile_ai8x.h"

namespace kiln::cli {
namespace {

struct CompileArgs {
  std::string model;  // FILE or stored id/name
  api::CompileFlags flags;
  std::string output;
  std::string name;  // upload name for a FILE (default: the file stem)
  bool local = false;
  bool table = false;
};

const char* SeverityWord(kiln::v1::Severity s) {
  switch (s) {
    case kiln::v1::ERROR: return "error";
    case kiln::v1::WARNING: return "warning";
    default: return "info";
  }
}

// The per-layer plan table; columns widen to the longest layer name and op.
void PrintTable(const kiln::v1::CompileAi8xResponse& r, std::FILE* to) {
  int name_w = 16, op_w = 14;
  for (const auto& l : r.layers()) {
    name_w = std::max(name_w, static_cast<int>(l.name().size()));
    op_w = std::max(op_w, static_cast<int>(l.op().size()));
  }
  std::fprintf(to, "%-3s %-*s %-*s %18s %18s %7s %7s %8s %6s\n", "#", name_w, "LAYER", op_w, "OP", "PROCESSORS",
               "OUTPUT_PROCESSORS", "IN_OFF", "OUT_OFF", "KWORDS", "BIAS");
  for (const auto& l : r.layers()) {
    std::fprintf(to, "%-3d %-*s %-*s 0x%016llx 0x%016llx 0x%04x  0x%04x %8lld %6lld%s\n", l.index(), name_w,
                 l.name().c_str(), op_w, l.op().c_str(), static_cast<unsigned long long>(l.processors()),
                 static_cast<unsigned long long>(l.output_processors()), l.in_offset(), l.out_offset(),
                 static_cast<long long>(l.kernel_words()), static_cast<long long>(l.bias_bytes()),
                 l.streaming() ? " streaming" : "");
  }
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

// The next step: the ai8xize.py command line (api IzerCommand) with this invocation's files, and
// one line per flag saying why it is there. On stderr, so that stdout stays the YAML.
void PrintIzerCommand(const kiln::v1::CompileAi8xResponse& r, const CompileArgs& a) {
  api::IzerPaths paths;
  paths.config_file = a.output;  // empty: <arch>.yaml
  // The FILE is the checkpoint unless its weights sit behind QAT chains the izer does not read.
  if (std::filesystem::is_regular_file(a.model) && !r.needs_quantized_checkpoint()) paths.checkpoint_file = a.model;
  std::string name = std::filesystem::is_regular_file(a.model) ? StoredName(a.model, a.name) : a.model;
  api::IzerCommandLine cmd = api::IzerCommand(r, name, paths);
  std::string line;
  for (const auto& w : cmd.argv) line += (line.empty() ? "" : " ") + ShellWord(w);
  std::cerr << "next: turn the YAML into C code with ai8x-synthesis (from its checkout):\n  " << line << "\n";
  for (const auto& f : cmd.why) std::cerr << "    " << f.flag() << ": " << f.reason() << "\n";
}

int Report(const kiln::v1::CompileAi8xResponse& r, const CompileArgs& a) {
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
    if (!d.layer_name().empty()) std::cerr << " layer " << d.layer() << " '" << d.layer_name() << "'";
    if (!d.onnx_node().empty()) std::cerr << " (ONNX node '" << d.onnx_node() << "')";
    std::cerr << ": " << d.message() << "\n";
  }
  // A failed compile's YAML is for inspection only (the izer must not get it): it never
  // replaces a file; on stdout it is marked as failed.
  bool wrote = false;
  if (!a.output.empty() && r.ok()) {
    std::ofstream out(a.output, std::ios::binary);
    if (!out || !(out << r.yaml()) || !out.flush()) {
      std::cerr << "kiln: compile: cannot write '" << a.output << "': " << std::strerror(errno) << "\n";
      return 1;
    }
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
  if (r.ok()) PrintIzerCommand(r, a);
  if (a.flags.arch.empty() || a.flags.dataset.empty()) {
    const auto& ro = r.resolved_options();
    std::cerr << "note: no --arch/--dataset given: the YAML says arch: " << ro.arch() << ", dataset: "
              << (ro.dataset().empty() ? "(default)" : ro.dataset())
              << "; ai8xize.py requires arch to be the checkpoint's model factory name (e.g. ai85net5)\n";
  }
  return r.ok() ? 0 : 1;
}

int RunCompile(const ClientOptions& options, const CompileArgs& a) {
  auto opts = api::ParseCompileFlags(a.flags);
  if (!opts.ok()) {
    std::cerr << "kiln: compile: " << opts.status().message() << "\n";
    return 2;
  }
  bool is_file = std::filesystem::is_regular_file(a.model);
  if (a.local) {
    if (!is_file) {
      std::cerr << "kiln: compile --local: '" << a.model << "' is not a file\n";
      return 2;
    }
    std::ifstream in(a.model, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    // The name `kiln upload` would store the file under, so that the default arch and the
    // messages are the same with and without a server.
    auto r = api::CompileAi8x(ss.str(), StoredName(a.model, a.name), *opts);
    if (!r.ok()) {
      std::cerr << "kiln: compile " << a.model << ": " << r.status().ToString() << "\n";
      return 1;
    }
    return Report(*r, a);
  }
  std::string id = a.model;
  if (is_file) {
    auto up = UploadFile(options, a.model, a.name);
    if (!up.ok()) {
      std::cerr << "kiln: compile: upload " << a.model << ": " << up.status().message() << "\n";
      return 1;
    }
    // By id: the name could be moved to other bytes by another client meanwhile. The arch default
    // is the name this file was stored under (as with --local), not one the same bytes had before.
    id = *up;
    if (a.flags.arch.empty()) opts->set_arch(StoredName(a.model, a.name));
  }
  kiln::v1::CompileAi8xRequest req;
  req.set_model_id(id);
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
  cmd->add_option("MODEL", a.model, "ONNX file (uploaded first) or a stored model id/name")->required();
  cmd->add_option("--device", a.flags.device, "MAX78000 or MAX78002")->capture_default_str();
  cmd->add_option("--arch", a.flags.arch, "YAML arch: the checkpoint's model factory name (e.g. ai85net5)");
  cmd->add_option("--dataset", a.flags.dataset, "YAML dataset: name");
  cmd->add_option("--input-format", a.flags.input_format, "auto, HWC or CHW")->capture_default_str();
  cmd->add_option("--set", a.flags.sets, "per-layer override LAYER.KEY=VALUE (repeatable)");
  cmd->add_option("-o,--output", a.output,
                  "write the YAML here, only when the compile succeeds (default: stdout)");
  cmd->add_option("--name", a.name, "name to store a FILE under (default: the file stem)");
  cmd->add_flag("--local", a.local, "compile in process, no server");
  cmd->add_flag("--fifo", a.flags.use_fifos, "the izer will run with --fifo");
  cmd->add_flag("--move-l0", a.flags.move_l0, "allow moving layer 0's processors");
  cmd->add_flag("--verbose", a.flags.verbose, "shapes of every layer as YAML comments");
  cmd->add_flag("--table", a.table, "print the per-layer plan table (to stderr when the YAML goes to stdout)");
  cmd->callback([&options, exit_code] { *exit_code = RunCompile(options, a); });
}

}  // namespace kiln::cli
