#include "device/tensor.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <sstream>

#include "common/float16.h"
#include "device/dtype_dispatch.h"

namespace kiln::device {
namespace {

Status CheckLayoutRank(Layout layout, std::size_t rank) {
  if (layout == Layout::kNHWC && rank != 3 && rank != 4) {
    return InvalidArgument("layout NHWC needs a rank-3 or rank-4 tensor, got rank " +
                           std::to_string(rank));
  }
  return Status::Ok();
}

}  // namespace

namespace {
struct DTypeInfo {
  DataType type;
  std::size_t size;
  const char* name;
  const char* kserve;
};
constexpr DTypeInfo kDTypes[] = {
    {DataType::kFloat32, 4, "float32", "FP32"}, {DataType::kBFloat16, 2, "bfloat16", "BF16"},
    {DataType::kFloat16, 2, "float16", "FP16"}, {DataType::kInt32, 4, "int32", "INT32"},
    {DataType::kInt64, 8, "int64", "INT64"},    {DataType::kUInt8, 1, "uint8", "UINT8"},
    {DataType::kFloat64, 8, "float64", "FP64"}, {DataType::kInt8, 1, "int8", "INT8"},
    {DataType::kInt16, 2, "int16", "INT16"},    {DataType::kUInt16, 2, "uint16", "UINT16"},
    {DataType::kUInt32, 4, "uint32", "UINT32"}, {DataType::kUInt64, 8, "uint64", "UINT64"},
    {DataType::kBool, 1, "bool", "BOOL"},
};
const DTypeInfo* Info(DataType d) {
  for (const auto& e : kDTypes) {
    if (e.type == d) return &e;
  }
  return nullptr;
}
}  // namespace

std::size_t DataTypeSize(DataType dtype) {
  const DTypeInfo* i = Info(dtype);
  return i != nullptr ? i->size : 0;
}

const char* DataTypeName(DataType dtype) {
  const DTypeInfo* i = Info(dtype);
  return i != nullptr ? i->name : "?";
}

const char* KServeDataTypeName(DataType dtype) {
  const DTypeInfo* i = Info(dtype);
  return i != nullptr ? i->kserve : "?";
}

Result<DataType> ParseDataType(std::string_view name) {
  std::string all;
  for (const auto& e : kDTypes) {
    if (name == e.name || name == e.kserve) return e.type;
    all += std::string(all.empty() ? "" : ", ") + e.name;
  }
  return InvalidArgument("unknown data type '" + std::string(name) + "' (expected one of " + all +
                         ", or the KServe-v2 names FP32, INT64, BOOL, ...)");
}

bool IsFloatingPoint(DataType d) {
  return d == DataType::kFloat32 || d == DataType::kFloat64 || d == DataType::kFloat16 || d == DataType::kBFloat16;
}

const char* LayoutName(Layout layout) { return layout == Layout::kNHWC ? "NHWC" : "NCHW"; }

Result<int64_t> ShapeElementCount(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return InvalidArgument("negative dimension in shape " + ShapeToString(shape));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
      return ResourceExhausted("element count of shape " + ShapeToString(shape) + " overflows");
    }
    n *= d;
  }
  return n;
}

