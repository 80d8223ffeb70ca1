// Pass 1: ONNX IR -> primitive ai8x layers. See passes.h for the contract.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/rules/rules.h"

namespace kiln::ai8x {
namespace {

using onnx_fe::Graph;
using onnx_fe::Node;

// What a tensor on the data path carries.
struct Value {
  enum Kind { kData, kHost } kind = kData;
  std::vector<int> refs;  // producing layer ids (kNetworkInput for the input); >1 = concat
  bool neg = false;       // Neg(x) of data x (for Sub as Neg+Add)
};

// "/feature_stage.1/feature_stage.1.1/conv1/Conv" -> "feature_stage.1.1.conv1";
// "/base/fire3/Conv" -> "base.fire3"; "" when the name has no scope.
std::string ScopeName(const std::string& node_name) {
  if (node_name.empty() || node_name[0] != '/') return "";
  std::vector<std::string> comps;
  size_t pos = 1;
  while (pos <= node_name.size()) {
    size_t next = node_name.find('/', pos);
    if (next == std::string::npos) next = node_name.size();
    comps.push_back(node_name.substr(pos, next - pos));
    pos = next + 1;
  }
  if (comps.size() < 2) return "";
  comps.pop_back();  // the op ("Conv", "Relu", ...)
  std::string path;
  std::string last;
  for (const std::string& c : comps) {
    if (c.empty()) continue;
    if (!last.empty() && c.size() > last.size() && c.compare(0, last.size() + 1, last + ".") == 0) {
      path = path.substr(0, path.size() - last.size()) + c;
    } else {
      path = path.empty() ? c : path + "." + c;
    }
    last = c;
  }
  return path;
}

// Saturates at INT64_MAX instead of overflowing.
int64_t Product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) {
    if (__builtin_mul_overflow(p, x, &p)) return INT64_MAX;
  }
  return p;
}

// Every integer taken from an ONNX shape or attribute is range-checked (rules::DimensionProblem,
// the *AttributeInRange checks of compiler/ai8x/rules/rules.h) before it is narrowed to the Layer's
// `int` fields; out of range is an error diagnostic, never a wrapped value.

class Builder {
 public:
  Builder(const Graph& g, Network& net) : g_(g), net_(net) {
    for (size_t i = 0; i < g.initializer_order().size(); ++i) {
      init_pos_.emplace(g.initializer_order()[i], static_cast<int>(i));
    }
  }

  void Run();

 private:
  bool IsData(const std::string& t) const { return !t.empty() && values_.count(g_.ResolveAlias(t)) > 0; }
  const Value* Get(const std::string& t) const {
    auto it = values_.find(g_.ResolveAlias(t));
    return it == values_.end() ? nullptr : &it->second;
  }
  void Set(const std::string& t, Value v) { values_[t] = std::move(v); }

  /// Static (C, H, W) of `t`; nullopt when unknown or, with `*bad` set, when a dimension is
  /// outside 1..rules::kMaxDimension.
  std::optional<Shape3> TensorShape(const std::string& t, bool* one_d, std::string* bad = nullptr) const;
  Shape3 RefsShape(const std::vector<int>& refs) const;
  std::string LayerName(const Node& n, const std::string& fallback_kind);
  std::string WeightName(const Node& n) const;
  std::optional<int> WeightBits(const Node& n) const;
  void SetWeightInitializer(Layer& l, const Node& n) const;
  /// Weight initializer and bit width of conv/linear layer `l`, and its output as data.
  void FinishWeightLayer(Layer& l, const Node& n);
  std::optional<float> ScalarConst(const std::string& t) const;
  bool AllConstZero(const std::string& t) const;

  Layer& NewLayer(const Node& n, const std::vector<int>& refs, const std::string& name);
  void Reshaped(Layer& l, const Node& n);
  void MakeHost(const Node& n, const std::string& why);
  void MarkOutput(const std::vector<int>& refs);

  void HandleConv(const Node& n);
  void HandleLinear(const Node& n);
  void HandlePool(const Node& n);
  void HandleActivation(const Node& n);
  void HandleEltwise(const Node& n, EltwiseOp op);
  void HandleTransparent(const Node& n, size_t data_input);

