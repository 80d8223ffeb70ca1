#include "runtime/inputs.h"

#include <algorithm>

#include "compiler/convplan/host_tensor.h"

namespace kiln::runtime {

namespace fe = onnx_fe;
using convplan::PlanInput;
using device::Tensor;

namespace {

// Seeded uniform [-1, 1) data: splitmix64 over (seed, name hash, index) — platform independent.
uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

Result<Tensor> GenerateInput(const PlanInput& in, uint64_t seed) {
  if (!in.shape.has_rank()) return InvalidArgument("input '" + in.name + "' is absent and its rank is unknown");
  std::vector<int64_t> shape;
  for (const fe::Dim& d : in.shape.dims()) {
    if (d.is_known()) {
      shape.push_back(d.value());
    } else if (d.is_symbol()) {
      shape.push_back(1);
    } else {
      return InvalidArgument("input '" + in.name + "' is absent and has an unknown dim " + in.shape.ToString() +
                             "; give it explicitly");
    }
  }
  auto t = Tensor::Zeros(shape);
  if (!t.ok()) return t.status();
  uint64_t state = SplitMix(seed ^ Fnv1a(in.name));
  for (float& v : t->span<float>()) {
    state = SplitMix(state);
    v = static_cast<float>(static_cast<double>(state >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
  }
  auto dtype = InputDataType(in);
  if (!dtype.ok()) return dtype.status();
  if (*dtype == device::DataType::kFloat32) return t;
  if (!device::IsFloatingPoint(*dtype)) {
    return InvalidArgument("input '" + in.name + "' is absent and has element type " + device::DataTypeName(*dtype) +
                           "; only floating-point inputs are generated, give it explicitly");
  }
  return t->CastTo(*dtype);
}

Result<device::DataType> InputDataType(const PlanInput& in) {
  if (in.dtype == fe::DataType::kUndefined) return device::DataType::kFloat32;
  auto t = convplan::HostDataType(in.dtype);
  if (!t.ok()) return t.status().WithContext("input '" + in.name + "'");
  return t;
}

Result<Tensor> ConvertInput(const PlanInput& in, const Tensor& given) {
  auto dtype = InputDataType(in);
  if (!dtype.ok()) return dtype.status();
  // Floating-point data converts between floating types (bf16 / fp16 / fp64 data for an fp32
  // model); anything else must be given in the model's type, as ONNX Runtime requires.
  if (given.dtype() != *dtype && !(device::IsFloatingPoint(given.dtype()) && device::IsFloatingPoint(*dtype))) {
    return InvalidArgument("input '" + in.name + "' is " + device::DataTypeName(given.dtype()) +
                           " but the model declares " + device::DataTypeName(*dtype));
  }
  auto f = given.CastTo(*dtype);
  if (!f.ok()) return f.status();
  auto t = f->ToLayout(device::Layout::kNCHW);
  if (!t.ok()) return t.status();
  KILN_RETURN_IF_ERROR(CheckInputShape(in, t->shape()));
  return t;
}

Status CheckInputShape(const PlanInput& in, const std::vector<int64_t>& shape) {
  if (!in.shape.has_rank()) return Status::Ok();
  bool same = shape.size() == in.shape.rank();
  for (size_t i = 0; same && i < in.shape.rank(); ++i) {
    const fe::Dim& d = in.shape.dim(i);
    same = !d.is_known() || d.value() == shape[i];
  }
  if (same) return Status::Ok();
  return InvalidArgument("input '" + in.name + "' has shape " + device::ShapeToString(shape) + ", the model declares " +
                         in.shape.ToString());
}

Result<ResolvedInputs> ResolveInputs(const std::vector<PlanInput>& plan_inputs, const RunInputs& given, uint64_t seed) {
  for (const auto& [name, t] : given) {
    if (std::none_of(plan_inputs.begin(), plan_inputs.end(), [&name = name](const PlanInput& i) { return i.name == name; })) {
      std::string known;
      for (const PlanInput& i : plan_inputs) known += (known.empty() ? "" : ", ") + i.name;
      return InvalidArgument("unknown input '" + name + "' (model inputs: " + known + ")");
    }
  }
  ResolvedInputs out;
  for (const PlanInput& in : plan_inputs) {
    auto it = given.find(in.name);
    Result<Tensor> t = it == given.end() ? GenerateInput(in, seed) : ConvertInput(in, it->second);
    if (!t.ok()) return t.status();
    if (it == given.end()) out.generated.push_back(in.name);
    out.values.emplace_back(in.name, std::move(*t));
  }
  return out;
}

}  // namespace kiln::runtime
