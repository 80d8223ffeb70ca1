#include "server/bounded_executor.h"

#include <gtest/gtest.h>

#include <future>

namespace kiln::server {
namespace {

TEST(BoundedExecutor, RefusesBeyondThreadsPlusQueueAndRecovers) {
  BoundedExecutor ex(/*threads=*/1, /*queue=*/1);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<int> ran{0};
  auto blocking = [&]() -> std::function<void()> {
    gate.wait();
    ran++;
    return nullptr;
  };
  EXPECT_TRUE(ex.Submit(blocking));   // running
  EXPECT_TRUE(ex.Submit(blocking));   // queued
  EXPECT_FALSE(ex.Submit(blocking));  // full
  EXPECT_EQ(ex.admitted(), 2u);
  release.set_value();
  for (int i = 0; i < 1000 && ex.admitted() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(ran.load(), 2);
  EXPECT_EQ(ex.admitted(), 0u);
  // The continuation runs after the slot is free: a new job is admitted from inside it.
  std::promise<bool> admitted_from_continuation;
  EXPECT_TRUE(ex.Submit([&]() -> std::function<void()> {
    ran++;
    return [&] {
      admitted_from_continuation.set_value(ex.Submit([]() -> std::function<void()> { return nullptr; }));
    };
  }));
  EXPECT_TRUE(admitted_from_continuation.get_future().get());
  ex.Join();
  EXPECT_EQ(ran.load(), 3);
}

}  // namespace
}  // namespace kiln::server
