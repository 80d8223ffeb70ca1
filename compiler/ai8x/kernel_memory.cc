#include "compiler/ai8x/kernel_memory.h"

#include <algorithm>

#include "compiler/ai8x/chip.h"

namespace kiln::ai8x {

KernelMemoryMap::Checked KernelMemoryMap::PlaceWithin(uint64_t procs, int64_t words, const ChipSpec& spec) {
  Checked c;
  c.start = StartFor(procs);
  for (uint64_t b = procs; b; b &= b - 1) {
    int p = Lowest(b);
    fill_[p] = c.start + words;
    if (fill_[p] > spec.KernelWords(p)) {
      c.overflow = p;
      break;
    }
  }
  return c;
}

int64_t KernelMemoryMap::MaxFill() const { return *std::max_element(fill_.begin(), fill_.end()); }

}  // namespace kiln::ai8x
