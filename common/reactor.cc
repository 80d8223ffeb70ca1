#include "common/reactor.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace kiln {
namespace {

thread_local bool on_reactor = false;
std::atomic<uint64_t> violations{0};

}  // namespace

ReactorScope::ReactorScope() : previous_(on_reactor) { on_reactor = true; }
ReactorScope::~ReactorScope() { on_reactor = previous_; }

bool OnReactorThread() { return on_reactor; }

void AssertNotOnReactor(const char* what) {
  if (!on_reactor) return;
  violations.fetch_add(1, std::memory_order_relaxed);
#ifndef NDEBUG
  std::fprintf(stderr, "kiln: blocking call %s on a gRPC reactor thread\n", what);
  std::abort();
#else
  (void)what;
#endif
}

uint64_t ReactorViolations() { return violations.load(std::memory_order_relaxed); }

}  // namespace kiln
