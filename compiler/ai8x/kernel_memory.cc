#include "compiler/ai8x/kernel_memory.h"

#include "compiler/ai8x/chip.h"

namespace kiln::ai8x {

KernelMemoryMap::Checked KernelMemoryMap::PlaceWithin(uint64_t procs, int64_t words, const ChipSpec& spec) {
  Checked c;
  c.start = StartFor(procs);
  for (int p = 0; p < kProcessors; ++p) {
    if (!((procs >> p) & 1)) continue;
    fill_[p] = c.start + words;
    if (fill_[p] > spec.KernelWords(p)) {
      c.overflow = p;
      break;
    }
  }
  return c;
}

}  // namespace kiln::ai8x
