// Helpers shared by the host kernels of runtime/host_kernels/ (contract: registry.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/host_kernels/registry.h"

namespace kiln::runtime::host_kernels {

using Shape = std::vector<int64_t>;
using device::Tensor;
using Out = Result<std::vector<Tensor>>;

/// INVALID_ARGUMENT "<node>: msg".
Status Err(const onnx_fe::Node& n, const std::string& msg);
/// A zero-filled tensor (fp32 unless `dtype` says otherwise).
Result<Tensor> Make(Shape shape, device::DataType dtype = device::DataType::kFloat32);
/// An int64 tensor of `shape` holding `values` (row-major; sizes must match).
Result<Tensor> Int64Tensor(Shape shape, const std::vector<int64_t>& values);
/// Every element type except bool, all on `path` (ONNX's "all numeric types" constraint).
inline std::vector<DTypePath> NumericDTypes(KernelPath path) {
  std::vector<DTypePath> v;
  for (device::DataType t : device::kAllDataTypes) {
    if (t != device::DataType::kBool) v.push_back({t, path});
  }
  return v;
}
/// inputs[i], or nullptr when absent.
const Tensor* In(const HostKernelInputs& in, size_t i);
/// inputs[i], or INVALID_ARGUMENT "<node>: <what> missing".
Result<const Tensor*> Required(const onnx_fe::Node& n, const HostKernelInputs& in, size_t i, const char* what);
/// The values of `t` as int64: integer and bool types exactly, floating types rounded to nearest.
std::vector<int64_t> IntsOf(const Tensor& t);
/// A negative axis counted from the end.
int64_t NormAxis(int64_t axis, int64_t rank);
/// Advances the row-major multi-index `idx` over `shape` (last axis fastest; wraps to all zeros).
void NextIndex(std::vector<int64_t>& idx, const Shape& shape);
std::vector<int64_t> RowMajorStrides(const Shape& s);
/// numpy broadcast of two shapes; INVALID_ARGUMENT "shapes [..] and [..] do not broadcast".
Result<Shape> BroadcastShape(const Shape& a, const Shape& b);
/// Strides of `s` viewed in broadcast shape `out` (0 on broadcast dims).
std::vector<int64_t> BroadcastStrides(const Shape& s, const Shape& out);
/// `t` as output 0, then empty tensors up to `num_outputs`.
std::vector<Tensor> Outputs(Tensor t, size_t num_outputs = 1);

/// Bytes of a tensor of `shape` with `element_size`-byte elements (negative dims count as 0;
/// saturates at INT64_MAX).
int64_t TensorBytes(const Shape& shape, int64_t element_size);
/// TensorBytes(shape, 4): the estimate for fp32 outputs, and the bound kernels use for any type
/// of at most 4 bytes (int64 / float64 outputs use TensorBytes(shape, 8)).
int64_t Fp32Bytes(const Shape& shape);
/// Saturating sum.
int64_t AddBytes(int64_t a, int64_t b);
/// Estimate for kernels whose only allocation is one output shaped like input 0.
int64_t SameAsInput0Bytes(const onnx_fe::Node& node, const std::vector<Shape>& input_shapes);

/// Elementary steps between two checks of the cancel token (registry.h contract: well under
/// 50 ms of scalar work on one core).
inline constexpr int64_t kCancelPollWork = int64_t{1} << 20;

/// Checks a cancel token every kCancelPollWork steps of work reported with Tick.
class CancelPoll {
 public:
  explicit CancelPoll(const device::CancelToken* token) : token_(token) {}
  /// Adds `work` steps; OK, or the token's CANCELLED / DEADLINE_EXCEEDED once due.
  Status Tick(int64_t work) {
    if (token_ == nullptr) return Status::Ok();
    done_ += work;
    if (done_ < kCancelPollWork) return Status::Ok();
    done_ = 0;
    return token_->Check();
  }

 private:
  const device::CancelToken* token_;
  int64_t done_ = 0;
};

}  // namespace kiln::runtime::host_kernels
