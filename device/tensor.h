// kiln::device::Tensor — a dense host tensor with a shape, an element type, a layout tag and
// 64-byte aligned storage. It is the currency of every device backend (device/backends/backend.h),
// of the scheduler and of the conv plan.
//
// Conventions
// * `shape()` is always the LOGICAL shape. For rank-4 feature maps that is (N, C, H, W), for
//   rank-3 (N, C, W) — whatever the layout. The layout tag only says how the elements are ordered
//   in memory:
//     - Layout::kNCHW: row-major over the logical shape (also what any tensor of rank != 3, 4 uses;
//       weights OIHW / IOHW and bias [O] are stored this way).
//     - Layout::kNHWC: channels last; for rank 4 memory order (N, H, W, C), for rank 3 (N, W, C).
//   `ToLayout()` converts between the two.
// * Storage is owned, contiguous, zero-initialised on creation and aligned to kTensorAlignment
//   (64 bytes: one cache line, one AVX-512 vector). Copying a Tensor copies its data (value
//   semantics); moving is cheap.
// * Element access: `data<float>()` / `span<float>()` require dtype kFloat32 (asserted in debug
//   builds); `raw()` gives bytes for any dtype (little-endian, as the host stores them).
// * Nothing here throws on bad input: the factories return kiln::Result with INVALID_ARGUMENT
//   (negative dims, layout not valid for the rank, data size mismatch) or RESOURCE_EXHAUSTED
//   (size overflow, more than kMaxTensorBytes, allocation failure).
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/status.h"

namespace kiln::device {

/// Element types a host tensor can hold: every ONNX tensor type Kiln computes with (onnx.proto
/// TensorProto.DataType minus STRING and the complex types). Device-side formats (bfloat8_b,
/// bfloat4_b) are not host element types: they exist only inside a backend (see
/// device/backends/precision.h). The numeric values are Kiln's own (stable, not ONNX's).
enum class DataType : int {
  kFloat32 = 0,   ///< IEEE binary32; the only type the device backends compute on.
  kBFloat16 = 1,  ///< bfloat16 bit patterns (uint16 storage), as the KServe "BF16" datatype.
  kFloat16 = 2,   ///< IEEE binary16 bit patterns (uint16 storage).
  kInt32 = 3,
  kInt64 = 4,
  kUInt8 = 5,
  kFloat64 = 6,
  kInt8 = 7,
  kInt16 = 8,
  kUInt16 = 9,
  kUInt32 = 10,
  kUInt64 = 11,
  kBool = 12,  ///< one byte per element, 0 or 1 (uint8 storage)
};

/// Every DataType, in enum order.
inline constexpr DataType kAllDataTypes[] = {
    DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16, DataType::kInt32, DataType::kInt64,
    DataType::kUInt8,   DataType::kFloat64,  DataType::kInt8,    DataType::kInt16, DataType::kUInt16,
    DataType::kUInt32,  DataType::kUInt64,   DataType::kBool};

/// Size of one element in bytes.
std::size_t DataTypeSize(DataType dtype);
/// numpy-style name: "float32", "bfloat16", "float16", "float64", "int8" … "int64", "uint8" …
/// "uint64", "bool".
const char* DataTypeName(DataType dtype);
/// KServe-v2 datatype name: "FP32", "BF16", "FP16", "FP64", "INT8" … "INT64", "UINT8" … "UINT64",
/// "BOOL".
const char* KServeDataTypeName(DataType dtype);
/// Inverse of DataTypeName and of KServeDataTypeName; INVALID_ARGUMENT for anything else.
Result<DataType> ParseDataType(std::string_view name);
/// float32, float64, float16, bfloat16.
bool IsFloatingPoint(DataType dtype);

/// Memory order of a rank-3/4 feature map (see the header comment).
enum class Layout : int { kNCHW = 0, kNHWC = 1 };
/// "NCHW" / "NHWC".
const char* LayoutName(Layout layout);

/// Alignment of every tensor's storage, in bytes.
inline constexpr std::size_t kTensorAlignment = 64;
/// Upper bound for one tensor's storage (16 GiB); larger requests fail with RESOURCE_EXHAUSTED.
inline constexpr std::size_t kMaxTensorBytes = std::size_t{16} << 30;

/// Number of elements of `shape`, or an error for negative dims / int64 overflow.
Result<int64_t> ShapeElementCount(std::span<const int64_t> shape);
/// "[1, 3, 224, 224]".
std::string ShapeToString(std::span<const int64_t> shape);

class Tensor {
 public:
  /// A default-constructed tensor: shape {}, no storage, dtype float32; `empty()` is true.
  /// (A real rank-0 scalar comes from Zeros({}) and has one element.)
  Tensor() = default;

  /// A zero-filled tensor. Errors: INVALID_ARGUMENT for a negative dim or kNHWC with a rank other
  /// than 3 or 4; RESOURCE_EXHAUSTED for overflow / > kMaxTensorBytes / allocation failure.
  static Result<Tensor> Zeros(std::vector<int64_t> shape, DataType dtype = DataType::kFloat32,
                              Layout layout = Layout::kNCHW);

  /// As Zeros, but the contents are unspecified (not written here): for producers that write every
  /// element, so that a large output's pages are first touched by the code that fills them (on
  /// its threads) instead of by a zero fill beforehand. The same errors as Zeros.
  static Result<Tensor> Uninitialized(std::vector<int64_t> shape, DataType dtype = DataType::kFloat32,
                                      Layout layout = Layout::kNCHW);

