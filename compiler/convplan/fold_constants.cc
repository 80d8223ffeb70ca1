#include "compiler/convplan/fold_constants.h"

#include <algorithm>
#include <climits>
#include <map>

#include "compiler/convplan/host_tensor.h"

namespace kiln::convplan {

namespace fe = onnx_fe;

namespace {

bool IsDefaultDomain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

bool HasSubgraph(const fe::Node& n) {
  for (const auto& [_, a] : n.attributes) {
    if (a.g || !a.graphs.empty()) return true;
  }
  return false;
}

// Shape-15 start / end: the slice [start, end) of the dims, clamped (onnx/docs/Operators.md).
std::vector<int64_t> ShapeSlice(const fe::Node& n, const std::vector<int64_t>& dims) {
  const int64_t r = static_cast<int64_t>(dims.size());
  auto clamp = [r](int64_t v) { return std::min(std::max(v < 0 ? v + r : v, int64_t{0}), r); };
  auto start = n.GetInt("start", 0);
  auto end = n.GetInt("end", r);
  const int64_t b = clamp(start.ok() ? *start : 0), e = clamp(end.ok() ? *end : r);
  return b < e ? std::vector<int64_t>(dims.begin() + b, dims.begin() + e) : std::vector<int64_t>{};
}

int64_t SatMul(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  return a > INT64_MAX / b ? INT64_MAX : a * b;
}
int64_t SatAdd(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }
int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n = SatMul(n, std::max<int64_t>(d, 0));
  return shape.empty() ? 1 : n;
}

// Bytes of the node's outputs as shape inference gives them, or -1 when an output's shape is not
// fully known (its size may then depend on the input values: ConstantOfShape, Range, ...).
int64_t InferredOutputBytes(const fe::Node& n, const fe::Graph& g) {
  int64_t bytes = 0;
  for (const std::string& out : n.outputs) {
    if (out.empty()) continue;
    const fe::Tensor* t = g.FindTensor(out);
    if (t == nullptr || !t->shape.is_static()) return -1;
    const int64_t element = t->dtype == fe::DataType::kUndefined ? 8 : static_cast<int64_t>(fe::DataTypeSize(t->dtype));
    bytes = SatAdd(bytes, SatMul(Elements(*t->shape.values()), std::max<int64_t>(element, 1)));
  }
  return bytes;
}

// The work of evaluating the node, in multiply-adds or elements touched: M·N·K (times the batch)
// for MatMul / Gemm, else the elements read and written.
int64_t FoldWork(const fe::Node& n, const std::vector<const device::Tensor*>& ins, int64_t out_bytes) {
  if ((n.op_type == "MatMul" || n.op_type == "Gemm" || n.op_type == "MatMulInteger") && ins.size() >= 2 && ins[0] &&
      ins[1]) {
    const std::vector<int64_t>& a = ins[0]->shape();
    const std::vector<int64_t>& b = ins[1]->shape();
    if (!a.empty() && !b.empty()) return SatMul(Elements(a), b.size() >= 2 ? b.back() : 1);  // batch·M·K·N
  }
  int64_t work = out_bytes;
  for (const device::Tensor* t : ins) {
    if (t != nullptr) work = SatAdd(work, Elements(t->shape()));
  }
  return work;
}

Result<device::Tensor> Int64(std::vector<int64_t> shape, const std::vector<int64_t>& v) {
  auto t = device::Tensor::Zeros(std::move(shape), device::DataType::kInt64);
  if (!t.ok()) return t.status();
  std::copy(v.begin(), v.end(), t->data<int64_t>());
  return t;
}

}  // namespace

