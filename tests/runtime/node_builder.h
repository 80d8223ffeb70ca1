// Test helper for the host-kernel tests (tests/runtime/host_*_test.cc): IR nodes built directly
// (compiler/onnx/ir.h), without an ONNX model, and their attributes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "compiler/onnx/ir.h"

namespace kiln::runtime::testutil {

/// Node `op` named "<op>_0" with inputs in0..in{n_in-1} and outputs out0..out{n_out-1}.
inline onnx_fe::Node MakeNode(const std::string& op, size_t n_in, int64_t opset = 13, size_t n_out = 1) {
  onnx_fe::Node n;
  n.name = op + "_0";
  n.op_type = op;
  n.opset_version = opset;
  for (size_t i = 0; i < n_in; ++i) n.inputs.push_back("in" + std::to_string(i));
  for (size_t i = 0; i < n_out; ++i) n.outputs.push_back("out" + std::to_string(i));
  return n;
}

/// Sets attribute `k`; `fill` writes the value member of the kind given.
template <typename Fill>
void SetAttr(onnx_fe::Node& n, const std::string& k, onnx_fe::AttributeType type, Fill fill) {
  onnx_fe::Attribute a;
  a.name = k;
  a.type = type;
  fill(a);
  n.attributes[k] = std::move(a);
}
inline void SetI(onnx_fe::Node& n, const std::string& k, int64_t v) {
  SetAttr(n, k, onnx_fe::AttributeType::kInt, [&](onnx_fe::Attribute& a) { a.i = v; });
}
inline void SetIs(onnx_fe::Node& n, const std::string& k, std::vector<int64_t> v) {
  SetAttr(n, k, onnx_fe::AttributeType::kInts, [&](onnx_fe::Attribute& a) { a.ints = std::move(v); });
}
inline void SetF(onnx_fe::Node& n, const std::string& k, float v) {
  SetAttr(n, k, onnx_fe::AttributeType::kFloat, [&](onnx_fe::Attribute& a) { a.f = v; });
}
inline void SetFs(onnx_fe::Node& n, const std::string& k, std::vector<float> v) {
  SetAttr(n, k, onnx_fe::AttributeType::kFloats, [&](onnx_fe::Attribute& a) { a.floats = std::move(v); });
}
inline void SetS(onnx_fe::Node& n, const std::string& k, const std::string& v) {
  SetAttr(n, k, onnx_fe::AttributeType::kString, [&](onnx_fe::Attribute& a) { a.s = v; });
}

}  // namespace kiln::runtime::testutil
