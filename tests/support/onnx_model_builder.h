// Test helper: builds ONNX models with onnx's own protobuf types (onnx::ModelProto), for every
// test that needs a model. Link target: kiln_test_support.
//
//   kiln::testing::OnnxModelBuilder b(/*opset=*/13);
//   b.Input("x", onnx::TensorProto::FLOAT, {"N", 3, 8, 8});
//   b.FloatInitializer("w", {4, 3, 3, 3}, values);
//   auto& conv = b.Node("Conv", {"x", "w"}, {"y"}, "conv1");
//   kiln::testing::SetInts(conv, "pads", {1, 1, 1, 1});
//   b.Output("y");
//   std::string bytes = b.Serialize();
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "onnx/onnx_pb.h"

namespace kiln::testing {

/// A dimension for a declared shape: a number or a symbol ("N").
struct TestDim {
  TestDim(int64_t v) : value(v) {}                  // NOLINT(implicit)
  TestDim(int v) : value(v) {}                      // NOLINT(implicit)
  TestDim(const char* s) : symbol(s) {}             // NOLINT(implicit)
  TestDim(std::string s) : symbol(std::move(s)) {}  // NOLINT(implicit)
  int64_t value = -1;
  std::string symbol;
};

class OnnxModelBuilder {
 public:
  /// A model importing the default domain at `opset`, IR version `ir_version` (8 = onnx 1.12's).
  explicit OnnxModelBuilder(int64_t opset = 13, int64_t ir_version = 8);

  onnx::ModelProto& model() { return model_; }
  onnx::GraphProto& graph() { return *model_.mutable_graph(); }

  /// Graph input with element type and shape.
  OnnxModelBuilder& Input(const std::string& name, int32_t elem_type, std::vector<TestDim> dims);
  /// Graph output with element type and shape; `dims` empty and `with_shape` false: type only.
  OnnxModelBuilder& Output(const std::string& name, int32_t elem_type = onnx::TensorProto::FLOAT,
                           std::vector<TestDim> dims = {}, bool with_shape = false);
  /// value_info entry.
  OnnxModelBuilder& ValueInfo(const std::string& name, int32_t elem_type, std::vector<TestDim> dims);
  /// Adds a tensor as an initializer (and, when `list_as_input`, also to graph.input).
  OnnxModelBuilder& Initializer(const onnx::TensorProto& tensor, bool list_as_input = false);
  /// FLOAT initializer stored as raw_data.
  OnnxModelBuilder& FloatInitializer(const std::string& name, std::vector<int64_t> dims,
                                     const std::vector<float>& values, bool list_as_input = false);
  /// Appends a node; returns it for attribute setting.
  onnx::NodeProto& Node(const std::string& op_type, std::vector<std::string> inputs,
                        std::vector<std::string> outputs, const std::string& name = "",
                        const std::string& domain = "");
  /// Adds an opset import (e.g. a custom domain).
  OnnxModelBuilder& Import(const std::string& domain, int64_t version);

  std::string Serialize() const;

 private:
  onnx::ModelProto model_;
};

// Attribute setters (the attribute's type field is set as onnx requires).
void SetInt(onnx::NodeProto& n, const std::string& name, int64_t v);
void SetInts(onnx::NodeProto& n, const std::string& name, std::vector<int64_t> v);
void SetFloat(onnx::NodeProto& n, const std::string& name, float v);
void SetFloats(onnx::NodeProto& n, const std::string& name, std::vector<float> v);
void SetString(onnx::NodeProto& n, const std::string& name, const std::string& v);
void SetTensor(onnx::NodeProto& n, const std::string& name, const onnx::TensorProto& t);
void SetGraph(onnx::NodeProto& n, const std::string& name, const onnx::GraphProto& g);

// Tensor factories.
onnx::TensorProto FloatTensorRaw(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& v);
onnx::TensorProto FloatTensorTyped(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& v);
onnx::TensorProto Float16TensorRaw(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& v);
onnx::TensorProto Float16TensorInt32(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& v);
onnx::TensorProto BFloat16TensorRaw(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& v);
onnx::TensorProto Int64Tensor(const std::string& name, std::vector<int64_t> dims, const std::vector<int64_t>& v);
onnx::TensorProto BoolTensor(const std::string& name, std::vector<int64_t> dims, const std::vector<bool>& v);

/// float -> IEEE half (round to nearest even), float -> bfloat16 (round to nearest even).
uint16_t FloatToHalf(float f);
uint16_t FloatToBFloat16(float f);

/// Deterministic pseudo-random floats in [-1, 1).
std::vector<float> RandomFloats(size_t n, uint32_t seed);

/// Reads a whole file (throws std::runtime_error when it cannot).
std::string ReadFileBytes(const std::string& path);

}  // namespace kiln::testing
