// Compile-time dispatch over device::DataType (device/tensor.h) for typed host code: the storage
// type of each element type, and VisitDataType, which calls a generic lambda with a tag carrying
// it. float16 / bfloat16 elements are uint16_t bit patterns (common/float16.h converts them);
// bool is uint8_t 0 / 1.
//
//   VisitDataType(t.dtype(), [&](auto tag) {
//     using T = typename decltype(tag)::type;   // storage type
//     constexpr DataType kType = decltype(tag)::kType;
//     ... t.data<T>() ...
//   });
#pragma once

#include <cstdint>
#include <type_traits>

#include "device/tensor.h"

namespace kiln::device {

template <DataType D>
struct DataTypeTag;

#define KILN_DTYPE_TAG(D, T)                   \
  template <>                                  \
  struct DataTypeTag<DataType::D> {            \
    using type = T;                            \
    static constexpr DataType kType = DataType::D; \
  };
KILN_DTYPE_TAG(kFloat32, float)
KILN_DTYPE_TAG(kBFloat16, uint16_t)
KILN_DTYPE_TAG(kFloat16, uint16_t)
KILN_DTYPE_TAG(kInt32, int32_t)
KILN_DTYPE_TAG(kInt64, int64_t)
KILN_DTYPE_TAG(kUInt8, uint8_t)
KILN_DTYPE_TAG(kFloat64, double)
KILN_DTYPE_TAG(kInt8, int8_t)
KILN_DTYPE_TAG(kInt16, int16_t)
KILN_DTYPE_TAG(kUInt16, uint16_t)
KILN_DTYPE_TAG(kUInt32, uint32_t)
KILN_DTYPE_TAG(kUInt64, uint64_t)
KILN_DTYPE_TAG(kBool, uint8_t)
#undef KILN_DTYPE_TAG

/// Calls f(DataTypeTag<dtype>{}) and returns its result (every branch must return the same type).
template <typename F>
decltype(auto) VisitDataType(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::kBFloat16: return f(DataTypeTag<DataType::kBFloat16>{});
    case DataType::kFloat16: return f(DataTypeTag<DataType::kFloat16>{});
    case DataType::kInt32: return f(DataTypeTag<DataType::kInt32>{});
    case DataType::kInt64: return f(DataTypeTag<DataType::kInt64>{});
    case DataType::kUInt8: return f(DataTypeTag<DataType::kUInt8>{});
    case DataType::kFloat64: return f(DataTypeTag<DataType::kFloat64>{});
    case DataType::kInt8: return f(DataTypeTag<DataType::kInt8>{});
    case DataType::kInt16: return f(DataTypeTag<DataType::kInt16>{});
    case DataType::kUInt16: return f(DataTypeTag<DataType::kUInt16>{});
    case DataType::kUInt32: return f(DataTypeTag<DataType::kUInt32>{});
    case DataType::kUInt64: return f(DataTypeTag<DataType::kUInt64>{});
    case DataType::kBool: return f(DataTypeTag<DataType::kBool>{});
    case DataType::kFloat32: break;
  }
  return f(DataTypeTag<DataType::kFloat32>{});
}

/// True for the integer types and bool.
constexpr bool IsIntegral(DataType d) {
  return d != DataType::kFloat32 && d != DataType::kFloat64 && d != DataType::kFloat16 && d != DataType::kBFloat16;
}

}  // namespace kiln::device
