// Expected-status tables of the model tests (tests/models/*.tsv, format in tests/models/README.md).
//
// A row is a model key followed by one status per column; a status is "pass", "not yet supported:
// <first error>" (what the host-kernel work still has to cover) or, for tt-emu runs only, "below
// PCC threshold: <layers>" (a run that completes with device layers under tt-metal's threshold;
// tests/models/README.md says when that is bf16 numerics rather than a bug) or "does not hold:
// ..." (a relation between two exports that their own graphs break, shown without Kiln's folding
// by tests/models/ai8x_test.cc). The tests
// compare the status they observe with the row, so a model that starts to pass and a model that
// stops passing both fail until the table is regenerated (`models_test --regenerate`, see
// tests/models/README.md). A run that completes with wrong numbers is "wrong: ..." and can never
// be expected.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace kiln::models {

struct StatusTable {
  std::string path;
  std::vector<std::string> comments;  ///< leading "# " lines, kept when the table is rewritten
  std::vector<std::string> columns;   ///< header without the key column
  std::vector<std::string> keys;      ///< rows in file order
  std::map<std::string, std::vector<std::string>> rows;

  /// The cell (key, column), or "" when absent.
  std::string Get(const std::string& key, const std::string& column) const;
};

/// Reads a table (tab-separated; the first non-comment line is the header). Errors:
/// NOT_FOUND (no file), INVALID_ARGUMENT (ragged rows, duplicate keys).
Result<StatusTable> ReadStatusTable(const std::string& path);

/// "pass" / "not yet supported: ..." / "below PCC threshold: ..." / "does not hold: ..." — the only
/// statuses a table may hold.
bool IsExpectableStatus(const std::string& status);

/// "not yet supported: <stage>: <CODE>: <first line of the message, at most 200 chars>" — tabs and
/// newlines removed so the status fits a table cell.
std::string NotYetSupported(const std::string& stage, const Status& error);
/// Cell text: no tabs or newlines, at most `limit` characters.
std::string CellText(std::string text, size_t limit = 240);

/// Regeneration (`--regenerate`, parsed by tests/models/main.cc): tests record what they observe
/// instead of comparing, and main rewrites every table touched when all tests ran.
bool Regenerating();
void SetRegenerating(bool on);
/// In regenerate mode: records (table, key, column) = status. Otherwise: gtest-expects that the
/// status equals the table's cell and is expectable, with `detail` in the failure message.
void CheckStatus(const StatusTable& table, const std::string& key, const std::string& column,
                 const std::string& status, const std::string& detail = "");
/// Rewrites every table with recorded statuses (rows/cells not recorded keep their old value).
Status WriteRecordedTables();

}  // namespace kiln::models
