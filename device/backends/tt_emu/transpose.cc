#include "device/backends/tt_emu/transpose.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::device::tt_emu {

namespace {

void TransposeScalar(const char* src, int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t src_stride, char* dst,
                     int64_t dst_stride) {
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t r = r0; r < r1; ++r) std::memcpy(dst + 4 * (c * dst_stride + r), src + 4 * (r * src_stride + c), 4);
}

#if defined(__x86_64__)
// GCC 12 flags the intrinsics' deliberately undefined pass-through operand (_mm512_undefined_epi32
// in avx512fintrin.h) once they are inlined into these unrolled blocks.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
// The first two stages of a block of kRows (8 or 16) rows R0.. of 16 words (four 128-bit lanes of
// 4): interleaving pairs of rows by 32 and then 64 bits leaves b[4k + m] holding, in its lane L,
// column 4L + m of rows 4k .. 4k+3.
template <int kRows>
__attribute__((target("avx512f"), always_inline)) inline void InterleaveRows(const char* src, int64_t src_stride,
                                                                             __m512i* b) {
  __m512i a[kRows];
  for (int k = 0; k < kRows / 2; ++k) {
    const __m512i x = _mm512_loadu_si512(src + 4 * (2 * k) * src_stride);
    const __m512i y = _mm512_loadu_si512(src + 4 * (2 * k + 1) * src_stride);
    a[2 * k] = _mm512_unpacklo_epi32(x, y);
    a[2 * k + 1] = _mm512_unpackhi_epi32(x, y);
  }
  for (int k = 0; k < kRows / 4; ++k) {
    b[4 * k] = _mm512_unpacklo_epi64(a[4 * k], a[4 * k + 2]);
    b[4 * k + 1] = _mm512_unpackhi_epi64(a[4 * k], a[4 * k + 2]);
    b[4 * k + 2] = _mm512_unpacklo_epi64(a[4 * k + 1], a[4 * k + 3]);
    b[4 * k + 3] = _mm512_unpackhi_epi64(a[4 * k + 1], a[4 * k + 3]);
  }
}

// One 16×16 block: output row 4L + m is lane L of b[m], b[4 + m], b[8 + m], b[12 + m]
// (InterleaveRows), gathered by two rounds of 128-bit lane shuffles.
__attribute__((target("avx512f"))) void Block16(const char* src, int64_t src_stride, char* dst, int64_t dst_stride) {
  __m512i b[16];
  InterleaveRows<16>(src, src_stride, b);
  for (int m = 0; m < 4; ++m) {
    const __m512i c0 = _mm512_shuffle_i32x4(b[m], b[4 + m], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i c1 = _mm512_shuffle_i32x4(b[m], b[4 + m], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i c2 = _mm512_shuffle_i32x4(b[8 + m], b[12 + m], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i c3 = _mm512_shuffle_i32x4(b[8 + m], b[12 + m], _MM_SHUFFLE(3, 2, 3, 2));
    _mm512_storeu_si512(dst + 4 * (0 + m) * dst_stride, _mm512_shuffle_i32x4(c0, c2, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm512_storeu_si512(dst + 4 * (4 + m) * dst_stride, _mm512_shuffle_i32x4(c0, c2, _MM_SHUFFLE(3, 1, 3, 1)));
    _mm512_storeu_si512(dst + 4 * (8 + m) * dst_stride, _mm512_shuffle_i32x4(c1, c3, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm512_storeu_si512(dst + 4 * (12 + m) * dst_stride, _mm512_shuffle_i32x4(c1, c3, _MM_SHUFFLE(3, 1, 3, 1)));
  }
}

// Eight rows by 16 columns (the conv's row tiles): output row 4L + m is lane L of b[m] (rows 0..3)
// and of b[4 + m] (rows 4..7), 8 words stored as 256 bits.
__attribute__((target("avx512f"))) void Block8(const char* src, int64_t src_stride, char* dst, int64_t dst_stride) {
  __m512i b[8];
  InterleaveRows<8>(src, src_stride, b);
  for (int m = 0; m < 4; ++m) {
    // [b[m].L0, b[4+m].L0 | b[m].L1, b[4+m].L1] and the same for lanes 2, 3.
    const __m512i c0 = _mm512_shuffle_i32x4(b[m], b[4 + m], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i c1 = _mm512_shuffle_i32x4(b[m], b[4 + m], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512i d0 = _mm512_shuffle_i32x4(c0, c0, _MM_SHUFFLE(3, 1, 2, 0));
    const __m512i d1 = _mm512_shuffle_i32x4(c1, c1, _MM_SHUFFLE(3, 1, 2, 0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 4 * (0 + m) * dst_stride), _mm512_castsi512_si256(d0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 4 * (4 + m) * dst_stride), _mm512_extracti64x4_epi64(d0, 1));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 4 * (8 + m) * dst_stride), _mm512_castsi512_si256(d1));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 4 * (12 + m) * dst_stride), _mm512_extracti64x4_epi64(d1, 1));
  }
}
#pragma GCC diagnostic pop
#endif

}  // namespace

void Transpose32(const void* src_v, int64_t rows, int64_t cols, int64_t src_stride, void* dst_v, int64_t dst_stride) {
  const char* src = static_cast<const char*>(src_v);
  char* dst = static_cast<char*>(dst_v);
  int64_t rb = 0, c16 = 0;  // the extent covered by whole blocks: rows [0, rb), columns [0, c16)
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) {
    c16 = cols / 16 * 16;
    for (; rb + 16 <= rows; rb += 16)
      for (int64_t c = 0; c < c16; c += 16)
        Block16(src + 4 * (rb * src_stride + c), src_stride, dst + 4 * (c * dst_stride + rb), dst_stride);
    if (rb + 8 <= rows) {
      for (int64_t c = 0; c < c16; c += 16)
        Block8(src + 4 * (rb * src_stride + c), src_stride, dst + 4 * (c * dst_stride + rb), dst_stride);
      rb += 8;
    }
  }
#endif
  TransposeScalar(src, 0, rb, c16, cols, src_stride, dst, dst_stride);   // right edge of the blocks
  TransposeScalar(src, rb, rows, 0, cols, src_stride, dst, dst_stride);  // bottom rows
}

}  // namespace kiln::device::tt_emu
