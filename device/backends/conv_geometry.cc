#include "device/backends/conv_geometry.h"

#include <algorithm>
#include <string>

namespace kiln::device {
namespace {

Status CheckBasics(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe) {
  if (in < 1) return InvalidArgument("input size must be >= 1, got " + std::to_string(in));
  if (k < 1) return InvalidArgument("kernel size must be >= 1, got " + std::to_string(k));
  if (s < 1) return InvalidArgument("stride must be >= 1, got " + std::to_string(s));
  if (d < 1) return InvalidArgument("dilation must be >= 1, got " + std::to_string(d));
  if (pb < 0 || pe < 0) {
    return InvalidArgument("pads must be >= 0, got " + std::to_string(pb) + "/" + std::to_string(pe));
  }
  return Status::Ok();
}

std::string Describe(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe) {
  return "input " + std::to_string(in) + ", kernel " + std::to_string(k) + ", stride " +
         std::to_string(s) + ", dilation " + std::to_string(d) + ", pads " + std::to_string(pb) + "/" +
         std::to_string(pe);
}

}  // namespace

Result<int64_t> ConvOutputSize(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe) {
  KILN_RETURN_IF_ERROR(CheckBasics(in, k, s, d, pb, pe));
  const int64_t span = in + pb + pe - DilatedKernel(k, d);
  if (span < 0) {
    return InvalidArgument("dilated kernel larger than padded input (" + Describe(in, k, s, d, pb, pe) + ")");
  }
  return span / s + 1;
}

Result<int64_t> ConvTransposeOutputSize(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb,
                                        int64_t pe, int64_t output_padding) {
  KILN_RETURN_IF_ERROR(CheckBasics(in, k, s, d, pb, pe));
  if (output_padding < 0 || output_padding >= std::max(s, d)) {
    return InvalidArgument("output_padding " + std::to_string(output_padding) +
                           " must be in [0, max(stride, dilation)) (stride " + std::to_string(s) +
                           ", dilation " + std::to_string(d) + ")");
  }
  const int64_t out = s * (in - 1) + output_padding + DilatedKernel(k, d) - pb - pe;
  if (out < 1) {
    return InvalidArgument("conv_transpose output size " + std::to_string(out) + " < 1 (" +
                           Describe(in, k, s, d, pb, pe) + ")");
  }
  return out;
}

Result<int64_t> PoolOutputSize(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe,
                               bool ceil_mode) {
  KILN_RETURN_IF_ERROR(CheckBasics(in, k, s, d, pb, pe));
  const int64_t span = in + pb + pe - DilatedKernel(k, d);
  if (span < 0) {
    return InvalidArgument("dilated pooling window larger than padded input (" +
                           Describe(in, k, s, d, pb, pe) + ")");
  }
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  // The last window must start inside the input or the begin padding (onnx PR #5741, PyTorch).
  if (ceil_mode && (out - 1) * s >= in + pb) --out;
  return out;
}

Result<AutoPad> ParseAutoPad(std::string_view s) {
  if (s.empty() || s == "NOTSET") return AutoPad::kNotSet;
  if (s == "VALID") return AutoPad::kValid;
  if (s == "SAME_UPPER") return AutoPad::kSameUpper;
  if (s == "SAME_LOWER") return AutoPad::kSameLower;
  return InvalidArgument("unknown auto_pad '" + std::string(s) +
                         "' (expected NOTSET, VALID, SAME_UPPER, SAME_LOWER)");
}

Result<std::pair<int64_t, int64_t>> ConvAutoPad(AutoPad mode, int64_t in, int64_t k, int64_t s,
                                                int64_t d) {
  KILN_RETURN_IF_ERROR(CheckBasics(in, k, s, d, 0, 0));
  switch (mode) {
    case AutoPad::kNotSet: return InvalidArgument("auto_pad NOTSET: use the explicit pads");
    case AutoPad::kValid: return std::pair<int64_t, int64_t>{0, 0};
    case AutoPad::kSameUpper:
    case AutoPad::kSameLower: {
      const int64_t out = (in + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (out - 1) * s + DilatedKernel(k, d) - in);
      const int64_t small = total / 2, big = total - total / 2;
      if (mode == AutoPad::kSameUpper) return std::pair<int64_t, int64_t>{small, big};
      return std::pair<int64_t, int64_t>{big, small};
    }
  }
  return Internal("unreachable auto_pad");
}

Result<std::pair<int64_t, int64_t>> ConvTransposePadsForOutput(AutoPad mode, int64_t in, int64_t k,
                                                               int64_t s, int64_t d,
                                                               int64_t output_padding, int64_t out) {
  KILN_RETURN_IF_ERROR(CheckBasics(in, k, s, d, 0, 0));
  if (out < 1) return InvalidArgument("conv_transpose output_shape entry must be >= 1");
  const int64_t total = s * (in - 1) + output_padding + DilatedKernel(k, d) - out;
  if (total < 0) {
    return InvalidArgument("conv_transpose output size " + std::to_string(out) +
                           " exceeds the full output " + std::to_string(out + total) +
                           " (negative padding is not supported)");
  }
  const int64_t small = total / 2, big = total - total / 2;
  if (mode == AutoPad::kSameUpper) return std::pair<int64_t, int64_t>{small, big};
  return std::pair<int64_t, int64_t>{big, small};
}

}  // namespace kiln::device
