// File helpers of the model store (store/model_store.h): errno to Status, atomic writes, the
// LOCK, verified objects. Internal to kiln_store.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/model_store.h"

namespace kiln::store::internal {

/// INTERNAL with `what`, the path and strerror(errno); RESOURCE_EXHAUSTED when errno is ENOSPC
/// or EDQUOT (a full file system: the client can free space and retry).
Status ErrnoStatus(const std::string& what, const std::filesystem::path& path);
Status FsyncDir(const std::filesystem::path& dir);
Status WriteAll(int fd, const void* data, size_t size, const std::filesystem::path& path);
/// Writes `content` to `target` atomically: a temp file in `tmp_dir` (same file system), fsync,
/// rename, fsync of the target's directory.
Status AtomicWriteFile(const std::filesystem::path& target, const std::filesystem::path& tmp_dir,
                       const std::string& content);
bool IsHexSha256(const std::string& s);
std::filesystem::path ObjectPathIn(const std::filesystem::path& dir, const std::string& id);
int64_t NowUnixSeconds();
/// Takes the store's LOCK (flock); FAILED_PRECONDITION while another process holds it.
Result<int> TakeLock(const std::filesystem::path& dir);
/// Creates objects/, tmp/ and orphans/.
Status MakeDirs(const std::filesystem::path& dir);
/// Whole file ("" when unreadable).
std::string ReadFile(const std::filesystem::path& path);
/// The model in `path` if its bytes hash to `id` and parse as ONNX (created = the file's mtime).
std::optional<ModelInfo> VerifiedObject(const std::filesystem::path& path, const std::string& id);
void SortById(std::vector<ModelInfo>& models);
/// The ModelInfo of the `size` uploaded bytes in the file `fd` (`path` for messages), for an
/// upload under `name`: summarized (compiler/onnx/summary.h; INVALID_ARGUMENT when they do not
/// parse), metadata within `max_metadata_bytes` (INVALID_ARGUMENT, *metadata_too_large set);
/// model_id left empty. One rule for the embedded and the shared store (model_store.cc).
Result<ModelInfo> DescribeUpload(int fd, const std::filesystem::path& path, uint64_t size, const std::string& name,
                                 uint64_t max_metadata_bytes, bool* metadata_too_large);

}  // namespace kiln::store::internal
