// common/memory.h: cgroup limit parsing, the budget counter, byte formatting, and that a failed
// operator new throws std::bad_alloc (common/operator_new.cc in the mimalloc programs; the
// standard library's here).
#include "common/memory.h"

#include <gtest/gtest.h>

#include <new>
#include <thread>
#include <vector>

namespace kiln {
namespace {

TEST(MemoryTest, ParsesCgroupLimits) {
  EXPECT_EQ(ParseCgroupMemoryLimit("8589934592\n"), 8589934592u);
  EXPECT_EQ(ParseCgroupMemoryLimit("max\n"), std::nullopt);
  EXPECT_EQ(ParseCgroupMemoryLimit(""), std::nullopt);
  EXPECT_EQ(ParseCgroupMemoryLimit("12x"), std::nullopt);
  EXPECT_EQ(ParseCgroupMemoryLimit("9223372036854771712"), std::nullopt);  // v1 "unlimited"
}

TEST(MemoryTest, DefaultBudgetIsThreeQuartersOfAvailable) {
  const uint64_t avail = AvailableMemoryBytes();
  EXPECT_GT(avail, 0u);
  EXPECT_EQ(DefaultMemoryBudgetBytes(), avail / 4 * 3);
}

TEST(MemoryTest, BudgetReservesOnlyWhatFits) {
  MemoryBudget b(100);
  EXPECT_TRUE(b.TryReserve(60));
  EXPECT_FALSE(b.TryReserve(41));
  EXPECT_TRUE(b.TryReserve(40));
  EXPECT_EQ(b.reserved(), 100u);
  EXPECT_FALSE(b.TryReserve(UINT64_MAX));
  b.Release(60);
  EXPECT_EQ(b.reserved(), 40u);
  // Concurrent reservations never pass the total.
  MemoryBudget c(1000);
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    ts.emplace_back([&] {
      for (int k = 0; k < 1000; ++k) ok += c.TryReserve(7) ? 1 : 0;
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), 1000 / 7);
  EXPECT_EQ(c.reserved(), uint64_t{1000 / 7 * 7});
}

TEST(MemoryTest, FormatsBytes) {
  EXPECT_EQ(FormatBytes(12), "12 B");
  EXPECT_EQ(FormatBytes(2147483648u), "2.0 GiB");
  EXPECT_EQ(FormatBytes(1536u << 20), "1.5 GiB");
}

TEST(MemoryTest, FailedNewThrowsBadAlloc) {
  EXPECT_THROW((void)::operator new(std::size_t{1} << 62), std::bad_alloc);
  EXPECT_EQ(::operator new(std::size_t{1} << 62, std::nothrow), nullptr);
}

}  // namespace
}  // namespace kiln
