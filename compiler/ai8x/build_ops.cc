// BuildLayers' handlers, one per accelerator operation (compiler/ai8x/builder.h).
#include <set>

#include "compiler/ai8x/builder.h"
#include "compiler/ai8x/rules/rules.h"

namespace kiln::ai8x::build {

Layer& Builder::NewLayer(const Node& n, const std::vector<int>& refs, const std::string& name) {
  Layer l;
  l.id = net_.next_id++;
  l.name = name;
  l.onnx_nodes.push_back(n.name);
  l.inputs = refs;
  l.in_shape = RefsShape(refs);
  bool od = false;
  if (!refs.empty()) {
    od = refs[0] == kNetworkInput ? net_.input_one_d : net_.Find(refs[0])->one_d;
  }
  l.one_d = od;
  std::string bad;
  if (n.outputs.size() > 0) {
    bool out_od = od;
    if (auto s = TensorShape(n.outputs[0], &out_od, &bad)) {
      l.out_shape = *s;
      l.one_d = out_od;
    } else {
      l.out_shape = l.in_shape;
    }
  }
  Layer& added = net_.Append(std::move(l));
  if (!bad.empty()) {
    rules::ReportDimensions(net_, &added, "output " + bad);
  }
  return added;
}

// A Reshape/Flatten/Squeeze between the producer and a conv or pooling layer (e.g. Conv1d data
// viewed as 2-D): the layer reads the data with the new dimensions (izer `in_dim`, izer.py
// L491-504; the element count must match). A conv (`may_flatten`) may also read it as
// (C*H*W, 1, 1): recorded as a channel view for FlattenViews (compiler/ai8x/flatten.cc).
void Builder::Reshaped(Layer& l, const Node& n, bool may_flatten) {
  if (l.inputs.size() != 1 || !n.has_input(0)) return;
  bool od = l.one_d;
  std::string bad;
  auto s = TensorShape(n.inputs[0], &od, &bad);
  if (!bad.empty()) {
    rules::ReportDimensions(net_, &l, "ONNX node '" + n.name + "': input " + bad);
    return;
  }
  if (!s || *s == l.in_shape) return;
  if (may_flatten && s->c != l.in_shape.c && s->pixels() == 1 && s->elements() == l.in_shape.elements()) {
    l.channel_view = true;
    l.viewed_from = l.in_shape;
    l.in_shape = *s;
    return;
  }
  if (!rules::CheckReshape(net_, l, *s)) return;
  l.in_shape = *s;
  l.in_dim = true;
}

void Builder::MarkOutput(const std::vector<int>& refs) {
  for (int r : refs) {
    if (r == kNetworkInput) continue;
    if (Layer* l = net_.Find(r)) l->output = true;
  }
}

void Builder::MakeHost(const Node& n, const std::string& why) {
  bool after_host = false;
  for (const std::string& in : n.inputs) {
    const Value* v = in.empty() ? nullptr : Get(in);
    if (v == nullptr) continue;
    if (v->kind == Value::kHost) {
      after_host = true;
    } else {
      MarkOutput(v->refs);
    }
  }
  std::string desc = n.op_type + " '" + n.name + "'";
  if (!why.empty()) desc += " (" + why + ")";
  static const std::set<std::string> kHwOps = {"Conv", "ConvTranspose", "Gemm", "MatMul", "Relu", "Abs",
                                               "MaxPool", "AveragePool", "Add", "Sub"};
  if (after_host && kHwOps.count(n.op_type) > 0) {
    dropped_hw_ops_.push_back(desc);
  } else if (!after_host) {
    host_ops_.push_back(desc);
  }
  for (const std::string& out : n.outputs) {
    if (!out.empty()) Set(out, Value{Value::kHost, {}, false});
  }
}

void Builder::HandleConv(const Node& n) {
  bool transpose = n.op_type == "ConvTranspose";
  if (!n.has_input(1) || IsData(n.inputs[1]) || (n.has_input(2) && IsData(n.inputs[2]))) {
    MakeHost(n, "weights computed from data");
    return;
  }
  const Value* in = Get(n.inputs[0]);
  auto wshape = g_.StaticInputShape(n, 1);
  if (!wshape.ok() || wshape->size() < 3) {
    MakeHost(n, "weight shape unknown");
    return;
  }
  auto ks = n.GetInts("kernel_shape", {});
  std::vector<int64_t> kernel = ks.ok() && !ks->empty() ? *ks
                                                        : std::vector<int64_t>(wshape->begin() + 2, wshape->end());
  if (kernel.size() != 1 && kernel.size() != 2) {
    MakeHost(n, std::to_string(kernel.size()) + "-D convolution");
    return;
  }
  Layer& l = NewLayer(n, in->refs, LayerName(n, "conv"));
  Reshaped(l, n, /*may_flatten=*/true);
  bool one_d = kernel.size() == 1;
  l.op = transpose ? OpKind::kConvTranspose2d : (one_d ? OpKind::kConv1d : OpKind::kConv2d);
  l.one_d = one_d;
  std::string wbad = rules::DimensionProblem("weight of ONNX node '" + n.name + "'", *wshape);
  if (!wbad.empty()) {
    rules::ReportDimensions(net_, &l, wbad);
    Set(n.outputs[0], Value{Value::kData, {l.id}, false});
    return;
  }
  if (rules::ConvAttributeInRange(net_, l, rules::ConvAttribute::kKernelShape, kernel)) {
    l.kernel_h = static_cast<int>(kernel[0]);
    l.kernel_w = one_d ? 1 : static_cast<int>(kernel[1]);
  }
  auto pads = n.GetInts("pads", std::vector<int64_t>(kernel.size() * 2, 0));
  auto strides = n.GetInts("strides", std::vector<int64_t>(kernel.size(), 1));
  auto dil = n.GetInts("dilations", std::vector<int64_t>(kernel.size(), 1));
  auto group = n.GetInt("group", 1);
  std::vector<int64_t> p = pads.ok() ? *pads : std::vector<int64_t>{};
  // auto_pad (SAME_UPPER / SAME_LOWER / VALID) stands for explicit pads: those are what the layer gets.
  auto auto_pad = n.GetString("auto_pad", "NOTSET");
  const std::vector<int64_t> in_dims =
      one_d ? std::vector<int64_t>{l.in_shape.h} : std::vector<int64_t>{l.in_shape.h, l.in_shape.w};
  const bool pads_known =
      auto_pad.ok() && rules::ResolveAutoPad(net_, l, *auto_pad, in_dims, kernel, strides.ok() ? *strides : std::vector<int64_t>{},
                                             dil.ok() ? *dil : std::vector<int64_t>{}, &p);
  if (pads_known && !p.empty() && rules::ConvAttributeInRange(net_, l, rules::ConvAttribute::kPads, p)) {
    l.pad = static_cast<int>(p[0]);
    rules::CheckUniformPads(net_, l, p);
  }
  if (strides.ok() && !strides->empty() && rules::ConvAttributeInRange(net_, l, rules::ConvAttribute::kStrides, *strides)) {
    l.stride = static_cast<int>((*strides)[0]);
    rules::CheckSquareStrides(net_, l, *strides);
  }
  if (dil.ok() && !dil->empty() && rules::ConvAttributeInRange(net_, l, rules::ConvAttribute::kDilations, *dil)) {
    l.dilation = static_cast<int>((*dil)[0]);
  }
  l.groups = 1;
  if (group.ok() && rules::ConvAttributeInRange(net_, l, rules::ConvAttribute::kGroup, {*group})) {
    l.groups = static_cast<int>(*group);
  }
  if (transpose) {
    auto op = n.GetInts("output_padding", {0, 0});
    if (op.ok() && !op->empty() && rules::ConvAttributeInRange(net_, l, rules::ConvAttribute::kOutputPadding, *op)) {
      l.output_padding = static_cast<int>((*op)[0]);
    }
  }
  l.has_bias = n.has_input(2);
  l.weight_count = Product(*wshape);
  // Weights [C_out, C_in/group, k...]; ConvTranspose: [C_in, C_out/group, k...].
  int64_t w_in = transpose ? (*wshape)[0] : (*wshape)[1] * l.groups;
  int64_t w_out = transpose ? (*wshape)[1] * l.groups : (*wshape)[0];
  l.in_channels_w = static_cast<int>(w_in);
  auto out_shape = TensorShape(n.outputs[0], nullptr);
  rules::CheckConvWeightShape(net_, l, *wshape, w_in, w_out, out_shape ? out_shape->c : -1);
  if (l.has_bias) {
    if (auto bshape = g_.StaticInputShape(n, 2); bshape.ok()) rules::CheckConvBiasShape(net_, l, *bshape, w_out);
  }
  FinishWeightLayer(l, n);
}

void Builder::HandleLinear(const Node& n) {
  bool gemm = n.op_type == "Gemm";
  if (!n.has_input(1) || IsData(n.inputs[1]) || (gemm && n.has_input(2) && IsData(n.inputs[2]))) {
    MakeHost(n, "both operands are data");
    return;
  }
  if (!IsData(n.inputs[0])) {
    MakeHost(n, "data is the second operand");
    return;
  }
  if (gemm) {
    auto ta = n.GetInt("transA", 0);
    if (ta.ok() && *ta != 0) {
      MakeHost(n, "transA=1");
      return;
    }
  }
  const Value* in = Get(n.inputs[0]);
  auto wshape = g_.StaticInputShape(n, 1);
  if (!wshape.ok() || wshape->size() != 2) {
    MakeHost(n, "weight shape unknown");
    return;
  }
  Layer& l = NewLayer(n, in->refs, LayerName(n, "fc"));
  l.op = OpKind::kLinear;
  l.one_d = true;
  std::string wbad = rules::DimensionProblem("weight of ONNX node '" + n.name + "'", *wshape);
  if (!wbad.empty()) {
    rules::ReportDimensions(net_, &l, wbad);
    Set(n.outputs[0], Value{Value::kData, {l.id}, false});
    return;
  }
  int64_t in_f = (*wshape)[1], out_f = (*wshape)[0];  // Gemm transB=1: [out, in]
  if (gemm) {
    auto tb = n.GetInt("transB", 0);
    if (tb.ok() && *tb == 0) std::swap(in_f, out_f);
  } else {
    in_f = (*wshape)[0];  // MatMul B = W^T: [in, out]
    out_f = (*wshape)[1];
  }
  l.in_channels_w = static_cast<int>(in_f);
  l.weight_count = in_f * out_f;
  l.has_bias = gemm && n.has_input(2);
  l.out_shape = {static_cast<int>(out_f), 1, 1};
  // Flatten when the producer's data is not 1x1 (seed: Gemm/MatMul whose input is not C x 1 x 1).
  Shape3 src = l.in_shape;
  rules::CheckLinearWeightShape(net_, l, *wshape, in_f, src);
  if (src.pixels() > 1) {
    l.flatten = true;
  }
  FinishWeightLayer(l, n);
}

void Builder::HandlePool(const Node& n) {
  const Value* in = Get(n.inputs[0]);
  auto ks = n.GetInts("kernel_shape", {});
  if (!ks.ok() || ks->empty() || ks->size() > 2) {
    MakeHost(n, "kernel_shape");
    return;
  }
  auto pads = n.GetInts("pads", std::vector<int64_t>(ks->size() * 2, 0));
  auto ceil = n.GetInt("ceil_mode", 0);
  bool padded = false;
  if (pads.ok()) {
    for (int64_t p : *pads) padded |= p != 0;
  }
  if (padded || (ceil.ok() && *ceil != 0)) {
    MakeHost(n, padded ? "padded pooling" : "ceil_mode=1");
    return;
  }
  auto strides = n.GetInts("strides", std::vector<int64_t>(ks->size(), 1));
  auto dil = n.GetInts("dilations", std::vector<int64_t>(ks->size(), 1));
  Layer& l = NewLayer(n, in->refs, LayerName(n, "pool"));
  Reshaped(l, n);
  l.pool = n.op_type == "MaxPool" ? PoolType::kMax : PoolType::kAvg;
  if (rules::PoolAttributeInRange(net_, l, "kernel_shape", *ks)) {
    l.pool_h = static_cast<int>((*ks)[0]);
    l.pool_w = ks->size() > 1 ? static_cast<int>((*ks)[1]) : 1;
  }
  if (strides.ok() && !strides->empty() && rules::PoolAttributeInRange(net_, l, "strides", *strides)) {
    l.pool_stride_h = static_cast<int>((*strides)[0]);
    l.pool_stride_w = strides->size() > 1 ? static_cast<int>((*strides)[1]) : 1;
  }
  if (ks->size() == 1) l.pool_stride_w = 1;
  if (dil.ok() && !dil->empty() && rules::PoolAttributeInRange(net_, l, "dilations", *dil)) {
    l.pool_dilation = static_cast<int>((*dil)[0]);
  }
  Set(n.outputs[0], Value{Value::kData, {l.id}, false});
}

void Builder::HandleActivation(const Node& n) {
  const Value* in = Get(n.inputs[0]);
  if (in->neg || in->refs.size() != 1) {
    MakeHost(n, "activation of a negated or concatenated tensor");
    return;
  }
  Layer& l = NewLayer(n, in->refs, LayerName(n, "act"));
  l.activation = n.op_type == "Relu" ? Activation::kRelu : Activation::kAbs;
  l.out_shape = l.in_shape;
  Set(n.outputs[0], Value{Value::kData, {l.id}, false});
}

void Builder::HandleEltwise(const Node& n, EltwiseOp op) {
  const Value* a = Get(n.inputs[0]);
  const Value* b = n.inputs.size() > 1 ? Get(n.inputs[1]) : nullptr;
  if (a == nullptr || b == nullptr || a->refs.size() != 1 || b->refs.size() != 1) {
    MakeHost(n, "element-wise operands must be two single tensors");
    return;
  }
  std::vector<int> refs{a->refs[0], b->refs[0]};
  if (op == EltwiseOp::kAdd && (a->neg || b->neg)) {
    if (a->neg && b->neg) {
      MakeHost(n, "-x + -y");
      return;
    }
    op = EltwiseOp::kSub;  // a + (-b) = a - b; (-a) + b = b - a
    if (a->neg) refs = {b->refs[0], a->refs[0]};
  } else if (a->neg || b->neg) {
    MakeHost(n, "negated operand");
    return;
  }
  Layer& l = NewLayer(n, refs, LayerName(n, "eltwise"));
  l.eltwise = op;
  l.operands = 2;
  l.in_shape = net_.OutputShapeOf(refs[0]);
  l.out_shape = l.in_shape;
  rules::CheckOperandShapes(net_, l, net_.OutputShapeOf(refs[1]));
  Set(n.outputs[0], Value{Value::kData, {l.id}, false});
}

void Builder::HandleTransparent(const Node& n, size_t data_input) {
  const Value* v = Get(n.inputs[data_input]);
  Value out = *v;
  for (const std::string& o : n.outputs) {
    if (!o.empty()) Set(o, out);
  }
}

}  // namespace kiln::ai8x::build
