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

std::string ShapeString(const Shape3& s, bool one_d) {
  if (one_d) return "(" + std::to_string(s.c) + ", " + std::to_string(s.h) + ")";
  return "(" + std::to_string(s.c) + ", " + std::to_string(s.h) + ", " + std::to_string(s.w) + ")";
}

Shape3 Layer::pooled_shape() const {
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

Passes ComputePasses(int channels) {
  Passes p;
  if (channels <= 0) return {1, 0};
  p.passes = (channels + 63) / 64;
  p.processors = (channels + p.passes - 1) / p.passes;
  if (channels > 64) p.processors = (p.processors + 3) / 4 * 4;
  if (p.processors > 64) p.processors = 64;
  return p;
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

void Network::Report(Severity s, std::string code, const Layer* layer, std::string message) {
  Diagnostic d;
  d.severity = s;
  d.code = std::move(code);
  if (layer != nullptr) {
    d.layer = IndexOf(layer->id);
    d.layer_name = layer->name;
    if (!layer->onnx_nodes.empty()) d.onnx_node = layer->onnx_nodes.front();
  }
  d.message = std::move(message);
  diagnostics.push_back(std::move(d));
}

}  // namespace kiln::ai8x