  const Graph& g_;
  Network& net_;
  onnx_fe::StringMap<Value> values_;
  onnx_fe::StringMap<int> init_pos_;  // initializer name -> model position
  std::unordered_set<std::string> used_names_;
  std::vector<std::string> host_ops_;
  std::vector<std::string> dropped_hw_ops_;
  bool saw_clamp_ = false;
};

std::optional<Shape3> Builder::TensorShape(const std::string& t, bool* one_d, std::string* bad) const {
  const onnx_fe::Tensor* tensor = g_.FindTensor(t);
  if (tensor == nullptr) return std::nullopt;
  auto vals = tensor->shape.values();
  if (!vals) return std::nullopt;
  const std::vector<int64_t>& v = *vals;
  if (v.size() >= 2 && v.size() <= 4) {
    std::string why = rules::DimensionProblem("tensor '" + t + "'", v);
    if (!why.empty()) {
      if (bad != nullptr) *bad = std::move(why);
      return std::nullopt;
    }
  }
  Shape3 s;
  bool od = false;
  if (v.size() == 4) {
    s = {static_cast<int>(v[1]), static_cast<int>(v[2]), static_cast<int>(v[3])};
  } else if (v.size() == 3) {
    s = {static_cast<int>(v[1]), static_cast<int>(v[2]), 1};
    od = true;
  } else if (v.size() == 2) {
    s = {static_cast<int>(v[1]), 1, 1};
    od = true;
  } else {
    return std::nullopt;
  }
  if (one_d) *one_d = od;
  return s;
}

Shape3 Builder::RefsShape(const std::vector<int>& refs) const {
  Shape3 s;
  for (size_t i = 0; i < refs.size(); ++i) {
    Shape3 p = net_.OutputShapeOf(refs[i]);
    if (i == 0) {
      s = p;
    } else {
      s.c += p.c;
    }
  }
  return s;
}

std::optional<float> Builder::ScalarConst(const std::string& t) const {
  if (t.empty()) return std::nullopt;
  const onnx_fe::Tensor* tensor = g_.FindTensor(t);
  if (tensor == nullptr || !tensor->is_constant() || tensor->constant->size() != 1) return std::nullopt;
  return tensor->constant->floats()[0];
}

bool Builder::AllConstZero(const std::string& t) const {
  const onnx_fe::Tensor* tensor = g_.FindTensor(t);
  if (tensor == nullptr || !tensor->is_constant()) return false;
  for (float f : tensor->constant->floats()) {
    if (f != 0.0f) return false;
  }
  return true;
}

// Weight initializer name "<layer>.op.weight" / "<layer>.weight" upstream of input 1, or "".
std::string Builder::WeightName(const Node& n) const {
  if (!n.has_input(1)) return "";
  std::deque<std::string> todo{n.inputs[1]};
  std::unordered_set<std::string> seen;
  int budget = 64;
  while (!todo.empty() && budget-- > 0) {
    std::string t(g_.ResolveAlias(todo.front()));
    todo.pop_front();
    if (!seen.insert(t).second) continue;
    const onnx_fe::Tensor* tensor = g_.FindTensor(t);
    if (tensor != nullptr && tensor->is_constant()) {
      const std::string suffix = ".weight";
      if (t.size() > suffix.size() && t.compare(t.size() - suffix.size(), suffix.size(), suffix) == 0) {
        std::string base = t.substr(0, t.size() - suffix.size());
        if (base.size() > 3 && base.compare(base.size() - 3, 3, ".op") == 0) base.resize(base.size() - 3);
        return base;
      }
      continue;
    }
    auto p = g_.Producer(t);
    if (!p) continue;
    for (const std::string& in : g_.node(*p).inputs) {
      if (!in.empty()) todo.push_back(in);
    }
  }
  return "";
}

