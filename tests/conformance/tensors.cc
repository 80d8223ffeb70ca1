// TensorProto ↔ device::Tensor for the runner: decoding through the ONNX front end's decoder
// (compiler/onnx/tensor_decode.h, the one TensorProto decoder in Kiln) and onnx's comparison.
#include <bit>
#include <cmath>
#include <cstring>
#include <sstream>

#include "compiler/onnx/ir.h"
#include "compiler/onnx/tensor_decode.h"
#include "tests/conformance/conformance.h"

namespace kiln::conformance {
namespace {

static_assert(std::endian::native == std::endian::little, "device::Tensor bytes are written little-endian");

using onnx_fe::DataType;

// KServe v2 datatype name of an ONNX element type: the names device::ParseDataType accepts, so
// the runner follows device::Tensor as it gains element types.
const char* KServeName(DataType t) {
  switch (t) {
    case DataType::kFloat: return "FP32";
    case DataType::kFloat16: return "FP16";
    case DataType::kBFloat16: return "BF16";
    case DataType::kDouble: return "FP64";
    case DataType::kInt8: return "INT8";
    case DataType::kInt16: return "INT16";
    case DataType::kInt32: return "INT32";
    case DataType::kInt64: return "INT64";
    case DataType::kUint8: return "UINT8";
    case DataType::kUint16: return "UINT16";
    case DataType::kUint32: return "UINT32";
    case DataType::kUint64: return "UINT64";
    case DataType::kBool: return "BOOL";
    case DataType::kString: return "BYTES";
    default: return "UNDEFINED";
  }
}

Result<std::shared_ptr<const onnx_fe::ConstantData>> Decode(const onnx::TensorProto& proto) {
  onnx::TensorProto t = proto;  // DecodeTensor moves the payload out
  const auto check = onnx_fe::internal::CheckTensorPayload(t);
  if (!check.error.empty()) return Status(check.code, "tensor '" + proto.name() + "' " + check.error);
  return onnx_fe::internal::DecodeTensor(t);
}

std::vector<int64_t> Dims(const onnx::TensorProto& t) { return {t.dims().begin(), t.dims().end()}; }

// The device element type of an ONNX one, or an error naming it.
Result<device::DataType> DeviceType(DataType t) {
  auto d = device::ParseDataType(KServeName(t));
  if (!d.ok()) {
    return FailedPrecondition(std::string("element type ") + onnx_fe::DataTypeName(t) +
                              " has no device::Tensor type");
  }
  return *d;
}

// Elements of `t` as doubles (exact for every type but 64-bit integers above 2^53).
Result<std::vector<double>> Values(const device::Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.num_elements()));
  switch (t.dtype()) {
    case device::DataType::kInt64:
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(t.data<int64_t>()[i]);
      return v;
    case device::DataType::kInt32:
      for (size_t i = 0; i < v.size(); ++i) v[i] = t.data<int32_t>()[i];
      return v;
    case device::DataType::kUInt8:
      for (size_t i = 0; i < v.size(); ++i) v[i] = t.data<uint8_t>()[i];
      return v;
    default: break;
  }
  const device::Tensor* f = &t;
  Result<device::Tensor> converted = Internal("unused");
  if (t.dtype() != device::DataType::kFloat32) {
    converted = t.ToFloat32();
    if (!converted.ok()) return converted.status();
    f = &*converted;
  }
  for (size_t i = 0; i < v.size(); ++i) v[i] = f->data<float>()[i];
  return v;
}

std::string IndexString(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] > 0) {
      idx[d] = flat % shape[d];
      flat /= shape[d];
    }
  }
  return device::ShapeToString(idx);
}

bool Close(double actual, double expected) {
  if (std::isnan(actual) || std::isnan(expected)) return std::isnan(actual) && std::isnan(expected);
  if (std::isinf(actual) || std::isinf(expected)) return actual == expected;
  return std::fabs(actual - expected) <= kAtol + kRtol * std::fabs(expected);
}

}  // namespace

