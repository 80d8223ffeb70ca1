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

// Every integer taken from an ONNX shape or attribute is range-checked before it is narrowed to
// the Layer's `int` fields; out of range is an error diagnostic, never a wrapped value. The bounds
// lie far above every hardware limit (channels <= 1024, rows/columns <= 2048, kernel/pool <= 16),
// so the rule checks still report the real limit, and they keep the int64 byte counts and the int
// arithmetic of the passes (e.g. pool_dilation * (pool_h - 1)) free of overflow.
constexpr int64_t kMaxDim = int64_t{1} << 20;    // one tensor dimension
constexpr int64_t kMaxAttr = int64_t{1} << 15;   // kernel, pad, stride, dilation, group, pooling

std::string IntsString(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// "" when every dimension of `v` lies in 1..kMaxDim, else what is wrong.
std::string BadDims(const std::string& what, const std::vector<int64_t>& v) {
  for (int64_t d : v) {
    if (d < 1 || d > kMaxDim) {
      return what + " has dimension " + std::to_string(d) + " (shape " + IntsString(v) + "); dimensions must be 1.." +
             std::to_string(kMaxDim);
    }
  }
  return "";
}

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
  /// outside 1..kMaxDim.
  std::optional<Shape3> TensorShape(const std::string& t, bool* one_d, std::string* bad = nullptr) const;
  /// Checks attribute values against [lo, kMaxAttr]; reports `code` on `l` and returns false when
  /// one is out of range.
  bool AttrInRange(Layer& l, const char* code, const std::string& attr, const std::vector<int64_t>& v, int64_t lo);
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
    std::string why = BadDims("tensor '" + t + "'", v);
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

bool Builder::AttrInRange(Layer& l, const char* code, const std::string& attr, const std::vector<int64_t>& v,
                          int64_t lo) {
  for (int64_t x : v) {
    if (x < lo || x > kMaxAttr) {
      net_.Report(Severity::kError, code, &l,
                  attr + " " + IntsString(v) + " is out of range (" +
                      std::to_string(x) + " is not in " + std::to_string(lo) + ".." + std::to_string(kMaxAttr) + ")");
      return false;
    }
  }
  return true;
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
    net_.Report(Severity::kError, "AI8X_DIMENSIONS", &added, "output " + bad);
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
    net_.Report(Severity::kError, "AI8X_DIMENSIONS", &l, "ONNX node '" + n.name + "': input " + bad);
    return;
  }
  if (!s || *s == l.in_shape) return;
  if (s->elements() != l.in_shape.elements()) {
    net_.Report(Severity::kError, "AI8X_RESHAPE", &l,
                "the input is reshaped from " + ShapeString(l.in_shape, false) + " to " + ShapeString(*s, false) +
                    " with a different element count");
    return;
  }
  if (s->c != l.in_shape.c) {
    net_.Report(Severity::kError, "AI8X_RESHAPE", &l,
                "the input is reshaped across channels (" + ShapeString(l.in_shape, false) + " -> " +
                    ShapeString(*s, false) + "); the izer can only change the height/width view (`in_dim`)");
    return;
  }
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
  std::string wbad = BadDims("weight of ONNX node '" + n.name + "'", *wshape);
  if (!wbad.empty()) {
    net_.Report(Severity::kError, "AI8X_DIMENSIONS", &l, wbad);
    Set(n.outputs[0], Value{Value::kData, {l.id}, false});
    return;
  }
  if (AttrInRange(l, "AI8X_KERNEL", "kernel_shape", kernel, 1)) {
    l.kernel_h = static_cast<int>(kernel[0]);
    l.kernel_w = one_d ? 1 : static_cast<int>(kernel[1]);
  }
  auto pads = n.GetInts("pads", std::vector<int64_t>(kernel.size() * 2, 0));
  auto strides = n.GetInts("strides", std::vector<int64_t>(kernel.size(), 1));
  auto dil = n.GetInts("dilations", std::vector<int64_t>(kernel.size(), 1));
  auto group = n.GetInt("group", 1);
  std::vector<int64_t> p = pads.ok() ? *pads : std::vector<int64_t>{};
  if (!p.empty() && AttrInRange(l, "AI8X_PAD", "pads", p, 0)) {
    l.pad = static_cast<int>(p[0]);
    for (int64_t x : p) {
      if (x != p[0]) {
        net_.Report(Severity::kError, "AI8X_PAD", &l,
                    "asymmetric padding " + std::to_string(p[0]) + "/" + std::to_string(x) +
                        " is not supported (the izer has one `pad` per layer)");
        break;
      }
    }
  }
  if (strides.ok() && !strides->empty() && AttrInRange(l, "AI8X_STRIDE", "strides", *strides, 1)) {
    l.stride = static_cast<int>((*strides)[0]);
    for (int64_t s : *strides) {
      if (s != (*strides)[0]) {
        net_.Report(Severity::kError, "AI8X_STRIDE", &l, "non-square stride is not supported");
        break;
      }
    }
  }
  if (dil.ok() && !dil->empty() && AttrInRange(l, "AI8X_DILATION", "dilations", *dil, 1)) {
    l.dilation = static_cast<int>((*dil)[0]);
  }
  l.groups = 1;
  if (group.ok() && AttrInRange(l, "AI8X_GROUPS", "group", {*group}, 1)) l.groups = static_cast<int>(*group);
  if (transpose) {
    auto op = n.GetInts("output_padding", {0, 0});
    if (op.ok() && !op->empty() && AttrInRange(l, "AI8X_PAD", "output_padding", *op, 0)) {
      l.output_padding = static_cast<int>((*op)[0]);
    }
  }
  l.has_bias = n.has_input(2);
  l.weight_count = Product(*wshape);
  // Weights [C_out, C_in/group, k...]; ConvTranspose: [C_in, C_out/group, k...].
  int64_t w_in = transpose ? (*wshape)[0] : (*wshape)[1] * l.groups;
  int64_t w_out = transpose ? (*wshape)[1] * l.groups : (*wshape)[0];
  l.in_channels_w = static_cast<int>(w_in);
  if (w_in != l.in_shape.c) {
    net_.Report(Severity::kError, "AI8X_SHAPE", &l,
                "weights " + IntsString(*wshape) + " with group " +
                    std::to_string(l.groups) + " expect " + std::to_string(w_in) + " input channels, but the input has " +
                    std::to_string(l.in_shape.c) + " (" + ShapeString(l.in_shape, false) + ")");
  } else if (auto os = TensorShape(n.outputs[0], nullptr); os && w_out != os->c) {
    net_.Report(Severity::kError, "AI8X_SHAPE", &l,
                "weights " + IntsString(*wshape) + " make " + std::to_string(w_out) +
                    " output channels, but the output has " + std::to_string(os->c));
  }
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
  std::string wbad = BadDims("weight of ONNX node '" + n.name + "'", *wshape);
  if (!wbad.empty()) {
    net_.Report(Severity::kError, "AI8X_DIMENSIONS", &l, wbad);
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
  if (in_f != src.elements()) {
    net_.Report(Severity::kError, "AI8X_SHAPE", &l,
                "weights " + IntsString(*wshape) + " take " + std::to_string(in_f) +
                    " input features, but the input " + ShapeString(src, false) + " has " +
                    std::to_string(src.elements()) + " values (inner dimensions differ)");
  }
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
  if (AttrInRange(l, "AI8X_POOL", "kernel_shape", *ks, 1)) {
    l.pool_h = static_cast<int>((*ks)[0]);
    l.pool_w = ks->size() > 1 ? static_cast<int>((*ks)[1]) : 1;
  }
  if (strides.ok() && !strides->empty() && AttrInRange(l, "AI8X_POOL", "strides", *strides, 1)) {
    l.pool_stride_h = static_cast<int>((*strides)[0]);
    l.pool_stride_w = strides->size() > 1 ? static_cast<int>((*strides)[1]) : 1;
  }
  if (ks->size() == 1) l.pool_stride_w = 1;
  if (dil.ok() && !dil->empty() && AttrInRange(l, "AI8X_POOL", "dilations", *dil, 1)) {
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
  Shape3 other = net_.OutputShapeOf(refs[1]);
  if (!(other == l.in_shape)) {
    net_.Report(Severity::kError, "AI8X_ELTWISE", &l,
                "element-wise operands differ in shape: " + ShapeString(l.in_shape, l.one_d) + " vs " +
                    ShapeString(other, l.one_d));
  }
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
    net_.Report(Severity::kError, "AI8X_INPUT", nullptr,
                "the accelerator takes exactly one input tensor; the model has " +
                    std::to_string(inputs.size()));
    return;
  }
  bool one_d = false;
  std::string bad;
  auto in_shape = TensorShape(inputs[0], &one_d, &bad);
  if (!bad.empty()) {
    net_.Report(Severity::kError, "AI8X_DIMENSIONS", nullptr, "input " + bad);
    return;
  }
  if (!in_shape) {
    net_.Report(Severity::kError, "AI8X_INPUT", nullptr,
                "input '" + inputs[0] + "' needs a static shape [1,C,H,W] or [1,C,L]");
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
    std::string first;  // what the data meets first: the user's clue
    for (size_t i = 0; i < host_ops_.size() && i < 3; ++i) first += (i ? ", " : "") + host_ops_[i];
    net_.Report(Severity::kError, "AI8X_NO_LAYERS", nullptr,
                "no operation of this model runs on the accelerator (first data op must be a "
                "Conv/Gemm/MatMul/pooling)" +
                    (first.empty() ? std::string() : "; the input is first read by host work: " + first));
    return;
  }
  if (!host_ops_.empty()) {
    std::string msg = "the accelerator part ends here; the host must still compute: ";
    for (size_t i = 0; i < host_ops_.size(); ++i) msg += (i ? ", " : "") + host_ops_[i];
    Diagnostic d{Severity::kInfo, "AI8X_HOST_OPS", -1, "", host_ops_.empty() ? "" : "", msg};
    net_.diagnostics.push_back(d);
  }
  if (!dropped_hw_ops_.empty()) {
    std::string msg = "these operations follow host-side work and are left to the host as well: ";
    for (size_t i = 0; i < dropped_hw_ops_.size(); ++i) msg += (i ? ", " : "") + dropped_hw_ops_[i];
    net_.diagnostics.push_back({Severity::kWarning, "AI8X_HOST_AFTER_HOST", -1, "", "", msg});
  }
  // What this export form does not carry (issue 4 "Inputs").
  std::vector<std::string> no_bits;
  size_t weight_layers = 0;
  for (Layer& l : net_.layers) {
    if (!l.has_weights()) continue;
    ++weight_layers;
    if (!saw_clamp_) l.output_width_known = false;
    if (!l.quantization_known) no_bits.push_back(l.name);
  }
  if (!saw_clamp_) {
    net_.diagnostics.push_back({Severity::kWarning, "AI8X_WIDTH_NOT_DERIVED", -1, "", "", WidthNotDerivedMessage({})});
  }
  if (!no_bits.empty()) {
    net_.diagnostics.push_back(
        {Severity::kWarning, "AI8X_BITS_NOT_DERIVED", -1, "", "", BitsNotDerivedMessage(no_bits, weight_layers)});
  }
  // Conv/linear layers are emitted in topological (module call) order; CheckWeightOrder
  // compares that with the weight (state_dict) order.
}

// "a, b, c" of at most 8 names, then ", ...".
std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 8; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 8) s += ", ...";
  return s;
}

}  // namespace