std::string ShapeToString(std::span<const int64_t> shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

void Tensor::AlignedFree::operator()(std::byte* p) const { std::free(p); }

Result<Tensor> Tensor::Uninitialized(std::vector<int64_t> shape, DataType dtype, Layout layout) {
  KILN_RETURN_IF_ERROR(CheckLayoutRank(layout, shape.size()));
  auto count = ShapeElementCount(shape);
  if (!count.ok()) return count.status();
  const std::size_t esize = DataTypeSize(dtype);
  if (static_cast<uint64_t>(*count) > kMaxTensorBytes / esize) {
    return ResourceExhausted("tensor " + ShapeToString(shape) + " of " + DataTypeName(dtype) +
                             " exceeds the " + std::to_string(kMaxTensorBytes >> 30) + " GiB limit");
  }
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.layout_ = layout;
  t.num_elements_ = *count;
  const std::size_t bytes = static_cast<std::size_t>(*count) * esize;
  // aligned_alloc needs a size that is a multiple of the alignment; never allocate 0 bytes.
  const std::size_t alloc = std::max<std::size_t>(kTensorAlignment,
                                                  (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment);
  void* p = std::aligned_alloc(kTensorAlignment, alloc);
  if (p == nullptr) {
    return ResourceExhausted("cannot allocate " + std::to_string(alloc) + " bytes for tensor " +
                             ShapeToString(t.shape_));
  }
  std::memset(static_cast<std::byte*>(p) + bytes, 0, alloc - bytes);  // the alignment padding: zero, as with Zeros
  t.storage_.reset(static_cast<std::byte*>(p));
  return t;
}

Result<Tensor> Tensor::Zeros(std::vector<int64_t> shape, DataType dtype, Layout layout) {
  auto t = Uninitialized(std::move(shape), dtype, layout);
  if (t.ok()) std::memset(t->storage_.get(), 0, t->size_bytes());
  return t;
}

Result<Tensor> Tensor::FromFloats(std::vector<int64_t> shape, std::span<const float> values,
                                  Layout layout) {
  auto t = Zeros(std::move(shape), DataType::kFloat32, layout);
  if (!t.ok()) return t.status();
  if (static_cast<int64_t>(values.size()) != t->num_elements()) {
    return InvalidArgument("FromFloats: " + std::to_string(values.size()) + " values for shape " +
                           ShapeToString(t->shape()) + " (" + std::to_string(t->num_elements()) +
                           " elements)");
  }
  if (!values.empty()) std::memcpy(t->storage_.get(), values.data(), values.size() * sizeof(float));
  return t;
}

Result<Tensor> Tensor::FromBytes(std::vector<int64_t> shape, DataType dtype,
                                 std::span<const std::byte> bytes, Layout layout) {
  auto t = Zeros(std::move(shape), dtype, layout);
  if (!t.ok()) return t.status();
  if (bytes.size() != t->size_bytes()) {
    return InvalidArgument("FromBytes: " + std::to_string(bytes.size()) + " bytes for " +
                           DataTypeName(dtype) + ShapeToString(t->shape()) + " (needs " +
                           std::to_string(t->size_bytes()) + ")");
  }
  if (!bytes.empty()) std::memcpy(t->storage_.get(), bytes.data(), bytes.size());
  return t;
}

Tensor::Tensor(const Tensor& other)
    : shape_(other.shape_), dtype_(other.dtype_), layout_(other.layout_), num_elements_(other.num_elements_) {
  if (other.storage_) {
    const std::size_t alloc = std::max<std::size_t>(
        kTensorAlignment, (other.size_bytes() + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment);
    void* p = std::aligned_alloc(kTensorAlignment, alloc);
    if (p == nullptr) throw std::bad_alloc();  // same contract as any std container copy
    std::memcpy(p, other.storage_.get(), other.size_bytes());
    storage_.reset(static_cast<std::byte*>(p));
  }
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) {
    Tensor copy(other);
    *this = std::move(copy);
  }
  return *this;
}

std::vector<int64_t> Tensor::strides() const {
  const std::size_t r = shape_.size();
  std::vector<int64_t> s(r, 1);
  if (layout_ == Layout::kNCHW || r < 3) {
    for (std::size_t i = r; i-- > 1;) s[i - 1] = s[i] * shape_[i];
    return s;
  }
  // Channels last: memory order N, spatial..., C. Logical dims: 0 = N, 1 = C, 2.. = spatial.
  s[1] = 1;
  int64_t acc = shape_[1];
  for (std::size_t i = r; i-- > 2;) {
    s[i] = acc;
    acc *= shape_[i];
  }
  s[0] = acc;
  return s;
}

Result<Tensor> Tensor::ToLayout(Layout layout) const {
  if (layout == layout_) return Tensor(*this);
  KILN_RETURN_IF_ERROR(CheckLayoutRank(layout, shape_.size()));
  auto out = Zeros(shape_, dtype_, layout);
  if (!out.ok()) return out.status();
  const std::size_t es = DataTypeSize(dtype_);
  const auto si = strides();
  const auto so = out->strides();
  const int64_t n = shape_[0], c = shape_[1];
  int64_t spatial = 1;
  for (std::size_t i = 2; i < shape_.size(); ++i) spatial *= shape_[i];
  // For both layouts the spatial dims are contiguous among themselves (row-major), so index the
  // flattened spatial position p with stride (stride of the last spatial dim).
  const int64_t sp_i = si.back(), sp_o = so.back();
  const std::byte* src = storage_.get();
  std::byte* dst = out->storage_.get();
  for (int64_t in = 0; in < n; ++in)
    for (int64_t ic = 0; ic < c; ++ic)
      for (int64_t p = 0; p < spatial; ++p)
        std::memcpy(dst + (in * so[0] + ic * so[1] + p * sp_o) * es,
                    src + (in * si[0] + ic * si[1] + p * sp_i) * es, es);
  return out;
}

Result<Tensor> Tensor::ToFloat32() const { return CastTo(DataType::kFloat32); }

namespace {

// Element i of `p` (storage of type `d`) as double (floating types) or int64/uint64 (integers).
struct Scalar {
  bool is_float = false;
  bool is_unsigned = false;
  double f = 0.0;
  int64_t i = 0;  // uint64 values keep their bit pattern
};

Scalar Load(DataType d, const std::byte* p, int64_t k) {
  Scalar v;
  return VisitDataType(d, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr DataType kT = decltype(tag)::kType;
    T x;
    std::memcpy(&x, p + k * static_cast<int64_t>(sizeof(T)), sizeof(T));
    if constexpr (kT == DataType::kFloat16) {
      v.is_float = true;
      v.f = HalfToFloat(x);
    } else if constexpr (kT == DataType::kBFloat16) {
      v.is_float = true;
      v.f = BFloat16ToFloat(x);
    } else if constexpr (std::is_floating_point_v<T>) {
      v.is_float = true;
      v.f = x;
    } else {
      v.is_unsigned = std::is_unsigned_v<T>;
      v.i = static_cast<int64_t>(x);
    }
    return v;
  });
}

template <typename T>
T SaturatingFromDouble(double f) {
  if (std::isnan(f)) return T{0};
  const double t = std::trunc(f);
  if (t <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
  if (t >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(t);
}

void Store(DataType d, std::byte* p, int64_t k, const Scalar& v) {
  VisitDataType(d, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr DataType kT = decltype(tag)::kType;
    T x{};
    const double as_double = v.is_float ? v.f
                             : v.is_unsigned ? static_cast<double>(static_cast<uint64_t>(v.i))
                                             : static_cast<double>(v.i);
    if constexpr (kT == DataType::kBool) {
      x = v.is_float ? (v.f != 0.0 ? 1 : 0) : (v.i != 0 ? 1 : 0);
    } else if constexpr (kT == DataType::kFloat16) {
      // Through float: exact for float32 sources; float64 / large-integer sources round twice
      // (at most one half-ulp of float32 before the float16 rounding).
      x = FloatToHalf(static_cast<float>(as_double));
    } else if constexpr (kT == DataType::kBFloat16) {
      x = FloatToBFloat16(static_cast<float>(as_double));
    } else if constexpr (std::is_floating_point_v<T>) {
      x = static_cast<T>(as_double);
    } else if (v.is_float) {
      x = SaturatingFromDouble<T>(v.f);
    } else {
      x = static_cast<T>(v.i);  // two's-complement wrap, as numpy's astype
    }
    std::memcpy(p + k * static_cast<int64_t>(sizeof(T)), &x, sizeof(T));
  });
}

}  // namespace

Result<Tensor> Tensor::CastTo(DataType dtype) const {
  if (dtype == dtype_) return Tensor(*this);
  auto out = Zeros(shape_, dtype, layout_);
  if (!out.ok()) return out.status();
  const std::byte* s = storage_.get();
  std::byte* d = out->storage_.get();
  if (dtype_ == DataType::kFloat32 && dtype == DataType::kFloat64) {  // the common widening, fast
    const float* f = reinterpret_cast<const float*>(s);
    double* o = reinterpret_cast<double*>(d);
    for (int64_t i = 0; i < num_elements_; ++i) o[i] = f[i];
    return out;
  }
  for (int64_t i = 0; i < num_elements_; ++i) Store(dtype, d, i, Load(dtype_, s, i));
  return out;
}

Result<Tensor> Tensor::Reshaped(std::vector<int64_t> shape) const {
  if (layout_ != Layout::kNCHW) return InvalidArgument("Reshaped needs a row-major (NCHW) tensor");
  auto count = ShapeElementCount(shape);
  if (!count.ok()) return count.status();
  if (*count != num_elements_) {
    return InvalidArgument("cannot reshape " + ShapeToString(shape_) + " to " + ShapeToString(shape));
  }
  Tensor t(*this);
  t.shape_ = std::move(shape);
  return t;
}

std::string Tensor::DebugString() const {
  return std::string(DataTypeName(dtype_)) + ShapeToString(shape_) + " " + LayoutName(layout_);
}

}  // namespace kiln::device
