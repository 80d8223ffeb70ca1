#include "compiler/convplan/passes/fusion_util.h"

#include <algorithm>
#include <cmath>

namespace kiln::convplan::passes_util {

namespace fe = onnx_fe;
using device::Activation;

const std::string* DeviceTail(const PlanGraph& g, size_t i) {
  if (!g.alive(i) || !g.op(i).on_device()) return nullptr;
  const DeviceOp& d = g.op(i).device();
  if (d.outputs.size() != 1) return nullptr;
  return &d.outputs[0].tensor;
}

bool ActivationSlotFree(const DeviceOp& d) {
  return d.residual.empty() ? d.activation() == Activation::kNone : d.residual_activation == Activation::kNone;
}

void SetNextActivation(DeviceOp& d, Activation a) {
  if (d.residual.empty()) {
    d.set_activation(a);
  } else {
    d.residual_activation = a;
  }
}

const fe::Node* HostNode(const PlanGraph& g, size_t j, const char* type) {
  if (!g.alive(j) || g.op(j).on_device()) return nullptr;
  const fe::Node& n = g.op(j).host().node;
  if (n.op_type != type) return nullptr;
  return &n;
}

std::optional<float> ScalarConstant(const PlanGraph& g, const std::string& name) {
  const fe::ConstantData* c = g.Constant(name);
  if (c == nullptr || c->size() != 1) return std::nullopt;
  return c->floats()[0];
}

bool Near(std::optional<float> v, double want) {
  return v.has_value() && std::fabs(static_cast<double>(*v) - want) <= 1e-4 * std::fabs(want);
}

std::optional<size_t> SoleConsumer(const PlanGraph& g, const std::string& tensor) {
  if (g.IsGraphOutput(tensor)) return std::nullopt;
  std::vector<size_t> c = g.Consumers(tensor);
  if (c.size() != 1) return std::nullopt;
  return c[0];
}

void Absorb(PlanGraph& g, size_t i, const std::vector<size_t>& absorbed, const std::string& new_output,
            const std::string& fusion) {
  size_t last = i;
  for (size_t j : absorbed) last = std::max(last, j);
  g.BeginEdit(i);
  PlanOp& op = g.op(i);
  for (size_t j : absorbed) {
    op.source_nodes.push_back(g.op(j).name);
  }
  op.fusions.push_back(fusion);
  op.device().outputs[0].tensor = new_output;
  g.Log(fusion + " into " + op.name);
  for (size_t j : absorbed) g.Remove(j);
  g.MoveTo(i, last);
}

}  // namespace kiln::convplan::passes_util
