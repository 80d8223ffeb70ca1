#include "tests/models/status_table.h"

#include <gtest/gtest.h>

#include <fstream>
#include <mutex>
#include <sstream>

namespace kiln::models {
namespace {

std::vector<std::string> SplitTabs(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream is(line);
  while (std::getline(is, cell, '\t')) out.push_back(cell);
  if (!line.empty() && line.back() == '\t') out.push_back("");
  return out;
}

struct Recorded {
  std::mutex mu;
  bool on = false;
  std::map<std::string, StatusTable> tables;  // by path
};

Recorded& Rec() {
  static Recorded r;
  return r;
}

}  // namespace

std::string StatusTable::Get(const std::string& key, const std::string& column) const {
  auto row = rows.find(key);
  if (row == rows.end()) return "";
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i] == column) return i < row->second.size() ? row->second[i] : "";
  }
  return "";
}

Result<StatusTable> ReadStatusTable(const std::string& path) {
  std::ifstream f(path);
  if (!f) return NotFound("status table " + path + " not found");
  StatusTable t;
  t.path = path;
  std::string line;
  bool header = false;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      if (!header) t.comments.push_back(line);
      continue;
    }
    auto cells = SplitTabs(line);
    if (!header) {
      header = true;
      t.columns.assign(cells.begin() + 1, cells.end());
      continue;
    }
    if (cells.size() != t.columns.size() + 1) {
      return InvalidArgument(path + ": row '" + cells[0] + "' has " + std::to_string(cells.size()) +
                             " cells, the header " + std::to_string(t.columns.size() + 1));
    }
    if (t.rows.count(cells[0])) return InvalidArgument(path + ": key '" + cells[0] + "' twice");
    t.keys.push_back(cells[0]);
    t.rows[cells[0]].assign(cells.begin() + 1, cells.end());
  }
  if (!header) return InvalidArgument(path + ": no header line");
  return t;
}

bool IsExpectableStatus(const std::string& status) {
  return status == "pass" || status.rfind("not yet supported: ", 0) == 0 ||
         status.rfind("below PCC threshold: ", 0) == 0 || status.rfind("does not hold: ", 0) == 0;
}

std::string CellText(std::string text, size_t limit) {
  for (char& c : text) {
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  }
  if (text.size() > limit) text = text.substr(0, limit) + "...";
  return text;
}

std::string NotYetSupported(const std::string& stage, const Status& error) {
  std::string msg = error.message();
  msg = msg.substr(0, msg.find('\n'));
  return CellText("not yet supported: " + stage + ": " + StatusCodeName(error.code()) + ": " + msg, 240);
}

bool Regenerating() {
  std::lock_guard<std::mutex> lock(Rec().mu);
  return Rec().on;
}

void SetRegenerating(bool on) {
  std::lock_guard<std::mutex> lock(Rec().mu);
  Rec().on = on;
}

void CheckStatus(const StatusTable& table, const std::string& key, const std::string& column,
                 const std::string& status, const std::string& detail) {
  if (Regenerating()) {
    std::lock_guard<std::mutex> lock(Rec().mu);
    auto [it, added] = Rec().tables.try_emplace(table.path, table);
    StatusTable& t = it->second;
    if (!t.rows.count(key)) {
      t.keys.push_back(key);
      t.rows[key].assign(t.columns.size(), "");
    }
    for (size_t i = 0; i < t.columns.size(); ++i) {
      if (t.columns[i] == column) t.rows[key][i] = CellText(status);
    }
    return;
  }
  const std::string& observed = status;
  const std::string in_table = table.Get(key, column);
  EXPECT_TRUE(IsExpectableStatus(observed)) << key << " " << column << ": " << observed << "\n" << detail;
  EXPECT_EQ(observed, in_table) << key << " " << column << " differs from " << table.path
                                << " (regenerate it: tests/models/README.md)\n"
                                << detail;
}

Status WriteRecordedTables() {
  std::lock_guard<std::mutex> lock(Rec().mu);
  for (const auto& [path, t] : Rec().tables) {
    std::ostringstream os;
    for (const auto& c : t.comments) os << c << "\n";
    os << "model";
    for (const auto& c : t.columns) os << "\t" << c;
    os << "\n";
    for (const auto& k : t.keys) {
      os << k;
      for (const auto& cell : t.rows.at(k)) os << "\t" << cell;
      os << "\n";
    }
    std::ofstream f(path, std::ios::trunc);
    f << os.str();
    if (!f) return Internal("cannot write " + path);
    std::printf("[models] wrote %s (%zu rows)\n", path.c_str(), t.keys.size());
  }
  return Status::Ok();
}

}  // namespace kiln::models
