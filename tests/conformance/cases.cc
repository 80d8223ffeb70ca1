// Test discovery, the selection rule, the parameter table and the params-mode model edit.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unordered_set>

#include "tests/conformance/conformance.h"

namespace kiln::conformance {
namespace {

namespace fs = std::filesystem;

// The CNN op set every conv-path model may use (the conv-path issue's list; LayerNormalization
// is opset 17, which onnx 1.12 knows).
const std::unordered_set<std::string_view>& CnnOps() {
  static const std::unordered_set<std::string_view> kOps = {
      "Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
      "BatchNormalization", "Relu", "LeakyRelu", "PRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish",
      "Tanh", "Elu", "Selu", "Softplus", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Abs",
      "Neg", "Reciprocal", "Floor", "Ceil", "Round", "Min", "Max", "Sum", "Mean", "Concat", "Split",
      "Slice", "Gather", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Pad", "Resize",
      "Upsample", "ReduceMean", "ReduceMax", "ReduceSum", "ReduceMin", "ReduceL2", "Softmax",
      "LogSoftmax", "MatMul", "Gemm", "Shape", "Constant", "ConstantOfShape", "Identity", "Dropout",
      "Cast", "Expand", "Tile", "Where", "Equal", "Greater", "Less", "InstanceNormalization",
      "LayerNormalization", "LRN", "DepthToSpace", "SpaceToDepth", "Erf", "Sign"};
  return kOps;
}

// Parameter inputs per op type (input indices; index 0, the data input, is never one). ReduceX
// (every Reduce* op) takes axes as input 1 where its opset has that form (ReduceSum-13).
const std::map<std::string_view, std::vector<size_t>, std::less<>>& ParamTable() {
  static const std::map<std::string_view, std::vector<size_t>, std::less<>> kTable = {
      {"Conv", {1, 2}},        {"ConvTranspose", {1, 2}}, {"BatchNormalization", {1, 2, 3, 4}},
      {"PRelu", {1}},          {"Pad", {1, 2}},           {"Resize", {1, 2, 3}},
      {"Reshape", {1}},        {"Expand", {1}},           {"Tile", {1}},
      {"Slice", {1, 2, 3, 4}}, {"Clip", {1, 2}},          {"Split", {1}},
      {"Squeeze", {1}},        {"Unsqueeze", {1}}};
  return kTable;
}

// Visits every node of `graph` and of its subgraphs (iteratively: If/Loop/Scan bodies).
template <typename Fn>
void ForEachNode(const onnx::GraphProto& graph, Fn&& fn) {
  std::vector<const onnx::GraphProto*> todo = {&graph};
  while (!todo.empty()) {
    const onnx::GraphProto* g = todo.back();
    todo.pop_back();
    for (const auto& n : g->node()) {
      fn(n);
      for (const auto& a : n.attribute()) {
        if (a.has_g()) todo.push_back(&a.g());
        for (const auto& sg : a.graphs()) todo.push_back(&sg);
      }
    }
  }
}

Result<std::string> ReadFile(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot read " + path.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// input_K.pb / output_K.pb of `dir` in K order.
Result<std::vector<onnx::TensorProto>> ReadTensors(const fs::path& dir, const std::string& prefix) {
  std::map<int, fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string f = e.path().filename().string();
    if (f.rfind(prefix, 0) != 0 || e.path().extension() != ".pb") continue;
    files[std::stoi(f.substr(prefix.size()))] = e.path();
  }
  std::vector<onnx::TensorProto> out;
  for (const auto& [k, path] : files) {
    if (k != static_cast<int>(out.size())) return InvalidArgument(dir.string() + ": " + prefix + "K.pb not contiguous");
    auto bytes = ReadFile(path);
    if (!bytes.ok()) return bytes.status();
    onnx::TensorProto t;
    // Graph inputs / outputs are tensors (checked by ReadTestCase), so these are TensorProtos.
    if (!t.ParseFromString(*bytes) || t.data_type() == 0) {
      return InvalidArgument(path.filename().string() + " is not a TensorProto");
    }
    out.push_back(std::move(t));
  }
  return out;
}

bool IsTensorType(const onnx::ValueInfoProto& v) { return !v.has_type() || v.type().has_tensor_type(); }

}  // namespace

bool InCnnOpSet(std::string_view op_type) { return CnnOps().count(op_type) > 0; }

std::string FirstNodeOutsideOpSet(const onnx::GraphProto& graph) {
  std::string first;
  ForEachNode(graph, [&](const onnx::NodeProto& n) {
    if (!first.empty()) return;
    const bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    if (!default_domain) {
      first = n.domain() + ":" + n.op_type();
    } else if (!InCnnOpSet(n.op_type())) {
      first = n.op_type();
    }
  });
  return first;
}

bool IsParameterInput(std::string_view op_type, size_t index) {
  if (index == 0) return false;
  if (op_type.rfind("Reduce", 0) == 0) return index == 1;
  auto it = ParamTable().find(op_type);
  return it != ParamTable().end() && std::count(it->second.begin(), it->second.end(), index) > 0;
}

Result<std::vector<std::string>> ListTests(const std::string& suite_dir) {
  std::error_code ec;
  if (!fs::is_directory(suite_dir, ec)) {
    return NotFound("no test directory " + suite_dir + " (Debian package libonnx-testdata; scripts/install-deps.sh)");
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(suite_dir)) {
    if (fs::exists(e.path() / "model.onnx")) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

Result<onnx::ModelProto> ReadModel(const std::string& dir) {
  auto bytes = ReadFile(fs::path(dir) / "model.onnx");
  if (!bytes.ok()) return bytes.status();
  onnx::ModelProto model;
  if (!model.ParseFromString(*bytes)) return InvalidArgument(dir + "/model.onnx does not parse");
  return model;
}

Result<TestCase> ReadTestCase(const std::string& suite, const std::string& dir) {
  TestCase tc;
  tc.suite = suite;
  tc.name = fs::path(dir).filename().string();
  auto model = ReadModel(dir);
  if (!model.ok()) return model.status();
  tc.model = std::move(*model);
  for (const auto& v : tc.model.graph().input()) {
    if (!IsTensorType(v)) return FailedPrecondition("graph input '" + v.name() + "' is not a tensor (sequence types)");
  }
  for (const auto& v : tc.model.graph().output()) {
    if (!IsTensorType(v)) return FailedPrecondition("graph output '" + v.name() + "' is not a tensor (sequence types)");
  }
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  }
  std::sort(sets.begin(), sets.end());
  for (const auto& s : sets) {
    DataSet ds;
    ds.name = s.filename().string();
    auto in = ReadTensors(s, "input_");
    if (!in.ok()) return in.status();
    auto out = ReadTensors(s, "output_");
    if (!out.ok()) return out.status();
    ds.inputs = std::move(*in);
    ds.outputs = std::move(*out);
    tc.data_sets.push_back(std::move(ds));
  }
  if (tc.data_sets.empty()) return InvalidArgument(dir + " has no test_data_set_*");
  return tc;
}

std::vector<std::string> RuntimeInputs(const onnx::GraphProto& graph) {
  std::set<std::string> inits;
  for (const auto& t : graph.initializer()) inits.insert(t.name());
  std::vector<std::string> names;
  for (const auto& v : graph.input()) {
    if (!inits.count(v.name())) names.push_back(v.name());
  }
  return names;
}

std::vector<size_t> ParameterInputs(const onnx::GraphProto& graph) {
  std::set<std::string> as_param, as_data;
  ForEachNode(graph, [&](const onnx::NodeProto& n) {
    for (int i = 0; i < n.input_size(); ++i) {
      (IsParameterInput(n.op_type(), static_cast<size_t>(i)) ? as_param : as_data).insert(n.input(i));
    }
  });
  const std::vector<std::string> inputs = RuntimeInputs(graph);
  std::vector<size_t> params;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (as_param.count(inputs[k]) && !as_data.count(inputs[k])) params.push_back(k);
  }
  return params;
}

onnx::ModelProto WithParametersAsInitializers(const onnx::ModelProto& model, const DataSet& data,
                                              const std::vector<size_t>& params) {
  onnx::ModelProto m = model;
  onnx::GraphProto* g = m.mutable_graph();
  const std::vector<std::string> inputs = RuntimeInputs(*g);
  std::set<std::string> moved;
  for (size_t k : params) {
    if (k >= inputs.size() || k >= data.inputs.size()) continue;
    onnx::TensorProto* t = g->add_initializer();
    *t = data.inputs[k];
    t->set_name(inputs[k]);
    moved.insert(inputs[k]);
  }
  if (m.ir_version() >= 4) {
    auto* in = g->mutable_input();
    in->erase(std::remove_if(in->begin(), in->end(),
                             [&](const onnx::ValueInfoProto& v) { return moved.count(v.name()) > 0; }),
              in->end());
  }
  return m;
}

}  // namespace kiln::conformance
