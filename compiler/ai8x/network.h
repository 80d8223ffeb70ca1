// The ai8x layer list that every compiler/ai8x pass reads and rewrites, and the diagnostics the
// passes report.
//
// A Network is an ordered list of Layers, the order being the izer's layer sequence (and, for
// conv/linear layers, the weight order: the izer assigns checkpoint weights to YAML layers by
// position, docs/specs/ai8x-izer-rules.md §1.3 "Order mapping to weights"). Layers refer to their
// inputs by stable ids (Layer::id), never by position, so passes may insert and remove layers
// freely; `kNetworkInput` (-1) names the network input.
//
// Before the fusion passes a Layer is one primitive (a conv/linear, an activation, a pooling or
// an element-wise operation); after them it is one izer layer. Fields follow the izer's YAML keys
// (docs/specs/ai8x-izer-rules.md §1.3).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/ai8x/chip.h"

namespace kiln::ai8x {

inline constexpr int kNetworkInput = -1;

/// Hardware operator (`op:`). kNone is the izer's `passthrough`/`none`.
enum class OpKind { kNone, kConv1d, kConv2d, kConvTranspose2d, kLinear };
enum class Activation { kNone, kRelu, kAbs };
enum class PoolType { kNone, kMax, kAvg };
/// `eltwise:` operation (or the operation of a stand-alone element-wise layer).
enum class EltwiseOp { kNone, kAdd, kSub, kOr, kXor };

const char* OpKindName(OpKind op);          // "conv2d", "passthrough", ...
const char* ActivationName(Activation a);  // "ReLU", "Abs", "None"
const char* EltwiseName(EltwiseOp e);      // "add", "sub", "or", "xor"

/// Data shape of one tensor as the accelerator stores it: channels x height x width. 1-D data
/// (Conv1d, Linear) has w == 1, as in the izer ([L, 1]).
struct Shape3 {
  int c = 0;
  int h = 1;
  int w = 1;
  int64_t pixels() const { return int64_t{h} * w; }
  int64_t elements() const { return int64_t{c} * h * w; }
  bool operator==(const Shape3&) const = default;
};
std::string ShapeString(const Shape3& s, bool one_d);  // "(16, 32, 32)" / "(128, 128)"
std::string IntsString(const std::vector<int64_t>& v);  // "[1,2,3]"

/// What building and fusion decide about a layer (BuildLayers, the Fuse* passes, InsertWriteGaps,
/// ApplyStructureOverrides): the operation, its attributes, shapes and producers. The planning
/// passes read these and write only Layer::placed.
struct LayerDef {
  int id = 0;                 ///< stable identity; inputs refer to it
  std::string name;           ///< izer `name:` (unique), from the ONNX scope or weight name
  std::vector<std::string> onnx_nodes;  ///< ONNX nodes this layer implements (first = main one)
  std::string comment;        ///< "conv2.pool and conv2 fused with conv2.activate"

  OpKind op = OpKind::kNone;
  int kernel_h = 1, kernel_w = 1;  ///< conv1d: kernel_h = k, kernel_w = 1
  int pad = 0;
  int stride = 1;
  int dilation = 1;
  int groups = 1;
  int output_padding = 0;     ///< ConvTranspose2d output padding (izer requires 1)
  bool has_bias = false;
  int64_t weight_count = 0;   ///< number of weights (izer `weights_vol`)
  int in_channels_w = 0;      ///< input channels the weights expect (Linear: in_features)
  /// ONNX initializer that holds the weights, at the start of the QAT chain (`conv1.op.weight`;
  /// float exports after BN folding: the folded constant, e.g. `onnx::Conv_135`); "" when none.
  std::string weight_initializer;
  /// Position of weight_initializer in the model's initializer list
  /// (onnx_fe::Graph::initializer_order(), torch: state_dict order); -1 when unknown or when the
  /// name is exporter-generated (`onnx::...`, digits: folded constants, listed after the named
  /// parameters whatever their module order). CheckWeightOrder compares these.
  int weight_position = -1;

  Activation activation = Activation::kNone;
  PoolType pool = PoolType::kNone;
  int pool_h = 1, pool_w = 1;
  int pool_stride_h = 1, pool_stride_w = 1;
  int pool_dilation = 1;
  bool pool_first = true;     ///< only meaningful with eltwise + pooling

