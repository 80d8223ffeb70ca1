// A 32-bit matrix transpose for the tt-emu conv's layout changes: the activations' NCHW → NHWC tiles
// (conv_engine.cc, ConvertActivationTile), the exact level's row tiles into the NCHW output
// (conv_engine.cc, RunRowsExact) and the output rows' (pixel, channel) → NCHW (tt_conv.cc, RunConv).
#pragma once

#include <cstdint>

namespace kiln::device::tt_emu {

/// dst[c * dst_stride + r] = src[r * src_stride + c] for r < rows, c < cols, of 32-bit elements (any
/// type: moved as bits, never interpreted; strides in elements). src and dst must not overlap.
/// With AVX-512F, whole blocks of 16 rows × 16 columns (64 shuffles) and then one of 8 rows × 16
/// columns (32 shuffles: the conv's 8-row tiles) go through registers (a strided gather per
/// element otherwise), the edges element by element.
void Transpose32(const void* src, int64_t rows, int64_t cols, int64_t src_stride, void* dst, int64_t dst_stride);

}  // namespace kiln::device::tt_emu
