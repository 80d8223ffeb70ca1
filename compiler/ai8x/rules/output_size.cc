// Rule family "output size" (AI8X_EMPTY_OUTPUT): a convolution whose kernel does not fit its
// (pooled) input with the layer's padding has no output pixel. ai8x.py's Conv1d/Conv2d are
// torch.nn convs, whose output extent is in + 2·pad − dilation·(k − 1) (stride 1, which
// rules/operators.cc enforces); torch refuses an extent below 1 ("Kernel size can't be greater
// than actual input size"), and the izer, computing the same extent (izer.py's output_dim), would
// emit a layer of no pixels. ConvTranspose2d only grows its input; Linear has no kernel extent.
#include "compiler/ai8x/rules/checks.h"

namespace kiln::ai8x::rules {

void CheckOutputSize(RuleContext& c, const Layer& l, size_t) {
  if (l.op != OpKind::kConv1d && l.op != OpKind::kConv2d) return;
  const Shape3 in = l.pooled_shape();
  const int64_t dil = std::max(1, l.dilation);
  auto extent = [&](int64_t size, int kernel) { return size + 2 * int64_t{l.pad} - dil * (int64_t{kernel} - 1); };
  const int64_t oh = extent(in.h, l.kernel_h);
  const int64_t ow = l.op == OpKind::kConv1d ? 1 : extent(in.w, l.kernel_w);
  if (oh >= 1 && ow >= 1) return;
  const std::string kernel = l.op == OpKind::kConv1d ? std::to_string(l.kernel_h)
                                                      : std::to_string(l.kernel_h) + "x" + std::to_string(l.kernel_w);
  const std::string input = l.op == OpKind::kConv1d ? std::to_string(in.h)
                                                     : std::to_string(in.h) + "x" + std::to_string(in.w);
  c.net.Report(Severity::kError, code::kEmptyOutput, &l,
               "kernel " + kernel + " with pad " + std::to_string(l.pad) + " does not fit the " + input +
                   (l.pool != PoolType::kNone ? " pooled" : "") + " input: the output would have no pixel");
}

}  // namespace kiln::ai8x::rules
