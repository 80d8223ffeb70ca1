// The ai8x rule checks (docs/specs/ai8x-izer-rules.md §1.3-§1.8, each check citing the izer code it
// mirrors).
//
// Every diagnostic code is decided in exactly one file of this folder (compiler/ai8x/codes.h names
// it), one file per family:
//   model.cc        what the ONNX export is and carries (input, host ops, weight order, shapes)
//   operators.cc    operator attributes and limits (kernel, pad, stride, dilation, groups, flatten,
//                   linear, channels, dimensions, output width, quantization, layer count)
//   pooling.cc      pooling sizes, strides, dilation
//   output_size.cc  a conv kernel that does not fit its input (no output pixel)
//   eltwise.cc      element-wise operands (maps, write gaps, multi-pass and bias limits)
//   processors.cc   processor maps, CHW input, passthrough maps, concatenation, quadrant 0
//   data_memory.cc  data-memory instance bounds and planner failures
//   streaming.cc    the streaming prefix and FIFO input
//   kernel_memory.cc, bias_memory.cc  the two weight memories
//
// CheckRules (compiler/ai8x/passes.h) runs the registry below over the planned network. Passes that
// meet a rule's condition at their own stage (the builder reading ONNX attributes, fusion,
// planning) call the functions declared here, grouped by the file that defines them, instead of
// reporting a code themselves. A layer keeps one finding per severity and code (Network::Report
// joins the explanations), so a problem seen at two stages reads as one finding.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/ai8x/codes.h"
#include "compiler/ai8x/kernel_memory.h"
#include "compiler/ai8x/network.h"

namespace kiln::ai8x::rules {

/// What the checks of one CheckRules run share.
struct RuleContext {
  explicit RuleContext(Network& network) : net(network), spec(network.spec()), n(network.layers.size()) {}

