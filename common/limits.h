// Limits shared by the modules that handle the same bytes, so that what one accepts the next
// can process.
#pragma once

#include <climits>
#include <cstdint>

namespace kiln {

/// Largest serialized ONNX model, in bytes, that any part of Kiln accepts: the store's default
/// max_model_bytes (store/model_store.h), the loader's default LoaderLimits::max_model_bytes
/// (compiler/onnx/loader.h) and the upload summary (compiler/onnx/summary.cc). protobuf parses at
/// most INT_MAX bytes (google/protobuf/io/coded_stream.h, CodedInputStream::SetTotalBytesLimit),
/// so this is also the ceiling any configured limit is clamped to.
inline constexpr uint64_t kMaxModelBytes = static_cast<uint64_t>(INT_MAX);

}  // namespace kiln