Result<device::Tensor> ToDeviceTensor(const onnx::TensorProto& proto) {
  const auto type = static_cast<DataType>(proto.data_type());
  auto dtype = DeviceType(type);
  if (!dtype.ok()) return dtype.status();
  auto data = Decode(proto);
  if (!data.ok()) return data.status();
  const size_t esize = onnx_fe::DataTypeSize(type);
  if (device::DataTypeSize(*dtype) != esize) {
    return Internal(std::string("element size of ") + onnx_fe::DataTypeName(type) + " differs from device::Tensor's");
  }
  const size_t n = (*data)->size();
  std::vector<std::byte> bytes(n * esize);
  std::byte* out = bytes.data();
  const auto floats = (*data)->floats();
  for (size_t i = 0; i < n; ++i) {
    switch (type) {
      case DataType::kFloat: std::memcpy(out + 4 * i, &floats[i], 4); break;
      case DataType::kDouble: {
        // The decoder serves DOUBLE rounded to fp32; far inside the tolerance.
        const double d = floats[i];
        std::memcpy(out + 8 * i, &d, 8);
        break;
      }
      case DataType::kFloat16: {
        // Exact: the value came from a binary16.
        const auto h = std::bit_cast<uint16_t>(static_cast<_Float16>(floats[i]));
        std::memcpy(out + 2 * i, &h, 2);
        break;
      }
      case DataType::kBFloat16: {
        const auto b = static_cast<uint16_t>(std::bit_cast<uint32_t>(floats[i]) >> 16);
        std::memcpy(out + 2 * i, &b, 2);
        break;
      }
      default: {
        // Integers and BOOL: the low `esize` bytes of the exact value (two's complement).
        const int64_t v = (*data)->ints()[i];
        std::memcpy(out + esize * i, &v, esize);
        break;
      }
    }
  }
  return device::Tensor::FromBytes(Dims(proto), *dtype, bytes);
}

std::string CompareTensor(const onnx::TensorProto& expected, const device::Tensor& actual) {
  const auto type = static_cast<DataType>(expected.data_type());
  const std::vector<int64_t> shape = Dims(expected);
  if (shape != actual.shape()) {
    return "shape: expected " + device::ShapeToString(shape) + ", got " + device::ShapeToString(actual.shape());
  }
  auto want = Decode(expected);
  if (!want.ok()) return "expected output: " + want.status().message();
  auto got = Values(actual);
  if (!got.ok()) return "output: " + got.status().message();

  std::string value_error;
  int64_t bad = 0, first = -1;
  double max_diff = 0;
  for (size_t i = 0; i < got->size(); ++i) {
    const double e = (*want)->is_integer() ? static_cast<double>((*want)->ints()[i]) : (*want)->floats()[i];
    const double a = (*got)[i];
    if (Close(a, e)) continue;
    if (first < 0) first = static_cast<int64_t>(i);
    ++bad;
    if (std::isfinite(a) && std::isfinite(e)) max_diff = std::max(max_diff, std::fabs(a - e));
  }
  if (bad > 0) {
    const double e = (*want)->is_integer() ? static_cast<double>((*want)->ints()[first]) : (*want)->floats()[first];
    std::ostringstream m;
    m.precision(7);
    m << "values: " << bad << " of " << got->size() << " differ, first at " << IndexString(first, shape)
      << ": got " << (*got)[first] << ", expected " << e << " (max |diff| " << max_diff << ")";
    value_error = m.str();
  }

  auto dtype = DeviceType(type);
  std::string dtype_error;
  if (!dtype.ok() || *dtype != actual.dtype()) {
    dtype_error = std::string("dtype: expected ") + onnx_fe::DataTypeName(type) +
                  (dtype.ok() ? "" : " (no device::Tensor type)") + ", got " + device::DataTypeName(actual.dtype());
    // Say whether the values are right regardless, so the two kinds of work can be told apart.
    return dtype_error + (value_error.empty() ? " (values match)" : " (values differ too)");
  }
  return value_error;
}

}  // namespace kiln::conformance
