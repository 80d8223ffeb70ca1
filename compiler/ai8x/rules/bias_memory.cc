// Rule family "bias memory" (AI8X_BIAS_MEMORY): izer/kbias.py L55-210. Depthwise layers put their
// bias bytes into the quadrants of their processors first; every other biased layer (out_ch +
// output start column * passes bytes, one more for a streaming layer 0 on a chip without
// SUPPORT_STREAM_BIAS, kbias.py L80-81) goes to the least-used quadrant the network uses, in
// kbias.py's bias_sort order: `flatten` layers first where REQUIRE_FLATTEN_BIAS_FIRST, then longest
// first (a stable sort, so equal lengths keep layer order).
#include <algorithm>

#include "compiler/ai8x/rules/checks.h"

namespace kiln::ai8x::rules {

void CheckBiasMemory(RuleContext& c) {
  Network& net = c.net;
  if (net.lift_limits) return;
  uint32_t groups_used = 0;
  for (const Layer& l : net.layers) {
    for (int g = 0; g < 4; ++g) {
      if ((l.placed.processors >> (16 * g)) & 0xffff) groups_used |= 1u << g;
    }
  }
  for (int g = 0; g < 4; ++g) {
    if ((net.layers.back().placed.output_processors >> (16 * g)) & 0xffff) groups_used |= 1u << g;
  }
  int64_t used[4] = {0, 0, 0, 0};
  struct Item {
    int64_t bytes;
    size_t layer;
  };
  std::vector<Item> general;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const Layer& l = net.layers[i];
    if (!l.has_weights() || !l.has_bias) continue;
    int out_exp = ComputePasses(l.out_shape.c).passes;
    if (l.groups > 1) {
      for (int g = 0; g < 4; ++g) {
        int cnt = std::popcount((l.placed.processors >> (16 * g)) & 0xffff);
        if (cnt > 0) used[g] += int64_t{cnt} * out_exp;
      }
      continue;
    }
    int start_col = l.placed.output_processors ? std::countr_zero(l.placed.output_processors) % 4 : 0;
    int64_t bytes = l.out_shape.c + int64_t{start_col} * out_exp;
    if (i == 0 && l.placed.streaming && !c.spec.support_stream_bias) ++bytes;  // "Work around a problem on AI85"
    general.push_back({bytes, i});
  }
  // bias_sort's key: -1 for a flatten layer where REQUIRE_FLATTEN_BIAS_FIRST, else BIAS_SIZE - bytes
  // (a layer longer than a quadrant sorts first, so its error comes early, as in the izer).
  auto key = [&](const Item& it) -> int64_t {
    if (c.spec.require_flatten_bias_first && net.layers[it.layer].flatten) return -1;
    return c.spec.bias_bytes_per_group - it.bytes;
  };
  std::stable_sort(general.begin(), general.end(), [&](const Item& a, const Item& b) { return key(a) < key(b); });
  for (const Item& b : general) {
    int best = -1;
    for (int g = 0; g < 4; ++g) {
      if (!(groups_used & (1u << g))) continue;
      if (best < 0 || used[g] < used[best]) best = g;
    }
    if (best < 0) best = 0;
    used[best] += b.bytes;
  }
  for (int g = 0; g < 4; ++g) {
    if (used[g] > c.spec.bias_bytes_per_group) {
      net.Report(Severity::kError, code::kBiasMemory, nullptr,
                 "bias memory of quadrant " + std::to_string(g) + " exhausted: " + std::to_string(used[g]) + " of " +
                     std::to_string(c.spec.bias_bytes_per_group) +
                     " bytes (izer kbias.py); what would help: fewer biased output channels or using more quadrants");
    }
  }
}

}  // namespace kiln::ai8x::rules
