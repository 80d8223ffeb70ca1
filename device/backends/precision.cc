#include "device/backends/precision.h"

namespace kiln::device {

PrecisionConfig PrecisionConfig::TtawConv() {
  PrecisionConfig p;
  p.math_fidelity = MathFidelity::kHiFi4;
  p.fp32_dest_acc_en = true;
  p.packer_l1_acc = true;
  p.math_approx_mode = false;  // "exact SFPU activations" (CONV_PRECISION, precision.h)
  return p;
}

bool PrecisionConfig::EffectiveFp32DestAcc() const {
  if (fp32_dest_acc_en.has_value()) return *fp32_dest_acc_en;
  return input_dtype == DeviceDType::kFloat32 && weights_dtype == DeviceDType::kFloat32;
}

Status PrecisionConfig::Validate() const {
  if (input_dtype == DeviceDType::kBFloat4B) {
    return InvalidArgument("input dtype bfloat4_b is not supported (float32, bfloat16, bfloat8_b)");
  }
  if (output_dtype == DeviceDType::kBFloat4B) {
    return InvalidArgument("output dtype bfloat4_b is not supported (float32, bfloat16, bfloat8_b)");
  }
  if (act_block_w < 0) {
    return InvalidArgument("act_block_w must be >= 0 (0 = default), got " + std::to_string(act_block_w));
  }
  return Status::Ok();
}

std::string PrecisionConfig::ToString() const {
  std::string s = MathFidelityName(math_fidelity);
  s += std::string(" w=") + DeviceDTypeName(weights_dtype);
  s += std::string(" in=") + DeviceDTypeName(input_dtype);
  s += std::string(" out=") + DeviceDTypeName(output_dtype);
  s += " fp32_acc=" + std::string(EffectiveFp32DestAcc() ? "1" : "0");
  if (!fp32_dest_acc_en.has_value()) s += "(default)";
  s += " l1_acc=" + std::string(packer_l1_acc ? "1" : "0");
  s += " approx=" + std::string(math_approx_mode ? "1" : "0");
  s += std::string(" ") + ArchName(arch);
  s += " abw=" + (act_block_w == 0 ? std::string("auto") : std::to_string(act_block_w));
  return s;
}

}  // namespace kiln::device
