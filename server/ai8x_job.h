// One ai8x compile, from ONNX bytes to a kiln.v1.CompileAi8xResponse: compiler/onnx LoadModel,
// then compiler/ai8x CompileAi8x, then the conversion to the API message. Shared by
// CompileService and `kiln compile --local`, so both give the same answer for the same input.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "kiln/v1/compile.pb.h"

namespace kiln::server {

/// Compiles `bytes` (one .onnx file). `model_name` names the model in errors and is the default
/// `arch`. Errors: those of onnx_fe::LoadModel (INVALID_ARGUMENT, FAILED_PRECONDITION,
/// RESOURCE_EXHAUSTED) and INVALID_ARGUMENT for malformed options. Hardware-rule violations are
/// not errors: the response has ok = false and diagnostics. Thread-safe.
Result<kiln::v1::CompileAi8xResponse> CompileAi8xBytes(std::string_view bytes,
                                                       const std::string& model_name,
                                                       const kiln::v1::CompileAi8xOptions& options);

/// Version string put into responses (kiln_version).
const char* Ai8xJobKilnVersion();

}  // namespace kiln::server
