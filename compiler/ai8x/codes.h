// The diagnostic codes of the ai8x back end, each as a named constant with the one rule file that
// decides it.
//
// A code is reported (Network::Report) only from the file named here, under compiler/ai8x/rules/;
// passes that meet the condition at their own stage (the builder reading ONNX attributes, fusion,
// planning) call that file's functions (compiler/ai8x/rules/rules.h) instead of reporting the
// code themselves. tests/ai8x/ai8x_pipeline_test.cc checks both directions: every constant is used
// by exactly its file, and docs/ai8x-diagnostics.md lists every code here and no other.
#pragma once

#include <string_view>

namespace kiln::ai8x {

// X(constant, code, deciding file relative to compiler/ai8x). Order: as the catalogue lists them.
#define KILN_AI8X_DIAGNOSTIC_CODES(X)                                  \
  X(kInput, "AI8X_INPUT", "rules/model.cc")                            \
  X(kNoLayers, "AI8X_NO_LAYERS", "rules/model.cc")                     \
  X(kHostOps, "AI8X_HOST_OPS", "rules/model.cc")                       \
  X(kHostAfterHost, "AI8X_HOST_AFTER_HOST", "rules/model.cc")          \
  X(kWidthNotDerived, "AI8X_WIDTH_NOT_DERIVED", "rules/model.cc")      \
  X(kBitsNotDerived, "AI8X_BITS_NOT_DERIVED", "rules/model.cc")        \
  X(kWeightOrder, "AI8X_WEIGHT_ORDER", "rules/model.cc")               \
  X(kActivation, "AI8X_ACTIVATION", "rules/operators.cc")              \
  X(kPad, "AI8X_PAD", "rules/operators.cc")                            \
  X(kStride, "AI8X_STRIDE", "rules/operators.cc")                      \
  X(kKernel, "AI8X_KERNEL", "rules/operators.cc")                      \
  X(kDilation, "AI8X_DILATION", "rules/operators.cc")                  \
  X(kGroups, "AI8X_GROUPS", "rules/operators.cc")                      \
  X(kPool, "AI8X_POOL", "rules/pooling.cc")                            \
  X(kFlatten, "AI8X_FLATTEN", "rules/operators.cc")                    \
  X(kLinear, "AI8X_LINEAR", "rules/operators.cc")                      \
  X(kChannels, "AI8X_CHANNELS", "rules/operators.cc")                  \
  X(kDimensions, "AI8X_DIMENSIONS", "rules/operators.cc")              \
  X(kOutputWidth, "AI8X_OUTPUT_WIDTH", "rules/operators.cc")           \
  X(kQuantization, "AI8X_QUANTIZATION", "rules/operators.cc")          \
  X(kEltwise, "AI8X_ELTWISE", "rules/eltwise.cc")                      \
  X(kWriteGap, "AI8X_WRITE_GAP", "rules/eltwise.cc")                   \
  X(kConcat, "AI8X_CONCAT", "rules/processors.cc")                     \
  X(kProcessors, "AI8X_PROCESSORS", "rules/processors.cc")             \
  X(kPassthroughMap, "AI8X_PASSTHROUGH_MAP", "rules/processors.cc")    \
  X(kInputFormat, "AI8X_INPUT_FORMAT", "rules/processors.cc")          \
  X(kFifo, "AI8X_FIFO", "rules/streaming.cc")                          \
  X(kStreaming, "AI8X_STREAMING", "rules/streaming.cc")                \
  X(kDataMemory, "AI8X_DATA_MEMORY", "rules/data_memory.cc")           \
  X(kKernelMemory, "AI8X_KERNEL_MEMORY", "rules/kernel_memory.cc")     \
  X(kBiasMemory, "AI8X_BIAS_MEMORY", "rules/bias_memory.cc")           \
  X(kShape, "AI8X_SHAPE", "rules/model.cc")                            \
  X(kReshape, "AI8X_RESHAPE", "rules/model.cc")                        \
  X(kHostTail, "AI8X_HOST_TAIL", "rules/model.cc")                     \
  X(kLayerCount, "AI8X_LAYER_COUNT", "rules/operators.cc")             \
  X(kEmptyOutput, "AI8X_EMPTY_OUTPUT", "rules/output_size.cc")

/// The code constants: code::kPad == "AI8X_PAD", ...
namespace code {
#define KILN_AI8X_CODE_CONSTANT(constant, text, file) inline constexpr char constant[] = text;
KILN_AI8X_DIAGNOSTIC_CODES(KILN_AI8X_CODE_CONSTANT)
#undef KILN_AI8X_CODE_CONSTANT
}  // namespace code

/// One registered code: its constant's name ("kPad"), the code ("AI8X_PAD") and the file that
/// decides it ("rules/operators.cc", relative to compiler/ai8x).
struct DiagnosticCode {
  std::string_view constant;
  std::string_view code;
  std::string_view file;
};

/// Every code, in the order of KILN_AI8X_DIAGNOSTIC_CODES.
inline constexpr DiagnosticCode kDiagnosticCodes[] = {
#define KILN_AI8X_CODE_ENTRY(constant, text, file) {#constant, text, file},
    KILN_AI8X_DIAGNOSTIC_CODES(KILN_AI8X_CODE_ENTRY)
#undef KILN_AI8X_CODE_ENTRY
};

}  // namespace kiln::ai8x
