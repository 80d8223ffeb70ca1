#include "device/numerics/tile.h"

#include <array>
#include <cstring>

namespace kiln::numerics {

size_t TileBytes(DeviceDType fmt) {
  switch (fmt) {
    case DeviceDType::kFloat32: return 4096;
    case DeviceDType::kBFloat16: return 2048;
    case DeviceDType::kBFloat8B: return 64 + 1024;
    case DeviceDType::kBFloat4B: return 64 + 512;
  }
  return 0;
}

Result<std::vector<uint8_t>> EncodeTile(std::span<const float> tile, DeviceDType fmt, TileEncoder enc,
                                        HostBfpRounding host_bfp) {
  if (tile.size() != static_cast<size_t>(kTileElems))
    return InvalidArgument("EncodeTile: expected 1024 values, got " + std::to_string(tile.size()));
  // Values in face order.
  std::array<uint32_t, kTileElems> f;
  for (int r = 0; r < kTileDim; ++r)
    for (int c = 0; c < kTileDim; ++c) f[FaceOrderIndex(r, c)] = FloatBits(tile[r * kTileDim + c]);
  std::vector<uint8_t> out(TileBytes(fmt), 0);
  switch (fmt) {
    case DeviceDType::kFloat32: {
      for (int i = 0; i < kTileElems; ++i) {
        uint32_t u = f[i];
        if (enc == TileEncoder::kPackerBf16Dst) u = PackBf16DstToFp32(static_cast<uint16_t>(u >> 16));
        for (int b = 0; b < 4; ++b) out[4 * i + b] = static_cast<uint8_t>(u >> (8 * b));
      }
      break;
    }
    case DeviceDType::kBFloat16: {
      for (int i = 0; i < kTileElems; ++i) {
        uint16_t t;
        if (enc == TileEncoder::kHost) t = HostFp32ToBf16(f[i]);
        else if (enc == TileEncoder::kPackerFp32Dst) t = PackFp32DstToBf16(f[i]);
        else t = PackBf16DstToBf16(static_cast<uint16_t>(f[i] >> 16));
        out[2 * i] = static_cast<uint8_t>(t);
        out[2 * i + 1] = static_cast<uint8_t>(t >> 8);
      }
      break;
    }
    case DeviceDType::kBFloat8B:
    case DeviceDType::kBFloat4B: {
      const BfpFormat bf = BfpFormatOf(fmt);
      for (int g = 0; g < 64; ++g) {  // group g = face g/16, row g%16 = 16 consecutive face-order values
        std::span<const uint32_t, 16> in(&f[g * 16], 16);
        BfpGroup grp;
        if (enc == TileEncoder::kHost) {
          grp = HostEncodeBfpGroup(in, bf, host_bfp);
        } else if (enc == TileEncoder::kPackerFp32Dst) {
          grp = PackBfpFromFp32Dst(in, bf);
        } else {
          std::array<uint16_t, 16> t;
          for (int i = 0; i < 16; ++i) t[i] = static_cast<uint16_t>(in[i] >> 16);
          grp = PackBfpFromBf16Dst(t, bf);
        }
        out[g] = grp.exp;
        for (int i = 0; i < 16; ++i) {
          int idx = g * 16 + i;
          if (bf == BfpFormat::kBfp8) {
            out[64 + idx] = grp.codes[i];
          } else {
            out[64 + idx / 2] |= static_cast<uint8_t>((grp.codes[i] & 0xFu) << (4 * (idx & 1)));
          }
        }
      }
      break;
    }
  }
  return out;
}

Result<std::vector<float>> DecodeTile(std::span<const uint8_t> bytes, DeviceDType fmt, TileDecoder dec) {
  if (bytes.size() != TileBytes(fmt))
    return InvalidArgument("DecodeTile: expected " + std::to_string(TileBytes(fmt)) + " bytes, got " +
                           std::to_string(bytes.size()));
  std::array<uint32_t, kTileElems> f{};
  switch (fmt) {
    case DeviceDType::kFloat32:
      for (int i = 0; i < kTileElems; ++i) {
        uint32_t u = 0;
        for (int b = 0; b < 4; ++b) u |= static_cast<uint32_t>(bytes[4 * i + b]) << (8 * b);
        f[i] = dec == TileDecoder::kUnpacker ? static_cast<uint32_t>(UnpackFp32ToBf16(u)) << 16 : u;
      }
      break;
    case DeviceDType::kBFloat16:
      for (int i = 0; i < kTileElems; ++i)
        f[i] = (static_cast<uint32_t>(bytes[2 * i]) | (static_cast<uint32_t>(bytes[2 * i + 1]) << 8)) << 16;
      break;
    case DeviceDType::kBFloat8B:
    case DeviceDType::kBFloat4B: {
      const BfpFormat bf = BfpFormatOf(fmt);
      for (int idx = 0; idx < kTileElems; ++idx) {
        uint8_t e = bytes[idx / 16];
        uint8_t code = bf == BfpFormat::kBfp8 ? bytes[64 + idx]
                                               : static_cast<uint8_t>((bytes[64 + idx / 2] >> (4 * (idx & 1))) & 0xFu);
        f[idx] = dec == TileDecoder::kUnpacker ? static_cast<uint32_t>(UnpackBfpToBf16(e, code, bf)) << 16
                                               : FloatBits(DecodeBfpValue(e, code, bf));
      }
      break;
    }
  }
  std::vector<float> out(kTileElems);
  for (int r = 0; r < kTileDim; ++r)
    for (int c = 0; c < kTileDim; ++c) out[r * kTileDim + c] = BitsFloat(f[FaceOrderIndex(r, c)]);
  return out;
}

}  // namespace kiln::numerics
