#include "api/compile_cache.h"

#include "api/version.h"

namespace kiln::api {
namespace {

// Length-prefixed so that no field's text can imitate another field.
void Field(std::string& key, std::string_view name, std::string_view value) {
  key.append(name).append("=").append(std::to_string(value.size())).append(":").append(value).append(";");
}

}  // namespace

std::string CompileCacheKey(std::string_view model_sha256, const std::string& model_name,
                            const kiln::v1::CompileAi8xOptions& o) {
  std::string key;
  Field(key, "kiln", KilnVersion());
  Field(key, "model", model_sha256);
  // The defaults of api/compile_ai8x.cc CompileAi8x: an unset device is MAX78000, an empty arch is
  // the model name.
  Field(key, "device", o.device() == kiln::v1::MAX78002 ? "MAX78002" : "MAX78000");
  Field(key, "input_format", std::to_string(static_cast<int>(o.input_format())));
  Field(key, "fifo", o.use_fifos() ? "1" : "0");
  Field(key, "move_l0", o.move_l0() ? "1" : "0");
  Field(key, "arch", o.arch().empty() ? model_name : o.arch());
  // The name also reaches the answer through the izer command line's default checkpoint name.
  Field(key, "name", model_name);
  Field(key, "dataset", o.dataset());
  Field(key, "verbose", o.verbose() ? "1" : "0");
  for (const auto& ov : o.overrides()) {  // in order: a later override of the same key wins
    Field(key, "set.layer", ov.layer());
    Field(key, "set.key", ov.key());
    Field(key, "set.value", ov.value());
  }
  return key;
}

std::shared_ptr<const kiln::v1::CompileAi8xResponse> CompileCache::Get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->response;
}

void CompileCache::Put(const std::string& key, kiln::v1::CompileAi8xResponse response) {
  uint64_t size = response.ByteSizeLong() + key.size();
  if (size > max_bytes_) return;
  auto shared = std::make_shared<const kiln::v1::CompileAi8xResponse>(std::move(response));
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.push_front(Entry{key, std::move(shared), size});
  index_[key] = lru_.begin();
  bytes_ += size;
  while (bytes_ > max_bytes_ && !lru_.empty()) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

uint64_t CompileCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t CompileCache::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace kiln::api