std::string WidthNotDerivedMessage(const std::vector<std::string>& overridden) {
  if (!overridden.empty()) {
    return "the export has no activation clamps (simplified form), so 32-bit wide outputs cannot be "
           "derived; output_width is as overridden for " + JoinNames(overridden) + " and 8-bit elsewhere";
  }
  return "the export has no activation clamps (simplified form), so 32-bit wide outputs "
         "(`output_width: 32`) cannot be derived; all layers assumed 8-bit unless overridden "
         "(--set LAYER.output_width=32)";
}

std::string BitsNotDerivedMessage(const std::vector<std::string>& missing, size_t weight_layers) {
  if (missing.empty()) {
    return "weight bit widths cannot be derived (no QAT weight chain); all " + std::to_string(weight_layers) +
           " weight layer(s) have them from the overrides (--set LAYER.quantization)";
  }
  if (missing.size() < weight_layers) {
    return "weight bit widths cannot be derived (no QAT weight chain) for " + std::to_string(missing.size()) +
           " layer(s) without an override (" + JoinNames(missing) +
           "); kernel memory is checked for 8-bit weights there and the izer takes the widths from the "
           "checkpoint unless overridden (--set LAYER.quantization=N)";
  }
  return "weight bit widths cannot be derived (no QAT weight chain) for " + std::to_string(missing.size()) +
         " layer(s) (" + JoinNames(missing) +
         "); kernel memory is checked for 8-bit weights and the izer takes the widths from the "
         "checkpoint unless overridden (--set LAYER.quantization=N)";
}