  EltwiseOp eltwise = EltwiseOp::kNone;
  int operands = 1;           ///< element-wise operand count (2..16)
  bool flatten = false;

  int output_width = 8;       ///< 8 or 32
  bool output_width_known = true;  ///< false when the export cannot tell (simplified form)
  int quantization = 8;       ///< weight bits: 1, 2, 4, 8
  bool quantization_known = false;  ///< derived from the QAT weight chain or an override

  /// Producers: layer ids or kNetworkInput. Element-wise: the operands in operand order;
  /// concatenation: the parts in channel order. Empty only before the builder fills it.
  std::vector<int> inputs;
  Shape3 in_shape;            ///< one operand as stored (concat: all parts), before pooling
  Shape3 out_shape;           ///< output as stored
  bool one_d = false;         ///< 1-D data (Conv1d / Linear); printed as (C, L)

  int write_gap = 0;           ///< InsertWriteGaps: interleaved output for an element-wise reader
  /// InsertWriteGaps: reads a producer's interleaved output in place (`read_gap`, MAX78002:
  /// SUPPORT_MULTIPASS_STRIDE) instead of through a `gap_*` copy; equals that producer's write_gap.
  int read_gap = 0;
  bool output = false;        ///< its data leaves the accelerator (`output: true`)
  bool gap_layer = false;     ///< inserted write_gap passthrough
  bool in_dim = false;        ///< the data is reshaped between producer and layer: emit `in_dim`
  /// BuildLayers: a conv reads its producer's (C, H, W) viewed across channels as (C*H*W, 1, 1)
  /// (`x.view(N, -1, 1, 1)`); in_shape is then the view and `viewed_from` the producer's shape.
  /// FlattenViews (flatten.cc) turns it into `flatten: true` or reports AI8X_RESHAPE.
  bool channel_view = false;
  Shape3 viewed_from;

