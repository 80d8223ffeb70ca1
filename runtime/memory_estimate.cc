#include "runtime/memory_estimate.h"

#include <algorithm>
#include <climits>
#include <map>
#include <optional>
#include <vector>

#include "common/saturating.h"
#include "runtime/device_op_runner.h"
#include "runtime/host_kernels/registry.h"

namespace kiln::runtime {
namespace {

int64_t Bytes(const std::vector<int64_t>& shape, int64_t element) { return SatMul(SatElements(shape), element); }

}  // namespace

MemoryEstimate EstimateRunMemory(const convplan::ConvPlan& plan, const RunInputs& inputs, const RunOptions& options) {
  MemoryEstimate e;
  const onnx_fe::Graph* graph = plan.model ? &plan.model->graph() : nullptr;
  struct Value {
    std::optional<std::vector<int64_t>> shape;
    int64_t bytes = 0;
  };
  std::map<std::string, Value> values;  // shapes known so far (inputs, op outputs)
  auto shape_of = [&](const std::string& name) -> std::optional<std::vector<int64_t>> {
    if (auto it = values.find(name); it != values.end()) return it->second.shape;
    if (graph != nullptr) {
      if (const onnx_fe::Tensor* t = graph->FindTensor(name); t != nullptr && t->shape.has_rank()) return t->shape.values();
    }
    return std::nullopt;
  };
  auto element_size = [&](const std::string& name, bool device_value) -> int64_t {
    if (device_value || graph == nullptr) return 4;
    const onnx_fe::Tensor* t = graph->FindTensor(name);
    if (t == nullptr || t->dtype == onnx_fe::DataType::kUndefined) return 4;
    return std::max<int64_t>(1, static_cast<int64_t>(onnx_fe::DataTypeSize(t->dtype)));
  };
  // The run's inputs, live for the whole run (the caller holds them).
  int64_t live = 0;
  for (const convplan::PlanInput& in : plan.inputs) {
    Value v;
    if (auto it = inputs.find(in.name); it != inputs.end()) {
      v.shape = it->second.shape();
    } else if (in.shape.has_rank()) {
      std::vector<int64_t> s;
      for (const onnx_fe::Dim& d : in.shape.dims()) s.push_back(d.is_symbol() ? 1 : (d.is_known() ? d.value() : 0));
      v.shape = s;
    }
    if (!v.shape) e.complete = false;
    v.bytes = v.shape ? Bytes(*v.shape, element_size(in.name, false)) : 0;
    live = SatAdd(live, v.bytes);
    values[in.name] = v;
  }
  // Last reader of each tensor; graph outputs live to the end.
  std::map<std::string, size_t> last_use;
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    for (const std::string& t : plan.ops[i].Inputs()) last_use[t] = i;
  }
  for (const auto& o : plan.outputs) last_use[o.tensor] = plan.ops.size();
  std::map<std::string, int64_t> held;  // op outputs alive, by name
  const int64_t chains = (options.compare_to_reference || options.mode == RunMode::kPerLayer) ? 2 : 1;
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    const convplan::PlanOp& op = plan.ops[i];
    std::vector<std::vector<int64_t>> in_shapes;
    bool known = true;
    auto shapes_of = [&](const std::vector<std::string>& names) {
      for (const std::string& n : names) {
        if (n.empty()) {
          in_shapes.push_back({});
          continue;
        }
        auto s = shape_of(n);
        if (!s) known = false;
        in_shapes.push_back(s.value_or(std::vector<int64_t>{}));
      }
    };
    int64_t op_bytes = 0;
    if (op.on_device()) {
      shapes_of(op.device().inputs);
      op_bytes = known ? DeviceOpBytes(op.device(), in_shapes) : 0;
    } else {
      shapes_of(op.host().node.inputs);
      // The outputs' inferred shapes: the kernel's estimate may use them (Resize: its scales are
      // values), and an op never counts less than its outputs (a kernel estimate from the input
      // shapes alone cannot see a size that an input's values decide).
      std::vector<std::vector<int64_t>> out_shapes;
      int64_t out_bytes = 0;
      for (const std::string& out : op.host().node.outputs) {
        if (out.empty()) {
          out_shapes.push_back({});
          continue;
        }
        auto s = shape_of(out);
        if (!s) {
          out_shapes.clear();
          out_bytes = 0;
          break;
        }
        out_bytes = SatAdd(out_bytes, Bytes(*s, element_size(out, false)));
        out_shapes.push_back(*s);
      }
      if (known) {
        auto b = HostKernels().EstimateBytes(op.host().node, in_shapes, out_shapes);
        op_bytes = b.ok() ? *b : 0;
      }
      op_bytes = std::max(op_bytes, out_bytes);
    }
    if (!known) e.complete = false;
    const int64_t at_op = SatMul(chains, SatAdd(live, op_bytes));
    if (at_op > e.peak_bytes || e.peak_op.empty()) {
      e.peak_bytes = at_op;
      e.peak_op = op.name + " (" + op.op + ")";
      e.peak_op_bytes = op_bytes;
    }
    // The op's outputs become live; tensors read for the last time here are dropped.
    for (const std::string& out : op.Outputs()) {
      if (out.empty()) continue;
      Value v;
      v.shape = shape_of(out);
      if (!v.shape) e.complete = false;
      v.bytes = v.shape ? Bytes(*v.shape, element_size(out, op.on_device())) : 0;
      values[out] = v;
      if (last_use.count(out)) {
        held[out] = v.bytes;
        live = SatAdd(live, v.bytes);
      }
    }
    for (const std::string& t : op.Inputs()) {
      auto h = held.find(t);
      if (h != held.end() && last_use[t] == i) {
        live -= std::min(live, h->second);
        held.erase(h);
      }
    }
  }
  for (const auto& o : plan.outputs) {
    auto it = values.find(o.tensor);
    if (it != values.end()) e.output_bytes = SatAdd(e.output_bytes, it->second.bytes);
  }
  return e;
}

}  // namespace kiln::runtime
