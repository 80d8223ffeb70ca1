#include "compiler/convplan/fold_constants.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>

#include "common/saturating.h"
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

// Bytes of the node's outputs as shape inference gives them, or -1 when an output's shape is not
// fully known (its size may then depend on the input values: ConstantOfShape, Range, ...).
int64_t InferredOutputBytes(const fe::Node& n, const fe::Graph& g) {
  int64_t bytes = 0;
  for (const std::string& out : n.outputs) {
    if (out.empty()) continue;
    const fe::Tensor* t = g.FindTensor(out);
    if (t == nullptr || !t->shape.is_static()) return -1;
    const int64_t element = t->dtype == fe::DataType::kUndefined ? 8 : static_cast<int64_t>(fe::DataTypeSize(t->dtype));
    bytes = SatAdd(bytes, SatMul(SatElements(*t->shape.values()), std::max<int64_t>(element, 1)));
  }
  return bytes;
}

// Numpy broadcasting of `shapes` (right-aligned; a dim of 1 stretches).
std::vector<int64_t> Broadcast(const std::vector<std::vector<int64_t>>& shapes) {
  size_t r = 0;
  for (const auto& s : shapes) r = std::max(r, s.size());
  std::vector<int64_t> out(r, 1);
  for (const auto& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[r - s.size() + i];
      o = std::max(o, s[i]);
    }
  }
  return out;
}

std::vector<int64_t> IntValues(const device::Tensor* t) {
  if (t == nullptr) return {};
  auto v = t->CastTo(device::DataType::kInt64);
  if (!v.ok()) return {};
  return std::vector<int64_t>(v->data<int64_t>(), v->data<int64_t>() + v->num_elements());
}

// Where shape inference left an output's size open (it runs before folding, without data
// propagation, so ops reading a folded Shape chain have open dims): an upper bound of the node's
// output bytes from the input values (8 bytes an element), or -1 for an op that may grow its
// input in a way not bounded here (Pad, Resize, Upsample, OneHot, ...: left unfolded).
int64_t OutputBoundBytes(const fe::Node& n, const std::vector<const device::Tensor*>& ins) {
  auto shape = [&](size_t i) { return i < ins.size() && ins[i] ? ins[i]->shape() : std::vector<int64_t>{}; };
  int64_t elements = -1;
  const std::string& op = n.op_type;
  if (op == "ConstantOfShape") {
    elements = SatElements(IntValues(ins.empty() ? nullptr : ins[0]));
  } else if (op == "Expand") {
    elements = SatElements(Broadcast({shape(0), IntValues(ins.size() > 1 ? ins[1] : nullptr)}));
  } else if (op == "Tile") {
    elements = SatElements(shape(0));
    for (int64_t r : IntValues(ins.size() > 1 ? ins[1] : nullptr)) elements = SatMul(elements, std::max<int64_t>(r, 0));
  } else if (op == "Range") {
    if (ins.size() < 3 || !ins[0] || !ins[1] || !ins[2]) return -1;
    auto v = [](const device::Tensor* t) {
      auto d = t->CastTo(device::DataType::kFloat64);
      return d.ok() && d->num_elements() == 1 ? d->data<double>()[0] : 0.0;
    };
    const double start = v(ins[0]), limit = v(ins[1]), delta = v(ins[2]);
    const double count = delta == 0 ? 0 : std::ceil((limit - start) / delta);
    if (!(count < 9e15)) return -1;
    elements = std::max<int64_t>(static_cast<int64_t>(count), 0);
  } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" || op == "Max" || op == "Min" ||
             op == "Sum" || op == "Mean" || op == "Where" || op == "Equal" || op == "Less" || op == "Greater" ||
             op == "LessOrEqual" || op == "GreaterOrEqual" || op == "And" || op == "Or" || op == "Xor" ||
             op == "Mod" || op == "BitShift" || op == "PRelu") {
    std::vector<std::vector<int64_t>> shapes;
    for (size_t i = 0; i < ins.size(); ++i) shapes.push_back(shape(i));
    elements = SatElements(Broadcast(shapes));
  } else if (op == "Pad" || op == "Resize" || op == "Upsample" || op == "OneHot" || op == "MatMul" || op == "Gemm" ||
             op == "Einsum" || op == "CumSum" || op == "ScatterND" || op == "GatherND" || op == "Gather" ||
             op == "GatherElements") {
    return -1;
  } else {  // ops that reorder, select or reduce: no more elements than they read (NonZero: rank times)
    elements = 0;
    for (size_t i = 0; i < ins.size(); ++i) {
      elements = SatAdd(elements, SatMul(SatElements(shape(i)), std::max<int64_t>(1, static_cast<int64_t>(shape(i).size()))));
    }
  }
  return SatMul(elements, 8);
}

// The work of evaluating the node, in multiply-adds or elements touched (`out_bytes`, the
// outputs' size in bytes, stands in for their element count: an upper bound of it):
// batch·M·K·N for MatMul / Gemm (transA / transB read), the output times the kernel area for
// pooling, else the elements read and written.
int64_t FoldWork(const fe::Node& n, const std::vector<const device::Tensor*>& ins, int64_t out_bytes) {
  const std::string& op = n.op_type;
  if ((op == "MatMul" || op == "MatMulInteger" || op == "Gemm") && ins.size() >= 2 && ins[0] && ins[1]) {
    std::vector<int64_t> a = ins[0]->shape(), b = ins[1]->shape();
    if (a.empty() || b.empty()) return out_bytes;
    if (op == "Gemm") {
      if (a.size() != 2 || b.size() != 2) return INT64_MAX;
      auto ta_attr = n.GetInt("transA", 0), tb_attr = n.GetInt("transB", 0);
      const bool ta = ta_attr.ok() && *ta_attr != 0, tb = tb_attr.ok() && *tb_attr != 0;
      return SatMul(SatMul(ta ? a[1] : a[0], ta ? a[0] : a[1]), tb ? b[0] : b[1]);
    }
    if (a.size() == 1) a.insert(a.begin(), 1);
    if (b.size() == 1) b.push_back(1);
    const int64_t m = a[a.size() - 2], k = a.back(), nn = b.back();
    const std::vector<int64_t> batch =
        Broadcast({std::vector<int64_t>(a.begin(), a.end() - 2), std::vector<int64_t>(b.begin(), b.end() - 2)});
    return SatMul(SatMul(SatMul(SatElements(batch), m), k), nn);
  }
  int64_t work = out_bytes;
  if (op == "MaxPool" || op == "AveragePool" || op == "LpPool") {
    auto kernel = n.GetInts("kernel_shape", std::vector<int64_t>{});
    if (kernel.ok()) {
      for (int64_t k : *kernel) work = SatMul(work, std::max<int64_t>(k, 1));
    }
  }
  for (const device::Tensor* t : ins) {
    if (t != nullptr) work = SatAdd(work, SatElements(t->shape()));
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
      int64_t out_bytes = InferredOutputBytes(n, g);
      if (out_bytes < 0) out_bytes = OutputBoundBytes(n, ins);
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