  bool is_conv() const { return op == OpKind::kConv1d || op == OpKind::kConv2d || op == OpKind::kConvTranspose2d; }
  bool has_weights() const { return op != OpKind::kNone; }
  bool is_pool_only() const { return op == OpKind::kNone && pool != PoolType::kNone && eltwise == EltwiseOp::kNone && activation == Activation::kNone; }
  bool is_activation_only() const { return op == OpKind::kNone && pool == PoolType::kNone && eltwise == EltwiseOp::kNone && activation != Activation::kNone; }
  bool is_eltwise_only() const { return op == OpKind::kNone && eltwise != EltwiseOp::kNone && pool == PoolType::kNone && activation == Activation::kNone; }
  /// Channels of one operand as the processors see it (flatten: before flattening).
  int in_channels() const { return in_shape.c; }
  int out_channels() const { return out_shape.c; }
  /// Shape after the layer's pooling (what the convolution sees).
  Shape3 pooled_shape() const;
};

/// What the planning passes decide about a layer (ChooseInputFormatAndStreaming: chw_input,
/// streaming; AllocateProcessors: the maps; PlanDataMemory: the offsets); ApplyPlacementOverrides
/// replaces what the user names.
struct Placement {
  uint64_t processors = 0;         ///< input processor map (bit p = processor p)
  uint64_t output_processors = 0;  ///< output processor map
  int in_offset = 0;               ///< data-memory byte offset of the input (per instance)
  int out_offset = 0;              ///< data-memory byte offset of the output (per instance)
  bool streaming = false;          ///< `streaming: true`
  bool chw_input = false;          ///< first layer only: `data_format: CHW`
};

/// One izer layer (or, before fusion, one primitive): its definition plus its placement.
struct Layer : LayerDef {
  Placement placed;
};

/// Multi-pass arithmetic of docs/specs/ai8x-izer-rules.md §1.5 (max7800x.py L451-468, L915-941).
struct Passes {
  int passes = 1;      ///< ceil(ch / 64)
  int processors = 0;  ///< ceil(ch / passes), rounded up to a multiple of 4 when ch > 64
};
inline Passes ComputePasses(int channels) {
  Passes p;
  if (channels <= 0) return {1, 0};
  p.passes = (channels + 63) / 64;
  p.processors = (channels + p.passes - 1) / p.passes;
  if (channels > 64) p.processors = (p.processors + 3) / 4 * 4;
  if (p.processors > 64) p.processors = 64;
  return p;
}


enum class Severity { kInfo, kWarning, kError };
const char* SeverityName(Severity s);  // "info", "warning", "error"

/// One finding. `code` is a stable identifier: a compiler/ai8x/codes.h constant, documented in
/// docs/ai8x-diagnostics.md.
struct Diagnostic {
  Severity severity = Severity::kInfo;
  std::string code;
  int layer = -1;          ///< index in the final layer list, -1 when not about one layer
  std::string layer_name;  ///< izer layer name, "" when not about one layer
  std::string onnx_node;   ///< ONNX node name, "" when not about one node
  std::string message;
};

/// One ai8xize.py command-line flag the plan relies on, with one line saying why (printed next to
/// the command line). Filled by the pass that makes the decision (Network::RequireIzerFlag):
/// `--fifo` by ChooseInputFormatAndStreaming / ApplyPlacementOverrides, `--overlap-data` by
/// PlanDataMemory. `--device` is not a plan flag (it is the chip option).
struct IzerFlag {
  std::string flag;    ///< "--fifo", "--overlap-data", ...
  std::string reason;  ///< "layer 0 streams its input through the FIFOs"
};

/// The layer list plus what the passes need to know about the network as a whole.
struct Network {
  Chip chip = Chip::kMAX78000;
  std::vector<Layer> layers;
  Shape3 input_shape;      ///< network input (C, H, W); 1-D: (C, L, 1)
  bool input_one_d = false;
  std::string input_name;  ///< ONNX graph input
  bool chw_input = false;  ///< input layer reads CHW data (`data_format: CHW`)
  bool use_fifo = false;   ///< the first layer streams: the izer needs `--fifo`
  /// ai8xize.py flags this plan needs, in the order they were required (no duplicates).
  std::vector<IzerFlag> izer_flags;
  /// BuildLayers: some weights reach their conv/linear through a QAT quantize chain (qat form).
  /// izer/onnxcp.py reads only weights that are initializers of the Conv/Gemm itself.
  bool qat_weight_chains = false;
  int next_id = 0;         ///< next unused Layer::id
  bool lift_limits = false;  ///< bench only: skip layer-count, kernel- and bias-memory limits
  std::vector<Diagnostic> diagnostics;

  const ChipSpec& spec() const { return GetChipSpec(chip); }
  /// Adds `flag` to izer_flags (once; a second reason for the same flag is ignored).
  void RequireIzerFlag(const std::string& flag, std::string reason);
  /// Position of the layer with `id`, or -1. O(1) after Reindex(); falls back to a scan.
  int IndexOf(int id) const;
  Layer* Find(int id);
  const Layer* Find(int id) const;
  /// Rebuilds the id -> position map; call after inserting or removing layers.
  void Reindex();
  /// Appends a layer and indexes it (O(1)).
  Layer& Append(Layer l);
  /// Ids of the layers that read `id`'s output (in sequence order; a layer reading it twice
  /// appears twice).
  std::vector<int> ConsumersOf(int id) const;
  /// Output shape of `id` (kNetworkInput: the input shape).
  Shape3 OutputShapeOf(int id) const;

  /// Adds a finding (`code`: a compiler/ai8x/codes.h constant; `layer` may be null). A layer has
  /// at most one finding per severity and code: a second one about the same layer (by name) is
  /// joined to the first as "; also: MESSAGE" (unless its message is already there), so one
  /// problem seen at two stages (e.g. fusion and the rule checks) reads as one finding.
  void Report(Severity s, std::string code, const Layer* layer, std::string message);

 private:
  /// Position in `diagnostics` of the finding of one (severity, code, layer name), or its size
  /// when there is none; the index is rebuilt when `diagnostics` was edited from outside.
  size_t FindingOf(Severity s, const std::string& code, const std::string& layer_name);

  std::unordered_map<int, int> index_;
  std::unordered_map<std::string, size_t> finding_index_;
};

}  // namespace kiln::ai8x
