// FoldBatchNorm: BatchNormalization (inference: training_mode 0, one output) reading a device op's
// only output, scale / B / mean / var constant (initializers or Constant nodes) with O values:
// with f = scale / sqrt(var + epsilon) (epsilon from the node, schema default 1e-5):
// W'[o] = W[o]·f[o], b'[o] = (b[o] − mean[o])·f[o] + B[o] (b = 0 without bias) — ONNX
// BatchNormalization-15 in inference form. ConvTranspose: output channel o of IOHW weight (c, j)
// is g·(O/group) + j with g = c / (C/group). The device op must have no activation, residual or
// merged outputs yet.
#include <cmath>

#include "compiler/convplan/passes/fusion_util.h"
#include "compiler/convplan/passes/rules.h"

namespace kiln::convplan {

namespace fe = onnx_fe;
using device::Activation;
using namespace passes_util;  // NOLINT

namespace {

// Match: the BatchNormalization op.
class FoldBatchNormPass : public RewriteRule<size_t> {
 public:
  const char* name() const override { return "FoldBatchNorm"; }
  std::vector<std::string_view> TargetOpTypes() const override { return {kConv2dOp, kConvTranspose2dOp}; }

 protected:
  std::optional<size_t> SatisfyCondition(const PlanGraph& g, size_t i) const override {
    const std::string* t = DeviceTail(g, i);
    if (t == nullptr) return std::nullopt;
    const DeviceOp& d = g.op(i).device();
    if (d.activation() != Activation::kNone || !d.residual.empty()) return std::nullopt;
    auto j = SoleConsumer(g, *t);
    if (!j) return std::nullopt;
    const fe::Node* bn = HostNode(g, *j, "BatchNormalization");
    if (bn == nullptr || bn->inputs.size() < 5 || bn->inputs[0] != *t) return std::nullopt;
    for (size_t k = 1; k < bn->outputs.size(); ++k) {
      if (!bn->outputs[k].empty()) return std::nullopt;  // training-mode outputs requested
    }
    if (const fe::Attribute* tm = bn->FindAttribute("training_mode"); tm != nullptr && tm->i != 0) return std::nullopt;
    for (int k = 1; k <= 4; ++k) {
      const fe::ConstantData* c = g.Constant(bn->inputs[k]);
      if (c == nullptr || static_cast<int64_t>(c->size()) != d.out_channels()) return std::nullopt;
    }
    return j;
  }

  Status Apply(PlanGraph& g, size_t i, const size_t& j) const override {
    const fe::Node bn = g.op(j).host().node;
    DeviceOp& d = g.op(i).device();
    const int64_t O = d.out_channels();
    const fe::ConstantData* p[4];
    for (int k = 0; k < 4; ++k) {
      p[k] = g.Constant(bn.inputs[1 + k]);
      if (p[k] == nullptr || static_cast<int64_t>(p[k]->size()) != O) {
        return InvalidArgument(bn.Describe() + ": parameter '" + bn.inputs[1 + k] + "' must have " +
                               std::to_string(O) + " values");
      }
    }
    auto eps = bn.GetFloat("epsilon", 1e-5f);
    if (!eps.ok()) return eps.status();
    std::vector<double> f(O);
    auto scale = p[0]->floats(), shift = p[1]->floats(), mean = p[2]->floats(), var = p[3]->floats();
    for (int64_t o = 0; o < O; ++o) f[o] = scale[o] / std::sqrt(static_cast<double>(var[o]) + *eps);
    if (!d.bias) {
      auto b = device::Tensor::Zeros({O});
      if (!b.ok()) return b.status();
      d.bias = std::move(*b);
    }
    float* b = d.bias->data<float>();
    for (int64_t o = 0; o < O; ++o) {
      b[o] = static_cast<float>((static_cast<double>(b[o]) - mean[o]) * f[o] + shift[o]);
    }
    int64_t c_offset = 0;
    for (device::Tensor& w : d.weights) {
      float* wd = w.data<float>();
      const int64_t khw = w.dim(2) * w.dim(3);
      if (d.kind == DeviceOpKind::kConv2d) {
        const int64_t per_o = w.dim(1) * khw;
        for (int64_t o = 0; o < w.dim(0); ++o) {
          for (int64_t k = 0; k < per_o; ++k) wd[o * per_o + k] = static_cast<float>(wd[o * per_o + k] * f[o]);
        }
      } else {
        // IOHW (C, O/group, kh, kw): output channel of (c, j) is group(c)·(O/group) + j.
        const int64_t opg = w.dim(1), group = d.conv_transpose.group;
        const int64_t cpg = d.in_channels() / group;
        for (int64_t c = 0; c < w.dim(0); ++c) {
          const int64_t gidx = (c + c_offset) / cpg;
          for (int64_t jo = 0; jo < opg; ++jo) {
            const int64_t o = gidx * opg + jo;
            float* row = wd + (c * opg + jo) * khw;
            for (int64_t k = 0; k < khw; ++k) row[k] = static_cast<float>(row[k] * f[o]);
          }
        }
        c_offset += w.dim(0);
      }
    }
    Absorb(g, i, {j}, bn.outputs[0], "FoldBatchNorm(" + bn.name + ")");
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<RewritePass> MakeFoldBatchNorm() { return std::make_unique<FoldBatchNormPass>(); }

}  // namespace kiln::convplan
