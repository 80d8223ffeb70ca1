// Rule family "bias memory" (AI8X_BIAS_MEMORY): izer/kbias.py L55-210. Depthwise layers put their
// bias bytes into the quadrants of their processors first; every other biased layer (out_ch +
// output start column * passes bytes) goes, longest first, to the least-used quadrant the network
// uses.
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
    general.push_back({l.out_shape.c + int64_t{start_col} * out_exp, i});
  }
  std::stable_sort(general.begin(), general.end(), [](const Item& a, const Item& b) { return a.bytes > b.bytes; });
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
