// Incremental SHA-256 (OpenSSL EVP), hex-encoded digests. Used for content-addressed model ids.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace kiln {

/// Streaming SHA-256. Update() any number of times, then HexDigest() once (64 lowercase hex chars).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(const void* data, size_t size);
  void Update(std::string_view s) { Update(s.data(), s.size()); }
  std::string HexDigest();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// SHA-256 of `data` as 64 lowercase hex characters.
std::string Sha256Hex(std::string_view data);

}  // namespace kiln
