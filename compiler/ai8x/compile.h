// Public entry point of the ai8x back end: ONNX IR in, izer network YAML + report out.
//
//   auto model = kiln::onnx_fe::LoadModel(bytes);                  // compiler/onnx
//   kiln::ai8x::Ai8xOptions opts;  opts.chip = Chip::kMAX78000; opts.arch = "ai85net5";
//   auto r = kiln::ai8x::CompileAi8x(**model, opts);
//   if (!r.ok()) -> the request itself was unusable (bad option value): INVALID_ARGUMENT.
//   r->ok == false -> the model breaks a hardware rule; r->diagnostics say which and why.
//
// The structs map one to one onto kiln.v1 CompileAi8xRequest / CompileAi8xResponse
// (proto/kiln/v1):
// Ai8xOptions = the request minus the model, Ai8xCompileResult = the response. Every field is
// documented where it is declared.
//
// The passes run in the order of compiler/ai8x/pipeline.h (Ai8xPipeline(); each declared in
// compiler/ai8x/passes.h and testable alone).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "compiler/ai8x/chip.h"
#include "compiler/ai8x/network.h"
#include "compiler/onnx/ir.h"

namespace kiln::ai8x {

/// Input data format of the first layer (`data_format:`).
enum class InputFormat {
  kAuto,  ///< the seed's rule (CHW for <= 16 input channels, else HWC), unless data memory
          ///< demands CHW (input too large for HWC) or streaming demands HWC
  kHWC,
  kCHW,
};
/// Parses "auto" / "hwc" / "chw" (case-insensitive). Errors: INVALID_ARGUMENT.
Result<InputFormat> ParseInputFormat(const std::string& text);

/// One `--set LAYER.KEY=VALUE` override.
/// LAYER: a layer name (as in the YAML), a layer index in the YAML's layer list, or "last".
/// KEY: output_width (8|32), quantization (1|2|4|8), activate (none|relu|abs),
///      streaming (true|false), processors (hex map), output_processors (hex map),
///      out_offset (int/hex). Layer keys (output_width, quantization, activate; the latter two on
///      conv/linear layers only) are applied after fusion, before placement; placement keys
///      (streaming, processors, output_processors, out_offset) are applied after planning and
///      replace what Kiln planned, and the rule checks then judge the result.
struct LayerOverride {
  std::string layer;
  std::string key;
  std::string value;
};

/// Compile options (= CompileAi8xRequest minus the model).
struct Ai8xOptions {
  Chip chip = Chip::kMAX78000;
  InputFormat input_format = InputFormat::kAuto;
  /// The izer will be run with `--fifo`: the first layer's input comes through the FIFOs (its
  /// processors are then limited to 0-3/16-19/32-35/48-51 HWC or 0/16/32/48 CHW). Kiln also sets
  /// this by itself when it has to stream (then Ai8xCompileResult::izer_flags has --fifo).
  bool use_fifos = false;
  /// Allow moving layer 0's processors away from 0 (seed option `move_l0`).
  bool move_l0 = false;
  /// `arch:` — must equal the checkpoint's `arch` (the model factory name, e.g. "ai85net5").
  /// Empty: `default_arch` (the model's name).
  std::string arch;
  /// `dataset:` — names the izer's sample input `tests/sample_<dataset>.npy`. Empty: "unknown".
  std::string dataset;
  /// Fallback for `arch` (e.g. the uploaded model's name).
  std::string default_arch;
  std::vector<LayerOverride> overrides;
  /// Write shapes for every layer (not only the input and output layers) as YAML comments.
  bool verbose = false;
  /// Bench/testing only: do not check the layer count, kernel-memory and bias-memory limits (lets
  /// synthetic chains of 10,000 layers run through every pass). Never set by the service.
  bool lift_layer_limit = false;
};

/// Per-layer report row (= CompileAi8xResponse.layers[]).
struct Ai8xLayerSummary {
  int index = 0;
  std::string name;
  std::string op;                 ///< "conv2d", "conv2d+add", "passthrough", "mlp", ...
  std::vector<std::string> onnx_nodes;
  int in_channels = 0, out_channels = 0;
  std::string in_shape, out_shape;  ///< "(16, 32, 32)"
  uint64_t processors = 0;
  uint64_t output_processors = 0;
  int in_offset = 0;
  int out_offset = 0;
  int64_t data_in_bytes = 0;       ///< per data-memory instance (izer in_size)
  int64_t data_out_bytes = 0;      ///< per data-memory instance (izer out_size)
  int64_t kernel_words = 0;        ///< 72-bit kernel words per enabled processor (izer kern_len); 0 when
                                   ///< the izer reuses an earlier layer's kernels (KernelTwin, resources.h)
  int64_t bias_bytes = 0;
  bool streaming = false;
};

/// Whole-network resource use (= CompileAi8xResponse.resources).
struct Ai8xResourceSummary {
  int layers = 0;
  int max_layers = 0;
  int64_t max_kernel_words_used = 0;   ///< fullest processor's kernel memory (words)
  int64_t kernel_words_per_processor = 0;  ///< capacity of a small processor
  int64_t bias_bytes_used = 0;
  int64_t bias_bytes_capacity = 0;     ///< 4 quadrants
  int64_t data_bytes_peak = 0;         ///< highest data-memory address used (per instance)
  int64_t data_instance_bytes = 0;
  int streaming_layers = 0;
};

// IzerFlag (one ai8xize.py flag the plan relies on, and why) is declared in network.h; the
// command line's --device, --config-file, --checkpoint-file, --prefix and --test-dir are not
// among them: api/compile_ai8x.h IzerCommand adds those.

/// The compile outcome (= CompileAi8xResponse).
struct Ai8xCompileResult {
  /// True when no error diagnostic was reported; `yaml` is then ready for ai8xize.py.
  bool ok = false;
  /// The network YAML. Also written when !ok (as far as it could be planned) so users can see
  /// what Kiln would have produced; never feed it to the izer then.
  std::string yaml;
  std::vector<Ai8xLayerSummary> layers;
  std::vector<Diagnostic> diagnostics;
  Ai8xResourceSummary resources;
  /// ai8xize.py flags this YAML needs beyond the device and the files, e.g. {"--fifo", "layers 0-1
  /// stream ..."}; in the order they go on the command line.
  std::vector<IzerFlag> izer_flags;
  /// Options after defaulting (arch, dataset, input format actually used, fifo).
  Ai8xOptions resolved;
  /// ai8x-synthesis' izer/onnxcp.py cannot read the model's .onnx as the weights of this YAML
  /// (OnnxCheckpointProblem, compiler/ai8x/passes.h: QAT quantize chains, a layer order it numbers
  /// differently, kernels it checks wrongly): `--checkpoint-file` must then be the quantized
  /// checkpoint (ai8x-synthesis quantize.py of the training checkpoint).
  bool needs_quantized_checkpoint = false;
  /// Why, in one sentence ("" when the .onnx works).
  std::string quantized_checkpoint_reason;
};

/// Compiles the ONNX model to an izer network YAML.
/// Errors (Status): INVALID_ARGUMENT for malformed options (unknown override key, bad value,
/// unknown layer in an override). Everything about the model itself — unsupported ops, hardware
/// rule violations, memory that does not fit — is reported as diagnostics with ok == false.
/// Thread-safe: no shared state.
Result<Ai8xCompileResult> CompileAi8x(const onnx_fe::Model& model, const Ai8xOptions& options);

/// The same for a Network built elsewhere (tests, benches): runs every pass after BuildLayers.
Result<Ai8xCompileResult> CompileAi8xNetwork(Network network, const Ai8xOptions& options);

}  // namespace kiln::ai8x