// QAT weight bits: the weight path holds Mul(x, 2^(bits-1)) -> Round (IZER-RULES.md §2.3 (b)).
std::optional<int> Builder::WeightBits(const Node& n) const {
  if (!n.has_input(1)) return std::nullopt;
  std::deque<std::string> todo{n.inputs[1]};
  std::unordered_set<std::string> seen;
  int budget = 64;
  while (!todo.empty() && budget-- > 0) {
    std::string t(g_.ResolveAlias(todo.front()));
    todo.pop_front();
    if (!seen.insert(t).second) continue;
    auto p = g_.Producer(t);
    if (!p) continue;
    const Node& node = g_.node(*p);
    if (node.op_type == "Round" && node.has_input(0)) {
      auto mp = g_.Producer(g_.ResolveAlias(node.inputs[0]));
      if (mp && g_.node(*mp).op_type == "Mul") {
        const Node& mul = g_.node(*mp);
        for (size_t i = 0; i < mul.inputs.size(); ++i) {
          auto c = ScalarConst(mul.inputs[i]);
          if (!c) continue;
          double l = std::log2(static_cast<double>(*c));
          int bits = static_cast<int>(std::lround(l)) + 1;
          if (std::fabs(l - std::round(l)) < 1e-6 && (bits == 1 || bits == 2 || bits == 4 || bits == 8)) return bits;
        }
      }
    }
    // Do not wander into the data path (weights never depend on it).
    for (const std::string& in : node.inputs) {
      if (!in.empty() && !IsData(in)) todo.push_back(in);
    }
  }
  return std::nullopt;
}

