// Process memory: the out-of-memory policy and the memory budget of kilnd.
//
// * Out of memory: a failed allocation throws std::bad_alloc, which the scheduler turns into
//   RESOURCE_EXHAUSTED for that job only (sched/scheduler.h, "Failure isolation"). In the programs
//   linked with mimalloc that takes common/operator_new.cc (Debian's mimalloc aborts instead).
// * MemoryBudget: bytes that admitted work may hold at once (sched/scheduler.h "Admission"): a
//   counter with Reserve / Release, thread-safe. The default size is DefaultMemoryBudgetBytes().
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kiln {

/// The limit in a cgroup v2 `memory.max` or v1 `memory.limit_in_bytes` file's text; nullopt for
/// "max", an empty or malformed text, or a v1 "no limit" value (>= 2^62).
std::optional<uint64_t> ParseCgroupMemoryLimit(std::string_view text);

/// The memory this process may use: the smallest limit of its cgroup (v2: memory.max of its own
/// cgroup, /proc/self/cgroup's "0::" path under /sys/fs/cgroup; v1: memory.limit_in_bytes of the
/// "memory" controller's path) and physical RAM (sysconf _SC_PHYS_PAGES × _SC_PAGESIZE).
uint64_t AvailableMemoryBytes();

/// 75 % of AvailableMemoryBytes(): the default --memory-budget (server/config.h); the rest is
/// headroom for what no estimate counts (gRPC buffers, threads' stacks, allocator slack).
uint64_t DefaultMemoryBudgetBytes();

/// "1.5 GiB" / "512 MiB" / "12 B": bytes for messages.
std::string FormatBytes(uint64_t bytes);

/// A budget of bytes (see the header comment). Thread-safe.
class MemoryBudget {
 public:
  explicit MemoryBudget(uint64_t total_bytes) : total_(total_bytes) {}
  uint64_t total() const { return total_; }
  uint64_t reserved() const { return reserved_.load(); }
  /// Reserves `bytes` when reserved() + bytes <= total(); false (nothing reserved) otherwise.
  bool TryReserve(uint64_t bytes);
  /// Returns bytes of an earlier TryReserve.
  void Release(uint64_t bytes);

 private:
  const uint64_t total_;
  std::atomic<uint64_t> reserved_{0};
};

}  // namespace kiln
