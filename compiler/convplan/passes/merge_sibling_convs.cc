// MergeSiblingConvs: two or more kConv2d device ops reading the same single input, group 1, equal
// spatial rank, kernel, strides, pads, dilations and activation, no residual, no K-split → one
// conv anchored at the first: weights concatenated along O (bias zero-filled where one is
// missing), one OutputSlice per original output tensor (the executor splits the channels back,
// runtime/device_op_runner.h).
#include <cstring>

#include "compiler/convplan/passes/fusion_util.h"
#include "compiler/convplan/passes/rules.h"

namespace kiln::convplan {

namespace {

// Match: the later siblings of op i, ascending.
class MergeSiblingConvsPass : public RewriteRule<std::vector<size_t>> {
 public:
  const char* name() const override { return "MergeSiblingConvs"; }
  std::vector<std::string_view> TargetOpTypes() const override { return {kConv2dOp}; }

 protected:
  std::optional<std::vector<size_t>> SatisfyCondition(const PlanGraph& g, size_t i) const override {
    std::vector<size_t> out;
    if (!Eligible(g, i)) return std::nullopt;
    const DeviceOp& d = g.op(i).device();
    for (size_t j : g.Consumers(d.inputs[0])) {
      if (j <= i || !Eligible(g, j)) continue;
      const DeviceOp& e = g.op(j).device();
      if (e.inputs[0] != d.inputs[0] || e.spatial_rank != d.spatial_rank || !(e.conv == d.conv)) continue;
      const device::Tensor& a = d.weights[0];
      const device::Tensor& b = e.weights[0];
      if (a.dim(1) != b.dim(1) || a.dim(2) != b.dim(2) || a.dim(3) != b.dim(3)) continue;
      out.push_back(j);
    }
    if (out.empty()) return std::nullopt;
    return out;
  }

  Status Apply(PlanGraph& g, size_t i, const std::vector<size_t>& sib) const override {
    g.BeginEdit(i);
    DeviceOp& d = g.op(i).device();
    std::vector<const DeviceOp*> all = {&d};
    for (size_t j : sib) all.push_back(&g.op(j).device());
    int64_t O = 0;
    bool any_bias = false;
    for (const DeviceOp* s : all) {
      O += s->out_channels();
      any_bias = any_bias || s->bias.has_value();
    }
    const device::Tensor& w0 = d.weights[0];
    auto w = device::Tensor::Zeros({O, w0.dim(1), w0.dim(2), w0.dim(3)});
    if (!w.ok()) return w.status();
    std::optional<device::Tensor> bias;
    if (any_bias) {
      auto b = device::Tensor::Zeros({O});
      if (!b.ok()) return b.status();
      bias = std::move(*b);
    }
    std::vector<OutputSlice> outs;
    int64_t off = 0;
    const int64_t per_o = w0.dim(1) * w0.dim(2) * w0.dim(3);
    for (const DeviceOp* s : all) {
      const int64_t o = s->out_channels();
      std::memcpy(w->data<float>() + off * per_o, s->weights[0].data<float>(), sizeof(float) * o * per_o);
      if (s->bias) std::memcpy(bias->data<float>() + off, s->bias->data<float>(), sizeof(float) * o);
      for (const OutputSlice& sl : s->outputs) {
        outs.push_back(OutputSlice{sl.tensor, sl.channel_begin + off, sl.channel_end + off});
      }
      off += o;
    }
    PlanOp& op = g.op(i);
    // The merged op's name joins the siblings' names, shortened in the middle past kNamedSiblings
    // ("conv1+pconv0+pconv1+…+pconv9999 (10001 convs)"): error messages and reports name the op,
    // and 10,000 joined names pushed the reason out of a bounded message.
    constexpr size_t kNamedSiblings = 4;
    std::string names;
    for (size_t k = 0; k < sib.size(); ++k) {
      const size_t j = sib[k];
      for (const std::string& s : g.op(j).source_nodes) op.source_nodes.push_back(s);
      for (const std::string& f : g.op(j).fusions) op.fusions.push_back(f);
      const bool shown = sib.size() <= kNamedSiblings || k + 2 < kNamedSiblings || k + 1 == sib.size();
      if (shown) {
        op.name += "+" + g.op(j).name;
        names += (names.empty() ? "" : ", ") + g.op(j).name;
      } else if (k + 2 == kNamedSiblings) {
        op.name += "+…";
        names += ", … " + std::to_string(sib.size() - kNamedSiblings + 1) + " more …";
      }
    }
    if (sib.size() > kNamedSiblings) op.name += " (" + std::to_string(sib.size() + 1) + " convs)";
    d.weights = {std::move(*w)};
    d.bias = std::move(bias);
    d.outputs = std::move(outs);
    op.fusions.push_back("MergeSiblingConvs(" + names + ")");
    g.Log("MergeSiblingConvs(" + names + ") into " + op.name);
    for (size_t j : sib) g.Remove(j);
    g.EndEdit(i);
    return Status::Ok();
  }

 private:
  static bool Eligible(const PlanGraph& g, size_t i) {
    if (!g.alive(i) || !g.op(i).on_device()) return false;
    const DeviceOp& d = g.op(i).device();
    return d.kind == DeviceOpKind::kConv2d && d.inputs.size() == 1 && d.weights.size() == 1 && d.conv.group == 1 &&
           d.residual.empty();
  }
};

}  // namespace

std::unique_ptr<RewritePass> MakeMergeSiblingConvs() { return std::make_unique<MergeSiblingConvsPass>(); }

}  // namespace kiln::convplan
