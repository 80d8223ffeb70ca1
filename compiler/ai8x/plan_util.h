// Helpers shared by the planning passes (input_format.cc, allocate.cc, data_memory.cc) and the
// izer size formulas (resources.cc). Internal to compiler/ai8x.
#pragma once

#include <bit>
#include <cstdint>

#include "compiler/ai8x/network.h"

namespace kiln::ai8x {

/// Lowest / highest set processor of a map, -1 for none.
inline int FirstProcessor(uint64_t m) { return m == 0 ? -1 : std::countr_zero(m); }
inline int LastProcessor(uint64_t m) { return m == 0 ? -1 : 63 - std::countl_zero(m); }

/// Data-memory instances (one per 4 processors) touched by a processor map.
inline uint32_t InstanceMask(uint64_t procs) {
  uint32_t m = 0;
  for (int i = 0; i < 16; ++i) {
    if ((procs >> (4 * i)) & 0xf) m |= 1u << i;
  }
  return m;
}

/// `count` consecutive processors starting at `shift`.
inline uint64_t ProcessorRun(int count, int shift) {
  if (count <= 0) return 0;
  uint64_t run = count >= 64 ? ~uint64_t{0} : ((uint64_t{1} << count) - 1);
  return shift >= 64 ? 0 : run << shift;
}

/// izer `kern_len` (kernels.py L221-330, IZER-RULES.md §1.7): 72-bit words per enabled input
/// processor of `l` when it writes `out_map`.
int64_t KernLen(const Layer& l, uint64_t out_map);

/// Rolling-buffer estimate for a streaming layer's input: a few padded input rows per pass (the
/// izer, max7800x.py L2373-2410, computes `rollover` from the kernel, pooling and stride rows).
int64_t StreamBufferBytes(const Layer& l);

}  // namespace kiln::ai8x
