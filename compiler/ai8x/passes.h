// The passes of the ai8x back end. Each reads and rewrites a Network and reports findings into
// Network::diagnostics (through the rule files of compiler/ai8x/rules, which decide every code);
// none throws. Their order is compiler/ai8x/pipeline.cc's Ai8xPipeline(), the one list CompileAi8x
// runs; each can also be run alone (tests) or as a range (RunPasses).
#pragma once

#include <string>
#include <vector>

#include "compiler/ai8x/compile.h"
#include "compiler/ai8x/network.h"
#include "compiler/ai8x/resources.h"
#include "compiler/onnx/ir.h"

namespace kiln::ai8x {

/// BuildLayers — IR -> primitive layers (compiler/ai8x/build_layers.cc). Walks the data path
/// (everything computed from the graph input; weight/QAT sub-graphs are constant-derived and only
/// inspected) and makes one Layer per Conv / ConvTranspose / Gemm / MatMul, Relu / Abs, MaxPool /
/// AveragePool, and element-wise Add / Sub (`Neg`+`Add`) / BitwiseOr / BitwiseXor. Transparent on
/// the data path: the QAT quantize/clamp chain (Mul/Div/Round/Floor/Clip/Min/Max with constant
/// operands), Reshape/Flatten/Squeeze/Unsqueeze, zero Pad before AveragePool, Identity/Dropout
/// (already removed by the loader). Concat of data tensors becomes a multi-input (`in_sequences`)
/// consumer. Recognised (docs/specs/ai8x-izer-rules.md §2.3): QAT weight bits from
/// `Mul(2^(bits-1))` before `Round`; `Clip(-32768)` after a conv/linear = `output_width: 32`;
/// bias-less Linear as `Transpose`+`MatMul`; flatten before Linear (producer H*W > 1). Names: the
/// node scope (`/conv1/Conv` -> conv1, `/a/a.b/conv/Conv` -> a.b.conv), else the weight initializer
/// (`conv1.op.weight` -> conv1). The hardware part ends at the first op the accelerator cannot do:
/// every layer whose data reaches such an op or a graph output gets `output: true`, and one info
/// diagnostic (AI8X_HOST_OPS) lists what the host must still compute. Errors only for what makes
/// the model unusable as a whole (no/multiple inputs, no hardware layer, unknown shapes):
/// AI8X_INPUT. No ONNX integer is narrowed unchecked: a tensor/weight dimension outside 1..2^20 is
/// AI8X_DIMENSIONS, an attribute outside its range (pads/output_padding 0..2^15, kernel, stride,
/// dilation, group, pooling 1..2^15) the attribute's code (AI8X_PAD, AI8X_KERNEL, ...), and shapes
/// that disagree (Conv W.shape[1]*group != input channels, Gemm/MatMul inner dimension != input
/// features) AI8X_SHAPE, each naming the ONNX node.
void BuildLayers(const onnx_fe::Graph& graph, Network& net);

/// FlattenViews (compiler/ai8x/flatten.cc) — a conv whose input is its producer's (C, H, W) viewed as
/// (C*H*W, 1, 1) (Layer::channel_view, `x.view(N, -1, 1, 1)` before a 1x1 conv, e.g. ai85net6's
/// conv5) gets `flatten: true` and reads the producer's shape (izer.py L547-555) when it is an
/// unpadded, unstrided, ungrouped 1x1 Conv2d; otherwise AI8X_RESHAPE names what prevents it. The
/// flatten limits (pixels, pooling, streaming) are the flatten rule's (rules/operators.cc).
void FlattenViews(Network& net);

/// CutHostTail (compiler/ai8x/host_tail.cc; after fusion) — trailing ai8x.SoftwareLinear layers (a
/// Linear without a QAT weight chain, its ReLU fused, whose readers are all host tail, in an export
/// whose other weight layers carry bit widths) are removed from the network: ai8x-training
/// computes them on the host with a 16-bit clamped output (ai8x.py FusedSoftwareLinearReLU), which
/// the accelerator cannot reproduce. Their producers become outputs (`output: true`), and one info
/// AI8X_HOST_TAIL per cut layer says what the host must compute (weights, shapes, the rounding and
/// clamp of the quantized simulation). A float export (no bit widths anywhere) is left alone.
void CutHostTail(Network& net);

/// CheckWeightOrder (compiler/ai8x/rules/model.cc; docs/specs/ai8x-izer-rules.md §1.3 "Order
/// mapping to weights"). The izer assigns the checkpoint's `*.weight` tensors to the YAML's
/// conv/linear layers by position, and the YAML's layer order is the execution order, so the two
/// must agree. Compares the conv/linear layers' Layer::weight_position (their weight initializers'
/// model order, torch: state_dict = module definition order) with the layer order; layers without a
/// position (exporter-generated weight names, hand-built networks) are skipped, and so are layers
/// applying an earlier layer's module again (`weight_source`, WeightSource in resources.h). When
/// they disagree and the izer reads a quantized checkpoint (qat exports), independent branches are
/// reordered into weight order where a topological order allows it (one info AI8X_WEIGHT_ORDER);
/// otherwise one AI8X_WEIGHT_ORDER error names the first two layers (and ONNX nodes) out of order:
/// the modules must be defined in the order they are called.
void CheckWeightOrder(Network& net);

/// ApplyStructureOverrides (compiler/ai8x/overrides.cc) — applies LayerOverride entries whose key
/// is a layer key (output_width, quantization, activate) to the fused layer list, then rewords the
/// AI8X_WIDTH_NOT_DERIVED / AI8X_BITS_NOT_DERIVED warnings to say what the overrides settled.
/// Returns INVALID_ARGUMENT for unknown keys/values/layers (keys checked for all entries); every
/// such error names LAYER.KEY=VALUE.
Status ApplyStructureOverrides(Network& net, const std::vector<LayerOverride>& overrides);
/// ApplyPlacementOverrides — applies placement keys (streaming, processors, output_processors,
/// out_offset) after planning. Errors as above.
Status ApplyPlacementOverrides(Network& net, const std::vector<LayerOverride>& overrides);

/// FuseActivation (fuse.cc) — fuse a stand-alone Relu/Abs into the conv/linear that produces its
/// only input when that layer has no other reader and no activation yet. Two exact rewrites come
/// first: a Relu/Abs of data that cannot be negative (the output of an activation, or a max/avg
/// pooling of such data) is the identity and is dropped (Relu(Relu(x)) = Relu(x)); a Relu after a
/// max-pooling layer whose input is a conv/linear without activation moves into that conv/linear
/// (Relu(maxpool(x)) = maxpool(Relu(x)), Relu being monotone), when the conv/linear and the pooling
/// have no other reader. A stand-alone activation that cannot be fused is an error
/// (AI8X_ACTIVATION): the izer rejects activation on passthrough layers (izer.py L593-595).
void FuseActivation(Network& net);

/// FusePooling (fuse.cc) — fuse a pooling-only layer into the conv/linear that is its only reader.
/// Not into a flattening Linear (izer: flatten is incompatible with pooling). Left alone, a pooling
/// layer stays a passthrough layer with `max_pool`/`avg_pool`.
void FusePooling(Network& net);

/// FuseEltwise (fuse.cc) — fuse a stand-alone element-wise layer into the Conv2d/ConvTranspose2d
/// that is its only reader: at most one pooling in total (`pool_first: false` when the conv pools),
/// never into Conv1d (max7800x.py L504-506), not on MAX78002 when the conv has bias
/// (SUPPORT_MULTIPASS_ELTWISE_CONV_BIAS false, max7800x.py L2074-2080), not on MAX78000 when the
/// operands are multi-pass (EMULATE_ELTWISE_MP, max7800x.py L984-990).
void FuseEltwise(Network& net);

/// InsertWriteGaps (fuse.cc) — element-wise inputs must be interleaved
/// (docs/specs/ai8x-izer-rules.md §1.6): a producer read only by the element-wise layer gets
/// `write_gap: operands-1`; a producer with other readers (or the network input) gets a
/// `gap_<name>` passthrough copy with the write gap, whose output map equals its input map (fixes
/// the seed's per-x16 packing defect, max7800x.py L945-962). The copy is placed right after its
/// source when the element-wise operation is fused into a convolution, right before the
/// element-wise layer when it stands alone (the two placements of the hand-written ressimplenet and
/// MobileNetV2 files).
void InsertWriteGaps(Network& net);

/// InsertConcatCopies (concat_copy.cc) — concatenation layouts (docs/specs/ai8x-izer-rules.md
/// §1.6): a concatenation of more than 64 channels (read in passes) needs parts of one pass each
/// (else AI8X_CONCAT), written interleaved: a part read only by the concatenation gets
/// `write_gap: parts-1`; a part also read elsewhere, or the network input, gets a `copy_<name>`
/// passthrough layer with the write gap, placed right before the concatenating layer (as the
/// hand-written camvid-unet-large.yaml's `pt`). Single-pass concatenation copies only the network
/// input; its other shared parts are placed by AllocateProcessors.
void InsertConcatCopies(Network& net);

/// ChooseInputFormatAndStreaming (input_format.cc) — input format and streaming. Picks
/// `data_format` for the first layer (options.input_format; auto = the seed's rule: CHW for <= 16
/// channels) and marks the leading layers `streaming: true` when their input or output does not fit
/// one data-memory instance (max7800x.py L469-479, L601-609), as the streaming rules allow
/// (docs/specs/ai8x-izer-rules.md §1.8: a prefix of at most 8 layers, first layer HWC <= 16
/// channels on FIFO processors, last streaming layer padded and fitting). Streaming sets
/// Network::use_fifo (`--fifo`). When streaming cannot help: AI8X_DATA_MEMORY error naming the
/// layer and what would help.
void ChooseInputFormatAndStreaming(Network& net, const Ai8xOptions& options);

/// AllocateProcessors (allocate.cc) — processor allocation (docs/specs/ai8x-izer-rules.md §1.5,
/// §1.7; weight-cost order as the seed yamlwriter). Layers that read the same data share one map;
/// element-wise operands are written to their consumer's map; concatenation parts get consecutive
/// partial maps. Maps are contiguous runs (HWC) or one processor per group of 4 / 16 (CHW), placed
/// at multiples of 4 so that the fullest processor's kernel memory (izer `kern_len` with 4-word
/// alignment) stays lowest, preferring memories the producer does not read from. Sets
/// placed.processors and placed.output_processors of every layer.
void AllocateProcessors(Network& net, const Ai8xOptions& options);

/// PlanDataMemory (data_memory.cc) — data-memory planning. Per data-memory instance, assigns
/// placed.out_offset / placed.in_offset so that no layer writes over data a later layer still reads
/// (network input and outputs included), interleaves element-wise operands (base, base+4, ...;
/// consumer in_offset = base), places concatenation parts at one offset, reserves streaming rolling
/// buffers, and keeps every region inside the instance (izer size formulas). A region that fits
/// nowhere is an AI8X_DATA_MEMORY error naming the layer. Offsets come from best fit over the live
/// intervals (exact search when that fails, for up to 128 layers); a layer's output overlaps its
/// input (InPlaceLag) only when the plan does not fit otherwise, and then `--overlap-data` is
/// required (Network::izer_flags).
void PlanDataMemory(Network& net);

/// The in-place rule of PlanDataMemory (data_memory.cc): the input pixel (row-major index in the
/// layer's input, before pooling) that output pixel (r, c) of `l` and every later one read first;
/// the hardware reads no earlier pixel once it writes (r, c) (HWC, one pass, stride/pad/pooling).
int64_t InPlaceFirstPixelRead(const Layer& l, int r, int c);
/// Bytes by which `l`'s output must start below its input when the two overlap in place
/// (exact rule above plus a 64-byte slack); -1 when Kiln never overlaps this layer's data
/// (multi-pass, transposed, linear, flattening, gapped, element-wise, CHW or streaming layers).
int64_t InPlaceLag(const Layer& l);

/// CheckRules (rules/registry.cc) — runs the rule registry (compiler/ai8x/rules/rules.h): every
/// izer rule of docs/specs/ai8x-izer-rules.md §1.3-§1.8 Kiln can decide statically; each violation
/// is a diagnostic (docs/ai8x-diagnostics.md lists the codes).
void CheckRules(Network& net);

// The per-layer resource numbers (DataInBytes, DataOutBytes, KernelWords, BiasBytes,
// DefaultFinalOutputMap) are in compiler/ai8x/resources.h.

/// EmitYaml (yaml_writer.cc) — YAML (yaml-cpp), keys in the seed's order, seed comments, `0x%016x`
/// maps and `0x%04x` offsets.
std::string EmitYaml(const Network& net, const Ai8xOptions& options);

/// Report (compile.cc) — the last pass: diagnostics get their final layer positions (-1: fused
/// away), `r` gets ok, the per-layer rows, resources (kernel memory through KernelMemoryMap), izer
/// flags, resolved options (`resolved` plus the planned input format and fifo) and the diagnostics.
/// Moves names, node lists and diagnostics out of `net`.
void FillReport(Network& net, const Ai8xOptions& resolved, Ai8xCompileResult& r);

/// OnnxCheckpointProblem (compiler/ai8x/onnx_checkpoint.cc; run by the Report pass before
/// FillReport) — why the izer's ONNX weight reader (izer/onnxcp.py) cannot take the model's .onnx
/// (`graph`, BuildLayers' input) as the --checkpoint-file of `net`'s YAML, or "" when it can: QAT
/// weight chains; a YAML layer order that is not the order of the graph's Conv/Gemm nodes with
/// initializer weights (a weightless layer before a weight layer, ConvTranspose or MatMul
/// layers); a kernel check the reader gets wrong (biased layers with mixed kernel sizes, Conv1d).
/// Then the quantized checkpoint (ai8x-synthesis quantize.py) is needed. `graph` null (a network
/// built elsewhere): only the QAT chains are checked.
std::string OnnxCheckpointProblem(const onnx_fe::Graph* graph, const Network& net);

}  // namespace kiln::ai8x
