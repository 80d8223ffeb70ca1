#include "tests/support/onnx_model_builder.h"

#include "common/float16.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace kiln::testing {
namespace {

void FillType(onnx::ValueInfoProto* vi, int32_t elem_type, const std::vector<TestDim>& dims, bool with_shape) {
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  if (!with_shape) return;
  auto* shape = tt->mutable_shape();
  for (const TestDim& d : dims) {
    auto* dim = shape->add_dim();
    if (d.symbol.empty()) {
      dim->set_dim_value(d.value);
    } else {
      dim->set_dim_param(d.symbol);
    }
  }
}

template <typename T>
void AppendLE(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  if constexpr (std::endian::native == std::endian::big) {
    for (size_t i = 0; i < sizeof(T) / 2; ++i) std::swap(b[i], b[sizeof(T) - 1 - i]);
  }
  out.append(b, sizeof(T));
}

onnx::TensorProto Base(const std::string& name, std::vector<int64_t> dims, int32_t type) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(type);
  for (int64_t d : dims) t.add_dims(d);
  return t;
}

}  // namespace

OnnxModelBuilder::OnnxModelBuilder(int64_t opset, int64_t ir_version) {
  model_.set_ir_version(ir_version);
  model_.set_producer_name("kiln-tests");
  auto* imp = model_.add_opset_import();
  imp->set_domain("");
  imp->set_version(opset);
  model_.mutable_graph()->set_name("test_graph");
}

OnnxModelBuilder& OnnxModelBuilder::Input(const std::string& name, int32_t elem_type, std::vector<TestDim> dims) {
  FillType(graph().add_input(), elem_type, dims, true);
  graph().mutable_input(graph().input_size() - 1)->set_name(name);
  return *this;
}

OnnxModelBuilder& OnnxModelBuilder::Output(const std::string& name, int32_t elem_type, std::vector<TestDim> dims,
                                           bool with_shape) {
  auto* vi = graph().add_output();
  vi->set_name(name);
  FillType(vi, elem_type, dims, with_shape || !dims.empty());
  return *this;
}

OnnxModelBuilder& OnnxModelBuilder::ValueInfo(const std::string& name, int32_t elem_type, std::vector<TestDim> dims) {
  auto* vi = graph().add_value_info();
  vi->set_name(name);
  FillType(vi, elem_type, dims, true);
  return *this;
}

OnnxModelBuilder& OnnxModelBuilder::Initializer(const onnx::TensorProto& tensor, bool list_as_input) {
  *graph().add_initializer() = tensor;
  if (list_as_input) {
    auto* vi = graph().add_input();
    vi->set_name(tensor.name());
    std::vector<TestDim> dims(tensor.dims().begin(), tensor.dims().end());
    FillType(vi, tensor.data_type(), dims, true);
  }
  return *this;
}

OnnxModelBuilder& OnnxModelBuilder::FloatInitializer(const std::string& name, std::vector<int64_t> dims,
                                                     const std::vector<float>& values, bool list_as_input) {
  return Initializer(FloatTensorRaw(name, std::move(dims), values), list_as_input);
}

onnx::NodeProto& OnnxModelBuilder::Node(const std::string& op_type, std::vector<std::string> inputs,
                                        std::vector<std::string> outputs, const std::string& name,
                                        const std::string& domain) {
  auto* n = graph().add_node();
  n->set_op_type(op_type);
  if (!name.empty()) n->set_name(name);
  if (!domain.empty()) n->set_domain(domain);
  for (auto& i : inputs) n->add_input(i);
  for (auto& o : outputs) n->add_output(o);
  return *n;
}

OnnxModelBuilder& OnnxModelBuilder::Import(const std::string& domain, int64_t version) {
  auto* imp = model_.add_opset_import();
  imp->set_domain(domain);
  imp->set_version(version);
  return *this;
}

std::string OnnxModelBuilder::Serialize() const {
  std::string out;
  if (!model_.SerializeToString(&out)) throw std::runtime_error("ModelProto serialization failed");
  return out;
}

void SetInt(onnx::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void SetInts(onnx::NodeProto& n, const std::string& name, std::vector<int64_t> v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void SetFloat(onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void SetFloats(onnx::NodeProto& n, const std::string& name, std::vector<float> v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOATS);
  for (float x : v) a->add_floats(x);
}
void SetString(onnx::NodeProto& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}
void SetTensor(onnx::NodeProto& n, const std::string& name, const onnx::TensorProto& t) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::TENSOR);
  *a->mutable_t() = t;
}
void SetGraph(onnx::NodeProto& n, const std::string& name, const onnx::GraphProto& g) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::GRAPH);
  *a->mutable_g() = g;
}

onnx::TensorProto FloatTensorRaw(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& v) {
  auto t = Base(name, std::move(dims), onnx::TensorProto::FLOAT);
  std::string raw;
  raw.reserve(v.size() * 4);
  for (float x : v) AppendLE(raw, x);
  t.set_raw_data(std::move(raw));
  return t;
}
onnx::TensorProto FloatTensorTyped(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& v) {
  auto t = Base(name, std::move(dims), onnx::TensorProto::FLOAT);
  for (float x : v) t.add_float_data(x);
  return t;
}
onnx::TensorProto Float16TensorRaw(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& v) {
  auto t = Base(name, std::move(dims), onnx::TensorProto::FLOAT16);
  std::string raw;
  for (float x : v) AppendLE(raw, FloatToHalf(x));
  t.set_raw_data(std::move(raw));
  return t;
}
onnx::TensorProto Float16TensorInt32(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& v) {
  auto t = Base(name, std::move(dims), onnx::TensorProto::FLOAT16);
  for (float x : v) t.add_int32_data(FloatToHalf(x));
  return t;
}
onnx::TensorProto BFloat16TensorRaw(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& v) {
  auto t = Base(name, std::move(dims), onnx::TensorProto::BFLOAT16);
  std::string raw;
  for (float x : v) AppendLE(raw, FloatToBFloat16(x));
  t.set_raw_data(std::move(raw));
  return t;
}
onnx::TensorProto Int64Tensor(const std::string& name, std::vector<int64_t> dims, const std::vector<int64_t>& v) {
  auto t = Base(name, std::move(dims), onnx::TensorProto::INT64);
  for (int64_t x : v) t.add_int64_data(x);
  return t;
}
onnx::TensorProto BoolTensor(const std::string& name, std::vector<int64_t> dims, const std::vector<bool>& v) {
  auto t = Base(name, std::move(dims), onnx::TensorProto::BOOL);
  for (bool x : v) t.add_int32_data(x ? 1 : 0);
  return t;
}

uint16_t FloatToHalf(float f) { return kiln::FloatToHalf(f); }
uint16_t FloatToBFloat16(float f) { return kiln::FloatToBFloat16(f); }

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::string ReadFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace kiln::testing
