// One ai8x compile, from ONNX bytes to a kiln.v1.CompileAi8xResponse: compiler/onnx LoadModel,
// then compiler/ai8x CompileAi8x, then the conversion to the API message. CompileService and
// `kiln compile --local` both call it, so both give the same answer for the same input. The
// defaults a compile depends on are decided here once: the model name (the default `arch`,
// CompileModelName) and the CLI's flag spellings (ParseCompileFlags).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "kiln/v1/compile.pb.h"
#include "store/model_store.h"

namespace kiln::api {

/// Compiles `bytes` (one .onnx file). `model_name` names the model in errors and is the default
/// `arch`. Errors: those of onnx_fe::LoadModel (INVALID_ARGUMENT, FAILED_PRECONDITION,
/// RESOURCE_EXHAUSTED) and INVALID_ARGUMENT for malformed options. Hardware-rule violations are
/// not errors: the response has ok = false and diagnostics. Thread-safe; blocking (CPU lane).
/// `model_sha256`: the bytes' SHA-256 when the caller knows it (a stored model's id), else "" and
/// it is computed (the response's model_id; ~0.6 ms per MiB).
Result<kiln::v1::CompileAi8xResponse> CompileAi8x(std::string_view bytes, const std::string& model_name,
                                                  const kiln::v1::CompileAi8xOptions& options,
                                                  const std::string& model_sha256 = "");

/// The files of an ai8xize.py command line. Empty fields get IzerCommand's defaults.
struct IzerPaths {
  std::string config_file;      ///< the YAML; default "<arch>.yaml"
  /// default "<model name>.onnx" (izer/onnxcp.py reads ONNX weights), or "<arch>-q.pth.tar" when the
  /// response says needs_quantized_checkpoint
  std::string checkpoint_file;
  std::string prefix;           ///< the generated project's name; default "<arch>"
  std::string test_dir;         ///< where the project goes; default "sdk/Examples/<device>/CNN"
  std::string sample_input;     ///< a .npy sample; default "sample.npy" (only when no dataset)
};

/// The complete ai8xize.py command line for a successful compile: argv (program first) plus one
/// {flag, reason} per flag saying why it is there, in argv order. The plan's flags come from
/// `r.plan_flags` (compiler/ai8x Ai8xCompileResult::izer_flags); `--sample-input` is added when
/// the YAML names no dataset (the izer would look for tests/sample_unknown.npy). `model_name`
/// names the default checkpoint. Empty when !r.ok().
struct IzerCommandLine {
  std::vector<std::string> argv;
  std::vector<kiln::v1::IzerFlag> why;
};
IzerCommandLine IzerCommand(const kiln::v1::CompileAi8xResponse& r, const std::string& model_name,
                            const IzerPaths& paths = {});

/// The name a stored model is compiled under (its default arch): `requested` when the request
/// named the model by one of its names, else its first name, else the id's first 12 digits.
std::string CompileModelName(const store::ModelInfo& info, const std::string& requested);

/// The ai8x-training model factories Kiln knows by name (`arch` of ai8x-training's model
/// modules, models/*.py): those of the reference exports, tests/data/ai8x/models/manifest.json
/// and factories.json (a test checks that every factory there is in this list). Sorted.
const std::vector<std::string>& KnownAi8xFactories();

/// The factory an ai8x-training export's file name names, or "" when it names none Kiln knows.
/// The name is `<dataset>-<arch>.<form>.onnx` (train.py --summary onnx; form qat, float or
/// simplified; ".onnx" and the form are optional): "mnist-ai85net5.qat.onnx" -> "ai85net5". A
/// bare "<arch>" counts too. The izer only accepts an `arch:` equal to the checkpoint's factory, so
/// `kiln compile` infers --arch only from a known factory and otherwise requires it.
std::string FactoryFromExportName(std::string_view file_name);

/// The flags of `kiln compile`, as typed.
struct CompileFlags {
  std::string device = "MAX78000";  ///< MAX78000 | MAX78002 (also AI85/85, AI87/87), any case
  std::string arch, dataset;
  std::string input_format = "auto";  ///< auto | HWC | CHW, any case
  std::vector<std::string> sets;      ///< LAYER.KEY=VALUE
  bool use_fifos = false, move_l0 = false, verbose = false;
};
/// INVALID_ARGUMENT naming the flag and the value.
Result<kiln::v1::CompileAi8xOptions> ParseCompileFlags(const CompileFlags& flags);

}  // namespace kiln::api
