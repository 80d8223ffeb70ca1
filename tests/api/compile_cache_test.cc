// api/compile_cache.h: what the key tells apart, the byte bound, least-recent eviction.
#include "api/compile_cache.h"

#include <gtest/gtest.h>

#include "api/version.h"

namespace kiln::api {
namespace {

const std::string kSha(64, 'a');

kiln::v1::CompileAi8xResponse Response(size_t yaml_bytes) {
  kiln::v1::CompileAi8xResponse r;
  r.set_ok(true);
  r.set_yaml(std::string(yaml_bytes, 'y'));
  return r;
}

TEST(CompileCacheKey, DefaultsAreNormalizedAndEveryOptionCounts) {
  kiln::v1::CompileAi8xOptions o;
  std::string base = CompileCacheKey(kSha, "m", o);
  // An unset device is MAX78000, an empty arch is the model name.
  kiln::v1::CompileAi8xOptions same = o;
  same.set_device(kiln::v1::MAX78000);
  EXPECT_EQ(CompileCacheKey(kSha, "m", same), base);
  same.set_arch("m");
  EXPECT_EQ(CompileCacheKey(kSha, "m", same), base);
  EXPECT_NE(base.find(KilnVersion()), std::string::npos);

  std::vector<kiln::v1::CompileAi8xOptions> differ(8, o);
  differ[0].set_device(kiln::v1::MAX78002);
  differ[1].set_input_format(kiln::v1::INPUT_FORMAT_CHW);
  differ[2].set_use_fifos(true);
  differ[3].set_move_l0(true);
  differ[4].set_arch("other");
  differ[5].set_dataset("MNIST");
  differ[6].set_verbose(true);
  auto* ov = differ[7].add_overrides();
  ov->set_layer("conv1");
  ov->set_key("quantization");
  ov->set_value("4");
  for (const auto& d : differ) EXPECT_NE(CompileCacheKey(kSha, "m", d), base) << d.ShortDebugString();
  EXPECT_NE(CompileCacheKey(std::string(64, 'b'), "m", o), base);
  EXPECT_NE(CompileCacheKey(kSha, "other-name", o), base);
  // Field boundaries cannot be imitated by a value.
  kiln::v1::CompileAi8xOptions a = o, b = o;
  a.set_arch("x;dataset=1:y");
  b.set_arch("x");
  b.set_dataset("y");
  EXPECT_NE(CompileCacheKey(kSha, "m", a), CompileCacheKey(kSha, "m", b));
}

TEST(CompileCache, HitReturnsTheKeptAnswer) {
  CompileCache cache(1 << 20);
  EXPECT_EQ(cache.Get("k"), nullptr);
  cache.Put("k", Response(100));
  auto hit = cache.Get("k");
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->yaml(), std::string(100, 'y'));
  EXPECT_EQ(cache.entries(), 1u);
  EXPECT_EQ(cache.bytes(), Response(100).ByteSizeLong() + 1);
}

TEST(CompileCache, BoundedInBytesLeastRecentlyUsedLeavesFirst) {
  const uint64_t entry = Response(1000).ByteSizeLong() + 1;
  CompileCache cache(3 * entry);
  cache.Put("a", Response(1000));
  cache.Put("b", Response(1000));
  cache.Put("c", Response(1000));
  ASSERT_NE(cache.Get("a"), nullptr);  // a is now the most recent; b the least
  cache.Put("d", Response(1000));
  EXPECT_EQ(cache.Get("b"), nullptr);
  EXPECT_NE(cache.Get("a"), nullptr);
  EXPECT_NE(cache.Get("c"), nullptr);
  EXPECT_NE(cache.Get("d"), nullptr);
  EXPECT_LE(cache.bytes(), 3 * entry);
  // Replacing an entry does not count it twice.
  cache.Put("d", Response(1000));
  EXPECT_EQ(cache.entries(), 3u);
  EXPECT_EQ(cache.bytes(), 3 * entry);
  // An answer larger than the whole budget is not kept, and evicts nothing.
  cache.Put("huge", Response(10 * 1000));
  EXPECT_EQ(cache.Get("huge"), nullptr);
  EXPECT_EQ(cache.entries(), 3u);
}

TEST(CompileCache, ZeroBytesKeepsNothing) {
  CompileCache cache(0);
  cache.Put("k", Response(1));
  EXPECT_EQ(cache.Get("k"), nullptr);
  EXPECT_EQ(cache.bytes(), 0u);
}

}  // namespace
}  // namespace kiln::api