  Network& net;
  const ChipSpec& spec;
  size_t n = 0;                   ///< layer count
  KernelMemoryMap kernel_memory;  ///< filled layer by layer by the kernel-memory check
};

/// One registered check. Network checks see the whole list; layer checks run for each layer in
/// sequence order (all of one layer's checks, in registry order, before the next layer's).
struct Rule {
  enum Scope { kNetworkFirst, kLayer, kNetworkLast };
  std::string_view name;
  std::string_view file;  ///< the family file that defines it, relative to compiler/ai8x
  Scope scope;
  void (*layer)(RuleContext&, const Layer&, size_t index) = nullptr;
  void (*network)(RuleContext&) = nullptr;
};

/// The checks in the order they run (rules/registry.cc). The order is the order of the findings.
std::span<const Rule> Registry();

// ---- rules/model.cc -------------------------------------------------------------------------

/// AI8X_INPUT (no layer): the model's input is unusable.
void ReportInput(Network& net, std::string message);
/// AI8X_NO_LAYERS: nothing runs on the accelerator; `host_ops` is what the data meets first.
void ReportNoLayers(Network& net, const std::vector<std::string>& host_ops);
/// AI8X_HOST_OPS (info) when `host_ops` is not empty; AI8X_HOST_AFTER_HOST (warning) when
/// `dropped` (accelerator ops after host work) is not empty.
void ReportHostOps(Network& net, const std::vector<std::string>& host_ops, const std::vector<std::string>& dropped);
/// AI8X_WIDTH_NOT_DERIVED when the export has no clamps (`saw_clamp` false) and
/// AI8X_BITS_NOT_DERIVED when weight layers lack a bit width.
void ReportNotDerived(Network& net, bool saw_clamp);
/// Rewords those two warnings once overrides applied (`widened`: layers whose output_width came
/// from an override); they stay warnings (the values are the user's, not the model's), except
/// that AI8X_BITS_NOT_DERIVED goes once every weight layer has a `quantization` override.
void RewordNotDerived(Network& net, const std::vector<std::string>& widened);
/// Messages of the two warnings (exposed for tests).
std::string WidthNotDerivedMessage(const std::vector<std::string>& overridden);
std::string BitsNotDerivedMessage(const std::vector<std::string>& missing, size_t weight_layers);
/// AI8X_SHAPE: Conv weights `wshape` (`w_in` input channels, `w_out` output channels, group
/// included) disagree with the input (`l.in_shape`) or the node's output channels `out_c` (< 0:
/// unknown).
/// AI8X_SHAPE: a Conv/ConvTranspose bias whose shape is not [output channels] (the izer: "Output
/// channel count ... does not match the number of bias values", kbias.py).
void CheckConvBiasShape(Network& net, const Layer& l, const std::vector<int64_t>& bshape, int64_t w_out);
void CheckConvWeightShape(Network& net, const Layer& l, const std::vector<int64_t>& wshape, int64_t w_in,
                          int64_t w_out, int out_c);
/// AI8X_SHAPE: Gemm/MatMul weights `wshape` take `in_features` but the input `src` has other.
void CheckLinearWeightShape(Network& net, const Layer& l, const std::vector<int64_t>& wshape, int64_t in_features,
                            const Shape3& src);
/// AI8X_RESHAPE: `l`'s input is viewed as `to` (a Reshape/Flatten before it). Returns true when
/// the izer can express it (`in_dim`: same element count and channels).
bool CheckReshape(Network& net, const Layer& l, const Shape3& to);
/// AI8X_RESHAPE for a conv that reads its input viewed across channels (Layer::channel_view) when
/// `flatten: true` cannot express it; `why` names the izer condition that fails.
void ReportChannelView(Network& net, const Layer& l, const std::string& why);
/// AI8X_HOST_TAIL (info): `cut` is left off the YAML as host work; `host_must` says what the host
/// computes.
void ReportHostTail(Network& net, const Layer& cut, const std::string& host_must);
/// Restates AI8X_BITS_NOT_DERIVED for the layers that remain after layers were removed (dropped
/// when every remaining weight layer has its bit width).
void RestateBitsNotDerived(Network& net);

// ---- rules/operators.cc ---------------------------------------------------------------------

/// Range of every ONNX dimension Kiln narrows to `int`: 1..2^20 (far above the hardware limits,
/// so the rule checks still report the real limit).
inline constexpr int64_t kMaxDimension = int64_t{1} << 20;
/// Range of kernel, pad, stride, dilation, group and pooling attributes: ..2^15.
inline constexpr int64_t kMaxAttribute = int64_t{1} << 15;
/// "" when every dimension of `v` lies in 1..kMaxDimension, else what is wrong (naming `what`).
std::string DimensionProblem(const std::string& what, const std::vector<int64_t>& v);
/// AI8X_DIMENSIONS for a tensor or weight dimension out of range (`layer` may be null).
void ReportDimensions(Network& net, const Layer* layer, std::string message);
/// "" when every value of attribute `attr` lies in lo..kMaxAttribute, else what is wrong.
std::string AttributeProblem(const std::string& attr, const std::vector<int64_t>& v, int64_t lo);

/// The Conv/ConvTranspose attributes the builder narrows.
enum class ConvAttribute { kKernelShape, kPads, kStrides, kDilations, kGroup, kOutputPadding };
/// False (and that attribute's code: AI8X_KERNEL, AI8X_PAD, AI8X_STRIDE, AI8X_DILATION,
/// AI8X_GROUPS) when a value is out of range.
bool ConvAttributeInRange(Network& net, const Layer& l, ConvAttribute attr, const std::vector<int64_t>& v);
/// The explicit pads [begin..., end...] an ONNX `auto_pad` stands for (onnx/defs/nn/defs.cc:
/// VALID none; SAME_UPPER / SAME_LOWER the total max((ceil(in / s) - 1)·s + (k - 1)·d + 1 - in, 0)
/// per axis, its odd unit at the end / the beginning), over the spatial dims `in`; NOTSET: `pads`
/// unchanged. False with AI8X_PAD naming the value for anything else, and for auto_pad on a
/// ConvTranspose with SAME_* (its SAME padding depends on output_shape; give explicit pads).
bool ResolveAutoPad(Network& net, const Layer& l, const std::string& auto_pad, const std::vector<int64_t>& in,
                    const std::vector<int64_t>& kernel, const std::vector<int64_t>& strides,
                    const std::vector<int64_t>& dilations, std::vector<int64_t>* pads);
/// AI8X_PAD for asymmetric pads, AI8X_STRIDE for non-square strides (the izer has one of each).
void CheckUniformPads(Network& net, const Layer& l, const std::vector<int64_t>& pads);
void CheckSquareStrides(Network& net, const Layer& l, const std::vector<int64_t>& strides);
/// AI8X_ACTIVATION: a stand-alone activation that cannot be fused, and why.
void ReportUnfusedActivation(Network& net, const Layer& l, const std::string& why);

// ---- rules/pooling.cc -----------------------------------------------------------------------

/// False (AI8X_POOL) when a value of pooling attribute `attr` is outside 1..kMaxAttribute.
bool PoolAttributeInRange(Network& net, const Layer& l, const std::string& attr, const std::vector<int64_t>& v);

// ---- rules/eltwise.cc -----------------------------------------------------------------------

/// AI8X_ELTWISE when the second operand's shape differs from `l.in_shape`.
void CheckOperandShapes(Network& net, const Layer& l, const Shape3& other);

// ---- rules/processors.cc --------------------------------------------------------------------

/// AI8X_INPUT_FORMAT: CHW was requested but the first layer cannot read CHW.
void ReportChwNotPossible(Network& net, const Layer& first);
/// AI8X_PROCESSORS for a layer of a shared-map group: needs `need` processors where the group has
/// `group_count`, or more than 64.
void CheckSharedMapCount(Network& net, const Layer& l, int need, int group_count);
/// AI8X_CONCAT: `l`'s output is concatenated and also read elsewhere.
void ReportConcatAlsoReadElsewhere(Network& net, const Layer& l);
/// AI8X_CONCAT: a concatenation of more than 64 channels whose parts are not one pass each.
void ReportUnevenMultipassConcat(Network& net, const Layer& concat, int passes, int processors);

// ---- rules/data_memory.cc -------------------------------------------------------------------

/// AI8X_DATA_MEMORY: layer `big` does not fit one instance and streaming cannot help (`why`).
void ReportStreamingCannotHelp(Network& net, const Layer& big, const std::string& why);
/// AI8X_DATA_MEMORY: the network input needs `bytes` per instance, more than one instance.
void ReportInputTooLarge(Network& net, const Layer& first, int64_t bytes);
/// AI8X_DATA_MEMORY: no free region of `bytes` for `l`'s output; `reader` (may be null) is the
/// element-wise / concatenating reader whose whole input region was being reserved.
void ReportNoRoom(Network& net, const Layer& l, int64_t bytes, const Layer* reader);

// ---- rules/streaming.cc ---------------------------------------------------------------------

/// AI8X_STREAMING (info): layers 0..last stream and the izer needs --fifo.
void ReportStreamingPrefix(Network& net, const Layer& last, int last_index);

}  // namespace kiln::ai8x::rules
