#include "compiler/convplan/host_tensor.h"

#include <cstring>

#include "common/float16.h"
#include "device/dtype_dispatch.h"

namespace kiln::convplan {

namespace fe = onnx_fe;
using device::DataType;

Result<DataType> HostDataType(fe::DataType type) {
  switch (type) {
    case fe::DataType::kFloat: return DataType::kFloat32;
    case fe::DataType::kUint8: return DataType::kUInt8;
    case fe::DataType::kInt8: return DataType::kInt8;
    case fe::DataType::kUint16: return DataType::kUInt16;
    case fe::DataType::kInt16: return DataType::kInt16;
    case fe::DataType::kInt32: return DataType::kInt32;
    case fe::DataType::kInt64: return DataType::kInt64;
    case fe::DataType::kBool: return DataType::kBool;
    case fe::DataType::kFloat16: return DataType::kFloat16;
    case fe::DataType::kDouble: return DataType::kFloat64;
    case fe::DataType::kUint32: return DataType::kUInt32;
    case fe::DataType::kUint64: return DataType::kUInt64;
    case fe::DataType::kBFloat16: return DataType::kBFloat16;
    case fe::DataType::kString:
    case fe::DataType::kComplex64:
    case fe::DataType::kComplex128:
      return FailedPrecondition(std::string("has element type ") + fe::DataTypeName(type) +
                                ", which Kiln does not compute with");
    case fe::DataType::kUndefined: break;
  }
  return InvalidArgument("has an undefined element type");
}

fe::DataType OnnxDataType(DataType type) {
  switch (type) {
    case DataType::kFloat32: return fe::DataType::kFloat;
    case DataType::kBFloat16: return fe::DataType::kBFloat16;
    case DataType::kFloat16: return fe::DataType::kFloat16;
    case DataType::kInt32: return fe::DataType::kInt32;
    case DataType::kInt64: return fe::DataType::kInt64;
    case DataType::kUInt8: return fe::DataType::kUint8;
    case DataType::kFloat64: return fe::DataType::kDouble;
    case DataType::kInt8: return fe::DataType::kInt8;
    case DataType::kInt16: return fe::DataType::kInt16;
    case DataType::kUInt16: return fe::DataType::kUint16;
    case DataType::kUInt32: return fe::DataType::kUint32;
    case DataType::kUInt64: return fe::DataType::kUint64;
    case DataType::kBool: return fe::DataType::kBool;
  }
  return fe::DataType::kUndefined;
}

Result<device::Tensor> ConstantTensor(const fe::Tensor& t) {
  if (t.constant == nullptr) return InvalidArgument("tensor '" + t.name + "' has no constant value");
  const fe::ConstantData& c = *t.constant;
  auto dtype = HostDataType(c.original_type());
  if (!dtype.ok()) return dtype.status().WithContext("constant '" + t.name + "'");
  std::vector<int64_t> shape;
  if (t.shape.is_static()) {
    shape = *t.shape.values();
  } else {
    shape = {static_cast<int64_t>(c.size())};
  }
  if (*dtype == DataType::kFloat32) return device::Tensor::FromFloats(std::move(shape), c.floats());
  auto out = device::Tensor::Zeros(std::move(shape), *dtype);
  if (!out.ok()) return out.status();
  if (static_cast<size_t>(out->num_elements()) != c.size()) {
    return InvalidArgument("constant '" + t.name + "' has " + std::to_string(c.size()) +
                           " elements but its shape needs " + std::to_string(out->num_elements()));
  }
  const int64_t n = out->num_elements();
  device::VisitDataType(*dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr DataType kT = decltype(tag)::kType;
    T* p = out->template data<T>();
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (kT == DataType::kFloat16) {
        p[i] = FloatToHalf(c.floats()[i]);  // exact: the value came from a float16
      } else if constexpr (kT == DataType::kBFloat16) {
        p[i] = FloatToBFloat16(c.floats()[i]);
      } else if constexpr (kT == DataType::kFloat64) {
        p[i] = c.doubles().empty() ? static_cast<double>(c.floats()[i]) : c.doubles()[i];
      } else if constexpr (kT == DataType::kFloat32) {
        p[i] = c.floats()[i];
      } else {
        p[i] = static_cast<T>(c.ints()[i]);
      }
    }
  });
  return out;
}

Result<std::shared_ptr<const fe::ConstantData>> ToConstantData(const device::Tensor& t) {
  if (t.layout() != device::Layout::kNCHW) return InvalidArgument("ToConstantData: tensor is not row-major");
  auto f = t.ToFloat32();
  if (!f.ok()) return f.status();
  auto floats = std::make_shared<std::vector<float>>(f->span<float>().begin(), f->span<float>().end());
  std::vector<int64_t> ints;
  std::vector<double> doubles;
  if (device::IsIntegral(t.dtype())) {
    device::VisitDataType(t.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (T v : t.span<T>()) ints.push_back(static_cast<int64_t>(v));
    });
  } else if (t.dtype() == DataType::kFloat64) {
    doubles.assign(t.span<double>().begin(), t.span<double>().end());
  }
  std::span<const float> view(floats->data(), floats->size());
  return std::shared_ptr<const fe::ConstantData>(std::make_shared<fe::ConstantData>(
      OnnxDataType(t.dtype()), std::move(floats), view, std::move(ints), std::move(doubles)));
}

}  // namespace kiln::convplan
