// The inputs of a plan run (runtime/executor.h): given inputs checked and converted, absent ones
// generated.
//
// * Element types: every input is converted to the element type the model declares for it (ONNX
//   type of the graph input; float32 when the model leaves it undefined). Floating-point data
//   converts between floating types (e.g. fp32 data for an fp16 model, round to nearest even);
//   any other mismatch (float data for an int64 input, int32 for int64) is INVALID_ARGUMENT
//   "input 'x' is float32 but the model declares int64".
// * Given: converted to the model's type, NCHW row-major; rank and known dims
//   must match the plan's input (INVALID_ARGUMENT "input 'x' has shape [..], the model declares
//   [..]"); symbolic dims take the given size. A name that is not a plan input is INVALID_ARGUMENT
//   listing the model's inputs.
// * Absent: seeded uniform random in [-1, 1): splitmix64 over (seed ^ FNV-1a(name)), one step per
//   element, the top 24 bits scaled — platform independent, so the same seed and input name give
//   the same data everywhere — computed in fp32, then converted to the input's floating type.
//   Integer and bool inputs are never generated (INVALID_ARGUMENT asking for the input). Symbolic dims are bound to 1; an unknown rank or an unknown (not
//   symbolic) dim cannot be generated → INVALID_ARGUMENT asking for the input.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "compiler/convplan/plan.h"
#include "device/tensor.h"

namespace kiln::runtime {

/// Graph input name → tensor.
using RunInputs = std::map<std::string, device::Tensor>;

struct ResolvedInputs {
  /// Every plan input in ConvPlan::inputs order: (name, tensor of the input's element type).
  std::vector<std::pair<std::string, device::Tensor>> values;
  /// Names of the inputs that were absent and generated, in plan order.
  std::vector<std::string> generated;
};

/// Resolves the run's inputs (see the header comment); the first error in plan order is returned.
Result<ResolvedInputs> ResolveInputs(const std::vector<convplan::PlanInput>& plan_inputs, const RunInputs& given,
                                     uint64_t seed);

/// The host element type of plan input `in` (float32 when the model leaves it undefined).
Result<device::DataType> InputDataType(const convplan::PlanInput& in);
/// One given input checked against `in` and converted to its element type, NCHW.
Result<device::Tensor> ConvertInput(const convplan::PlanInput& in, const device::Tensor& given);
/// INVALID_ARGUMENT ("input 'x' has shape [...], the model declares [...]") when `shape` differs
/// from `in`'s declared shape in rank or in a known dim; what ConvertInput checks, for callers that
/// check before anything is estimated or allocated (api/run_conv.cc PrepareConvRun).
Status CheckInputShape(const convplan::PlanInput& in, const std::vector<int64_t>& shape);
/// One absent input generated with `seed`.
Result<device::Tensor> GenerateInput(const convplan::PlanInput& in, uint64_t seed);

}  // namespace kiln::runtime
