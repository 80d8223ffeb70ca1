#include "compiler/convplan/passes.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kiln::convplan {

namespace fe = onnx_fe;
using device::Activation;

// ---------------------------------------------------------------------------------------------
// PlanGraph

PlanGraph::PlanGraph(ConvPlan plan) : plan_(std::move(plan)), alive_(plan_.ops.size(), true) {
  for (const fe::GraphOutput& o : plan_.outputs) {
    graph_outputs_.insert(o.tensor);
    graph_outputs_.insert(o.name);
  }
  for (size_t i = 0; i < plan_.ops.size(); ++i) EndEdit(i);
}

void PlanGraph::EndEdit(size_t i) {
  if (!alive_.at(i)) return;
  for (const std::string& in : plan_.ops[i].Inputs()) {
    std::vector<size_t>& r = readers_[in];
    auto it = std::lower_bound(r.begin(), r.end(), i);
    if (it == r.end() || *it != i) r.insert(it, i);
  }
  for (const std::string& o : plan_.ops[i].Outputs()) writer_[o] = i;
}

void PlanGraph::BeginEdit(size_t i) {
  for (const std::string& in : plan_.ops.at(i).Inputs()) {
    auto f = readers_.find(in);
    if (f == readers_.end()) continue;
    auto it = std::lower_bound(f->second.begin(), f->second.end(), i);
    if (it != f->second.end() && *it == i) f->second.erase(it);
  }
  for (const std::string& o : plan_.ops[i].Outputs()) {
    auto w = writer_.find(o);
    if (w != writer_.end() && w->second == i) writer_.erase(w);
  }
}

std::vector<size_t> PlanGraph::Consumers(std::string_view tensor) const {
  auto it = readers_.find(std::string(tensor));
  return it == readers_.end() ? std::vector<size_t>{} : it->second;
}

std::optional<size_t> PlanGraph::Producer(std::string_view tensor) const {
  auto it = writer_.find(std::string(tensor));
  if (it == writer_.end()) return std::nullopt;
  return it->second;
}

bool PlanGraph::IsGraphOutput(std::string_view tensor) const {
  return graph_outputs_.count(std::string(tensor)) != 0;
}

const fe::ConstantData* PlanGraph::Constant(std::string_view tensor) const {
  return plan_.FindConstant(std::string(tensor));
}

const fe::Tensor* PlanGraph::FindTensor(std::string_view tensor) const {
  return plan_.model ? plan_.model->graph().FindTensor(tensor) : nullptr;
}

bool PlanGraph::OnlyReadBy(std::string_view tensor, size_t reader) const {
  if (IsGraphOutput(tensor) || Constant(tensor) != nullptr) return false;
  std::vector<size_t> c = Consumers(tensor);
  return c.size() == 1 && c[0] == reader;
}

void PlanGraph::Remove(size_t i) {
  BeginEdit(i);
  alive_.at(i) = false;
}

void PlanGraph::MoveTo(size_t from, size_t to) {
  BeginEdit(from);
  if (from != to) {
    plan_.ops.at(to) = std::move(plan_.ops.at(from));
    alive_.at(to) = true;
    alive_.at(from) = false;
  }
  EndEdit(to);
}

ConvPlan PlanGraph::Compact() && {
  std::vector<PlanOp> ops;
  for (size_t i = 0; i < plan_.ops.size(); ++i) {
    if (alive_[i]) ops.push_back(std::move(plan_.ops[i]));
  }
  plan_.ops = std::move(ops);
  alive_.assign(plan_.ops.size(), true);
  return std::move(plan_);
}

// ---------------------------------------------------------------------------------------------
// Helpers

namespace {

// The single output tensor of a device op, or nullptr.
const std::string* DeviceTail(const PlanGraph& g, size_t i) {
  if (!g.alive(i) || !g.op(i).on_device()) return nullptr;
  const DeviceOp& d = g.op(i).device();
  if (d.outputs.size() != 1) return nullptr;
  return &d.outputs[0].tensor;
}

// True when op i's next activation slot is free.
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

// Host op j of type `type` (alive), or nullptr.
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

// The one consumer of `tensor` when it is an intermediate that may disappear, else nullopt.
std::optional<size_t> SoleConsumer(const PlanGraph& g, const std::string& tensor) {
  if (g.IsGraphOutput(tensor)) return std::nullopt;
  std::vector<size_t> c = g.Consumers(tensor);
  if (c.size() != 1) return std::nullopt;
  return c[0];
}

// Finishes a fusion: device op i absorbs `absorbed` ops (the last of which, `last`, produces
// `new_output`), takes `last`'s slot.
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

// ---------------------------------------------------------------------------------------------
// Single-node activations: Relu, Relu6 (Clip), Sigmoid.

class FuseUnaryActivation : public RewritePass {
 public:
  FuseUnaryActivation(const char* pass_name, const char* op_type, Activation act)
      : name_(pass_name), op_type_(op_type), act_(act) {}
  const char* name() const override { return name_; }

