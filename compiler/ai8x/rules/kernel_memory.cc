// Rule family "kernel memory" (AI8X_KERNEL_MEMORY): izer/kernels.py L221-330 with the first fit of
// compiler/ai8x/kernel_memory.h (4-word aligned start, same start on all processors of a layer);
// a layer whose kernels the izer deduplicates (KernelTwin, compiler/ai8x/resources.h) takes none.
#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/rules/checks.h"

namespace kiln::ai8x::rules {
namespace {

// The layers whose weights fill processor `p` up to and including `l` (layer order = placement
// order) that have no derived bit width: only for them can an 8-bit assumption be the cause.
std::string LayersWithoutBitsOn(const Network& net, const Layer& l, int p) {
  std::string names;
  for (const Layer& o : net.layers) {
    if (o.has_weights() && ((o.placed.processors >> p) & 1) && !o.quantization_known) {
      names += (names.empty() ? "" : ", ") + o.name;
    }
    if (&o == &l) break;
  }
  return names;
}

}  // namespace

void CheckKernelMemory(RuleContext& c, const Layer& l, size_t i) {
  if (!l.has_weights() || c.net.lift_limits) return;
  if (KernelTwin(c.net, i) >= 0) return;  // the izer stores its kernels once (izer/kdedup.py)
  int64_t words = KernelWords(c.net, l);
  KernelMemoryMap::Checked placed = c.kernel_memory.PlaceWithin(l.placed.processors, words, c.spec);
  if (placed.overflow < 0) return;
  int p = placed.overflow;
  std::string no_bits = LayersWithoutBitsOn(c.net, l, p);
  c.net.Report(Severity::kError, code::kKernelMemory, &l,
               "kernel memory exhausted at processor " + std::to_string(p) + ": needs words " +
                   std::to_string(placed.start) + ".." + std::to_string(placed.start + words) + " of " +
                   std::to_string(c.spec.KernelWords(p)) +
                   " (izer kernels.py); what would help: fewer weights, lower `quantization`, or spreading layers "
                   "over more processors" +
                   (no_bits.empty() ? std::string()
                                    : "; note: this export does not carry the weight bit widths of " + no_bits +
                                          " (on processor " + std::to_string(p) +
                                          "), 8-bit was assumed: pass --set LAYER.quantization=N for layers trained "
                                          "with fewer bits"));
}

}  // namespace kiln::ai8x::rules
