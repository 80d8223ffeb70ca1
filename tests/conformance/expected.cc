// expected_failures.txt: parsing, writing, and the error text helpers the table and log share.
#include <algorithm>
#include <array>
#include <cctype>
#include <set>
#include <sstream>

#include "tests/conformance/conformance.h"

namespace kiln::conformance {
namespace {

// The reasons a test may fail for good: what Kiln never represents (opset < 6: the loader's
// floor, compiler/onnx/loader.h; STRING tensors; sequence types), what cannot be compared
// (random Dropout masks; training-mode BatchNormalization's running statistics), and data bugs.
constexpr std::array<std::string_view, 5> kPermanent = {
    "opset < 6", "string tensors", "sequence types", "random Dropout masks",
    "training-mode BatchNormalization outputs"};
// Followed by a citation (onnx issue / PR or file) of the bug.
constexpr std::string_view kDataBug = "onnx-1.12 test-data bug: ";

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

}  // namespace

bool IsPermanentReason(std::string_view reason) {
  if (std::find(kPermanent.begin(), kPermanent.end(), reason) != kPermanent.end()) return true;
  return reason.rfind(kDataBug, 0) == 0 && reason.size() > kDataBug.size();
}

Result<std::vector<Expected>> ParseExpected(const std::string& text) {
  std::vector<Expected> out;
  std::set<std::pair<std::string, Mode>> seen;
  std::istringstream in(text);
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    const std::string t = Trim(line);
    if (t.empty() || t[0] == '#') continue;
    std::istringstream ls(t);
    Expected e;
    std::string mode;
    ls >> e.id >> mode;
    std::getline(ls, e.reason);
    e.reason = Trim(e.reason);
    const std::string where = "expected_failures.txt:" + std::to_string(no) + ": ";
    if (e.id.find('/') == std::string::npos) return InvalidArgument(where + "expected <suite>/<test>, got '" + e.id + "'");
    if (mode != "shipped" && mode != "params") {
      return InvalidArgument(where + "mode must be shipped or params, got '" + mode + "'");
    }
    e.mode = mode == "params" ? Mode::kParams : Mode::kShipped;
    const bool temporary = e.reason.rfind(kNotYetSupported, 0) == 0 && e.reason.size() > kNotYetSupported.size();
    if (!temporary && !IsPermanentReason(e.reason)) {
      return InvalidArgument(where + "unknown reason '" + e.reason +
                             "' (opset < 6 | string tensors | sequence types | random Dropout masks | "
                             "training-mode BatchNormalization outputs | onnx-1.12 test-data bug: <citation> | "
                             "not yet supported: <first error>)");
    }
    if (!seen.insert({e.id, e.mode}).second) return InvalidArgument(where + e.id + " " + mode + " listed twice");
    out.push_back(std::move(e));
  }
  return out;
}

std::string ExpectedHeader(const std::string& text) {
  std::istringstream in(text);
  std::string line, header;
  while (std::getline(in, line) && (line.empty() || line[0] == '#')) header += line + "\n";
  return header;
}

std::string FormatExpected(const std::string& header, std::vector<Expected> entries) {
  std::sort(entries.begin(), entries.end(), [](const Expected& a, const Expected& b) {
    return a.id != b.id ? a.id < b.id : a.mode < b.mode;
  });
  std::string out = header;
  for (const Expected& e : entries) out += e.id + " " + ModeName(e.mode) + " " + e.reason + "\n";
  return out;
}

std::string OneLine(std::string_view message) {
  std::string s;
  for (char c : message) {
    const bool space = std::isspace(static_cast<unsigned char>(c));
    if (space && (s.empty() || s.back() == ' ')) continue;
    s += space ? ' ' : c;
  }
  // convplan::CheckSupported appends every op the host supports; the table needs only the nodes.
  if (size_t at = s.find(" (device ops:"); at != std::string::npos) s.erase(at);
  constexpr size_t kMax = 200;
  if (s.size() > kMax) s = s.substr(0, kMax - 3) + "...";
  return Trim(s);
}

std::string ErrorCategory(std::string_view error) {
  std::string e(error);
  // Data-set prefix.
  if (e.rfind("test_data_set_", 0) == 0) e.erase(0, e.find(": ") + 2);
  // "N unsupported node(s): Op 'a', Op 'b', Other 'c'" → "unsupported node(s): Op, Other".
  if (size_t at = e.find("unsupported node(s): "); at != std::string::npos) {
    std::string list = e.substr(at + 21);
    if (size_t p = list.find(" (device ops:"); p != std::string::npos) list.erase(p);
    std::vector<std::string> ops;
    std::istringstream ls(list);
    std::string item;
    while (std::getline(ls, item, ',')) {
      std::string op = Trim(item);
      op = op.substr(0, op.find(' '));
      if (!op.empty() && std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
    }
    std::sort(ops.begin(), ops.end());
    std::string out = e.substr(0, e.find(':')) + ": unsupported op(s):";
    for (const auto& op : ops) out += " " + op;
    return out;
  }
  // Elide quoted names, bracketed shapes and numbers.
  std::string out;
  for (size_t i = 0; i < e.size(); ++i) {
    const char c = e[i];
    if (c == '\'') {
      const size_t close = e.find('\'', i + 1);
      if (close == std::string::npos) break;
      out += "'*'";
      i = close;
    } else if (c == '[') {
      const size_t close = e.find(']', i + 1);
      if (close == std::string::npos) break;
      out += "[*]";
      i = close;
    } else if ((i == 0 || !(std::isalnum(static_cast<unsigned char>(e[i - 1])) || e[i - 1] == '_')) &&
               (std::isdigit(static_cast<unsigned char>(c)) ||
                ((c == '-' || c == '.') && i + 1 < e.size() && std::isdigit(static_cast<unsigned char>(e[i + 1]))))) {
      // A number (not digits inside a word such as "float32").
      while (i + 1 < e.size() && (std::isalnum(static_cast<unsigned char>(e[i + 1])) || e[i + 1] == '.' ||
                                  e[i + 1] == '-' || e[i + 1] == '+')) {
        ++i;
      }
      out += "N";
    } else {
      out += c;
    }
  }
  return OneLine(out).substr(0, 120);
}

}  // namespace kiln::conformance
