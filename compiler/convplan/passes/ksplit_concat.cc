// KSplitConcat: Concat (axis 1, after normalising a negative axis) whose output is read only by
// one device op (group 1, one input, not a graph output, not also its residual), with at least two
// non-constant inputs whose channel counts are known and sum to the op's input channels → the
// device op reads the Concat inputs as K parts with its weights split along the input-channel dim
// (OIHW dim 1 / IOHW dim 0); no concat is built (the executor sums the partial convs,
// runtime/device_op_runner.h).
#include <cstring>

#include "compiler/convplan/passes/fusion_util.h"
#include "compiler/convplan/passes/rules.h"

namespace kiln::convplan {

namespace fe = onnx_fe;
using namespace passes_util;  // NOLINT

namespace {

struct KSplitMatch {
  size_t concat;
  std::vector<int64_t> channels;
};

class KSplitConcatPass : public RewriteRule<KSplitMatch> {
 public:
  const char* name() const override { return "KSplitConcat"; }
  std::vector<std::string_view> TargetOpTypes() const override { return {kConv2dOp, kConvTranspose2dOp}; }

 protected:
  std::optional<KSplitMatch> SatisfyCondition(const PlanGraph& g, size_t i) const override {
    if (!g.alive(i) || !g.op(i).on_device()) return std::nullopt;
    const DeviceOp& d = g.op(i).device();
    if (d.inputs.size() != 1 || d.weights.size() != 1 || d.group() != 1) return std::nullopt;
    const std::string& x = d.inputs[0];
    if (d.residual == x) return std::nullopt;
    auto p = g.Producer(x);
    if (!p) return std::nullopt;
    const fe::Node* cn = HostNode(g, *p, "Concat");
    if (cn == nullptr || !g.OnlyReadBy(x, i)) return std::nullopt;
    const fe::Tensor* xt = g.FindTensor(x);
    if (xt == nullptr || !xt->shape.has_rank() || xt->shape.rank() < 3) return std::nullopt;
    auto axis = cn->GetInt("axis");
    if (!axis.ok()) return std::nullopt;
    int64_t a = *axis < 0 ? *axis + static_cast<int64_t>(xt->shape.rank()) : *axis;
    if (a != 1) return std::nullopt;
    KSplitMatch m{*p, {}};
    int64_t total = 0;
    for (const std::string& in : cn->inputs) {
      if (in.empty() || g.Constant(in) != nullptr) return std::nullopt;
      const fe::Tensor* t = g.FindTensor(in);
      if (t == nullptr || !t->shape.has_rank() || t->shape.rank() != xt->shape.rank() || !t->shape.dim(1).is_known()) {
        return std::nullopt;
      }
      m.channels.push_back(t->shape.dim(1).value());
      total += t->shape.dim(1).value();
    }
    if (m.channels.size() < 2 || total != d.in_channels()) return std::nullopt;
    return m;
  }

  Status Apply(PlanGraph& g, size_t i, const KSplitMatch& m) const override {
    const fe::Node concat = g.op(m.concat).host().node;
    g.BeginEdit(i);
    DeviceOp& d = g.op(i).device();
    const device::Tensor w = d.weights[0];
    std::vector<device::Tensor> parts;
    int64_t begin = 0;
    const int64_t khw = w.dim(2) * w.dim(3);
    for (int64_t ch : m.channels) {
      if (d.kind == DeviceOpKind::kConv2d) {
        // OIHW: slice along I.
        auto part = device::Tensor::Zeros({w.dim(0), ch, w.dim(2), w.dim(3)});
        if (!part.ok()) return part.status();
        for (int64_t o = 0; o < w.dim(0); ++o) {
          std::memcpy(part->data<float>() + o * ch * khw, w.data<float>() + (o * w.dim(1) + begin) * khw,
                      sizeof(float) * ch * khw);
        }
        parts.push_back(std::move(*part));
      } else {
        // IOHW: slice along the first dim (contiguous).
        const int64_t row = w.dim(1) * khw;
        auto part = device::Tensor::FromFloats({ch, w.dim(1), w.dim(2), w.dim(3)},
                                               std::span<const float>(w.data<float>() + begin * row, ch * row));
        if (!part.ok()) return part.status();
        parts.push_back(std::move(*part));
      }
      begin += ch;
    }
    d.weights = std::move(parts);
    d.inputs.clear();
    for (const std::string& in : concat.inputs) d.inputs.push_back(in);
    PlanOp& op = g.op(i);
    op.source_nodes.push_back(concat.name);
    op.fusions.push_back("KSplitConcat(" + concat.name + ")");
    g.Log("KSplitConcat(" + concat.name + ") into " + op.name);
    g.Remove(m.concat);
    g.EndEdit(i);
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<RewritePass> MakeKSplitConcat() { return std::make_unique<KSplitConcatPass>(); }

}  // namespace kiln::convplan
