// The compile cache of kilnd's CompileService: CompileAi8x answers kept by what decides them, so a
// repeated compile of a stored model answers without reading, hashing, loading or compiling it.
//
// Key (CompileCacheKey): the model's SHA-256 (the store's model id), the options normalized (the
// defaults a compile resolves made explicit: device, input format, flags, arch — empty means the
// model name, so the name is part of the key then —, dataset, overrides in order, verbose) and the
// Kiln version (api/version.h): a different binary may compile differently. A compile is a pure
// function of these (compiler/ai8x/compile.h: no shared state), so an entry never goes stale;
// entries leave only by least-recent use when the cache exceeds its byte budget.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "kiln/v1/compile.pb.h"

namespace kiln::api {

/// The cache key of compiling the model with SHA-256 `model_sha256` (lowercase hex), stored under
/// `model_name` (the default arch, api/compile_ai8x.h CompileModelName), with `options`.
std::string CompileCacheKey(std::string_view model_sha256, const std::string& model_name,
                            const kiln::v1::CompileAi8xOptions& options);

/// Least-recently-used map key -> response, bounded by the bytes of the entries (serialized
/// response size + key). Thread-safe.
class CompileCache {
 public:
  /// `max_bytes` 0 disables the cache (Get always misses, Put keeps nothing).
  explicit CompileCache(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  /// The kept response, or null (a miss).
  std::shared_ptr<const kiln::v1::CompileAi8xResponse> Get(const std::string& key);
  /// Keeps `response` under `key` (replacing an entry), then drops least-recently-used entries
  /// until the total fits max_bytes. A response larger than max_bytes is not kept.
  void Put(const std::string& key, kiln::v1::CompileAi8xResponse response);

  uint64_t bytes() const;
  size_t entries() const;
  uint64_t max_bytes() const { return max_bytes_; }

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const kiln::v1::CompileAi8xResponse> response;
    uint64_t bytes = 0;
  };
  const uint64_t max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // front = most recently used
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  uint64_t bytes_ = 0;
};

}  // namespace kiln::api