// True for names an exporter makes up for constants it computed (torch: `onnx::Conv_135` for a
// BN-folded weight; older versions: "135"). torch lists such initializers after the named
// parameters whatever the module order, so their position says nothing about the state_dict.
bool GeneratedName(const std::string& t) {
  if (t.rfind("onnx::", 0) == 0) return true;
  return !t.empty() && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The initializer holding `n`'s weights (input 1): walking back from the weight input through the
// QAT chain (Mul/Round/Clip/Div/Transpose, ...), the nearest initializer with as many elements as
// the layer has weights (l.weight_count); failing that, the nearest named `*.weight`.
void Builder::SetWeightInitializer(Layer& l, const Node& n) const {
  if (!n.has_input(1)) return;
  // Views into g_'s strings, which outlive this walk.
  std::deque<std::string_view> todo{n.inputs[1]};
  std::vector<std::string_view> seen;  // at most `budget` entries
  std::string_view fallback;
  int budget = 64;
  while (!todo.empty() && budget-- > 0) {
    std::string_view t = g_.ResolveAlias(todo.front());
    todo.pop_front();
    if (std::find(seen.begin(), seen.end(), t) != seen.end()) continue;
    seen.push_back(t);
    if (!t.empty() && values_.count(t) > 0) continue;
    if (init_pos_.count(t) > 0) {
      const onnx_fe::Tensor* tensor = g_.FindTensor(t);
      if (tensor != nullptr && tensor->is_constant() &&
          static_cast<int64_t>(tensor->constant->size()) == l.weight_count) {
        fallback = t;
        break;
      }
      if (fallback.empty() && t.size() > 7 && t.ends_with(".weight")) fallback = t;
      continue;
    }
    auto p = g_.Producer(t);
    if (!p) continue;
    for (const std::string& in : g_.node(*p).inputs) {
      if (!in.empty()) todo.push_back(in);
    }
  }
  l.weight_initializer = std::string(fallback);
  if (!fallback.empty() && !GeneratedName(l.weight_initializer)) l.weight_position = init_pos_.find(fallback)->second;
}

void Builder::FinishWeightLayer(Layer& l, const Node& n) {
  SetWeightInitializer(l, n);
  if (auto bits = WeightBits(n)) {
    l.quantization = *bits;
    l.quantization_known = true;
  }
  Set(n.outputs[0], Value{Value::kData, {l.id}, false});
}

std::string Builder::LayerName(const Node& n, const std::string& fallback_kind) {
  std::string base = ScopeName(n.original_name.empty() ? n.name : n.original_name);
  if (base.empty()) base = WeightName(n);
  if (base.empty()) base = n.name.empty() ? fallback_kind : n.name;
  // izer names: keep them YAML-friendly
  for (char& c : base) {
    if (c == '/' || c == ':' || c == ' ' || c == '#' || c == ',' || c == '[' || c == ']' || c == '{' || c == '}') c = '_';
  }
  while (!base.empty() && (base.front() == '_' || base.front() == '.')) base.erase(base.begin());
  if (base.empty() || base == "stop" || base == "input") base = fallback_kind + "_" + base;
  std::string name = base;
  for (int k = 2; used_names_.count(name) > 0; ++k) name = base + "_" + std::to_string(k);
  used_names_.insert(name);
  return name;
}

Layer& Builder::NewLayer(const Node& n, const std::vector<int>& refs, const std::string& name) {
  Layer l;
  l.id = net_.next_id++;
  l.name = name;
  l.onnx_nodes.push_back(n.name);
  l.inputs = refs;
  l.in_shape = RefsShape(refs);
  bool od = false;
  if (!refs.empty()) {
    od = refs[0] == kNetworkInput ? net_.input_one_d : net_.Find(refs[0])->one_d;
  }
  l.one_d = od;
  std::string bad;
  if (n.outputs.size() > 0) {
    bool out_od = od;
    if (auto s = TensorShape(n.outputs[0], &out_od, &bad)) {
      l.out_shape = *s;
      l.one_d = out_od;
    } else {
      l.out_shape = l.in_shape;
    }
  }
  Layer& added = net_.Append(std::move(l));
  if (!bad.empty()) {
    rules::ReportDimensions(net_, &added, "output " + bad);
  }
  return added;
}

// A Reshape/Flatten/Squeeze between the producer and a conv or pooling layer (e.g. Conv1d data
// viewed as 2-D): the layer reads the data with the new dimensions (izer `in_dim`, izer.py
// L491-504; the element count must match).
void Builder::Reshaped(Layer& l, const Node& n) {
  if (l.inputs.size() != 1 || !n.has_input(0)) return;
  bool od = l.one_d;
  std::string bad;
  auto s = TensorShape(n.inputs[0], &od, &bad);
  if (!bad.empty()) {
    rules::ReportDimensions(net_, &l, "ONNX node '" + n.name + "': input " + bad);
    return;
  }
  if (!s || *s == l.in_shape) return;
  if (!rules::CheckReshape(net_, l, *s)) return;
  l.in_shape = *s;
  l.in_dim = true;
}

void Builder::MarkOutput(const std::vector<int>& refs) {
  for (int r : refs) {
    if (r == kNetworkInput) continue;
    if (Layer* l = net_.Find(r)) l->output = true;
  }
}

void Builder::MakeHost(const Node& n, const std::string& why) {
  bool after_host = false;
  for (const std::string& in : n.inputs) {
    const Value* v = in.empty() ? nullptr : Get(in);
    if (v == nullptr) continue;
    if (v->kind == Value::kHost) {
      after_host = true;
    } else {
      MarkOutput(v->refs);
    }
  }
  std::string desc = n.op_type + " '" + n.name + "'";
  if (!why.empty()) desc += " (" + why + ")";
  static const std::set<std::string> kHwOps = {"Conv", "ConvTranspose", "Gemm", "MatMul", "Relu", "Abs",
                                               "MaxPool", "AveragePool", "Add", "Sub"};
  if (after_host && kHwOps.count(n.op_type) > 0) {
    dropped_hw_ops_.push_back(desc);
  } else if (!after_host) {
    host_ops_.push_back(desc);
  }
  for (const std::string& out : n.outputs) {
    if (!out.empty()) Set(out, Value{Value::kHost, {}, false});
  }
}

void Builder::HandleConv(const Node& n) {
  bool transpose = n.op_type == "ConvTranspose";
  if (!n.has_input(1) || IsData(n.inputs[1]) || (n.has_input(2) && IsData(n.inputs[2]))) {
    MakeHost(n, "weights computed from data");
    return;
  }
  const Value* in = Get(n.inputs[0]);
  auto wshape = g_.StaticInputShape(n, 1);
  if (!wshape.ok() || wshape->size() < 3) {
    MakeHost(n, "weight shape unknown");
    return;
  }
  auto ks = n.GetInts("kernel_shape", {});
  std::vector<int64_t> kernel = ks.ok() && !ks->empty() ? *ks
                                                        : std::vector<int64_t>(wshape->begin() + 2, wshape->end());
  if (kernel.size() != 1 && kernel.size() != 2) {
    MakeHost(n, std::to_string(kernel.size()) + "-D convolution");
    return;
  }
  Layer& l = NewLayer(n, in->refs, LayerName(n, "conv"));
  Reshaped(l, n);
  bool one_d = kernel.size() == 1;
  l.op = transpose ? OpKind::kConvTranspose2d : (one_d ? OpKind::kConv1d : OpKind::kConv2d);
  l.one_d = one_d;
  std::string wbad = rules::DimensionProblem("weight of ONNX node '" + n.name + "'", *wshape);
  if (!wbad.empty()) {
    rules::ReportDimensions(net_, &l, wbad);
    Set(n.outputs[0], Value{Value::kData, {l.id}, false});
    return;
  }
  if (rules::ConvAttributeInRange(net_, l, rules::ConvAttribute::kKernelShape, kernel)) {
    l.kernel_h = static_cast<int>(kernel[0]);
    l.kernel_w = one_d ? 1 : static_cast<int>(kernel[1]);
  }
  auto pads = n.GetInts("pads", std::vector<int64_t>(kernel.size() * 2, 0));
  auto strides = n.GetInts("strides", std::vector<int64_t>(kernel.size(), 1));
  auto dil = n.GetInts("dilations", std::vector<int64_t>(kernel.size(), 1));
  auto group = n.GetInt("group", 1);
  std::vector<int64_t> p = pads.ok() ? *pads : std::vector<int64_t>{};
  if (!p.empty() && rules::ConvAttributeInRange(net_, l, rules::ConvAttribute::kPads, p)) {
    l.pad = static_cast<int>(p[0]);
    rules::CheckUniformPads(net_, l, p);
  }
  if (strides.ok() && !strides->empty() && rules::ConvAttributeInRange(net_, l, rules::ConvAttribute::kStrides, *strides)) {
    l.stride = static_cast<int>((*strides)[0]);
    rules::CheckSquareStrides(net_, l, *strides);
  }
  if (dil.ok() && !dil->empty() && rules::ConvAttributeInRange(net_, l, rules::ConvAttribute::kDilations, *dil)) {
    l.dilation = static_cast<int>((*dil)[0]);
  }
  l.groups = 1;
  if (group.ok() && rules::ConvAttributeInRange(net_, l, rules::ConvAttribute::kGroup, {*group})) {
    l.groups = static_cast<int>(*group);
  }
  if (transpose) {
    auto op = n.GetInts("output_padding", {0, 0});
    if (op.ok() && !op->empty() && rules::ConvAttributeInRange(net_, l, rules::ConvAttribute::kOutputPadding, *op)) {
      l.output_padding = static_cast<int>((*op)[0]);
    }
  }
  l.has_bias = n.has_input(2);
  l.weight_count = Product(*wshape);
  // Weights [C_out, C_in/group, k...]; ConvTranspose: [C_in, C_out/group, k...].
  int64_t w_in = transpose ? (*wshape)[0] : (*wshape)[1] * l.groups;
  int64_t w_out = transpose ? (*wshape)[1] * l.groups : (*wshape)[0];
  l.in_channels_w = static_cast<int>(w_in);
  auto out_shape = TensorShape(n.outputs[0], nullptr);
  rules::CheckConvWeightShape(net_, l, *wshape, w_in, w_out, out_shape ? out_shape->c : -1);
  FinishWeightLayer(l, n);
}

void Builder::HandleLinear(const Node& n) {
  bool gemm = n.op_type == "Gemm";
  if (!n.has_input(1) || IsData(n.inputs[1]) || (gemm && n.has_input(2) && IsData(n.inputs[2]))) {
    MakeHost(n, "both operands are data");
    return;
  }
  if (!IsData(n.inputs[0])) {
    MakeHost(n, "data is the second operand");
    return;
  }
  if (gemm) {
    auto ta = n.GetInt("transA", 0);
    if (ta.ok() && *ta != 0) {
      MakeHost(n, "transA=1");
      return;
    }
  }
  const Value* in = Get(n.inputs[0]);
  auto wshape = g_.StaticInputShape(n, 1);
  if (!wshape.ok() || wshape->size() != 2) {
    MakeHost(n, "weight shape unknown");
    return;
  }
  Layer& l = NewLayer(n, in->refs, LayerName(n, "fc"));
  l.op = OpKind::kLinear;
  l.one_d = true;
  std::string wbad = rules::DimensionProblem("weight of ONNX node '" + n.name + "'", *wshape);
  if (!wbad.empty()) {
    rules::ReportDimensions(net_, &l, wbad);
    Set(n.outputs[0], Value{Value::kData, {l.id}, false});
    return;
  }
  int64_t in_f = (*wshape)[1], out_f = (*wshape)[0];  // Gemm transB=1: [out, in]
  if (gemm) {
    auto tb = n.GetInt("transB", 0);
    if (tb.ok() && *tb == 0) std::swap(in_f, out_f);
  } else {
    in_f = (*wshape)[0];  // MatMul B = W^T: [in, out]
    out_f = (*wshape)[1];
  }
  l.in_channels_w = static_cast<int>(in_f);
  l.weight_count = in_f * out_f;
  l.has_bias = gemm && n.has_input(2);
  l.out_shape = {static_cast<int>(out_f), 1, 1};
  // Flatten when the producer's data is not 1x1 (seed: Gemm/MatMul whose input is not C x 1 x 1).
  Shape3 src = l.in_shape;
  rules::CheckLinearWeightShape(net_, l, *wshape, in_f, src);
  if (src.pixels() > 1) {
    l.flatten = true;
  }
  FinishWeightLayer(l, n);
}

void Builder::HandlePool(const Node& n) {
  const Value* in = Get(n.inputs[0]);
  auto ks = n.GetInts("kernel_shape", {});
  if (!ks.ok() || ks->empty() || ks->size() > 2) {
    MakeHost(n, "kernel_shape");
    return;
  }
  auto pads = n.GetInts("pads", std::vector<int64_t>(ks->size() * 2, 0));
  auto ceil = n.GetInt("ceil_mode", 0);
  bool padded = false;
  if (pads.ok()) {
    for (int64_t p : *pads) padded |= p != 0;
  }
  if (padded || (ceil.ok() && *ceil != 0)) {
    MakeHost(n, padded ? "padded pooling" : "ceil_mode=1");
    return;
  }
  auto strides = n.GetInts("strides", std::vector<int64_t>(ks->size(), 1));
  auto dil = n.GetInts("dilations", std::vector<int64_t>(ks->size(), 1));
  Layer& l = NewLayer(n, in->refs, LayerName(n, "pool"));
  Reshaped(l, n);
  l.pool = n.op_type == "MaxPool" ? PoolType::kMax : PoolType::kAvg;
  if (rules::PoolAttributeInRange(net_, l, "kernel_shape", *ks)) {
    l.pool_h = static_cast<int>((*ks)[0]);
    l.pool_w = ks->size() > 1 ? static_cast<int>((*ks)[1]) : 1;
  }
  if (strides.ok() && !strides->empty() && rules::PoolAttributeInRange(net_, l, "strides", *strides)) {
    l.pool_stride_h = static_cast<int>((*strides)[0]);
    l.pool_stride_w = strides->size() > 1 ? static_cast<int>((*strides)[1]) : 1;
  }
  if (ks->size() == 1) l.pool_stride_w = 1;
  if (dil.ok() && !dil->empty() && rules::PoolAttributeInRange(net_, l, "dilations", *dil)) {
    l.pool_dilation = static_cast<int>((*dil)[0]);
  }
  Set(n.outputs[0], Value{Value::kData, {l.id}, false});
}

void Builder::HandleActivation(const Node& n) {
  const Value* in = Get(n.inputs[0]);
  if (in->neg || in->refs.size() != 1) {
    MakeHost(n, "activation of a negated or concatenated tensor");
    return;
  }
  Layer& l = NewLayer(n, in->refs, LayerName(n, "act"));
  l.activation = n.op_type == "Relu" ? Activation::kRelu : Activation::kAbs;
  l.out_shape = l.in_shape;
  Set(n.outputs[0], Value{Value::kData, {l.id}, false});
}

void Builder::HandleEltwise(const Node& n, EltwiseOp op) {
  const Value* a = Get(n.inputs[0]);
  const Value* b = n.inputs.size() > 1 ? Get(n.inputs[1]) : nullptr;
  if (a == nullptr || b == nullptr || a->refs.size() != 1 || b->refs.size() != 1) {
    MakeHost(n, "element-wise operands must be two single tensors");
    return;
  }
  std::vector<int> refs{a->refs[0], b->refs[0]};
  if (op == EltwiseOp::kAdd && (a->neg || b->neg)) {
    if (a->neg && b->neg) {
      MakeHost(n, "-x + -y");
      return;
    }
    op = EltwiseOp::kSub;  // a + (-b) = a - b; (-a) + b = b - a
    if (a->neg) refs = {b->refs[0], a->refs[0]};
  } else if (a->neg || b->neg) {
    MakeHost(n, "negated operand");
    return;
  }
  Layer& l = NewLayer(n, refs, LayerName(n, "eltwise"));
  l.eltwise = op;
  l.operands = 2;
  l.in_shape = net_.OutputShapeOf(refs[0]);
  l.out_shape = l.in_shape;
  rules::CheckOperandShapes(net_, l, net_.OutputShapeOf(refs[1]));
  Set(n.outputs[0], Value{Value::kData, {l.id}, false});
}

void Builder::HandleTransparent(const Node& n, size_t data_input) {
  const Value* v = Get(n.inputs[data_input]);
  Value out = *v;
  for (const std::string& o : n.outputs) {
    if (!o.empty()) Set(o, out);
  }
}

void Builder::Run() {
  // The network input.
  std::vector<std::string> inputs;
  for (const std::string& in : g_.inputs()) {
    const onnx_fe::Tensor* t = g_.FindTensor(in);
    if (t != nullptr && !t->is_constant()) inputs.push_back(in);
  }
  if (inputs.size() != 1) {
    rules::ReportInput(net_, "the accelerator takes exactly one input tensor; the model has " +
                                 std::to_string(inputs.size()));
    return;
  }
  bool one_d = false;
  std::string bad;
  auto in_shape = TensorShape(inputs[0], &one_d, &bad);
  if (!bad.empty()) {
    rules::ReportDimensions(net_, nullptr, "input " + bad);
    return;
  }
  if (!in_shape) {
    rules::ReportInput(net_, "input '" + inputs[0] + "' needs a static shape [1,C,H,W] or [1,C,L]");
    return;
  }
  net_.input_shape = *in_shape;
  net_.input_one_d = one_d;
  net_.input_name = inputs[0];
  Set(inputs[0], Value{Value::kData, {kNetworkInput}, false});

  for (const Node& n : g_.nodes()) {
    bool data = false, host = false;
    std::vector<size_t> data_inputs;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const Value* v = n.inputs[i].empty() ? nullptr : Get(n.inputs[i]);
      if (v == nullptr) continue;
      data = true;
      data_inputs.push_back(i);
      if (v->kind == Value::kHost) host = true;
    }
    if (!data) continue;  // weight / QAT / shift sub-graph: constant-derived
    if (host) {
      MakeHost(n, "");
      continue;
    }
    const std::string& op = n.op_type;
    if (!n.domain.empty() && n.domain != "ai.onnx") {
      MakeHost(n, "domain " + n.domain);
      continue;
    }
    // a negated tensor may only feed Add
    bool feeds_neg = false;
    for (size_t i : data_inputs) feeds_neg |= Get(n.inputs[i])->neg;
    if (feeds_neg && op != "Add") {
      MakeHost(n, "reads a negated tensor");
      continue;
    }
    if (op == "Conv" || op == "ConvTranspose") {
      if (data_inputs.size() == 1 && data_inputs[0] == 0) {
        HandleConv(n);
      } else {
        MakeHost(n, "weights computed from data");
      }
    } else if (op == "Gemm" || op == "MatMul") {
      HandleLinear(n);
    } else if (op == "Relu" || op == "Abs") {
      HandleActivation(n);
    } else if (op == "MaxPool" || op == "AveragePool") {
      HandlePool(n);
    } else if (op == "Neg") {
      Value v = *Get(n.inputs[0]);
      if (v.refs.size() != 1) {
        MakeHost(n, "");
        continue;
      }
      v.neg = true;
      Set(n.outputs[0], v);
    } else if (op == "Add" || op == "Sub" || op == "BitwiseOr" || op == "BitwiseXor" || op == "Or" ||
               op == "Xor") {
      if (data_inputs.size() == 2) {
        EltwiseOp e = op == "Add"                            ? EltwiseOp::kAdd
                      : op == "Sub"                          ? EltwiseOp::kSub
                      : (op == "BitwiseOr" || op == "Or")   ? EltwiseOp::kOr
                                                             : EltwiseOp::kXor;
        HandleEltwise(n, e);
      } else if ((op == "Add" || op == "Sub") && AllConstZero(n.inputs[1 - data_inputs[0]])) {
        HandleTransparent(n, data_inputs[0]);
      } else {
        MakeHost(n, "element-wise with a constant");
      }
    } else if (op == "Mul" || op == "Div") {
      if (data_inputs.size() == 1 && (op == "Mul" || data_inputs[0] == 0)) {
        HandleTransparent(n, data_inputs[0]);  // QAT scale / quantize step
      } else {
        MakeHost(n, "");
      }
    } else if (op == "Clip" || op == "Min" || op == "Max") {
      if (data_inputs.size() != 1 || data_inputs[0] != 0) {
        MakeHost(n, "");
        continue;
      }
      saw_clamp_ = true;
      // Wide (32-bit) output marker: Clip(x, -32768) / Max(x, -32768) (IZER-RULES.md §2.3).
      std::optional<float> lo;
      if (op == "Clip" && n.has_input(1)) lo = ScalarConst(n.inputs[1]);
      if (op == "Max" && n.has_input(1)) lo = ScalarConst(n.inputs[1]);
      if (lo && *lo == -32768.0f) {
        for (int r : Get(n.inputs[0])->refs) {
          Layer* l = net_.Find(r);
          // through a stand-alone activation to its conv
          if (l != nullptr && l->is_activation_only() && l->inputs.size() == 1) l = net_.Find(l->inputs[0]);
          if (l != nullptr && l->has_weights()) l->output_width = 32;
        }
      }
      HandleTransparent(n, 0);
    } else if (op == "Round" || op == "Floor" || op == "Ceil" || op == "Cast" || op == "Reshape" ||
               op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
      if (data_inputs.size() == 1 && data_inputs[0] == 0) {
        HandleTransparent(n, 0);
      } else {
        MakeHost(n, "");
      }
    } else if (op == "Pad") {
      std::string mode = n.GetString("mode", "constant").ok() ? *n.GetString("mode", "constant") : "";
      const onnx_fe::ConstantData* pads = g_.ConstantInput(n, 1);
      bool zero = mode == "constant" && pads != nullptr;
      if (pads != nullptr) {
        for (int64_t p : pads->ints()) zero &= p == 0;
        if (pads->ints().empty()) {
          for (float f : pads->floats()) zero &= f == 0.0f;
        }
      }
      if (zero && data_inputs.size() == 1 && data_inputs[0] == 0) {
        HandleTransparent(n, 0);  // ai8x AvgPool exports Pad(zeros) + AveragePool
      } else {
        MakeHost(n, "non-zero padding");
      }
    } else if (op == "Concat") {
      auto axis = n.GetInt("axis", 1);
      Value out;
      bool ok = axis.ok() && (*axis == 1 || *axis == -3) && data_inputs.size() == n.inputs.size();
      for (size_t i : data_inputs) {
        const Value* v = Get(n.inputs[i]);
        if (v->neg) ok = false;
        out.refs.insert(out.refs.end(), v->refs.begin(), v->refs.end());
      }
      if (ok) {
        Set(n.outputs[0], out);
      } else {
        MakeHost(n, "concatenation other than along channels");
      }
    } else {
      MakeHost(n, "");
    }
  }

  // Graph outputs leave the accelerator.
  for (const onnx_fe::GraphOutput& o : g_.outputs()) {
    const Value* v = Get(o.tensor);
    if (v != nullptr && v->kind == Value::kData) MarkOutput(v->refs);
  }

  if (net_.layers.empty()) {
    rules::ReportNoLayers(net_, host_ops_);
    return;
  }
  rules::ReportHostOps(net_, host_ops_, dropped_hw_ops_);
  // What this export form does not carry: output widths without clamps, bit widths without QAT.
  for (Layer& l : net_.layers) {
    if (l.has_weights() && !saw_clamp_) l.output_width_known = false;
  }
  rules::ReportNotDerived(net_, saw_clamp_);
  // Conv/linear layers are emitted in topological (module call) order; CheckWeightOrder
  // compares that with the weight (state_dict) order.
}

}  // namespace

void BuildLayers(const onnx_fe::Graph& graph, Network& net) {
  Builder b(graph, net);
  b.Run();
  net.Reindex();
}

}  // namespace kiln::ai8x
