// The izer's per-layer size formulas (compiler/ai8x/passes.h DataInBytes ... BiasBytes, and
// plan_util.h): data in/out bytes per instance (max7800x.py L469-479, L601-609), kern_len, bias
// bytes, streaming buffer estimate, default final output map (izer.py L310-321).
#include <algorithm>

#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/plan_util.h"

namespace kiln::ai8x {

uint64_t DefaultFinalOutputMap(int out_channels) {
  return ProcessorRun(ComputePasses(out_channels).processors, 0);
}

int64_t DataInBytes(const Network& /*net*/, const Layer& l) {
  int passes = l.placed.chw_input ? 1 : ComputePasses(l.in_shape.c).passes;
  return l.in_shape.pixels() * passes * l.operands * (l.placed.chw_input ? 1 : 4);
}

int64_t DataOutBytes(const Network& /*net*/, const Layer& l) {
  int passes = ComputePasses(l.out_shape.c).passes;
  return l.out_shape.pixels() * passes * 4 * l.output_width / 8;
}

int64_t KernLen(const Layer& l, uint64_t out_map) {
  if (!l.has_weights() || out_map == 0) return 0;
  int64_t ksize = int64_t{l.kernel_h} * l.kernel_w;
  int in_exp = l.placed.chw_input ? 1 : ComputePasses(l.in_shape.c).passes;
  int out_exp = ComputePasses(l.out_shape.c).passes;
  int first = FirstProcessor(out_map);
  int start_col = first % 4;
  if (out_exp > 1) first -= start_col;
  int64_t span = 1 + LastProcessor(out_map) - first;
  int64_t kc;
  if (l.groups == 1) {
    kc = span * out_exp * (l.flatten ? 1 : in_exp);
  } else {
    kc = in_exp;
  }
  if (l.flatten) {
    int in_procs = ComputePasses(l.in_shape.c).processors;
    int64_t shape1 = in_procs > 0 ? (int64_t{l.in_channels_w} + in_procs - 1) / in_procs : 1;
    kc *= shape1;
    kc -= (int64_t{out_exp} * std::popcount(out_map) - l.out_shape.c) * shape1;
  }
  int bits = l.quantization > 0 ? l.quantization : 1;
  int qfactor = 8 / bits;
  int64_t res = (kc % qfactor) * ksize * (qfactor - 1);
  return (kc * ksize * bits + res + 71) / 72;
}

int64_t KernelWords(const Network& /*net*/, const Layer& l) { return KernLen(l, l.placed.output_processors); }

int64_t BiasBytes(const Layer& l) { return l.has_bias ? l.out_shape.c : 0; }

int64_t StreamBufferBytes(const Layer& l) {
  int rows = l.kernel_h + l.pool_h + std::max({l.stride, l.pool_stride_h, 1}) + 1;
  int64_t width = l.in_shape.w + 2 * l.pad;
  int passes = ComputePasses(l.in_shape.c).passes;
  int64_t bytes = rows * width * passes * 4;
  return (bytes + 15) / 16 * 16;
}

}  // namespace kiln::ai8x