  bool SatisfyCondition(const PlanGraph& g, size_t i) const override { return Match(g, i).has_value(); }

  Status Apply(PlanGraph& g, size_t i) const override {
    auto j = Match(g, i);
    if (!j) return Internal(std::string(name_) + ": condition does not hold");
    SetNextActivation(g.op(i).device(), act_);
    const fe::Node& n = g.op(*j).host().node;
    Absorb(g, i, {*j}, n.outputs[0], std::string(name_) + "(" + n.name + ")");
    return Status::Ok();
  }

 protected:
  virtual bool Accept(const PlanGraph&, const fe::Node&) const { return true; }

 private:
  std::optional<size_t> Match(const PlanGraph& g, size_t i) const {
    const std::string* t = DeviceTail(g, i);
    if (t == nullptr || !ActivationSlotFree(g.op(i).device())) return std::nullopt;
    auto j = SoleConsumer(g, *t);
    if (!j) return std::nullopt;
    const fe::Node* n = HostNode(g, *j, op_type_);
    if (n == nullptr || n->inputs.empty() || n->inputs[0] != *t || n->outputs.empty()) return std::nullopt;
    if (!Accept(g, *n)) return std::nullopt;
    return j;
  }

  const char* name_;
  const char* op_type_;
  Activation act_;
};

class FuseRelu6Pass : public FuseUnaryActivation {
 public:
  FuseRelu6Pass() : FuseUnaryActivation("FuseRelu6", "Clip", Activation::kRelu6) {}

 protected:
  bool Accept(const PlanGraph& g, const fe::Node& n) const override {
    return g.plan().model && IsRelu6Clip(n, g.plan().model->graph());
  }
};

// ---------------------------------------------------------------------------------------------
// SiLU: Mul(y, Sigmoid(y)).

class FuseSiluPass : public RewritePass {
 public:
  const char* name() const override { return "FuseSilu"; }
  bool SatisfyCondition(const PlanGraph& g, size_t i) const override { return Match(g, i).has_value(); }
  Status Apply(PlanGraph& g, size_t i) const override {
    auto m = Match(g, i);
    if (!m) return Internal("FuseSilu: condition does not hold");
    SetNextActivation(g.op(i).device(), Activation::kSilu);
    const fe::Node& mul = g.op(m->second).host().node;
    Absorb(g, i, {m->first, m->second}, mul.outputs[0],
           "FuseSilu(" + g.op(m->first).name + ", " + mul.name + ")");
    return Status::Ok();
  }

 private:
  // (sigmoid op, mul op)
  std::optional<std::pair<size_t, size_t>> Match(const PlanGraph& g, size_t i) const {
    const std::string* y = DeviceTail(g, i);
    if (y == nullptr || !ActivationSlotFree(g.op(i).device()) || g.IsGraphOutput(*y)) return std::nullopt;
    std::vector<size_t> c = g.Consumers(*y);
    if (c.size() != 2) return std::nullopt;
    for (int k = 0; k < 2; ++k) {
      size_t s = c[k], m = c[1 - k];
      const fe::Node* sig = HostNode(g, s, "Sigmoid");
      const fe::Node* mul = HostNode(g, m, "Mul");
      if (sig == nullptr || mul == nullptr || sig->inputs.empty() || sig->inputs[0] != *y) continue;
      if (mul->inputs.size() != 2) continue;
      const std::string& so = sig->outputs[0];
      const bool pair = (mul->inputs[0] == *y && mul->inputs[1] == so) || (mul->inputs[0] == so && mul->inputs[1] == *y);
      if (!pair || !g.OnlyReadBy(so, m)) continue;
      return std::make_pair(s, m);
    }
    return std::nullopt;
  }
};

// ---------------------------------------------------------------------------------------------
// Gelu (erf form).

class FuseGeluPass : public RewritePass {
 public:
  const char* name() const override { return "FuseGelu"; }
  bool SatisfyCondition(const PlanGraph& g, size_t i) const override { return Match(g, i).has_value(); }
  Status Apply(PlanGraph& g, size_t i) const override {
    auto m = Match(g, i);
    if (!m) return Internal("FuseGelu: condition does not hold");
    SetNextActivation(g.op(i).device(), Activation::kGelu);
    std::string out = g.op(m->back()).host().node.outputs[0];
    std::string names;
    for (size_t j : *m) names += (names.empty() ? "" : ", ") + g.op(j).name;
    Absorb(g, i, *m, out, "FuseGelu(" + names + ")");
    return Status::Ok();
  }

