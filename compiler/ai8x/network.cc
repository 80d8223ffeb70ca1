#include "compiler/ai8x/network.h"

namespace kiln::ai8x {

const char* OpKindName(OpKind op) {
  switch (op) {
    case OpKind::kNone: return "passthrough";
    case OpKind::kConv1d: return "conv1d";
    case OpKind::kConv2d: return "conv2d";
    case OpKind::kConvTranspose2d: return "convtranspose2d";
    case OpKind::kLinear: return "mlp";
  }
  return "?";
}

const char* ActivationName(Activation a) {
  switch (a) {
    case Activation::kNone: return "None";
    case Activation::kRelu: return "ReLU";
    case Activation::kAbs: return "Abs";
  }
  return "?";
}

const char* EltwiseName(EltwiseOp e) {
  switch (e) {
    case EltwiseOp::kNone: return "none";
    case EltwiseOp::kAdd: return "add";
    case EltwiseOp::kSub: return "sub";
    case EltwiseOp::kOr: return "or";
    case EltwiseOp::kXor: return "xor";
  }
  return "?";
}

const char* SeverityName(Severity s) {
  switch (s) {
    case Severity::kInfo: return "info";
    case Severity::kWarning: return "warning";
    case Severity::kError: return "error";
  }
  return "?";
}

std::string IntsString(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

std::string ShapeString(const Shape3& s, bool one_d) {
  if (one_d) return "(" + std::to_string(s.c) + ", " + std::to_string(s.h) + ")";
  return "(" + std::to_string(s.c) + ", " + std::to_string(s.h) + ", " + std::to_string(s.w) + ")";
}

Shape3 LayerDef::pooled_shape() const {
  Shape3 s = in_shape;
  if (eltwise == EltwiseOp::kNone && operands == 1) {
    // plain layer
  }
  if (pool != PoolType::kNone) {
    s.h = (s.h - pool_dilation * (pool_h - 1) - 1) / pool_stride_h + 1;
    s.w = (s.w - pool_dilation * (pool_w - 1) - 1) / pool_stride_w + 1;
  }
  return s;
}

int Network::IndexOf(int id) const {
  auto it = index_.find(id);
  if (it != index_.end() && it->second < static_cast<int>(layers.size()) && layers[it->second].id == id) {
    return it->second;
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].id == id) return static_cast<int>(i);
  }
  return -1;
}

Layer* Network::Find(int id) {
  int i = IndexOf(id);
  return i < 0 ? nullptr : &layers[i];
}

const Layer* Network::Find(int id) const {
  int i = IndexOf(id);
  return i < 0 ? nullptr : &layers[i];
}

void Network::Reindex() {
  index_.clear();
  index_.reserve(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) index_[layers[i].id] = static_cast<int>(i);
}

Layer& Network::Append(Layer l) {
  index_[l.id] = static_cast<int>(layers.size());
  layers.push_back(std::move(l));
  return layers.back();
}

std::vector<int> Network::ConsumersOf(int id) const {
  std::vector<int> out;
  for (const Layer& l : layers) {
    for (int in : l.inputs) {
      if (in == id) out.push_back(l.id);
    }
  }
  return out;
}

Shape3 Network::OutputShapeOf(int id) const {
  if (id == kNetworkInput) return input_shape;
  const Layer* l = Find(id);
  return l ? l->out_shape : Shape3{};
}

namespace {

std::string FindingKey(Severity s, const std::string& code, const std::string& layer_name) {
  std::string k(1, static_cast<char>('0' + static_cast<int>(s)));
  k += code;
  k += '\0';
  k += layer_name;
  return k;
}

}  // namespace

size_t Network::FindingOf(Severity s, const std::string& code, const std::string& layer_name) {
  auto matches = [&](size_t i) {
    if (i >= diagnostics.size()) return false;
    const Diagnostic& d = diagnostics[i];
    return d.severity == s && d.code == code && d.layer_name == layer_name;
  };
  const std::string key = FindingKey(s, code, layer_name);
  auto it = finding_index_.find(key);
  if (it != finding_index_.end() && matches(it->second)) return it->second;
  if (it == finding_index_.end()) return diagnostics.size();
  // A stale entry: `diagnostics` was edited from outside (cleared, replaced); index it again.
  finding_index_.clear();
  for (size_t i = 0; i < diagnostics.size(); ++i) {
    const Diagnostic& d = diagnostics[i];
    if (!d.layer_name.empty()) finding_index_.try_emplace(FindingKey(d.severity, d.code, d.layer_name), i);
  }
  it = finding_index_.find(key);
  return it == finding_index_.end() ? diagnostics.size() : it->second;
}

void Network::RequireIzerFlag(const std::string& flag, std::string reason) {
  for (const IzerFlag& f : izer_flags) {
    if (f.flag == flag) return;
  }
  izer_flags.push_back({flag, std::move(reason)});
}

void Network::Report(Severity s, std::string code, const Layer* layer, std::string message) {
  if (layer != nullptr && !layer->name.empty()) {
    size_t at = FindingOf(s, code, layer->name);
    if (at < diagnostics.size()) {
      std::string& kept = diagnostics[at].message;
      if (kept.find(message) == std::string::npos) kept += "; also: " + message;
      return;
    }
  }
  Diagnostic d;
  d.severity = s;
  d.code = std::move(code);
  if (layer != nullptr) {
    d.layer = IndexOf(layer->id);
    d.layer_name = layer->name;
    if (!layer->onnx_nodes.empty()) d.onnx_node = layer->onnx_nodes.front();
    if (!d.layer_name.empty()) finding_index_[FindingKey(s, d.code, d.layer_name)] = diagnostics.size();
  }
  d.message = std::move(message);
  diagnostics.push_back(std::move(d));
}

}  // namespace kiln::ai8x
