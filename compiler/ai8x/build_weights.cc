// BuildLayers' graph queries (compiler/ai8x/builder.h): tensor shapes, constants, the weight
// path (initializer, QAT bits, name) and layer names.
#include <algorithm>
#include <cmath>
#include <deque>

#include "compiler/ai8x/builder.h"
#include "compiler/ai8x/rules/rules.h"

namespace kiln::ai8x::build {

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

int64_t Product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) {
    if (__builtin_mul_overflow(p, x, &p)) return INT64_MAX;
  }
  return p;
}

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

template <typename VisitFn, typename FollowFn>
void Builder::WalkWeightPath(const Node& n, VisitFn visit, FollowFn follow) const {
  if (!n.has_input(1)) return;
  // Views into g_'s strings, which outlive the walk.
  std::deque<std::string_view> todo{n.inputs[1]};
  std::vector<std::string_view> seen;  // at most `budget` entries
  int budget = 64;
  while (!todo.empty() && budget-- > 0) {
    std::string_view t = g_.ResolveAlias(todo.front());
    todo.pop_front();
    if (std::find(seen.begin(), seen.end(), t) != seen.end()) continue;
    seen.push_back(t);
    Walk w = visit(t);
    if (w == Walk::kStop) return;
    if (w == Walk::kSkip) continue;
    auto p = g_.Producer(t);
    if (!p) continue;
    for (const std::string& in : g_.node(*p).inputs) {
      if (!in.empty() && follow(in)) todo.push_back(in);
    }
  }
}

std::string Builder::WeightName(const Node& n) const {
  std::string name;
  WalkWeightPath(
      n,
      [&](std::string_view t) {
        const onnx_fe::Tensor* tensor = g_.FindTensor(t);
        if (tensor == nullptr || !tensor->is_constant()) return Walk::kExpand;
        constexpr std::string_view kSuffix = ".weight";
        if (t.size() > kSuffix.size() && t.ends_with(kSuffix)) {
          std::string_view base = t.substr(0, t.size() - kSuffix.size());
          if (base.size() > 3 && base.ends_with(".op")) base.remove_suffix(3);
          name = std::string(base);
          return Walk::kStop;
        }
        return Walk::kSkip;
      },
      [](const std::string&) { return true; });
  return name;
}

std::optional<int> Builder::WeightBits(const Node& n) const {
  std::optional<int> bits;
  WalkWeightPath(
      n,
      [&](std::string_view t) {
        auto p = g_.Producer(t);
        if (!p) return Walk::kSkip;
        const Node& node = g_.node(*p);
        if (node.op_type == "Round" && node.has_input(0)) {
          auto mp = g_.Producer(g_.ResolveAlias(node.inputs[0]));
          if (mp && g_.node(*mp).op_type == "Mul") {
            const Node& mul = g_.node(*mp);
            for (size_t i = 0; i < mul.inputs.size(); ++i) {
              auto c = ScalarConst(mul.inputs[i]);
              if (!c) continue;
              double l = std::log2(static_cast<double>(*c));
              int b = static_cast<int>(std::lround(l)) + 1;
              if (std::fabs(l - std::round(l)) < 1e-6 && (b == 1 || b == 2 || b == 4 || b == 8)) {
                bits = b;
                return Walk::kStop;
              }
            }
          }
        }
        return Walk::kExpand;
      },
      // Do not wander into the data path (weights never depend on it).
      [&](const std::string& in) { return !IsData(in); });
  return bits;
}

// True for names an exporter makes up for constants it computed (torch: `onnx::Conv_135` for a
// BN-folded weight; older versions: "135"). torch lists such initializers after the named
// parameters whatever the module order, so their position says nothing about the state_dict.
bool GeneratedName(const std::string& t) {
  if (t.rfind("onnx::", 0) == 0) return true;
  return !t.empty() && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Walking back from the weight input through the QAT chain (Mul/Round/Clip/Div/Transpose, ...),
// data tensors excluded.
void Builder::SetWeightInitializer(Layer& l, const Node& n) const {
  std::string_view found;
  WalkWeightPath(
      n,
      [&](std::string_view t) {
        if (!t.empty() && values_.count(t) > 0) return Walk::kSkip;
        if (init_pos_.count(t) == 0) return Walk::kExpand;
        const onnx_fe::Tensor* tensor = g_.FindTensor(t);
        if (tensor != nullptr && tensor->is_constant() &&
            static_cast<int64_t>(tensor->constant->size()) == l.weight_count) {
          found = t;
          return Walk::kStop;
        }
        if (found.empty() && t.size() > 7 && t.ends_with(".weight")) found = t;
        return Walk::kSkip;
      },
      [](const std::string&) { return true; });
  l.weight_initializer = std::string(found);
  if (!found.empty() && !GeneratedName(l.weight_initializer)) l.weight_position = init_pos_.find(found)->second;
}

void Builder::FinishWeightLayer(Layer& l, const Node& n) {
  SetWeightInitializer(l, n);
  if (auto bits = WeightBits(n)) {
    l.quantization = *bits;
    l.quantization_known = true;
    net_.qat_weight_chains = true;
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

}  // namespace kiln::ai8x::build