 private:
  // The other operand of a binary node when one operand is `x`.
  static std::optional<std::string> Other(const fe::Node& n, const std::string& x) {
    if (n.inputs.size() != 2) return std::nullopt;
    if (n.inputs[0] == x) return n.inputs[1];
    if (n.inputs[1] == x) return n.inputs[0];
    return std::nullopt;
  }

  // Ops of the pattern, the final Mul last.
  std::optional<std::vector<size_t>> Match(const PlanGraph& g, size_t i) const {
    const std::string* yp = DeviceTail(g, i);
    if (yp == nullptr || !ActivationSlotFree(g.op(i).device()) || g.IsGraphOutput(*yp)) return std::nullopt;
    const std::string& y = *yp;
    std::vector<size_t> c = g.Consumers(y);
    if (c.size() != 2) return std::nullopt;
    for (int k = 0; k < 2; ++k) {
      size_t dj = c[k], pj = c[1 - k];
      // d = y / sqrt(2)  or  y * (1/sqrt(2))
      const fe::Node* dn = HostNode(g, dj, "Div");
      bool dok = false;
      if (dn != nullptr && dn->inputs.size() == 2 && dn->inputs[0] == y) {
        dok = Near(ScalarConstant(g, dn->inputs[1]), std::sqrt(2.0));
      } else if ((dn = HostNode(g, dj, "Mul")) != nullptr) {
        auto o = Other(*dn, y);
        dok = o && Near(ScalarConstant(g, *o), 1.0 / std::sqrt(2.0));
      }
      if (!dok) continue;
      auto ej = SoleConsumer(g, dn->outputs[0]);
      if (!ej) continue;
      const fe::Node* en = HostNode(g, *ej, "Erf");
      if (en == nullptr || en->inputs[0] != dn->outputs[0]) continue;
      auto aj = SoleConsumer(g, en->outputs[0]);
      if (!aj) continue;
      const fe::Node* an = HostNode(g, *aj, "Add");
      if (an == nullptr) continue;
      auto one = Other(*an, en->outputs[0]);
      if (!one || !Near(ScalarConstant(g, *one), 1.0)) continue;
      const std::string& a = an->outputs[0];
      const fe::Node* pn = HostNode(g, pj, "Mul");
      if (pn == nullptr) continue;
      auto pother = Other(*pn, y);
      if (!pother) continue;
      if (*pother == a) {
        // m = y * a ; z = m * 0.5
        if (!g.OnlyReadBy(a, pj)) continue;
        auto zj = SoleConsumer(g, pn->outputs[0]);
        if (!zj) continue;
        const fe::Node* zn = HostNode(g, *zj, "Mul");
        if (zn == nullptr) continue;
        auto half = Other(*zn, pn->outputs[0]);
        if (!half || !Near(ScalarConstant(g, *half), 0.5)) continue;
        return std::vector<size_t>{dj, *ej, *aj, pj, *zj};
      }
      if (Near(ScalarConstant(g, *pother), 0.5)) {
        // h = y * 0.5 ; z = h * a
        auto zj = SoleConsumer(g, pn->outputs[0]);
        if (!zj) continue;
        const fe::Node* zn = HostNode(g, *zj, "Mul");
        if (zn == nullptr) continue;
        auto other = Other(*zn, pn->outputs[0]);
        if (!other || *other != a || !g.OnlyReadBy(a, *zj)) continue;
        return std::vector<size_t>{dj, *ej, *aj, pj, *zj};
      }
    }
    return std::nullopt;
  }
};

// ---------------------------------------------------------------------------------------------
// BatchNormalization folding.

class FoldBatchNormPass : public RewritePass {
 public:
  const char* name() const override { return "FoldBatchNorm"; }
  bool SatisfyCondition(const PlanGraph& g, size_t i) const override { return Match(g, i).has_value(); }

  Status Apply(PlanGraph& g, size_t i) const override {
    auto j = Match(g, i);
    if (!j) return Internal("FoldBatchNorm: condition does not hold");
    const fe::Node bn = g.op(*j).host().node;
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
    Absorb(g, i, {*j}, bn.outputs[0], "FoldBatchNorm(" + bn.name + ")");
    return Status::Ok();
  }

