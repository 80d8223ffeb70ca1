#include "device/backends/precision.h"

#include <algorithm>
#include <cctype>

namespace kiln::device {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

const char* MathFidelityName(MathFidelity f) {
  switch (f) {
    case MathFidelity::kLoFi: return "LoFi";
    case MathFidelity::kHiFi2: return "HiFi2";
    case MathFidelity::kHiFi3: return "HiFi3";
    case MathFidelity::kHiFi4: return "HiFi4";
  }
  return "?";
}

const char* DeviceDTypeName(DeviceDType d) {
  switch (d) {
    case DeviceDType::kFloat32: return "float32";
    case DeviceDType::kBFloat16: return "bfloat16";
    case DeviceDType::kBFloat8B: return "bfloat8_b";
    case DeviceDType::kBFloat4B: return "bfloat4_b";
  }
  return "?";
}

const char* ArchName(Arch a) { return a == Arch::kBlackhole ? "blackhole" : "wormhole_b0"; }

Result<MathFidelity> ParseMathFidelity(std::string_view name) {
  const std::string s = Lower(name);
  if (s == "lofi") return MathFidelity::kLoFi;
  if (s == "hifi2") return MathFidelity::kHiFi2;
  if (s == "hifi3") return MathFidelity::kHiFi3;
  if (s == "hifi4") return MathFidelity::kHiFi4;
  return InvalidArgument("unknown math fidelity '" + std::string(name) +
                         "' (expected LoFi, HiFi2, HiFi3, HiFi4)");
}

Result<DeviceDType> ParseDeviceDType(std::string_view name) {
  const std::string s = Lower(name);
  if (s == "float32" || s == "fp32") return DeviceDType::kFloat32;
  if (s == "bfloat16" || s == "bf16" || s == "float16_b") return DeviceDType::kBFloat16;
  if (s == "bfloat8_b" || s == "bfp8_b" || s == "bfp8") return DeviceDType::kBFloat8B;
  if (s == "bfloat4_b" || s == "bfp4_b" || s == "bfp4") return DeviceDType::kBFloat4B;
  return InvalidArgument("unknown device dtype '" + std::string(name) +
                         "' (expected float32, bfloat16, bfloat8_b, bfloat4_b)");
}

Result<Arch> ParseArch(std::string_view name) {
  const std::string s = Lower(name);
  if (s == "wormhole_b0" || s == "wormhole" || s == "wh") return Arch::kWormholeB0;
  if (s == "blackhole" || s == "bh") return Arch::kBlackhole;
  return InvalidArgument("unknown arch '" + std::string(name) + "' (expected wormhole_b0, blackhole)");
}

PrecisionConfig PrecisionConfig::TtawConv() {
  PrecisionConfig p;
  p.math_fidelity = MathFidelity::kHiFi4;
  p.fp32_dest_acc_en = true;
  p.packer_l1_acc = true;
  p.math_approx_mode = false;  // "exact SFPU activations" (ttaw-conv.py.txt header)
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
