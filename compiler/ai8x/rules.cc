// Pass 9: izer rule checks (IZER-RULES.md §1.3-§1.8). Each check cites the izer code it mirrors.
#include <algorithm>
#include <bit>
#include <cstdio>
#include <unordered_map>

#include "compiler/ai8x/passes.h"

namespace kiln::ai8x {
namespace {

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void Err(Network& net, const char* code, const Layer& l, const std::string& msg) {
  net.Report(Severity::kError, code, &l, msg);
}

}  // namespace

void CheckRules(Network& net) {
  const ChipSpec& spec = net.spec();
  const size_t n = net.layers.size();
  net.Reindex();
  if (n == 0) return;
  const int64_t inst = spec.data_instance_bytes;

  // Layer count (yamlcfg.py L197-198); MAX78002 adds a hidden layer for avg pool after eltwise
  // (izer.py L602-606).
  int hidden = 0;
  for (size_t i = 1; i < n; ++i) {
    const Layer& l = net.layers[i];
    if (spec.require_passthrough_avgpool_after_eltwise && l.pool == PoolType::kAvg && l.inputs.size() == 1) {
      const Layer* p = net.Find(l.inputs[0]);
      if (p != nullptr && p->operands > 1) ++hidden;
    }
  }
  if (static_cast<int>(n) + hidden > spec.max_layers && !net.lift_limits) {
    net.diagnostics.push_back({Severity::kError, "AI8X_LAYER_COUNT", -1, "", "",
                               std::to_string(n) + " layers" +
                                   (hidden ? " (+" + std::to_string(hidden) + " hidden avg-pool reset layers)" : "") +
                                   " exceed the " + spec.name + " limit of " + std::to_string(spec.max_layers) +
                                   " (yamlcfg.py L197-198)"});
  }

  bool quadrant0 = false;
  bool bits_unknown = false;
  for (const Layer& l : net.layers) bits_unknown |= l.has_weights() && !l.quantization_known;
  std::vector<int64_t> kfill(64, 0);
  struct BiasItem {
    int64_t bytes;
    int layer;
  };
  std::vector<BiasItem> bias_items;

  for (size_t i = 0; i < n; ++i) {
    Layer& l = net.layers[i];
    const bool first = i == 0;
    quadrant0 |= (l.processors & 0xffff) != 0;
    if (i + 1 == n) quadrant0 |= (l.output_processors & 0xffff) != 0;

    // Processors (max7800x.py L915-941).
    int in_ch = l.in_shape.c;
    Passes inp = ComputePasses(in_ch);
    int expect_in = l.chw_input ? in_ch : inp.processors;
    if (std::popcount(l.processors) != expect_in) {
      Err(net, "AI8X_PROCESSORS", l,
          std::to_string(in_ch) + " input channels need " + std::to_string(expect_in) + " processors, map " +
              Hex(l.processors) + " has " + std::to_string(std::popcount(l.processors)) + " (max7800x.py L915-924)");
    }
    Passes outp = ComputePasses(l.out_shape.c);
    bool concat_part = false;
    if (std::popcount(l.output_processors) != outp.processors && !concat_part) {
      Err(net, "AI8X_PROCESSORS", l,
          std::to_string(l.out_shape.c) + " output channels need " + std::to_string(outp.processors) +
              " output processors, map " + Hex(l.output_processors) + " has " +
              std::to_string(std::popcount(l.output_processors)) + " (max7800x.py L934-941)");
    }
    if (l.chw_input) {
      for (int g = 0; g < 16; ++g) {
        if (std::popcount((l.processors >> (4 * g)) & 0xf) > 1) {
          Err(net, "AI8X_PROCESSORS", l, "CHW input allows one processor per group of 4 (max7800x.py L442-450)");
          break;
        }
      }
      if (!first) Err(net, "AI8X_INPUT_FORMAT", l, "CHW data is allowed only in the first layer (izer.py L449-451)");
      if (in_ch > 16) Err(net, "AI8X_INPUT_FORMAT", l, "CHW input takes at most 16 channels");
    }
    // Passthrough output map per x16 (max7800x.py L945-962).
    if (l.op == OpKind::kNone) {
      for (int g = 0; g < 4; ++g) {
        uint64_t in_pro = (uint64_t{1} << std::popcount((l.processors >> (16 * g)) & 0xffff)) - 1;
        uint64_t out_pro = (l.output_processors >> (16 * g)) & 0xffff;
        if (out_pro != 0) out_pro >>= std::countr_zero(out_pro);
        if (out_pro != in_pro) {
          Err(net, "AI8X_PASSTHROUGH_MAP", l,
              "a passthrough layer's output processors must be a packed version of its input processors in each "
              "group of 16: input " + Hex(l.processors) + ", output " + Hex(l.output_processors) +
                  " (max7800x.py L945-962)");
          break;
        }
      }
    }
    // Channels (max7800x.py L909-914).
    if (in_ch > spec.max_channels || l.out_shape.c > spec.max_channels) {
      Err(net, "AI8X_CHANNELS", l, "more than " + std::to_string(spec.max_channels) + " channels");
    }
    // Dimensions (izer.py MAX_ROW_COL; tornadocnn FRAME_SIZE_MAX).
    if (l.in_shape.h > spec.max_row_col || l.in_shape.w > spec.max_row_col) {
      Err(net, "AI8X_DIMENSIONS", l, "input " + ShapeString(l.in_shape, l.one_d) + " exceeds " +
                                         std::to_string(spec.max_row_col) + " rows/columns");
    }
    if (l.in_shape.pixels() * inp.passes >= spec.frame_size_max) {
      Err(net, "AI8X_DIMENSIONS", l, "H*W*passes exceeds FRAME_SIZE_MAX (2^21)");
    }

    // Operator-specific rules (izer.py L507-579, yamlcfg.py L434-473, max7800x.py L504-682).
    Shape3 pooled = l.pooled_shape();
    switch (l.op) {
      case OpKind::kConv2d:
        if (!((l.kernel_h == 1 && l.kernel_w == 1) || (l.kernel_h == 3 && l.kernel_w == 3))) {
          Err(net, "AI8X_KERNEL", l, "Conv2d kernels must be 1x1 or 3x3, not " + std::to_string(l.kernel_h) + "x" +
                                         std::to_string(l.kernel_w));
        }
        break;
      case OpKind::kConvTranspose2d:
        if (l.kernel_h != 3 || l.kernel_w != 3) Err(net, "AI8X_KERNEL", l, "ConvTranspose2d kernels must be 3x3");
        if (l.stride != 2) Err(net, "AI8X_STRIDE", l, "ConvTranspose2d stride must be 2 (yamlcfg.py L458-473)");
        if (l.output_padding != 1) Err(net, "AI8X_PAD", l, "ConvTranspose2d output padding must be 1 (max7800x.py L639-653)");
        break;
      case OpKind::kConv1d:
        if (l.kernel_h < 1 || l.kernel_h > 9) Err(net, "AI8X_KERNEL", l, "Conv1d kernel must be 1..9");
        if (l.operands > 1) Err(net, "AI8X_ELTWISE", l, "element-wise cannot be combined with Conv1d (max7800x.py L504-506)");
        if (!spec.support_multipass_padded_conv1d && in_ch > 64 && l.pad != 0) {
          Err(net, "AI8X_PAD", l, std::string(spec.name) + ": Conv1d with more than 64 input channels needs pad 0 (max7800x.py L508-511)");
        }
        break;
      case OpKind::kLinear:
        if (l.in_channels_w > spec.max_linear_features || l.out_shape.c > spec.max_linear_features) {
          Err(net, "AI8X_LINEAR", l, "Linear layers take at most 1024 input and output features (ai8x.py Linear)");
        }
        if (l.pool != PoolType::kNone) Err(net, "AI8X_FLATTEN", l, "a Linear layer cannot pool");
        break;
      case OpKind::kNone:
        if (l.activation != Activation::kNone) {
          Err(net, "AI8X_ACTIVATION", l, "activation on a passthrough layer (izer.py L593-595)");
        }
        if (l.output_width != 8) Err(net, "AI8X_OUTPUT_WIDTH", l, "passthrough layers must have output_width 8 (max7800x.py L787-789)");
        break;
    }
    if (l.op != OpKind::kConvTranspose2d && l.op != OpKind::kNone && l.op != OpKind::kLinear && l.stride != 1) {
      Err(net, "AI8X_STRIDE", l, "stride must be 1 (izer.py L526-532, L564-566)");
    }
    if (l.is_conv()) {
      if (l.pad < 0 || l.pad >= 3) Err(net, "AI8X_PAD", l, "pad must be 0, 1 or 2 (izer.py L557-563)");
      int k = l.op == OpKind::kConv1d ? l.kernel_h : std::min(l.kernel_h, l.kernel_w);
      if (l.op != OpKind::kConvTranspose2d && l.pad >= k && l.pad > 0) {
        Err(net, "AI8X_PAD", l, "pad " + std::to_string(l.pad) + " must be smaller than the kernel (izer.py L577-579)");
      }
      if (l.dilation != 1 && l.op != OpKind::kConv1d) {
        Err(net, "AI8X_DILATION", l, "dilation > 1 is supported only for Conv1d (max7800x.py L530-532)");
      }
    }
    // Depthwise (max7800x.py L655-682, L963-975).
    if (l.groups > 1) {
      if (!spec.support_depthwise) {
        Err(net, "AI8X_GROUPS", l, std::string("groups > 1 (depthwise) is not supported on ") + spec.name);
      } else if (l.groups != in_ch || l.groups != l.out_shape.c) {
        Err(net, "AI8X_GROUPS", l, "groups must equal input and output channels");
      }
      if (l.output_processors != 0 && std::countr_zero(l.output_processors) % 4 != 0) {
        Err(net, "AI8X_GROUPS", l, "depthwise output processors must start at a multiple of 4 (max7800x.py L965-970)");
      }
    }
    // Pooling (izer.py L507-524, max7800x.py L694-699, ai8x.py asserts).
    if (l.pool != PoolType::kNone) {
      if (l.pool_h < 1 || l.pool_h > spec.max_pool_size || l.pool_w < 1 || l.pool_w > spec.max_pool_size ||
          l.pool_stride_h < 1 || l.pool_stride_h > spec.max_pool_size) {
        std::string nodes;  // the pool's node is among the fused ones
        for (size_t k = 1; k < l.onnx_nodes.size(); ++k) nodes += (k > 1 ? ", " : "") + l.onnx_nodes[k];
        Err(net, "AI8X_POOL", l,
            "pooling kernel " + std::to_string(l.pool_h) + "x" + std::to_string(l.pool_w) + " and stride " +
                std::to_string(l.pool_stride_h) + " must be 1.." + std::to_string(spec.max_pool_size) +
                (nodes.empty() ? std::string() : " (fused ONNX nodes: " + nodes + ")"));
      }
      if (!l.one_d && l.pool_stride_h != l.pool_stride_w) Err(net, "AI8X_POOL", l, "pool stride must be square (izer.py L507-510)");
      if (pooled.h <= 0 || pooled.w <= 0) Err(net, "AI8X_POOL", l, "pooled dimension is zero (izer.py L522-524)");
      if (l.pool_dilation > spec.max_pool_dilation) {
        Err(net, "AI8X_POOL", l, "pool dilation exceeds " + std::to_string(spec.max_pool_dilation) + " (max7800x.py L694-699)");
      }
      if (l.flatten) Err(net, "AI8X_FLATTEN", l, "flatten cannot be combined with pooling (max7800x.py L660-680)");
    }
    // Flatten (izer.py L547-555).
    if (l.flatten) {
      if (pooled.pixels() > spec.max_flatten_pixels) {
        Err(net, "AI8X_FLATTEN", l, "flatten of " + std::to_string(pooled.h) + "x" + std::to_string(pooled.w) +
                                        " exceeds 256 pixels (izer.py L547-550)");
      }
      if (l.in_shape.elements() > 16384) Err(net, "AI8X_FLATTEN", l, "flatten input C*H*W exceeds 16384");
      if (l.streaming) Err(net, "AI8X_FLATTEN", l, "flatten cannot stream");
    }
    // Output width / activation (izer.py L414-417, L455-457).
    if (l.output_width != 8 && l.output_width != 32) Err(net, "AI8X_OUTPUT_WIDTH", l, "output_width must be 8 or 32");
    if (l.output_width == 32) {
      if (l.activation != Activation::kNone) {
        Err(net, "AI8X_OUTPUT_WIDTH", l, "32-bit output requires no activation (izer.py L414-417)");
      }
      if (i + 1 != n) {
        net.Report(Severity::kWarning, "AI8X_OUTPUT_WIDTH", &l, "32-bit output on an intermediate layer (izer.py L455-457)");
      }
    }
    if (l.quantization != 1 && l.quantization != 2 && l.quantization != 4 && l.quantization != 8) {
      Err(net, "AI8X_QUANTIZATION", l, "quantization must be 1, 2, 4 or 8");
    }
    // Element-wise (yamlcfg.py L411-417, max7800x.py L525-528, L759-768, L984-990, L2074-2080).
    if (l.operands > 1) {
      if (l.operands > 16) Err(net, "AI8X_ELTWISE", l, "at most 16 element-wise operands");
      if (!l.pool_first && l.pool != PoolType::kNone && l.operands > 2) {
        Err(net, "AI8X_ELTWISE", l, "pooling after the element-wise operation allows at most 2 operands");
      }
      uint64_t first_map = 0;
      bool maps_reported = false;
      for (size_t k = 0; k < l.inputs.size(); ++k) {
        const Layer* p = net.Find(l.inputs[k]);
        uint64_t m = p ? p->output_processors : l.processors;
        if (k == 0) first_map = m;
        if ((m != first_map || m != l.processors) && !maps_reported) {
          Err(net, "AI8X_ELTWISE", l, "element-wise operands must share the consumer's processors (max7800x.py L759-768)");
          maps_reported = true;
        }
        if (p != nullptr && p->write_gap != l.operands - 1) {
          Err(net, "AI8X_WRITE_GAP", l, "operand " + p->name + " must be written with write_gap " +
                                           std::to_string(l.operands - 1) + " (interleaved element-wise input)");
        }
      }
      if (spec.emulate_eltwise_mp && inp.passes > 1 && l.operands * inp.passes != l.operands + inp.passes &&
          (l.op != OpKind::kNone || l.pool != PoolType::kNone)) {
        Err(net, "AI8X_ELTWISE", l, "multi-pass element-wise beyond 2 passes cannot pool or convolve on MAX78000 (max7800x.py L984-990)");
      }
      if (!spec.support_multipass_eltwise_conv_bias && l.op != OpKind::kNone && l.has_bias) {
        Err(net, "AI8X_ELTWISE", l, std::string("on ") + spec.name +
                                        " element-wise operations must be in a separate layer from convolutions with bias (max7800x.py L2074-2080)");
      }
    } else if (l.inputs.size() > 1) {
      // Concatenation: all but the last part need a multiple of 4 channels (README limits).
      for (size_t k = 0; k + 1 < l.inputs.size(); ++k) {
        if (net.OutputShapeOf(l.inputs[k]).c % 4 != 0) {
          Err(net, "AI8X_CONCAT", l, "all but the last concatenated input need a multiple of 4 channels");
          break;
        }
      }
    }
    // Data memory (max7800x.py L469-479, L601-609).
    if (!l.streaming) {
      int64_t in_size = DataInBytes(net, l);
      if (l.in_offset + in_size > inst) {
        Err(net, "AI8X_DATA_MEMORY", l, "input of " + std::to_string(in_size) + " B at offset " + std::to_string(l.in_offset) +
                                            " exceeds the " + std::to_string(inst) + "-byte data-memory instance");
      }
    }
    bool last_stream = l.streaming && (i + 1 == n || !net.layers[i + 1].streaming);
    if (!l.streaming || last_stream) {
      int64_t out_size = DataOutBytes(net, l);
      if (l.out_offset + out_size > inst) {
        Err(net, "AI8X_DATA_MEMORY", l, "output of " + std::to_string(out_size) + " B at offset " +
                                            std::to_string(l.out_offset) + " exceeds the " + std::to_string(inst) +
                                            "-byte data-memory instance");
      }
    }
    if (l.out_offset % 4 != 0 || l.in_offset % 4 != 0) Err(net, "AI8X_DATA_MEMORY", l, "offsets must be multiples of 4");
    // Streaming (izer.py L446-448, max7800x.py L314-380).
    if (l.streaming) {
      if (i > 0 && !net.layers[i - 1].streaming) Err(net, "AI8X_STREAMING", l, "streaming layers must form a prefix (izer.py L446-448)");
      if (static_cast<int>(i) >= spec.max_stream_layers) Err(net, "AI8X_STREAMING", l, "at most 8 layers can stream");
      if (last_stream && l.pad == 0 && spec.chip == Chip::kMAX78000 &&
          !(l.op == OpKind::kConv2d && l.kernel_h == 1 && l.kernel_w == 1)) {  // 1x1: emulated as padded 3x3
        Err(net, "AI8X_STREAMING", l, "the final streaming layer must be padded on MAX78000 (max7800x.py L365-370)");
      }
      if (!spec.support_streaming_passthrough && l.op == OpKind::kNone) {
        Err(net, "AI8X_STREAMING", l, "passthrough layers cannot stream on this device");
      }
    }
    if (first && net.use_fifo) {
      int c = l.in_shape.c;
      if ((l.chw_input && c > 4) || (!l.chw_input && c > 16)) {
        Err(net, "AI8X_FIFO", l, "FIFO input takes at most 16 HWC / 4 CHW channels (max7800x.py L314-344)");
      }
      uint64_t allowed = l.chw_input ? 0x0001000100010001ULL : 0x000f000f000f000fULL;
      if (l.processors & ~allowed) {
        Err(net, "AI8X_FIFO", l, "FIFO input processors must be within 0-3/16-19/32-35/48-51 (HWC) or 0/16/32/48 (CHW)");
      }
    }

    // Kernel memory (izer/kernels.py L221-330): 4-word aligned start, same start on all processors.
    if (l.has_weights() && !net.lift_limits) {
      int64_t words = KernelWords(net, l);
      int64_t off = 0;
      for (int p = 0; p < 64; ++p) {
        if ((l.processors >> p) & 1) off = std::max(off, kfill[p]);
      }
      off = (off + 3) / 4 * 4;
      for (int p = 0; p < 64; ++p) {
        if (!((l.processors >> p) & 1)) continue;
        kfill[p] = off + words;
        if (kfill[p] > spec.KernelWords(p)) {
          Err(net, "AI8X_KERNEL_MEMORY", l,
              "kernel memory exhausted at processor " + std::to_string(p) + ": needs words " + std::to_string(off) + ".." +
                  std::to_string(off + words) + " of " + std::to_string(spec.KernelWords(p)) +
                  " (izer kernels.py); what would help: fewer weights, lower `quantization`, or spreading layers over more processors" +
                  (bits_unknown ? "; note: this export does not carry weight bit widths, 8-bit was assumed: pass "
                                  "--set LAYER.quantization=N for layers trained with fewer bits"
                                : ""));
          break;
        }
      }
      if (l.has_bias) bias_items.push_back({BiasBytes(l), static_cast<int>(i)});
    }
  }
  if (!quadrant0) {
    net.diagnostics.push_back({Severity::kError, "AI8X_PROCESSORS", -1, "", "",
                               "no layer uses quadrant 0 (processors 0-15); the izer requires it (max7800x.py L1003-1004)"});
  }
  // Bias memory (izer/kbias.py L55-210): depthwise layers put their bias bytes into the quadrants
  // of their processors first; every other layer (out_ch + output start column * passes bytes)
  // goes, longest first, to the least-used quadrant the network uses.
  uint32_t groups_used = 0;
  for (const Layer& l : net.layers) {
    for (int g = 0; g < 4; ++g) {
      if ((l.processors >> (16 * g)) & 0xffff) groups_used |= 1u << g;
    }
  }
  for (int g = 0; g < 4; ++g) {
    if ((net.layers.back().output_processors >> (16 * g)) & 0xffff) groups_used |= 1u << g;
  }
  int64_t used[4] = {0, 0, 0, 0};
  std::vector<BiasItem> general;
  for (const BiasItem& b : bias_items) {
    const Layer& l = net.layers[b.layer];
    int out_exp = ComputePasses(l.out_shape.c).passes;
    if (l.groups > 1) {
      for (int g = 0; g < 4; ++g) {
        int cnt = std::popcount((l.processors >> (16 * g)) & 0xffff);
        if (cnt > 0) used[g] += int64_t{cnt} * out_exp;
      }
      continue;
    }
    int start_col = l.output_processors ? std::countr_zero(l.output_processors) % 4 : 0;
    general.push_back({l.out_shape.c + int64_t{start_col} * out_exp, b.layer});
  }
  std::stable_sort(general.begin(), general.end(), [](const BiasItem& a, const BiasItem& b) { return a.bytes > b.bytes; });
  for (const BiasItem& b : general) {
    int best = -1;
    for (int g = 0; g < 4; ++g) {
      if (!(groups_used & (1u << g))) continue;
      if (best < 0 || used[g] < used[best]) best = g;
    }
    if (best < 0) best = 0;
    used[best] += b.bytes;
  }
  for (int g = 0; g < 4 && !net.lift_limits; ++g) {
    if (used[g] > spec.bias_bytes_per_group) {
      net.diagnostics.push_back({Severity::kError, "AI8X_BIAS_MEMORY", -1, "", "",
                                 "bias memory of quadrant " + std::to_string(g) + " exhausted: " + std::to_string(used[g]) +
                                     " of " + std::to_string(spec.bias_bytes_per_group) +
                                     " bytes (izer kbias.py); what would help: fewer biased output channels or using more quadrants"});
    }
  }
}

}  // namespace kiln::ai8x