  /// A float32 tensor holding a copy of `values`, which are given in MEMORY order for `layout`.
  /// INVALID_ARGUMENT when values.size() differs from the element count.
  static Result<Tensor> FromFloats(std::vector<int64_t> shape, std::span<const float> values,
                                   Layout layout = Layout::kNCHW);

  /// A tensor of any dtype from raw little-endian bytes in memory order (e.g. a KServe-v2 raw
  /// input). INVALID_ARGUMENT when bytes.size() != element count * DataTypeSize(dtype).
  static Result<Tensor> FromBytes(std::vector<int64_t> shape, DataType dtype,
                                  std::span<const std::byte> bytes, Layout layout = Layout::kNCHW);

  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&& other) noexcept = default;
  Tensor& operator=(Tensor&& other) noexcept = default;
  ~Tensor() = default;

  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  /// Logical dim `i`; negative `i` counts from the end (-1 is the last dim). Precondition:
  /// -rank() <= i < rank() (not checked).
  int64_t dim(int i) const { return shape_[static_cast<std::size_t>(i < 0 ? i + rank() : i)]; }
  DataType dtype() const { return dtype_; }
  Layout layout() const { return layout_; }
  int64_t num_elements() const { return num_elements_; }
  std::size_t size_bytes() const { return static_cast<std::size_t>(num_elements_) * DataTypeSize(dtype_); }
  /// True for a default-constructed tensor (no shape). A tensor with a 0 dim is not "empty" here.
  bool empty() const { return shape_.empty() && !storage_; }

  /// Typed element pointer in memory order. T must match dtype (float ↔ kFloat32, double ↔
  /// kFloat64, uint16_t ↔ kBFloat16 / kFloat16 / kUInt16, uint8_t ↔ kUInt8 / kBool, and the
  /// integer type of the same name otherwise); checked with assert.
  template <typename T>
  T* data() {
    assert(TypeMatches<T>());
    return reinterpret_cast<T*>(storage_.get());
  }
  template <typename T>
  const T* data() const {
    assert(TypeMatches<T>());
    return reinterpret_cast<const T*>(storage_.get());
  }
  template <typename T>
  std::span<T> span() {
    return {data<T>(), static_cast<std::size_t>(num_elements_)};
  }
  template <typename T>
  std::span<const T> span() const {
    return {data<T>(), static_cast<std::size_t>(num_elements_)};
  }
  std::span<std::byte> raw() { return {storage_.get(), size_bytes()}; }
  std::span<const std::byte> raw() const { return {storage_.get(), size_bytes()}; }

  /// Memory strides in elements for the logical dims (so element (n,c,h,w) of a rank-4 tensor is at
  /// sum(idx[i] * strides()[i]) whatever the layout).
  std::vector<int64_t> strides() const;

  /// A copy in `layout` (a plain copy when it already is). INVALID_ARGUMENT for kNHWC with rank
  /// other than 3 or 4.
  Result<Tensor> ToLayout(Layout layout) const;

  /// A float32 copy; converts bfloat16 / float16 exactly, float64 and integers to the nearest
  /// float32. Same layout.
  Result<Tensor> ToFloat32() const;

  /// A copy converted element by element to `dtype` with ONNX Cast semantics
  /// (onnx/docs/Operators.md, Cast): between floating types round to nearest even; floating to
  /// integer truncates toward zero (NaN and out-of-range values saturate to the target's range —
  /// ONNX leaves them undefined); integer to integer wraps like numpy's astype; to bool: != 0;
  /// from bool: 0 / 1. A plain copy when the type already is `dtype`. Same layout.
  Result<Tensor> CastTo(DataType dtype) const;

  /// The same data with a new logical shape of equal element count (layout must be kNCHW, i.e.
  /// row-major). INVALID_ARGUMENT otherwise.
  Result<Tensor> Reshaped(std::vector<int64_t> shape) const;

  /// "float32[1, 3, 224, 224] NCHW".
  std::string DebugString() const;

 private:
  struct AlignedFree {
    void operator()(std::byte* p) const;
  };
  template <typename T>
  bool TypeMatches() const;

  std::vector<int64_t> shape_;
  DataType dtype_ = DataType::kFloat32;
  Layout layout_ = Layout::kNCHW;
  int64_t num_elements_ = 0;
  std::unique_ptr<std::byte[], AlignedFree> storage_;
};

template <typename T>
bool Tensor::TypeMatches() const {
  using U = std::remove_const_t<T>;
  if constexpr (std::is_same_v<U, float>) return dtype_ == DataType::kFloat32;
  if constexpr (std::is_same_v<U, double>) return dtype_ == DataType::kFloat64;
  if constexpr (std::is_same_v<U, uint16_t>)
    return dtype_ == DataType::kBFloat16 || dtype_ == DataType::kFloat16 || dtype_ == DataType::kUInt16;
  if constexpr (std::is_same_v<U, int8_t>) return dtype_ == DataType::kInt8;
  if constexpr (std::is_same_v<U, int16_t>) return dtype_ == DataType::kInt16;
  if constexpr (std::is_same_v<U, int32_t>) return dtype_ == DataType::kInt32;
  if constexpr (std::is_same_v<U, int64_t>) return dtype_ == DataType::kInt64;
  if constexpr (std::is_same_v<U, uint32_t>) return dtype_ == DataType::kUInt32;
  if constexpr (std::is_same_v<U, uint64_t>) return dtype_ == DataType::kUInt64;
  if constexpr (std::is_same_v<U, uint8_t>) return dtype_ == DataType::kUInt8 || dtype_ == DataType::kBool;
  if constexpr (std::is_same_v<U, std::byte>) return true;
  return false;
}

}  // namespace kiln::device
