// Unit tests for the format conversions and tile layout (docs/specs/tt-numerics.md §1-§4) beyond
// the vectors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "device/numerics/formats.h"
#include "device/numerics/fpu.h"
#include "device/numerics/tile.h"

namespace kiln::numerics {
namespace {

TEST(Formats, HostBf16RoundingModes) {
  EXPECT_EQ(HostFp32ToBf16(0x3F808000u), 0x3F80);  // tie, even stays
  EXPECT_EQ(HostFp32ToBf16(0x3F818000u), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(HostFp32ToBf16(0x3F818000u, HostBf16Rounding::kTruncate), 0x3F81);
  EXPECT_EQ(HostFp32ToBf16(0x7FC00001u), 0x7FC0);
  EXPECT_EQ(HostFp32ToBf16(0x7F7FFFFFu), 0x7F80);  // overflow to Inf
}

TEST(Formats, HostBfpHalfUpDiffersFromRneOnTies) {
  // Group max 1.0 (E=127); element 1 + 2^-7 is 64.5 steps of 2^-6 → tie: RNE keeps 64, half-up 65.
  std::array<uint32_t, 16> in{};
  in.fill(0x3F800000u);
  in[1] = 0x3F810000u;  // 1.0078125
  auto rne = HostEncodeBfpGroup(in, BfpFormat::kBfp8, HostBfpRounding::kCurrent);
  auto hu = HostEncodeBfpGroup(in, BfpFormat::kBfp8, HostBfpRounding::kHalfUp);
  EXPECT_EQ(rne.exp, 127);
  EXPECT_EQ(rne.codes[1], 64);
  EXPECT_EQ(hu.codes[1], 65);
  EXPECT_EQ(rne.codes[0], 64);
  EXPECT_FLOAT_EQ(DecodeBfpValue(rne.exp, rne.codes[0], BfpFormat::kBfp8), 1.0f);
  // Denormals: current → 0, legacy 2025 → hidden one.
  std::array<uint32_t, 16> den{};
  den[0] = 0x00400000u;
  EXPECT_EQ(HostEncodeBfpGroup(den, BfpFormat::kBfp8, HostBfpRounding::kCurrent).codes[0], 0);
  EXPECT_EQ(HostEncodeBfpGroup(den, BfpFormat::kBfp8, HostBfpRounding::kLegacy2025).codes[0], 96);  // (1.5·2^23) >> 17
}

TEST(Tile, Bfp8ByteLayoutAndRoundTrip) {
  std::vector<float> t(kTileElems);
  for (int r = 0; r < 32; ++r)
    for (int c = 0; c < 32; ++c) t[r * 32 + c] = static_cast<float>((r * 32 + c) % 64) * 0.25f - 4.0f;
  auto enc = EncodeTile(t, DeviceDType::kBFloat8B, TileEncoder::kHost);
  ASSERT_TRUE(enc.ok());
  ASSERT_EQ(enc->size(), 1088u);
  // Exponent byte 16 = face1 row 0 = tile row 0, cols 16..31: values 0..3.75 → max 3.75 → E = 128.
  EXPECT_EQ((*enc)[16], 128);
  // Code of tile (0,16) is the first code of face1: value 0.0 → 0.
  EXPECT_EQ((*enc)[64 + 256], 0);
  // Tile (0,0) = -4 → face0 row0 max |.| = 4 → E = 129; -4 = 64·2^(129-127-6) → code 0x80|64.
  EXPECT_EQ((*enc)[0], 129);
  EXPECT_EQ((*enc)[64], 0xC0);
  auto dec = DecodeTile(*enc, DeviceDType::kBFloat8B, TileDecoder::kHost);
  ASSERT_TRUE(dec.ok());
  for (int i = 0; i < kTileElems; ++i) EXPECT_EQ((*dec)[i], t[i]) << i;  // quarter steps are exact here
  auto up = DecodeTile(*enc, DeviceDType::kBFloat8B, TileDecoder::kUnpacker);
  ASSERT_TRUE(up.ok());
  for (int i = 0; i < kTileElems; ++i) EXPECT_EQ((*up)[i], t[i]) << i;
}

TEST(Tile, Bfp4NibbleOrderAndSizes) {
  EXPECT_EQ(TileBytes(DeviceDType::kBFloat4B), 576u);
  EXPECT_EQ(TileBytes(DeviceDType::kBFloat16), 2048u);
  std::vector<float> t(kTileElems, 0.0f);
  t[0] = 1.0f;   // face0 element 0 → low nibble of byte 64
  t[1] = -1.0f;  // element 1 → high nibble
  auto enc = EncodeTile(t, DeviceDType::kBFloat4B, TileEncoder::kHost);
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ((*enc)[0], 127);
  EXPECT_EQ((*enc)[64], 0xC4);  // low nibble 4 (= 1.0), high nibble 8|4
  auto dec = DecodeTile(*enc, DeviceDType::kBFloat4B, TileDecoder::kHost);
  ASSERT_TRUE(dec.ok());
  EXPECT_EQ((*dec)[0], 1.0f);
  EXPECT_EQ((*dec)[1], -1.0f);
  EXPECT_FALSE(DecodeTile(std::vector<uint8_t>(10), DeviceDType::kBFloat4B, TileDecoder::kHost).ok());
  EXPECT_FALSE(EncodeTile(std::vector<float>(3), DeviceDType::kBFloat4B, TileEncoder::kHost).ok());
}

TEST(Tile, Bf16PackerRoundTripFaceOrder) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<float> t(kTileElems);
  for (auto& v : t) v = nd(rng);
  auto enc = EncodeTile(t, DeviceDType::kBFloat16, TileEncoder::kPackerFp32Dst);
  ASSERT_TRUE(enc.ok());
  // Element (16, 0) is the first element of face2 (byte offset 2*512).
  uint16_t first_face2 = static_cast<uint16_t>((*enc)[1024] | ((*enc)[1025] << 8));
  EXPECT_EQ(first_face2, PackFp32DstToBf16(FloatBits(t[16 * 32])));
  auto dec = DecodeTile(*enc, DeviceDType::kBFloat16, TileDecoder::kHost);
  ASSERT_TRUE(dec.ok());
  for (int i = 0; i < kTileElems; ++i) EXPECT_EQ(FloatBits((*dec)[i]) >> 16, PackFp32DstToBf16(FloatBits(t[i])));
}

TEST(Fpu, HiFi4SingleProductIsExactAndLoFiUnderestimates) {
  std::array<uint32_t, 16> a{}, b{};
  a[3] = 0x3FAB0000u;  // 1.3359375
  b[3] = 0xBFD70000u;  // -1.6796875
  FpuConfig cfg;
  float exact = BitsFloat(a[3]) * BitsFloat(b[3]);
  EXPECT_EQ(BitsFloat(MvmulFidelity(a, b, 0, MathFidelity::kHiFi4, cfg)), exact);
  float lofi = BitsFloat(MvmulFidelity(a, b, 0, MathFidelity::kLoFi, cfg));
  EXPECT_LT(std::fabs(lofi), std::fabs(exact));
  EXPECT_LT(std::fabs(lofi - exact) / std::fabs(exact), 0.0625 + 0.015625);
}

TEST(Fpu, L1AccBf16RoundsToNearestEven) {
  // 1 + 2^-8 is a tie between 1 and 1+2^-7 → RNE keeps 1.0 (0x3F80).
  EXPECT_EQ(PackL1AccBf16(0x3F80, 0x3B80), 0x3F80);
  EXPECT_EQ(PackL1AccBf16(0x7F80, 0xFF80), 0x7FC0);
  EXPECT_EQ(PackL1AccFp32(0x3F800000u, 0x3F800000u), 0x40000000u);
}

}  // namespace
}  // namespace kiln::numerics
