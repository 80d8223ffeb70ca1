#include "device/numerics/types.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace kiln::numerics {
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

const char* ActivationName(Activation a) {
  switch (a) {
    case Activation::kNone: return "none";
    case Activation::kRelu: return "relu";
    case Activation::kRelu6: return "relu6";
    case Activation::kSilu: return "silu";
    case Activation::kGelu: return "gelu";
    case Activation::kSigmoid: return "sigmoid";
    case Activation::kTanh: return "tanh";
    case Activation::kHardswish: return "hardswish";
  }
  return "?";
}

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

Result<Activation> ParseActivation(std::string_view name) {
  const std::string s = Lower(name);
  if (s.empty() || s == "none" || s == "identity" || s == "linear") return Activation::kNone;
  for (Activation a : {Activation::kRelu, Activation::kRelu6, Activation::kSilu, Activation::kGelu,
                       Activation::kSigmoid, Activation::kTanh, Activation::kHardswish}) {
    if (s == ActivationName(a)) return a;
  }
  return InvalidArgument("unknown activation '" + std::string(name) +
                         "' (expected none, relu, relu6, silu, gelu, sigmoid, tanh, hardswish)");
}

}  // namespace kiln::numerics
