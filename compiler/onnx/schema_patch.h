// Internal to compiler/onnx: process-wide adjustments to onnx 1.12's operator schemas, installed
// once before the first shape inference.
#pragma once

namespace kiln::onnx_fe::internal {

/// Wraps every registered schema's type-and-shape inference function (all versions) so that
///  * a required (Single or Variadic) input whose type is unknown makes inference fail with an
///    InferenceError instead of reaching inference code that dereferences a null TypeProto
///    (onnx 1.12 crashes there, e.g. when an upstream node's inference failed);
///  * a schema without an inference function fails inference instead of silently leaving its
///    outputs untyped for the nodes after it;
///  * MaxPool / AveragePool with ceil_mode=1 get the corrected output size of onnx PR #5741
///    ("sliding windows that would start in the right padded region are ignored", as PyTorch and
///    ONNX Runtime compute it) instead of onnx 1.12's.
/// Thread-safe and idempotent (std::call_once).
void InstallSchemaPatches();

/// Corrected pooled output size for one spatial axis (onnx PR #5741). `stride` must be > 0.
long long PooledSize(long long input, long long pad_begin, long long pad_end, long long kernel, long long stride,
                     long long dilation, bool ceil_mode);

}  // namespace kiln::onnx_fe::internal