Result<FoldResult> FoldConstants(std::shared_ptr<const fe::Model> model, const HostOpSupport& host_ops) {
  FoldResult result;
  result.model = model;
  if (!model) return result;
  const fe::Graph& g = model->graph();
  std::map<std::string, device::Tensor> values;  // model constants used so far + folded values
  std::map<std::string, fe::Model::FoldedValue> folded;
  std::vector<fe::NodeIndex> removed;

  auto value_of = [&](const std::string& name) -> const device::Tensor* {
    if (auto it = values.find(name); it != values.end()) return &it->second;
    const fe::Tensor* t = g.FindTensor(name);
    if (t == nullptr || !t->constant) return nullptr;
    auto c = ConstantTensor(*t);
    if (!c.ok()) return nullptr;
    return &values.emplace(name, std::move(*c)).first->second;
  };

  int64_t model_work = 0;  // FoldWork of the nodes evaluated so far
  for (fe::NodeIndex i = 0; i < g.nodes().size(); ++i) {
    const fe::Node& n = g.node(i);
    if (!IsDefaultDomain(n.domain) || n.op_type == "Conv" || n.op_type == "ConvTranspose" || HasSubgraph(n)) {
      continue;
    }
    const bool shape_op = (n.op_type == "Shape" || n.op_type == "Size") && !n.inputs.empty();
    if (!shape_op && !host_ops.CheckHostNode(n, g).empty()) continue;
    std::vector<device::Tensor> outs;
    if (shape_op) {  // decided by the IR's static shape, no kernel needed
      const fe::Tensor* x = g.FindTensor(n.inputs[0]);
      if (x == nullptr || !x->shape.is_static()) continue;
      const std::vector<int64_t> dims = *x->shape.values();
      int64_t count = 1;
      for (int64_t d : dims) count *= d;
      const std::vector<int64_t> s = n.op_type == "Shape" ? ShapeSlice(n, dims) : std::vector<int64_t>{count};
      auto t = n.op_type == "Shape" ? Int64({static_cast<int64_t>(s.size())}, s) : Int64({}, s);
      if (!t.ok()) continue;
      outs.push_back(std::move(*t));
    } else {
      std::vector<const device::Tensor*> ins;
      bool all_constant = !n.inputs.empty();
      for (const std::string& in : n.inputs) {
        if (in.empty()) {
          ins.push_back(nullptr);
          continue;
        }
        const device::Tensor* v = value_of(in);
        if (v == nullptr) {
          all_constant = false;
          break;
        }
        ins.push_back(v);
      }
      if (!all_constant) continue;
      // Bounded before evaluating (plan building has no memory budget and no cancel): outputs of a
      // known size within kMaxFoldedBytes, the node's work within kMaxFoldWork, the model's within
      // kMaxModelFoldWork. A node left here runs with the run, under its budget and cancellation.
      const int64_t out_bytes = InferredOutputBytes(n, g);
      if (out_bytes < 0 || out_bytes > kMaxFoldedBytes) continue;
      const int64_t work = FoldWork(n, ins, out_bytes);
      if (work > kMaxFoldWork || SatAdd(model_work, work) > kMaxModelFoldWork) continue;
      model_work += work;
      auto r = host_ops.EvaluateHostOp(n, ins);
      if (!r.ok()) continue;
      outs = std::move(*r);
    }
    bool fits = outs.size() >= 1;
    for (size_t k = 0; k < n.outputs.size() && fits; ++k) {
      if (n.outputs[k].empty()) continue;
      fits = k < outs.size() && !outs[k].empty() && static_cast<int64_t>(outs[k].size_bytes()) <= kMaxFoldedBytes;
    }
    if (!fits) continue;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k].empty()) continue;
      auto data = ToConstantData(outs[k]);
      if (!data.ok()) return data.status();
      folded[n.outputs[k]] = fe::Model::FoldedValue{std::move(*data), OnnxDataType(outs[k].dtype()), outs[k].shape()};
      values[n.outputs[k]] = std::move(outs[k]);
    }
    removed.push_back(i);
  }
  if (removed.empty()) return result;
  auto m = model->WithConstants(removed, folded);
  if (!m.ok()) return Internal("constant folding: " + m.status().message());
  result.model = std::move(*m);
  result.folded_nodes = static_cast<int64_t>(removed.size());
  return result;
}

}  // namespace kiln::convplan