void BuildLayers(const onnx_fe::Graph& graph, Network& net) {
  Builder b(graph, net);
  b.Run();
  net.Reindex();
}

void CheckWeightOrder(Network& net) {
  // Conv/linear layers in layer (= execution) order whose weights have a model position.
  std::vector<const Layer*> w;
  for (const Layer& l : net.layers) {
    if (l.has_weights() && l.weight_position >= 0) w.push_back(&l);
  }
  // Layers whose weights precede those of an earlier-running layer.
  int out_of_order = 0;
  const Layer* first = nullptr;   // earlier-running layer of the first pair out of order
  const Layer* second = nullptr;  // the layer right after it, whose weights are listed earlier
  int max_pos = -1;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i]->weight_position < max_pos) ++out_of_order;
    max_pos = std::max(max_pos, w[i]->weight_position);
    if (second == nullptr && i > 0 && w[i]->weight_position < w[i - 1]->weight_position) {
      first = w[i - 1];
      second = w[i];
    }
  }
  if (second == nullptr) return;
  auto describe = [](const Layer& l) {
    std::string s = "`" + l.name + "`";
    if (!l.onnx_nodes.empty()) s += " (ONNX node " + l.onnx_nodes.front() + ")";
    return s;
  };
  std::string msg =
      "conv/linear layers are not in weight order: layer " + describe(*first) + " runs before layer " +
      describe(*second) + ", but the weights of `" + first->name + "` (`" + first->weight_initializer +
      "`) come after those of `" + second->name + "` (`" + second->weight_initializer +
      "`) in the model's initializer list (positions " + std::to_string(first->weight_position) +
      " and " + std::to_string(second->weight_position) + "; torch writes it in state_dict order, the checkpoint's order)";
  if (out_of_order > 1) {
    msg += "; " + std::to_string(out_of_order) + " layers in all have weights listed before an earlier layer's";
  }
  msg +=
      ". The izer assigns the checkpoint's weights to the YAML's conv/linear layers by position, so it would "
      "load them into the wrong layers, and the YAML's layer order is the execution order, which cannot be "
      "changed to match. Define the modules in the model's __init__ in the order forward() calls them (the "
      "existing checkpoint loads into the reordered model by name with load_state_dict; save it again) and "
      "re-export";
  net.Report(Severity::kError, "AI8X_WEIGHT_ORDER", second, std::move(msg));
}

}  // namespace kiln::ai8x
