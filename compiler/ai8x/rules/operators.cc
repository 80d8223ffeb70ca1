// Rule family "operators": operator attributes and limits (AI8X_ACTIVATION, AI8X_PAD, AI8X_STRIDE,
// AI8X_KERNEL, AI8X_DILATION, AI8X_GROUPS, AI8X_FLATTEN, AI8X_LINEAR, AI8X_CHANNELS,
// AI8X_DIMENSIONS, AI8X_OUTPUT_WIDTH, AI8X_QUANTIZATION, AI8X_LAYER_COUNT). Sources: izer.py
// L414-417, L455-457, L507-579, L593-595; yamlcfg.py L197-198, L434-473; max7800x.py L504-682,
// L787-789, L909-914.
#include <algorithm>

#include "common/echo.h"
#include "compiler/ai8x/rules/checks.h"

namespace kiln::ai8x::rules {
namespace {

void Err(Network& net, const char* code, const Layer& l, const std::string& msg) {
  net.Report(Severity::kError, code, &l, msg);
}

}  // namespace

// ---- stage functions (rules.h) ------------------------------------------------------------------

std::string DimensionProblem(const std::string& what, const std::vector<int64_t>& v) {
  for (int64_t d : v) {
    if (d < 1 || d > kMaxDimension) {
      return what + " has dimension " + std::to_string(d) + " (shape " + IntsString(v) + "); dimensions must be 1.." +
             std::to_string(kMaxDimension);
    }
  }
  return "";
}

void ReportDimensions(Network& net, const Layer* layer, std::string message) {
  net.Report(Severity::kError, code::kDimensions, layer, std::move(message));
}

std::string AttributeProblem(const std::string& attr, const std::vector<int64_t>& v, int64_t lo) {
  for (int64_t x : v) {
    if (x < lo || x > kMaxAttribute) {
      return attr + " " + IntsString(v) + " is out of range (" + std::to_string(x) + " is not in " +
             std::to_string(lo) + ".." + std::to_string(kMaxAttribute) + ")";
    }
  }
  return "";
}

bool ConvAttributeInRange(Network& net, const Layer& l, ConvAttribute attr, const std::vector<int64_t>& v) {
  struct Info {
    const char* name;
    const char* code;
    int64_t lo;
  };
  static constexpr Info kInfo[] = {
      {"kernel_shape", code::kKernel, 1}, {"pads", code::kPad, 0},      {"strides", code::kStride, 1},
      {"dilations", code::kDilation, 1},  {"group", code::kGroups, 1}, {"output_padding", code::kPad, 0},
  };
  const Info& info = kInfo[static_cast<int>(attr)];
  std::string why = AttributeProblem(info.name, v, info.lo);
  if (why.empty()) return true;
  Err(net, info.code, l, why);
  return false;
}

bool ResolveAutoPad(Network& net, const Layer& l, const std::string& auto_pad, const std::vector<int64_t>& in,
                    const std::vector<int64_t>& kernel, const std::vector<int64_t>& strides,
                    const std::vector<int64_t>& dilations, std::vector<int64_t>* pads) {
  if (auto_pad.empty() || auto_pad == "NOTSET") return true;
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  if (!same && auto_pad != "VALID") {
    Err(net, code::kPad, l,
        "auto_pad '" + EscapeForEcho(auto_pad, 64) + "' is not an ONNX value (NOTSET, SAME_UPPER, SAME_LOWER, VALID)");
    return false;
  }
  if (l.op == OpKind::kConvTranspose2d && same) {
    Err(net, code::kPad, l, "auto_pad " + auto_pad + " on a ConvTranspose is not supported; give explicit pads");
    return false;
  }
  const size_t r = kernel.size();
  pads->assign(2 * r, 0);
  if (!same) return true;
  for (size_t i = 0; i < r && i < in.size(); ++i) {
    const int64_t s = i < strides.size() ? std::max<int64_t>(strides[i], 1) : 1;
    const int64_t d = i < dilations.size() ? std::max<int64_t>(dilations[i], 1) : 1;
    const int64_t out = (in[i] + s - 1) / s;
    const int64_t total = std::max<int64_t>((out - 1) * s + (kernel[i] - 1) * d + 1 - in[i], 0);
    const int64_t small = total / 2, big = total - small;
    (*pads)[i] = auto_pad == "SAME_UPPER" ? small : big;
    (*pads)[i + r] = auto_pad == "SAME_UPPER" ? big : small;
  }
  return true;
}

void CheckUniformPads(Network& net, const Layer& l, const std::vector<int64_t>& pads) {
  for (int64_t x : pads) {
    if (x != pads[0]) {
      Err(net, code::kPad, l,
          "asymmetric padding " + std::to_string(pads[0]) + "/" + std::to_string(x) +
              " is not supported (the izer has one `pad` per layer)");
      return;
    }
  }
}

void CheckSquareStrides(Network& net, const Layer& l, const std::vector<int64_t>& strides) {
  for (int64_t s : strides) {
    if (s != strides[0]) {
      Err(net, code::kStride, l, "non-square stride is not supported");
      return;
    }
  }
}

void ReportUnfusedActivation(Network& net, const Layer& l, const std::string& why) {
  Err(net, code::kActivation, l,
      "activation cannot be fused: " + why + " (the izer allows activation only on conv/linear layers, izer.py L593-595)");
}

// ---- registry checks (checks.h) -----------------------------------------------------------------

// yamlcfg.py L197-198; MAX78002 adds a hidden layer for avg pool after eltwise (izer.py L602-606).
void CheckLayerCount(RuleContext& c) {
  Network& net = c.net;
  int hidden = 0;
  for (size_t i = 1; i < c.n; ++i) {
    const Layer& l = net.layers[i];
    if (c.spec.require_passthrough_avgpool_after_eltwise && l.pool == PoolType::kAvg && l.inputs.size() == 1) {
      const Layer* p = net.Find(l.inputs[0]);
      if (p != nullptr && p->operands > 1) ++hidden;
    }
  }
  if (static_cast<int>(c.n) + hidden > c.spec.max_layers && !net.lift_limits) {
    net.Report(Severity::kError, code::kLayerCount, nullptr,
               std::to_string(c.n) + " layers" +
                   (hidden ? " (+" + std::to_string(hidden) + " hidden avg-pool reset layers)" : "") + " exceed the " +
                   c.spec.name + " limit of " + std::to_string(c.spec.max_layers) + " (yamlcfg.py L197-198)");
  }
}

// Channels (max7800x.py L909-914); dimensions (izer.py MAX_ROW_COL; tornadocnn FRAME_SIZE_MAX).
void CheckChannelsAndDimensions(RuleContext& c, const Layer& l, size_t) {
  const ChipSpec& spec = c.spec;
  if (l.in_shape.c > spec.max_channels || l.out_shape.c > spec.max_channels) {
    Err(c.net, code::kChannels, l, "more than " + std::to_string(spec.max_channels) + " channels");
  }
  if (l.in_shape.h > spec.max_row_col || l.in_shape.w > spec.max_row_col) {
    Err(c.net, code::kDimensions, l,
        "input " + ShapeString(l.in_shape, l.one_d) + " exceeds " + std::to_string(spec.max_row_col) + " rows/columns");
  }
  if (l.in_shape.pixels() * ComputePasses(l.in_shape.c).passes >= spec.frame_size_max) {
    Err(c.net, code::kDimensions, l, "H*W*passes exceeds FRAME_SIZE_MAX (2^21)");
  }
}

// Kernel sizes and the ConvTranspose2d stride/output padding (izer.py L507-579, yamlcfg.py
// L434-473, max7800x.py L639-653).
void CheckKernelByOperator(RuleContext& c, const Layer& l, size_t) {
  switch (l.op) {
    case OpKind::kConv2d:
      if (!((l.kernel_h == 1 && l.kernel_w == 1) || (l.kernel_h == 3 && l.kernel_w == 3))) {
        Err(c.net, code::kKernel, l,
            "Conv2d kernels must be 1x1 or 3x3, not " + std::to_string(l.kernel_h) + "x" + std::to_string(l.kernel_w));
      }
      break;
    case OpKind::kConvTranspose2d:
      if (l.kernel_h != 3 || l.kernel_w != 3) Err(c.net, code::kKernel, l, "ConvTranspose2d kernels must be 3x3");
      if (l.stride != 2) Err(c.net, code::kStride, l, "ConvTranspose2d stride must be 2 (yamlcfg.py L458-473)");
      if (l.output_padding != 1) {
        Err(c.net, code::kPad, l, "ConvTranspose2d output padding must be 1 (max7800x.py L639-653)");
      }
      break;
    case OpKind::kConv1d:
      if (l.kernel_h < 1 || l.kernel_h > 9) Err(c.net, code::kKernel, l, "Conv1d kernel must be 1..9");
      break;
    case OpKind::kLinear:
    case OpKind::kNone:
      break;
  }
}

// Conv1d padding on ai87 (max7800x.py L508-511), Linear features (ai8x.py Linear), passthrough
// layers (izer.py L593-595, max7800x.py L787-789).
void CheckOperatorLimits(RuleContext& c, const Layer& l, size_t) {
  const ChipSpec& spec = c.spec;
  switch (l.op) {
    case OpKind::kConv1d:
      if (!spec.support_multipass_padded_conv1d && l.in_shape.c > 64 && l.pad != 0) {
        Err(c.net, code::kPad, l,
            std::string(spec.name) + ": Conv1d with more than 64 input channels needs pad 0 (max7800x.py L508-511)");
      }
      break;
    case OpKind::kLinear:
      if (l.in_channels_w > spec.max_linear_features || l.out_shape.c > spec.max_linear_features) {
        Err(c.net, code::kLinear, l, "Linear layers take at most 1024 input and output features (ai8x.py Linear)");
      }
      if (l.pool != PoolType::kNone) Err(c.net, code::kFlatten, l, "a Linear layer cannot pool");
      break;
    case OpKind::kNone:
      if (l.activation != Activation::kNone) {
        Err(c.net, code::kActivation, l, "activation on a passthrough layer (izer.py L593-595)");
      }
      if (l.output_width != 8) {
        Err(c.net, code::kOutputWidth, l, "passthrough layers must have output_width 8 (max7800x.py L787-789)");
      }
      break;
    case OpKind::kConv2d:
    case OpKind::kConvTranspose2d:
      break;
  }
}

// Stride, padding and dilation of convolutions (izer.py L526-532, L557-566, L577-579,
// max7800x.py L530-532); depthwise (max7800x.py L655-682, L963-975).
void CheckConvAttributes(RuleContext& c, const Layer& l, size_t) {
  Network& net = c.net;
  if (l.op != OpKind::kConvTranspose2d && l.op != OpKind::kNone && l.op != OpKind::kLinear && l.stride != 1) {
    Err(net, code::kStride, l, "stride must be 1 (izer.py L526-532, L564-566)");
  }
  if (l.is_conv()) {
    if (l.pad < 0 || l.pad >= 3) Err(net, code::kPad, l, "pad must be 0, 1 or 2 (izer.py L557-563)");
    int k = l.op == OpKind::kConv1d ? l.kernel_h : std::min(l.kernel_h, l.kernel_w);
    if (l.op != OpKind::kConvTranspose2d && l.pad >= k && l.pad > 0) {
      Err(net, code::kPad, l, "pad " + std::to_string(l.pad) + " must be smaller than the kernel (izer.py L577-579)");
    }
    if (l.dilation != 1 && l.op != OpKind::kConv1d) {
      Err(net, code::kDilation, l, "dilation > 1 is supported only for Conv1d (max7800x.py L530-532)");
    }
  }
  if (l.groups > 1) {
    if (!c.spec.support_depthwise) {
      Err(net, code::kGroups, l, std::string("groups > 1 (depthwise) is not supported on ") + c.spec.name);
    } else if (l.groups != l.in_shape.c || l.groups != l.out_shape.c) {
      Err(net, code::kGroups, l, "groups must equal input and output channels");
    }
    if (l.placed.output_processors != 0 && std::countr_zero(l.placed.output_processors) % 4 != 0) {
      Err(net, code::kGroups, l, "depthwise output processors must start at a multiple of 4 (max7800x.py L965-970)");
    }
  }
}

// Flatten (izer.py L547-555; with pooling: max7800x.py L660-680).
void CheckFlatten(RuleContext& c, const Layer& l, size_t) {
  if (!l.flatten) return;
  if (l.pool != PoolType::kNone) {
    Err(c.net, code::kFlatten, l, "flatten cannot be combined with pooling (max7800x.py L660-680)");
  }
  Shape3 pooled = l.pooled_shape();
  if (pooled.pixels() > c.spec.max_flatten_pixels) {
    Err(c.net, code::kFlatten, l,
        "flatten of " + std::to_string(pooled.h) + "x" + std::to_string(pooled.w) + " exceeds 256 pixels (izer.py L547-550)");
  }
  if (l.in_shape.elements() > 16384) Err(c.net, code::kFlatten, l, "flatten input C*H*W exceeds 16384");
  if (l.placed.streaming) Err(c.net, code::kFlatten, l, "flatten cannot stream");
}

// Output width / activation (izer.py L414-417, L455-457); weight bits.
void CheckOutputWidthAndQuantization(RuleContext& c, const Layer& l, size_t i) {
  Network& net = c.net;
  if (l.output_width != 8 && l.output_width != 32) Err(net, code::kOutputWidth, l, "output_width must be 8 or 32");
  if (l.output_width == 32) {
    if (l.activation != Activation::kNone) {
      Err(net, code::kOutputWidth, l, "32-bit output requires no activation (izer.py L414-417)");
    }
    if (i + 1 != c.n) {
      net.Report(Severity::kWarning, code::kOutputWidth, &l, "32-bit output on an intermediate layer (izer.py L455-457)");
    }
  }
  if (l.quantization != 1 && l.quantization != 2 && l.quantization != 4 && l.quantization != 8) {
    Err(net, code::kQuantization, l, "quantization must be 1, 2, 4 or 8");
  }
}

}  // namespace kiln::ai8x::rules
