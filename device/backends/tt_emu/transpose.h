// A 32-bit matrix transpose for the tt-emu conv's layout changes: the activations' NCHW → NHWC tiles
// (conv_engine.cc, ConvertActivationTile) and the output rows' (pixel, channel) → NCHW
// (tt_conv.cc, TransposeTile).
#pragma once

#include <cstdint>

namespace kiln::device::tt_emu {

/// dst[c * dst_stride + r] = src[r * src_stride + c] for r < rows, c < cols, of 32-bit elements (any
/// type: moved as bits, never interpreted; strides in elements). src and dst must not overlap. With AVX-512F, whole 16×16 blocks
/// go through registers (64 shuffles per block; a strided gather per element otherwise), the
/// edges element by element.
void Transpose32(const void* src, int64_t rows, int64_t cols, int64_t src_stride, void* dst, int64_t dst_stride);

}  // namespace kiln::device::tt_emu
