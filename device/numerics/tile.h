// Tensix tile layout (docs/specs/tt-numerics.md §1): a 32×32 tile is four 16×16 faces
// (face0 = rows 0–15 × cols 0–15, face1 = rows 0–15 × cols 16–31, face2 = rows 16–31 × cols 0–15,
// face3 = rows 16–31 × cols 16–31), each stored row-major, faces in order.
// Bfp tiles: 64 shared-exponent bytes (face0 rows 0..15, then face1, face2, face3), then the codes
// face by face, row-major; bfp8 = 1088 bytes, bfp4 = 576 bytes (element 0 in the low nibble).
// bf16 tiles: 1024 little-endian uint16 in face order (2048 bytes); fp32 tiles: 4096 bytes.
//
// Host-side tile inputs/outputs are 1024 floats in row-major order (tile[r*32 + c]).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "device/numerics/formats.h"
#include "device/numerics/types.h"

namespace kiln::numerics {

inline constexpr int kTileDim = 32;
inline constexpr int kTileElems = 1024;
inline constexpr int kFaceDim = 16;

/// Index into face order of the element at (row, col) of a tile.
inline int FaceOrderIndex(int row, int col) {
  int face = (row / kFaceDim) * 2 + (col / kFaceDim);
  return face * 256 + (row % kFaceDim) * kFaceDim + (col % kFaceDim);
}

/// Bytes in one encoded tile of each device data type (device/numerics/types.h): float32 4096,
/// bfloat16 2048, bfloat8_b 1088, bfloat4_b 576.
size_t TileBytes(DeviceDType fmt);

/// How the fp32 values are converted while encoding.
enum class TileEncoder {
  kHost,            ///< tt-metal host conversion (§2.1 RNE / §2.2 with `host_bfp`)
  kPackerFp32Dst,   ///< device packer from an fp32 Dst (§3.1 / §3.4); fp32 output unchanged (§3.3)
  kPackerBf16Dst,   ///< device packer from a bf16 Dst (§3.2 / §3.4); values must be bf16-exact (top 16 bits used)
};

/// Encodes one row-major tile (1024 floats) into the exact byte layout of `fmt`.
/// Errors: INVALID_ARGUMENT if `tile` does not hold 1024 values.
Result<std::vector<uint8_t>> EncodeTile(std::span<const float> tile, DeviceDType fmt, TileEncoder enc,
                                        HostBfpRounding host_bfp = HostBfpRounding::kCurrent);

/// How encoded values are read back.
enum class TileDecoder {
  kHost,      ///< host decode (§2.3): exact bfp value rounded to fp32; bf16/fp32 bit-exact
  kUnpacker,  ///< device unpacker to bf16 (§4): bfp → bf16 incl. −Inf for sign-only codes; fp32 → bf16 truncation
};

/// Decodes one encoded tile to 1024 row-major floats.
/// Errors: INVALID_ARGUMENT if `bytes` is not TileBytes(fmt) long.
Result<std::vector<float>> DecodeTile(std::span<const uint8_t> bytes, DeviceDType fmt, TileDecoder dec);

}  // namespace kiln::numerics
