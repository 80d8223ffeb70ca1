// onnx_conformance: runs libonnx-testdata suites (tests/conformance/conformance.h) and checks the
// outcomes against expected_failures.txt. Usage (README.md here):
//   onnx_conformance --data DIR --expected FILE [--write-expected] [--filter SUBSTR] [--verbose] SUITE...
// Exit status 0 when every failure is in the table and every table entry of the suites run still
// fails; 1 otherwise (unexpected failures, unexpected passes, stale entries); 2 on usage errors.
// --write-expected rewrites FILE: permanent-reason lines are kept as they are, the
// "not yet supported: <first error>" lines of the suites run are replaced by the current failures.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "device/backends/builtin.h"
#include "tests/conformance/conformance.h"

namespace kiln::conformance {
namespace {

// The test being run, for the crash / timeout message (a kernel being rewritten may crash the
// process; ctest's TIMEOUT sends SIGTERM): written before each run, read by the signal handler.
char g_current[512] = "";

extern "C" void OnFatalSignal(int sig) {
  const char* what = sig == SIGTERM ? "\nonnx_conformance: terminated while running " : "\nonnx_conformance: crashed in ";
  ssize_t ignored = write(STDERR_FILENO, what, std::strlen(what));
  ignored = write(STDERR_FILENO, g_current, std::strlen(g_current));
  ignored = write(STDERR_FILENO, "\n", 1);
  (void)ignored;
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void SetCurrent(const std::string& id, Mode mode) {
  std::snprintf(g_current, sizeof(g_current), "%s %s", id.c_str(), ModeName(mode));
}

struct Args {
  std::string data = "/usr/share/libonnx-testdata/data";
  std::string expected;
  bool write_expected = false;
  bool verbose = false;  // also print the passes
  std::string filter;
  std::vector<std::string> suites;
};

struct Run {
  std::string id;
  Mode mode;
  Outcome outcome;
};

struct SuiteResult {
  std::string suite;
  size_t tests = 0, selected = 0, selected_expanded = 0;
  size_t params_tests = 0;
  std::map<Mode, size_t> passed;
  std::vector<Run> runs;
  double seconds = 0;
};

int Usage() {
  std::cerr << "usage: onnx_conformance [--data DIR] [--expected FILE [--write-expected]] [--filter SUBSTR] [--verbose] SUITE...\n"
               "  SUITE: a folder of DIR (node, pytorch-converted, pytorch-operator)\n";
  return 2;
}

Result<SuiteResult> RunSuite(const Args& args, const std::string& suite, device::Backend& backend) {
  const auto t0 = std::chrono::steady_clock::now();
  SuiteResult r;
  r.suite = suite;
  const std::string dir = args.data + "/" + suite;
  auto names = ListTests(dir);
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    if (!args.filter.empty() && name.find(args.filter) == std::string::npos) continue;
    ++r.tests;
    const std::string path = dir + "/" + name;
    auto model = ReadModel(path);
    if (!model.ok()) return model.status();
    if (!FirstNodeOutsideOpSet(model->graph()).empty()) continue;
    ++r.selected;
    if (name.find("_expanded") != std::string::npos) ++r.selected_expanded;
    const std::string id = suite + "/" + name;
    auto tc = ReadTestCase(suite, path);
    if (!tc.ok()) {
      r.runs.push_back({id, Mode::kShipped, {false, tc.status().ToString()}});
      continue;
    }
    SetCurrent(id, Mode::kShipped);
    r.runs.push_back({id, Mode::kShipped, RunTestCase(*tc, Mode::kShipped, backend)});
    if (!ParameterInputs(tc->model.graph()).empty()) {
      ++r.params_tests;
      SetCurrent(id, Mode::kParams);
      r.runs.push_back({id, Mode::kParams, RunTestCase(*tc, Mode::kParams, backend)});
    }
  }
  for (const Run& run : r.runs) r.passed[run.mode] += run.outcome.pass ? 1 : 0;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

void PrintHistogram(const std::string& title, const std::map<std::string, int>& counts, size_t top) {
  std::vector<std::pair<int, std::string>> sorted;
  for (const auto& [c, n] : counts) sorted.push_back({-n, c});
  std::sort(sorted.begin(), sorted.end());
  std::cout << "  " << title << " (" << sorted.size() << ", top " << std::min(top, sorted.size()) << "):\n";
  for (size_t i = 0; i < sorted.size() && i < top; ++i) {
    std::printf("    %4d  %s\n", -sorted[i].first, sorted[i].second.c_str());
  }
}

// The failures' first-error categories, and how many failing runs each unsupported op type blocks
// (a run whose plan lacks several ops counts for each).
void PrintCategories(const std::vector<const Run*>& failures, size_t top) {
  std::map<std::string, int> categories, ops;
  const std::string prefix = "unsupported op(s):";
  for (const Run* f : failures) {
    const std::string c = ErrorCategory(f->outcome.error);
    ++categories[c];
    if (size_t at = c.find(prefix); at != std::string::npos) {
      std::istringstream list(c.substr(at + prefix.size()));
      for (std::string op; list >> op;) ++ops[op];
    }
  }
  PrintHistogram("first-error categories of the failures without a permanent reason", categories, top);
  if (!ops.empty()) PrintHistogram("unsupported op types, by failing runs that need them", ops, top);
}

int Main(int argc, char** argv) {
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM}) std::signal(sig, OnFatalSignal);
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--data" || a == "--expected" || a == "--filter") {
      const char* v = value();
      if (v == nullptr) return Usage();
      (a == "--data" ? args.data : a == "--expected" ? args.expected : args.filter) = v;
    } else if (a == "--write-expected") {
      args.write_expected = true;
    } else if (a == "--verbose") {
      args.verbose = true;
    } else if (!a.empty() && a[0] == '-') {
      return Usage();
    } else {
      args.suites.push_back(a);
    }
  }
  if (args.suites.empty() || (args.write_expected && args.expected.empty())) return Usage();
  if (args.write_expected && !args.filter.empty()) {
    std::cerr << "--write-expected with --filter would drop the lines of the tests filtered out\n";
    return 2;
  }

  std::string table_text;
  std::vector<Expected> table;
  if (!args.expected.empty()) {
    std::ifstream f(args.expected);
    if (!f && !args.write_expected) {
      std::cerr << "cannot read " << args.expected << "\n";
      return 2;
    }
    std::ostringstream ss;
    ss << f.rdbuf();
    table_text = ss.str();
    auto parsed = ParseExpected(table_text);
    if (!parsed.ok()) {
      std::cerr << parsed.status().message() << "\n";
      return 2;
    }
    table = std::move(*parsed);
  }
  std::map<std::pair<std::string, Mode>, const Expected*> listed;
  for (const Expected& e : table) listed[{e.id, e.mode}] = &e;

  device::BackendOptions bo;
  bo.settings[device::kReferenceThreadsSetting] = "1";  // the suites' tensors are tiny
  auto backend = device::DefaultBackendRegistry().Create(device::kReferenceBackend, bo);
  if (!backend.ok()) {
    std::cerr << backend.status().ToString() << "\n";
    return 1;
  }

  int unexpected = 0;
  std::set<std::string> suites_run;
  std::set<std::pair<std::string, Mode>> ran;
  std::vector<Run> all_runs;
  for (const std::string& suite : args.suites) {
    auto r = RunSuite(args, suite, **backend);
    if (!r.ok()) {
      std::cerr << suite << ": " << r.status().ToString() << "\n";
      return 1;
    }
    suites_run.insert(suite);
    std::vector<const Run*> failures;
    int unexpected_fail = 0, unexpected_pass = 0, expected_fail = 0;
    for (const Run& run : r->runs) {
      ran.insert({run.id, run.mode});
      const bool in_table = listed.count({run.id, run.mode}) > 0;
      if (!run.outcome.pass) {
        if (!in_table || !IsPermanentReason(listed[{run.id, run.mode}]->reason)) failures.push_back(&run);
        std::cout << (in_table ? "FAIL " : "UNEXPECTED FAIL ") << run.id << " " << ModeName(run.mode) << ": "
                  << OneLine(run.outcome.error) << "\n";
        (in_table ? expected_fail : unexpected_fail)++;
      } else if (!in_table) {
        if (args.verbose) std::cout << "PASS " << run.id << " " << ModeName(run.mode) << "\n";
      } else {
        std::cout << "UNEXPECTED PASS " << run.id << " " << ModeName(run.mode) << " (listed: "
                  << listed[{run.id, run.mode}]->reason << ")\n";
        ++unexpected_pass;
      }
    }
    int stale = 0;
    for (const Expected& e : table) {
      if (e.id.rfind(suite + "/", 0) != 0 || ran.count({e.id, e.mode})) continue;
      if (!args.filter.empty() && e.id.find(args.filter) == std::string::npos) continue;
      std::cout << "STALE " << e.id << " " << ModeName(e.mode) << ": listed but not run (not selected, or no "
                << "parameter inputs)\n";
      ++stale;
    }
    std::printf("== %s: %zu tests, %zu selected (%zu of them _expanded), %.1f s\n", suite.c_str(), r->tests,
                r->selected, r->selected_expanded, r->seconds);
    std::printf("  shipped: %zu of %zu pass; params: %zu of %zu pass (tests with parameter inputs)\n",
                r->passed[Mode::kShipped], r->selected, r->passed[Mode::kParams], r->params_tests);
    std::printf("  failures: %d listed in the table, %d unexpected; unexpected passes: %d; stale entries: %d\n",
                expected_fail, unexpected_fail, unexpected_pass, stale);
    PrintCategories(failures, 15);
    unexpected += unexpected_fail + unexpected_pass + stale;
    all_runs.insert(all_runs.end(), r->runs.begin(), r->runs.end());
  }

  if (suites_run.size() > 1) {
    std::vector<const Run*> failures;
    for (const Run& run : all_runs) {
      const auto it = listed.find({run.id, run.mode});
      const bool permanent = it != listed.end() && IsPermanentReason(it->second->reason);
      if (!run.outcome.pass && !permanent) failures.push_back(&run);
    }
    std::cout << "== all suites: " << failures.size() << " failures without a permanent reason\n";
    PrintCategories(failures, 15);
  }

  if (args.write_expected) {
    std::vector<Expected> out;
    for (const Expected& e : table) {
      const std::string suite = e.id.substr(0, e.id.find('/'));
      if (IsPermanentReason(e.reason) || !suites_run.count(suite)) out.push_back(e);
    }
    for (const Run& run : all_runs) {
      if (run.outcome.pass) continue;
      const auto it = listed.find({run.id, run.mode});
      if (it != listed.end() && IsPermanentReason(it->second->reason)) continue;
      out.push_back({run.id, run.mode, std::string(kNotYetSupported) + OneLine(run.outcome.error)});
    }
    std::ofstream f(args.expected);
    f << FormatExpected(ExpectedHeader(table_text), out);
    if (!f) {
      std::cerr << "cannot write " << args.expected << "\n";
      return 1;
    }
    std::cout << "wrote " << args.expected << " (" << out.size() << " entries); the permanent-reason lines "
              << "that passed or went stale above need a person's decision\n";
    return 0;
  }
  return unexpected == 0 ? 0 : 1;
}

}  // namespace
}  // namespace kiln::conformance

int main(int argc, char** argv) { return kiln::conformance::Main(argc, argv); }
