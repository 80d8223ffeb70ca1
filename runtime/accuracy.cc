#include "runtime/accuracy.h"

#include <algorithm>
#include <cmath>

#include "device/numerics/formats.h"
#include "device/numerics/pcc.h"

namespace kiln::runtime {

using device::Tensor;

double PccThreshold(const convplan::DeviceOp& d, const device::PrecisionConfig& p, double custom) {
  if (custom > 0) return custom;
  // A device add has no rule of run_conv; tt-metal's ttnn.add tests assert PCC 0.9999 on single
  // ops, which a chained run's accumulated error would not meet: reported, not thresholded.
  if (d.kind == convplan::DeviceOpKind::kAdd) return 0.0;
  const bool fp32 = p.EffectiveFp32DestAcc();
  const bool bfp8 = p.EffectiveOutputDType() == device::DeviceDType::kBFloat8B;
  if (d.kind == convplan::DeviceOpKind::kConvTranspose2d) {
    return numerics::ConvTransposePccThreshold(fp32, p.math_fidelity, bfp8);
  }
  numerics::ConvPccRuleInput in;
  in.fp32_accum = fp32;
  in.fidelity = p.math_fidelity;
  in.bfp8_output = bfp8;
  in.activation = d.activation();
  in.cin_kh_kw = d.in_channels() * d.kernel().first * d.kernel().second;
  return numerics::ConvPccThreshold(in);
}

Result<Comparison> CompareOutputs(const std::vector<Tensor>& dev, const std::vector<Tensor>& ref, double threshold,
                                  const std::string& op_name, std::optional<device::DeviceDType> reference_dtype) {
  std::vector<float> a, b;
  for (size_t k = 0; k < dev.size(); ++k) {
    if (dev[k].empty() || ref[k].empty()) continue;
    if (dev[k].shape() != ref[k].shape()) {
      return Internal("op '" + op_name + "': device and reference output shapes differ");
    }
    // Host values of other element types (int64 shapes, bool masks, fp16) compare by value.
    auto da = dev[k].ToFloat32();
    auto rb = ref[k].ToFloat32();
    if (!da.ok()) return da.status();
    if (!rb.ok()) return rb.status();
    a.insert(a.end(), da->span<float>().begin(), da->span<float>().end());
    b.insert(b.end(), rb->span<float>().begin(), rb->span<float>().end());
  }
  if (reference_dtype && *reference_dtype != device::DeviceDType::kFloat32) {
    for (float& v : b) v = numerics::Bf16ToFloat(numerics::HostFp32ToBf16(numerics::FloatBits(v)));
  }
  auto pcc = numerics::CompPcc(b, a, threshold > 0 ? threshold : 0.99);
  if (!pcc.ok()) return pcc.status();
  Comparison c;
  c.pcc = pcc->pcc;
  double mx = 0;
  for (size_t e = 0; e < a.size(); ++e) {
    const double diff = std::fabs(static_cast<double>(a[e]) - b[e]);
    if (std::isnan(diff)) {
      mx = diff;
      break;
    }
    mx = std::max(mx, diff);
  }
  c.max_abs_error = mx;
  c.threshold = threshold;
  c.pass = threshold > 0 ? pcc->pass : true;
  return c;
}

}  // namespace kiln::runtime
