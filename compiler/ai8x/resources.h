// The izer's per-layer size formulas and processor-map helpers, used by the planning passes
// (input_format.cc, allocate.cc, data_memory.cc), the rules (compiler/ai8x/rules) and the report.
// Inline: they run several times per layer in the planner's inner loops.
#pragma once

#include <algorithm>
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

/// The izer's default output map of the final layer (izer.py L310-321): packed from processor 0.
inline uint64_t DefaultFinalOutputMap(int out_channels) {
  return ProcessorRun(ComputePasses(out_channels).processors, 0);
}

/// izer in_size: input bytes per data-memory instance (max7800x.py L469-479).
inline int64_t DataInBytes(const Network& /*net*/, const Layer& l) {
  int passes = l.placed.chw_input ? 1 : ComputePasses(l.in_shape.c).passes;
  return l.in_shape.pixels() * passes * l.operands * (l.placed.chw_input ? 1 : 4);
}

/// izer out_size: output bytes per data-memory instance (max7800x.py L601-609).
inline int64_t DataOutBytes(const Network& /*net*/, const Layer& l) {
  int passes = ComputePasses(l.out_shape.c).passes;
  return l.out_shape.pixels() * passes * 4 * l.output_width / 8;
}

/// izer `kern_len` (kernels.py L221-330, docs/specs/ai8x-izer-rules.md §1.7): 72-bit words per
/// enabled input processor of `l` when it writes `out_map`.
inline int64_t KernLen(const Layer& l, uint64_t out_map) {
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

/// KernLen with the layer's own output map.
inline int64_t KernelWords(const Network& /*net*/, const Layer& l) { return KernLen(l, l.placed.output_processors); }

/// Whether the izer stores the kernels of `a` and `b` once (izer/kdedup.py `deduplicate`, on unless
/// ai8xize.py runs with --no-deduplicate-weights): equal contents and shape, equal `quantization`,
/// equal processor maps (compared by the caller: placed.processors, or the shared map of an
/// allocation group). Kiln knows contents are equal when both layers read the same weight
/// initializer the same way (one module applied several times, e.g. the FPN heads of
/// ai87fpndetector); kernels equal by coincidence are counted twice, which only overestimates.
inline bool SameKernels(const Layer& a, const Layer& b) {
  return a.has_weights() && b.has_weights() && !a.weight_initializer.empty() &&
         a.weight_initializer == b.weight_initializer && a.op == b.op && a.kernel_h == b.kernel_h &&
         a.kernel_w == b.kernel_w && a.groups == b.groups && a.dilation == b.dilation && a.flatten == b.flatten &&
         a.weight_count == b.weight_count && a.quantization == b.quantization && a.in_shape.c == b.in_shape.c &&
         a.out_shape.c == b.out_shape.c && a.placed.chw_input == b.placed.chw_input;
}

/// The earlier layer whose kernels layer `i` reuses (SameKernels on the same processor map: the izer
/// places no kernels for `i`, kernels.py sees None), or -1.
inline int KernelTwin(const Network& net, size_t i) {
  const Layer& l = net.layers[i];
  if (l.weight_initializer.empty()) return -1;
  for (size_t j = 0; j < i; ++j) {
    const Layer& o = net.layers[j];
    if (o.placed.processors == l.placed.processors && SameKernels(o, l)) return static_cast<int>(j);
  }
  return -1;
}

/// The earlier layer that layer `i` applies again (SameKernels, any processor map), or -1. With a
/// quantized checkpoint (.pth.tar: the module's weights appear once in its state_dict, which the
/// izer assigns to the YAML's weight layers in order, izer/checkpoint.py `load`) layer `i` needs
/// `weight_source: <that layer>` (izer.py copies the weights, yamlcfg.py L600-606); with an ONNX
/// checkpoint it must not have one (izer/onnxcp.py yields weights per Conv node already, and
/// izer.py would insert a second copy).
inline int WeightSource(const Network& net, size_t i) {
  const Layer& l = net.layers[i];
  if (l.weight_initializer.empty()) return -1;
  for (size_t j = 0; j < i; ++j) {
    if (SameKernels(net.layers[j], l)) return static_cast<int>(j);
  }
  return -1;
}

/// Bias bytes of a layer (one per output channel when it has bias).
inline int64_t BiasBytes(const Layer& l) { return l.has_bias ? l.out_shape.c : 0; }

/// Rolling-buffer estimate for a streaming layer's input: a few padded input rows per pass (the
/// izer, max7800x.py L2373-2410, computes `rollover` from the kernel, pooling and stride rows).
inline int64_t StreamBufferBytes(const Layer& l) {
  int rows = l.kernel_h + l.pool_h + std::max({l.stride, l.pool_stride_h, 1}) + 1;
  int64_t width = l.in_shape.w + 2 * l.pad;
  int passes = ComputePasses(l.in_shape.c).passes;
  int64_t bytes = rows * width * passes * 4;
  return (bytes + 15) / 16 * 16;
}

}  // namespace kiln::ai8x
