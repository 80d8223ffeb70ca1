// index.yaml of the model store (store/model_store.h): its text form and the checks that decide
// whether it can be trusted. Internal to kiln_store.
//
// Format 2 (written by this version):
//   format_version: 2
//   model_count: <n>
//   models: [ {id, names, size_bytes, opset, inputs, outputs, node_count, producer_name,
//              created_unix_seconds}, ... ]   (sorted by id)
//   # kiln-index-sha256: <lowercase hex SHA-256 of every byte before this line>
// Format 1 (older kilnd) has no model_count and no checksum line; it is read (with the same
// entry checks) and rewritten as format 2 on the next write.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "store/model_store.h"

namespace kiln::store::internal {

inline constexpr int kIndexFormatVersion = ModelStore::kIndexFormatVersion;
inline constexpr char kChecksumPrefix[] = "# kiln-index-sha256: ";

/// The text of index.yaml for `models` (sorted by id), checksum line included.
std::string SerializeIndex(const std::vector<ModelInfo>& models);

/// Parses and checks index text. FAILED_PRECONDITION naming the first problem: unknown
/// format_version; YAML that does not parse; a missing or wrong checksum (format 2), which is how
/// truncation and edits show; model_count that differs from the entries; an entry without a
/// valid id, size_bytes of 0 or over kMaxModelBytes, or an invalid name; an id or a name that
/// appears twice. Returns the models sorted by id.
Result<std::vector<ModelInfo>> ParseIndex(const std::string& text);

/// Best-effort read of a damaged index for ModelStore::Repair: every entry whose id and names
/// parse, checksum and counts ignored. Never fails (an unreadable text gives nothing).
std::vector<ModelInfo> SalvageIndex(const std::string& text);

}  // namespace kiln::store::internal