 private:
  std::optional<size_t> Match(const PlanGraph& g, size_t i) const {
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
};

// ---------------------------------------------------------------------------------------------
// Residual Add.

class FuseResidualAddPass : public RewritePass {
 public:
  const char* name() const override { return "FuseResidualAdd"; }
  bool SatisfyCondition(const PlanGraph& g, size_t i) const override { return Match(g, i).has_value(); }
  Status Apply(PlanGraph& g, size_t i) const override {
    auto j = Match(g, i);
    if (!j) return Internal("FuseResidualAdd: condition does not hold");
    const fe::Node add = g.op(*j).host().node;
    const std::string& t = g.op(i).device().outputs[0].tensor;
    g.BeginEdit(i);
    g.op(i).device().residual = add.inputs[0] == t ? add.inputs[1] : add.inputs[0];
    Absorb(g, i, {*j}, add.outputs[0], "FuseResidualAdd(" + add.name + ")");
    return Status::Ok();
  }

 private:
  std::optional<size_t> Match(const PlanGraph& g, size_t i) const {
    const std::string* t = DeviceTail(g, i);
    if (t == nullptr || !g.op(i).device().residual.empty()) return std::nullopt;
    auto j = SoleConsumer(g, *t);
    if (!j) return std::nullopt;
    const fe::Node* add = HostNode(g, *j, "Add");
    if (add == nullptr || add->inputs.size() != 2) return std::nullopt;
    std::string r;
    if (add->inputs[0] == *t) {
      r = add->inputs[1];
    } else if (add->inputs[1] == *t) {
      r = add->inputs[0];
    } else {
      return std::nullopt;
    }
    if (r == *t || g.Constant(r) != nullptr) return std::nullopt;
    const fe::Tensor* tt = g.FindTensor(*t);
    const fe::Tensor* rt = g.FindTensor(r);
    const fe::Tensor* ot = g.FindTensor(add->outputs[0]);
    if (tt == nullptr || rt == nullptr || ot == nullptr) return std::nullopt;
    if (!tt->shape.has_rank() || !(tt->shape == rt->shape) || !(tt->shape == ot->shape)) return std::nullopt;
    for (const fe::Dim& d : tt->shape.dims()) {
      if (d.is_unknown()) return std::nullopt;
    }
    return j;
  }
};

// ---------------------------------------------------------------------------------------------
// Concat → K-split.

class KSplitConcatPass : public RewritePass {
 public:
  const char* name() const override { return "KSplitConcat"; }
  bool SatisfyCondition(const PlanGraph& g, size_t i) const override { return Match(g, i).has_value(); }

