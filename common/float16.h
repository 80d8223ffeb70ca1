// IEEE binary16 ("float16", ONNX FLOAT16) and bfloat16 (ONNX BFLOAT16) to fp32. Both conversions
// are exact. Shared by the ONNX front end (tensor payloads) and device tensors (.npy / dtype
// conversion).
#pragma once

#include <bit>
#include <cstdint>

namespace kiln {

/// IEEE half -> float: subnormals normalised, inf and NaN (payload kept) preserved.
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;  // inf / nan (payload kept)
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  return std::bit_cast<float>(bits);
}

/// bfloat16 -> float: the upper half of the fp32 bit pattern.
inline float BFloat16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

}  // namespace kiln
