// Process memory: the out-of-memory policy and the memory budget of kilnd.
//
// * Out of memory: a failed allocation throws std::bad_alloc, which the scheduler turns into
//   RESOURCE_EXHAUSTED for that job only (sched/scheduler.h, "Failure isolation"). In the programs
//   linked with mimalloc that takes common/operator_new.cc (Debian's mimalloc aborts instead).
// * AlignedAllocator: a std::vector allocator whose storage starts on a given alignment.
// * MemoryBudget: bytes that admitted work may hold at once (sched/scheduler.h "Admission"): a
//   counter with Reserve / Release, thread-safe. The default size is DefaultMemoryBudgetBytes().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <string_view>

namespace kiln {

/// An allocator whose storage starts at a multiple of kAlign bytes (operator new with
/// std::align_val_t), for vectors read with wide loads: a 64-byte row of a 64-aligned vector is one
/// cache line, where malloc's 16-byte alignment splits most 512-bit loads over two lines
/// (device/numerics/mvmul_kernel.h, PreparedSrcA::lanes: aligned, c64 exact LoFi ran 14 % faster;
/// bench/tt_emu/RESULTS.md, "The SrcA lanes' alignment").
template <typename T, std::size_t kAlign>
struct AlignedAllocator {
  static_assert(kAlign >= alignof(T) && (kAlign & (kAlign - 1)) == 0, "a power of two, at least T's alignment");
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = AlignedAllocator<U, kAlign>;
  };
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U, kAlign>&) noexcept {}  // NOLINT: rebinding converts implicitly
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kAlign})); }
  // The unsized form: clang 14 declares sized deallocation only with -fsized-deallocation, which
  // the fuzz build (scripts/fuzz-onnx.sh) does not pass.
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{kAlign}); }
  template <typename U>
  bool operator==(const AlignedAllocator<U, kAlign>&) const noexcept {  // stateless: all equal
    return true;
  }
};

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
