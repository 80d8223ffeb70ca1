#include "compiler/onnx/tensor_decode.h"

#include <bit>
#include <cstring>
#include <limits>
#include <vector>

#include "common/float16.h"

namespace kiln::onnx_fe::internal {
namespace {

using onnx::TensorProto;

template <typename T>
T LoadLE(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  if constexpr (std::endian::native == std::endian::big && sizeof(T) > 1) {
    unsigned char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    for (size_t i = 0; i < sizeof(T) / 2; ++i) std::swap(b[i], b[sizeof(T) - 1 - i]);
    std::memcpy(&v, b, sizeof(T));
  }
  return v;
}

// Which typed field holds elements of `type` (onnx.proto, TensorProto).
enum class Field { kNone, kFloat, kInt32, kInt64, kDouble, kUint64 };

Field TypedField(int32_t type) {
  switch (type) {
    case TensorProto::FLOAT: return Field::kFloat;
    case TensorProto::INT32:
    case TensorProto::INT16:
    case TensorProto::INT8:
    case TensorProto::UINT16:
    case TensorProto::UINT8:
    case TensorProto::BOOL:
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16: return Field::kInt32;
    case TensorProto::INT64: return Field::kInt64;
    case TensorProto::DOUBLE: return Field::kDouble;
    case TensorProto::UINT32:
    case TensorProto::UINT64: return Field::kUint64;
    default: return Field::kNone;
  }
}

int TypedFieldSize(const TensorProto& t, Field f) {
  switch (f) {
    case Field::kFloat: return t.float_data_size();
    case Field::kInt32: return t.int32_data_size();
    case Field::kInt64: return t.int64_data_size();
    case Field::kDouble: return t.double_data_size();
    case Field::kUint64: return t.uint64_data_size();
    case Field::kNone: break;
  }
  return 0;
}

int PopulatedDataFields(const TensorProto& t) {
  return (t.has_raw_data() ? 1 : 0) + (t.float_data_size() > 0) + (t.int32_data_size() > 0) +
         (t.int64_data_size() > 0) + (t.double_data_size() > 0) + (t.uint64_data_size() > 0) +
         (t.string_data_size() > 0);
}

}  // namespace

PayloadCheck CheckTensorPayload(const TensorProto& t) {
  PayloadCheck r;
  auto fail = [&](StatusCode code, std::string msg) {
    r.code = code;
    r.error = std::move(msg);
    return r;
  };
  if (t.data_location() == TensorProto::EXTERNAL || t.external_data_size() > 0) {
    return fail(StatusCode::kFailedPrecondition,
                "uses external data (data_location EXTERNAL); an uploaded model must be one self-contained "
                "file: re-export it with the weights embedded (e.g. onnx.save(model, path, "
                "save_as_external_data=False)). No external path is ever opened");
  }
  if (t.has_segment()) {
    return fail(StatusCode::kFailedPrecondition, "is a segmented tensor, which Kiln does not support");
  }
  const int32_t type = t.data_type();
  if (type == TensorProto::STRING) {
    return fail(StatusCode::kFailedPrecondition, "has element type STRING, which Kiln does not support");
  }
  if (type == TensorProto::COMPLEX64 || type == TensorProto::COMPLEX128) {
    return fail(StatusCode::kFailedPrecondition, std::string("has element type ") +
                                                      DataTypeName(static_cast<DataType>(type)) +
                                                      ", which Kiln does not support");
  }
  const Field field = TypedField(type);
  if (field == Field::kNone) {
    return fail(StatusCode::kInvalidArgument, "has invalid element type " + std::to_string(type));
  }
  const size_t elem_size = DataTypeSize(static_cast<DataType>(type));
  uint64_t count = 1;
  constexpr uint64_t kMaxElements = uint64_t{1} << 40;
  for (int i = 0; i < t.dims_size(); ++i) {
    const int64_t d = t.dims(i);
    if (d < 0) return fail(StatusCode::kInvalidArgument, "has negative dimension " + std::to_string(d));
    if (d != 0 && count > kMaxElements / static_cast<uint64_t>(d)) {
      return fail(StatusCode::kInvalidArgument, "has an absurd element count (dims overflow)");
    }
    count *= static_cast<uint64_t>(d);
  }
  r.element_count = count;
  if (PopulatedDataFields(t) > 1) {
    return fail(StatusCode::kInvalidArgument, "has more than one data field set (raw_data and a typed field)");
  }
  if (t.has_raw_data()) {
    const uint64_t want = count * elem_size;
    if (t.raw_data().size() != want) {
      return fail(StatusCode::kInvalidArgument,
                  "has " + std::to_string(t.raw_data().size()) + " bytes of raw_data but its dims and type " +
                      DataTypeName(static_cast<DataType>(type)) + " need " + std::to_string(count) + " x " +
                      std::to_string(elem_size) + " = " + std::to_string(want) + " bytes");
    }
    r.payload_bytes = want;
    return r;
  }
  const int have = TypedFieldSize(t, field);
  if (static_cast<uint64_t>(have) != count) {
    // A typed field of a different kind holding the data is also wrong.
    return fail(StatusCode::kInvalidArgument,
                "holds " + std::to_string(have) + " elements in the typed field for " +
                    DataTypeName(static_cast<DataType>(type)) + " but its dims need " + std::to_string(count) +
                    (PopulatedDataFields(t) == 1 && have == 0 ? " (the data is in a field of the wrong type)" : ""));
  }
  r.payload_bytes = count * elem_size;
  return r;
}

std::shared_ptr<const ConstantData> DecodeTensor(TensorProto& t) {
  const auto type = static_cast<DataType>(t.data_type());
  const size_t elem_size = DataTypeSize(type);
  const bool raw = t.has_raw_data();
  const size_t n = raw ? t.raw_data().size() / elem_size : static_cast<size_t>(TypedFieldSize(t, TypedField(t.data_type())));

  // Zero-copy paths for fp32.
  if (type == DataType::kFloat && n > 0) {
    if (raw && std::endian::native == std::endian::little) {
      auto owner = std::make_shared<std::string>(std::move(*t.mutable_raw_data()));
      t.clear_raw_data();
      if (reinterpret_cast<uintptr_t>(owner->data()) % alignof(float) == 0) {
        std::span<const float> view(reinterpret_cast<const float*>(owner->data()), n);
        return std::make_shared<ConstantData>(type, std::move(owner), view, std::vector<int64_t>{});
      }
      auto vec = std::make_shared<std::vector<float>>(n);
      std::memcpy(vec->data(), owner->data(), n * sizeof(float));
      std::span<const float> view(vec->data(), n);
      return std::make_shared<ConstantData>(type, std::move(vec), view, std::vector<int64_t>{});
    }
    if (!raw) {
      auto owner = std::make_shared<google::protobuf::RepeatedField<float>>();
      owner->Swap(t.mutable_float_data());
      std::span<const float> view(owner->data(), n);
      return std::make_shared<ConstantData>(type, std::move(owner), view, std::vector<int64_t>{});
    }
  }

  auto vec = std::make_shared<std::vector<float>>(n);
  float* out = vec->data();
  std::vector<int64_t> ints;
  const bool integer = type != DataType::kFloat && type != DataType::kFloat16 && type != DataType::kBFloat16 &&
                       type != DataType::kDouble;
  if (integer) ints.resize(n);
  std::vector<double> doubles;
  if (type == DataType::kDouble) doubles.resize(n);
  const char* p = raw ? t.raw_data().data() : nullptr;

  auto put_int = [&](size_t i, int64_t v) {
    ints[i] = v;
    out[i] = static_cast<float>(v);
  };

  for (size_t i = 0; i < n; ++i) {
    switch (type) {
      case DataType::kFloat:  // only reached on big-endian raw
        out[i] = LoadLE<float>(p + 4 * i);
        break;
      case DataType::kFloat16:
        out[i] = HalfToFloat(raw ? LoadLE<uint16_t>(p + 2 * i) : static_cast<uint16_t>(t.int32_data(i) & 0xffff));
        break;
      case DataType::kBFloat16:
        out[i] = BFloat16ToFloat(raw ? LoadLE<uint16_t>(p + 2 * i)
                                     : static_cast<uint16_t>(t.int32_data(i) & 0xffff));
        break;
      case DataType::kDouble:
        doubles[i] = raw ? LoadLE<double>(p + 8 * i) : t.double_data(i);
        out[i] = static_cast<float>(doubles[i]);
        break;
      case DataType::kInt8:
        put_int(i, raw ? LoadLE<int8_t>(p + i) : static_cast<int8_t>(t.int32_data(i)));
        break;
      case DataType::kUint8:
        put_int(i, raw ? LoadLE<uint8_t>(p + i) : static_cast<uint8_t>(t.int32_data(i)));
        break;
      case DataType::kBool:
        put_int(i, (raw ? LoadLE<uint8_t>(p + i) : t.int32_data(i)) != 0 ? 1 : 0);
        break;
      case DataType::kInt16:
        put_int(i, raw ? LoadLE<int16_t>(p + 2 * i) : static_cast<int16_t>(t.int32_data(i)));
        break;
      case DataType::kUint16:
        put_int(i, raw ? LoadLE<uint16_t>(p + 2 * i) : static_cast<uint16_t>(t.int32_data(i)));
        break;
      case DataType::kInt32:
        put_int(i, raw ? LoadLE<int32_t>(p + 4 * i) : t.int32_data(i));
        break;
      case DataType::kInt64:
        put_int(i, raw ? LoadLE<int64_t>(p + 8 * i) : t.int64_data(i));
        break;
      case DataType::kUint32:
        put_int(i, raw ? LoadLE<uint32_t>(p + 4 * i) : static_cast<uint32_t>(t.uint64_data(i)));
        break;
      case DataType::kUint64: {
        const uint64_t v = raw ? LoadLE<uint64_t>(p + 8 * i) : t.uint64_data(i);
        ints[i] = static_cast<int64_t>(v);  // values >= 2^63 wrap; out keeps the magnitude
        out[i] = static_cast<float>(v);
        break;
      }
      default:
        break;  // unreachable: CheckTensorPayload rejected the type
    }
  }
  // The decoded copy replaces the stored payload: release it now.
  if (raw) std::string().swap(*t.mutable_raw_data());
  std::span<const float> view(vec->data(), n);
  return std::make_shared<ConstantData>(type, std::move(vec), view, std::move(ints), std::move(doubles));
}

}  // namespace kiln::onnx_fe::internal
