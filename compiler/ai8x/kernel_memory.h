// Kernel memory of the 64 processors as the izer fills it, layer after layer (izer/kernels.py
// L221-330, IZER-RULES.md §1.7): a layer's kernels start at the same word on every processor of its
// map, that word being the first 4-word aligned one above everything already placed on those
// processors. Kiln approximates the izer's placement search with this first fit (README "Known
// limits"). One model for processor allocation (AllocateProcessors), the kernel-memory rule
// (rules/kernel_memory.cc) and the report (Ai8xResourceSummary::max_kernel_words_used).
#pragma once

#include <array>
#include <cstdint>

namespace kiln::ai8x {

struct ChipSpec;

class KernelMemoryMap {
 public:
  static constexpr int kProcessors = 64;

  /// Highest fill (72-bit words) among the processors of `procs` (bit p = processor p); 0 for none.
  int64_t MaxFillOf(uint64_t procs) const {
    int64_t m = 0;
    for (uint64_t b = procs; b; b &= b - 1) m = fill_[Lowest(b)] > m ? fill_[Lowest(b)] : m;
    return m;
  }
  /// Where a layer on `procs` starts: MaxFillOf(procs) rounded up to a multiple of 4 words.
  int64_t StartFor(uint64_t procs) const { return (MaxFillOf(procs) + 3) / 4 * 4; }
  /// Places `words` words on every processor of `procs` at StartFor(procs); returns the start.
  int64_t Place(uint64_t procs, int64_t words) {
    int64_t start = StartFor(procs);
    for (uint64_t b = procs; b; b &= b - 1) fill_[Lowest(b)] = start + words;
    return start;
  }

  /// Place() checked against each processor's memory (ChipSpec::KernelWords): processors are
  /// filled in ascending order up to and including the first one that overflows (the rest of the
  /// map keeps its fill), which `overflow` then names; -1 when everything fits.
  struct Checked {
    int64_t start = 0;
    int overflow = -1;
  };
  Checked PlaceWithin(uint64_t procs, int64_t words, const ChipSpec& spec);

  /// Fill of processor `p` (words), and the highest fill of all processors.
  int64_t fill(int p) const { return fill_[p]; }
  int64_t MaxFill() const;

 private:
  static int Lowest(uint64_t b) { return __builtin_ctzll(b); }
  std::array<int64_t, kProcessors> fill_{};
};

}  // namespace kiln::ai8x