  Status Apply(PlanGraph& g, size_t i) const override {
    auto m = Match(g, i);
    if (!m) return Internal("KSplitConcat: condition does not hold");
    const fe::Node concat = g.op(m->concat).host().node;
    g.BeginEdit(i);
    DeviceOp& d = g.op(i).device();
    const device::Tensor w = d.weights[0];
    std::vector<device::Tensor> parts;
    int64_t begin = 0;
    const int64_t khw = w.dim(2) * w.dim(3);
    for (int64_t ch : m->channels) {
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
    g.Remove(m->concat);
    g.EndEdit(i);
    return Status::Ok();
  }

 private:
  struct M {
    size_t concat;
    std::vector<int64_t> channels;
  };
  std::optional<M> Match(const PlanGraph& g, size_t i) const {
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
    M m{*p, {}};
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
};

// ---------------------------------------------------------------------------------------------
// Sibling convs.

class MergeSiblingConvsPass : public RewritePass {
 public:
  const char* name() const override { return "MergeSiblingConvs"; }
  bool SatisfyCondition(const PlanGraph& g, size_t i) const override { return !Siblings(g, i).empty(); }

  Status Apply(PlanGraph& g, size_t i) const override {
    std::vector<size_t> sib = Siblings(g, i);
    if (sib.empty()) return Internal("MergeSiblingConvs: condition does not hold");
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
    std::string names;
    for (size_t j : sib) {
      op.name += "+" + g.op(j).name;
      for (const std::string& s : g.op(j).source_nodes) op.source_nodes.push_back(s);
      for (const std::string& f : g.op(j).fusions) op.fusions.push_back(f);
      names += (names.empty() ? "" : ", ") + g.op(j).name;
    }
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
  std::vector<size_t> Siblings(const PlanGraph& g, size_t i) const {
    std::vector<size_t> out;
    if (!Eligible(g, i)) return out;
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
    return out;
  }
};

class RemoveDeadHostOpsPass : public RewritePass {
 public:
  const char* name() const override { return "RemoveDeadHostOps"; }
  bool SatisfyCondition(const PlanGraph& g, size_t i) const override {
    if (!g.alive(i) || g.op(i).on_device()) return false;
    for (const std::string& o : g.op(i).Outputs()) {
      if (g.IsGraphOutput(o) || !g.Consumers(o).empty()) return false;
    }
    return true;
  }
  Status Apply(PlanGraph& g, size_t i) const override {
    g.Log("RemoveDeadHostOps: " + g.op(i).name);
    g.Remove(i);
    return Status::Ok();
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------

bool IsRelu6Clip(const fe::Node& node, const fe::Graph& graph) {
  if (node.op_type != "Clip") return false;
  if (node.opset_version < 11) {
    const fe::Attribute* mn = node.FindAttribute("min");
    const fe::Attribute* mx = node.FindAttribute("max");
    return mn != nullptr && mx != nullptr && mn->type == fe::AttributeType::kFloat &&
           mx->type == fe::AttributeType::kFloat && mn->f == 0.0f && mx->f == 6.0f;
  }
  if (!node.has_input(1) || !node.has_input(2)) return false;
  const fe::ConstantData* mn = graph.ConstantInput(node, 1);
  const fe::ConstantData* mx = graph.ConstantInput(node, 2);
  return mn != nullptr && mx != nullptr && mn->size() == 1 && mx->size() == 1 && mn->floats()[0] == 0.0f &&
         mx->floats()[0] == 6.0f;
}

std::unique_ptr<RewritePass> MakeFoldBatchNorm() { return std::make_unique<FoldBatchNormPass>(); }
std::unique_ptr<RewritePass> MakeFuseRelu() {
  return std::make_unique<FuseUnaryActivation>("FuseRelu", "Relu", Activation::kRelu);
}
std::unique_ptr<RewritePass> MakeFuseRelu6() { return std::make_unique<FuseRelu6Pass>(); }
std::unique_ptr<RewritePass> MakeFuseSigmoid() {
  return std::make_unique<FuseUnaryActivation>("FuseSigmoid", "Sigmoid", Activation::kSigmoid);
}
std::unique_ptr<RewritePass> MakeFuseSilu() { return std::make_unique<FuseSiluPass>(); }
std::unique_ptr<RewritePass> MakeFuseGelu() { return std::make_unique<FuseGeluPass>(); }
std::unique_ptr<RewritePass> MakeFuseResidualAdd() { return std::make_unique<FuseResidualAddPass>(); }
std::unique_ptr<RewritePass> MakeKSplitConcat() { return std::make_unique<KSplitConcatPass>(); }
std::unique_ptr<RewritePass> MakeMergeSiblingConvs() { return std::make_unique<MergeSiblingConvsPass>(); }
std::unique_ptr<RewritePass> MakeRemoveDeadHostOps() { return std::make_unique<RemoveDeadHostOpsPass>(); }

Result<int> RunPass(PlanGraph& graph, const RewritePass& pass) {
  int count = 0;
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t i = 0; i < graph.size(); ++i) {
      if (!graph.alive(i) || !pass.SatisfyCondition(graph, i)) continue;
      Status s = pass.Apply(graph, i);
      if (!s.ok()) return s;
      ++count;
      changed = true;
    }
  }
  return count;
}

std::vector<std::unique_ptr<RewritePass>> PassesFor(const PlanOptions& o) {
  std::vector<std::unique_ptr<RewritePass>> v;
  if (o.fold_batchnorm) v.push_back(MakeFoldBatchNorm());
  if (o.fuse_activations) {
    v.push_back(MakeFuseSilu());
    v.push_back(MakeFuseGelu());
    v.push_back(MakeFuseRelu());
    v.push_back(MakeFuseRelu6());
    v.push_back(MakeFuseSigmoid());
  }
  if (o.fuse_residual_add) v.push_back(MakeFuseResidualAdd());
  if (o.ksplit_concat) v.push_back(MakeKSplitConcat());
  if (o.merge_sibling_convs) v.push_back(MakeMergeSiblingConvs());
  v.push_back(MakeRemoveDeadHostOps());
  return v;
}

Result<ConvPlan> RunPasses(ConvPlan plan, const std::vector<std::unique_ptr<RewritePass>>& passes) {
  PlanGraph g(std::move(plan));
  for (int round = 0; round < 64; ++round) {
    int applied = 0;
    for (const auto& p : passes) {
      auto n = RunPass(g, *p);
      if (!n.ok()) return n.status();
      applied += *n;
    }
    if (applied == 0) break;
  }
  return std::move(g).Compact();
}

}  // namespace kiln::convplan
