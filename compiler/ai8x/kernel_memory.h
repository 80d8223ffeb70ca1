// Kernel memory of the 64 processors as the izer fills it, layer after layer (izer/kernels.py
// L221-330, docs/specs/ai8x-izer-rules.md §1.7): a layer's kernels start at the same word on every
// processor of its map, that word being the first 4-word aligned one above everything already
// placed on those processors. Kiln approximates the izer's placement search with this first fit
// (README "Known limits"). One model for processor allocation (AllocateProcessors), the
// kernel-memory rule (rules/kernel_memory.cc) and the report
// (Ai8xResourceSummary::max_kernel_words_used).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <vector>

namespace kiln::ai8x {

struct ChipSpec;

class KernelMemoryMap {
 public:
  static constexpr int kProcessors = 64;

  /// Highest fill (72-bit words) among the processors of `procs` (bit p = processor p); 0 for none.
  /// Visits only the set bits (cheap for the small maps the allocator tries most).
  int64_t MaxFillOf(uint64_t procs) const {
    int64_t m = 0;
    for (uint64_t b = procs; b; b &= b - 1) m = std::max(m, fill_[std::countr_zero(b)]);
    return m;
  }
  /// Where a layer on `procs` starts: the highest fill of its processors rounded up to a multiple
  /// of 4 words.
  int64_t StartFor(uint64_t procs) const {
    int64_t m = 0;
    for (int p = 0; p < kProcessors; ++p) {
      if ((procs >> p) & 1) m = std::max(m, fill_[p]);
    }
    return (m + 3) / 4 * 4;
  }
  /// Places `words` words on every processor of `procs` at StartFor(procs); returns the start.
  int64_t Place(uint64_t procs, int64_t words) {
    const int64_t start = StartFor(procs);
    for (int p = 0; p < kProcessors; ++p) {
      if ((procs >> p) & 1) fill_[p] = start + words;
    }
    return start;
  }

  /// The fill of `procs` after Place(procs, w) for each w of `words` in turn (0 skipped), without
  /// placing: each layer starts at the 4-word aligned end of the previous one. The highest fill
  /// of the chip would then be max(MaxFill(), the result).
  int64_t EndIfStacked(uint64_t procs, const std::vector<int64_t>& words) const {
    int64_t end = MaxFillOf(procs);
    for (int64_t w : words) {
      if (w != 0) end = (end + 3) / 4 * 4 + w;
    }
    return end;
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
  int64_t MaxFill() const { return *std::max_element(fill_.begin(), fill_.end()); }

 private:
  std::array<int64_t, kProcessors> fill_{};
};

}  // namespace kiln::ai8x
