// Pass FlattenViews (compiler/ai8x/passes.h): a conv that reads its producer's (C, H, W) viewed
// as (C*H*W, 1, 1) is the izer's `flatten: true` (izer.py L547-555: the layer's input channels
// become C*H*W / (H*W) and its output 1x1; ai8x-synthesis tests/test-ai85-cifar10-hwc-1x1.yaml).
#include <string>

#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/rules/rules.h"

namespace kiln::ai8x {
namespace {

// Why `flatten: true` cannot express the view on `l`, or "" when it can. Flattening multiplies
// the producer's pixels into the weights' input channels, which is exactly a 1x1, stride-1,
// unpadded, ungrouped 2-D convolution of the viewed data (max7800x.py L660-680 refuse pooling
// and groups; izer.py L547-550 the pixel count, checked again by the flatten rule).
std::string WhyNotFlatten(const Layer& l) {
  if (l.op != OpKind::kConv2d) return std::string("the reader is a ") + OpKindName(l.op) + ", not a Conv2d";
  if (l.kernel_h != 1 || l.kernel_w != 1) {
    return "the convolution's kernel is " + std::to_string(l.kernel_h) + "x" + std::to_string(l.kernel_w) +
           ", not 1x1";
  }
  if (l.pad != 0 || l.stride != 1 || l.dilation != 1) return "the convolution is padded, strided or dilated";
  if (l.groups != 1) return "the convolution is grouped (izer: groups are not supported when flattening)";
  if (l.inputs.size() != 1 || l.operands != 1) return "the convolution reads more than one tensor";
  return "";
}

}  // namespace

void FlattenViews(Network& net) {
  for (Layer& l : net.layers) {
    if (!l.channel_view) continue;
    std::string why = WhyNotFlatten(l);
    if (!why.empty()) {
      rules::ReportChannelView(net, l, why);
      continue;
    }
    l.flatten = true;
    l.in_shape = l.viewed_from;  // the processors read the producer's map; in_channels_w stays C*H*W
    l.channel_view = false;
  }
}

}  // namespace kiln::ai8x
