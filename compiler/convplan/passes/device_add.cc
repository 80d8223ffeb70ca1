// DeviceAdd: a host Add(a, b) becomes a device op (DeviceOpKind::kAdd, Backend::Add: on the card
// the ttnn.add TT-NN runs for a CNN's residual adds, docs/specs/tt-conv-dataflow.md §6) when
//  * a, b and the output are float tensors of one rank-3 or rank-4 shape (feature maps; no
//    broadcasting; every dim known or a symbol, the channels known), neither input a constant;
//  * at least one input is written by a device op (a conv, or a device add fed by one).
// An activation after it (Relu; relu6 = Clip(0, 6)) is then fused by FuseRelu / FuseRelu6 as the
// add's activation (passes/fuse_unary_activation.h). It runs before FuseResidualAdd in the
// pipeline, which therefore only fuses Adds into convs when DeviceAdd is disabled.
#include "compiler/convplan/passes/fusion_util.h"
#include "compiler/convplan/passes/rules.h"

namespace kiln::convplan {

namespace fe = onnx_fe;

namespace {

class DeviceAddPass : public RewriteRule<int64_t> {
 public:
  const char* name() const override { return "DeviceAdd"; }
  std::vector<std::string_view> TargetOpTypes() const override { return {"Add"}; }

 protected:
  // Match: the channel count of the output.
  std::optional<int64_t> SatisfyCondition(const PlanGraph& g, size_t i) const override {
    const fe::Node* add = passes_util::HostNode(g, i, "Add");
    if (add == nullptr || add->inputs.size() != 2 || add->outputs.size() != 1 || add->outputs[0].empty()) {
      return std::nullopt;
    }
    const fe::Tensor* out = g.FindTensor(add->outputs[0]);
    if (out == nullptr || out->dtype != fe::DataType::kFloat || !out->shape.has_rank()) return std::nullopt;
    const size_t rank = out->shape.dims().size();
    if (rank != 3 && rank != 4) return std::nullopt;
    for (const fe::Dim& d : out->shape.dims()) {
      if (d.is_unknown()) return std::nullopt;
    }
    bool from_device = false;
    for (const std::string& in : add->inputs) {
      if (in.empty() || g.Constant(in) != nullptr) return std::nullopt;
      const fe::Tensor* t = g.FindTensor(in);
      if (t == nullptr || t->dtype != fe::DataType::kFloat || !(t->shape == out->shape)) return std::nullopt;
      auto p = g.Producer(in);
      if (p && g.op(*p).on_device()) from_device = true;
    }
    if (!from_device) return std::nullopt;
    if (!out->shape.dims()[1].is_known()) return std::nullopt;  // the output slice's channels
    return out->shape.dims()[1].value();
  }

  Status Apply(PlanGraph& g, size_t i, const int64_t& channels) const override {
    const fe::Node add = g.op(i).host().node;
    g.BeginEdit(i);
    PlanOp& op = g.op(i);
    DeviceOp d;
    d.kind = DeviceOpKind::kAdd;
    d.spatial_rank = static_cast<int>(g.FindTensor(add.outputs[0])->shape.dims().size()) - 2;
    d.inputs = add.inputs;
    d.outputs = {OutputSlice{add.outputs[0], 0, channels}};
    op.op = DeviceOpKindName(DeviceOpKind::kAdd);
    op.fusions.push_back("DeviceAdd(" + add.name + ")");
    op.body = std::move(d);
    g.EndEdit(i);
    g.Log("DeviceAdd: " + add.name + " on the device");
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<RewritePass> MakeDeviceAdd() { return std::make_unique<DeviceAddPass>(); }

}  // namespace kiln::convplan
