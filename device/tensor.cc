#include "device/tensor.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <sstream>

#include "common/float16.h"

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

std::size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return 4;
    case DataType::kBFloat16: return 2;
    case DataType::kFloat16: return 2;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kUInt8: return 1;
  }
  return 0;
}

const char* DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return "float32";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kFloat16: return "float16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kUInt8: return "uint8";
  }
  return "?";
}

Result<DataType> ParseDataType(std::string_view name) {
  struct Entry {
    std::string_view a, b;
    DataType t;
  };
  static constexpr Entry kTable[] = {
      {"float32", "FP32", DataType::kFloat32}, {"bfloat16", "BF16", DataType::kBFloat16},
      {"float16", "FP16", DataType::kFloat16}, {"int32", "INT32", DataType::kInt32},
      {"int64", "INT64", DataType::kInt64},    {"uint8", "UINT8", DataType::kUInt8},
  };
  for (const auto& e : kTable) {
    if (name == e.a || name == e.b) return e.t;
  }
  return InvalidArgument("unknown data type '" + std::string(name) +
                         "' (expected float32, bfloat16, float16, int32, int64, uint8)");
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

Result<Tensor> Tensor::Zeros(std::vector<int64_t> shape, DataType dtype, Layout layout) {
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
  std::memset(p, 0, alloc);
  t.storage_.reset(static_cast<std::byte*>(p));
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

Result<Tensor> Tensor::ToFloat32() const {
  auto out = Zeros(shape_, DataType::kFloat32, layout_);
  if (!out.ok()) return out.status();
  float* d = out->data<float>();
  const std::byte* s = storage_.get();
  for (int64_t i = 0; i < num_elements_; ++i) {
    switch (dtype_) {
      case DataType::kFloat32: std::memcpy(&d[i], s + 4 * i, 4); break;
      case DataType::kBFloat16: {
        uint16_t v;
        std::memcpy(&v, s + 2 * i, 2);
        d[i] = BFloat16ToFloat(v);
        break;
      }
      case DataType::kFloat16: {
        uint16_t v;
        std::memcpy(&v, s + 2 * i, 2);
        d[i] = HalfToFloat(v);
        break;
      }
      case DataType::kInt32: {
        int32_t v;
        std::memcpy(&v, s + 4 * i, 4);
        d[i] = static_cast<float>(v);
        break;
      }
      case DataType::kInt64: {
        int64_t v;
        std::memcpy(&v, s + 8 * i, 8);
        d[i] = static_cast<float>(v);
        break;
      }
      case DataType::kUInt8: d[i] = static_cast<float>(static_cast<uint8_t>(s[i])); break;
    }
  }
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
