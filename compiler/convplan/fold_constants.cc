#include "compiler/convplan/fold_constants.h"

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
