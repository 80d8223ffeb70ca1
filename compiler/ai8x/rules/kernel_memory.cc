// Rule family "kernel memory" (AI8X_KERNEL_MEMORY): izer/kernels.py L221-330 with the first fit of
// compiler/ai8x/kernel_memory.h (4-word aligned start, same start on all processors of a layer).
#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/rules/checks.h"

namespace kiln::ai8x::rules {

void CheckKernelMemory(RuleContext& c, const Layer& l, size_t) {
  if (!l.has_weights() || c.net.lift_limits) return;
  int64_t words = KernelWords(c.net, l);
  KernelMemoryMap::Checked placed = c.kernel_memory.PlaceWithin(l.placed.processors, words, c.spec);
  if (placed.overflow < 0) return;
  int p = placed.overflow;
  c.net.Report(Severity::kError, code::kKernelMemory, &l,
               "kernel memory exhausted at processor " + std::to_string(p) + ": needs words " +
                   std::to_string(placed.start) + ".." + std::to_string(placed.start + words) + " of " +
                   std::to_string(c.spec.KernelWords(p)) +
                   " (izer kernels.py); what would help: fewer weights, lower `quantization`, or spreading layers "
                   "over more processors" +
                   (c.bits_unknown ? "; note: this export does not carry weight bit widths, 8-bit was assumed: pass "
                                     "--set LAYER.quantization=N for layers trained with fewer bits"
                                   : ""));
}

}  // namespace kiln::ai8x::rules
