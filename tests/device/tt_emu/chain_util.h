// Helpers of the tt-emu tests that write a conv's expected output as a chain of the verified
// numerics primitives (tt_emu_test.cc, dataflow_test.cc): kept independent of the engine's own
// packer code (device/backends/tt_emu/device_formats.h), which those chains check.
#pragma once

#include <array>
#include <cstdint>

#include "device/backends/precision.h"
#include "device/numerics/formats.h"

namespace kiln::device::testing {

/// Packs 32 Dst values to `dt` (docs/specs/tt-numerics.md §3) as the device unpacker reads them
/// back (`host` false: partials) or as the host decodes them (`host` true: the op's output); bfp
/// outputs are bfloat8_b.
inline std::array<uint32_t, 32> Pack32(const std::array<uint32_t, 32>& d, DeviceDType dt, bool fp32_dst, bool host) {
  namespace nx = kiln::numerics;
  std::array<uint32_t, 32> r{};
  if (dt == DeviceDType::kFloat32) {
    for (int o = 0; o < 32; ++o) r[o] = fp32_dst ? d[o] : nx::PackBf16DstToFp32(static_cast<uint16_t>(d[o] >> 16));
  } else if (dt == DeviceDType::kBFloat16) {
    for (int o = 0; o < 32; ++o)
      r[o] = static_cast<uint32_t>(fp32_dst ? nx::PackFp32DstToBf16(d[o])
                                            : nx::PackBf16DstToBf16(static_cast<uint16_t>(d[o] >> 16)))
             << 16;
  } else {
    for (int g0 = 0; g0 < 32; g0 += 16) {
      nx::BfpGroup g;
      if (fp32_dst) {
        std::array<uint32_t, 16> t;
        for (int i = 0; i < 16; ++i) t[i] = d[g0 + i];
        g = nx::PackBfpFromFp32Dst(t, nx::BfpFormat::kBfp8);
      } else {
        std::array<uint16_t, 16> t;
        for (int i = 0; i < 16; ++i) t[i] = static_cast<uint16_t>(d[g0 + i] >> 16);
        g = nx::PackBfpFromBf16Dst(t, nx::BfpFormat::kBfp8);
      }
      for (int i = 0; i < 16; ++i)
        r[g0 + i] = host ? nx::FloatBits(nx::DecodeBfpValue(g.exp, g.codes[i], nx::BfpFormat::kBfp8))
                         : static_cast<uint32_t>(nx::UnpackBfpToBf16(g.exp, g.codes[i], nx::BfpFormat::kBfp8)) << 16;
    }
  }
  return r;
}

}  // namespace kiln::device::testing
