// Pass BuildLayers (compiler/ai8x/passes.h): the walk over the ONNX nodes (compiler/ai8x/builder.h).
#include "compiler/ai8x/builder.h"
#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/rules/rules.h"

namespace kiln::ai8x {
namespace build {

void Builder::Run() {
  if (!SetUpInput()) return;
  for (const Node& n : g_.nodes()) Visit(n);
  // Graph outputs leave the accelerator.
  for (const onnx_fe::GraphOutput& o : g_.outputs()) {
    const Value* v = Get(o.tensor);
    if (v != nullptr && v->kind == Value::kData) MarkOutput(v->refs);
  }
  Finish();
}

// The network input: exactly one non-constant graph input with a static shape.
bool Builder::SetUpInput() {
  std::vector<std::string> inputs;
  for (const std::string& in : g_.inputs()) {
    const onnx_fe::Tensor* t = g_.FindTensor(in);
    if (t != nullptr && !t->is_constant()) inputs.push_back(in);
  }
  if (inputs.size() != 1) {
    rules::ReportInput(net_, "the accelerator takes exactly one input tensor; the model has " +
                                 std::to_string(inputs.size()));
    return false;
  }
  bool one_d = false;
  std::string bad;
  auto in_shape = TensorShape(inputs[0], &one_d, &bad);
  if (!bad.empty()) {
    rules::ReportDimensions(net_, nullptr, "input " + bad);
    return false;
  }
  if (!in_shape) {
    rules::ReportInput(net_, "input '" + inputs[0] + "' needs a static shape [1,C,H,W] or [1,C,L]");
    return false;
  }
  net_.input_shape = *in_shape;
  net_.input_one_d = one_d;
  net_.input_name = inputs[0];
  Set(inputs[0], Value{Value::kData, {kNetworkInput}, false});
  return true;
}

// One node of the data path (nodes that read no data are weight / QAT / shift sub-graphs:
// constant-derived, only inspected through the weight queries).
void Builder::Visit(const Node& n) {
  bool data = false, host = false;
  std::vector<size_t> data_inputs;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const Value* v = n.inputs[i].empty() ? nullptr : Get(n.inputs[i]);
    if (v == nullptr) continue;
    data = true;
    data_inputs.push_back(i);
    if (v->kind == Value::kHost) host = true;
  }
  if (!data) return;
  if (host) {
    MakeHost(n, "");
    return;
  }
  const std::string& op = n.op_type;
  if (!n.domain.empty() && n.domain != "ai.onnx") {
    MakeHost(n, "domain " + n.domain);
    return;
  }
  // a negated tensor may only feed Add
  bool feeds_neg = false;
  for (size_t i : data_inputs) feeds_neg |= Get(n.inputs[i])->neg;
  if (feeds_neg && op != "Add") {
    MakeHost(n, "reads a negated tensor");
    return;
  }
  if (op == "Conv" || op == "ConvTranspose") {
    if (data_inputs.size() == 1 && data_inputs[0] == 0) {
      HandleConv(n);
    } else {
      MakeHost(n, "weights computed from data");
    }
  } else if (op == "Gemm" || op == "MatMul") {
    HandleLinear(n);
  } else if (op == "Relu" || op == "Abs") {
    HandleActivation(n);
  } else if (op == "MaxPool" || op == "AveragePool") {
    HandlePool(n);
  } else if (op == "Neg") {
    HandleNeg(n);
  } else if (op == "Add" || op == "Sub" || op == "BitwiseOr" || op == "BitwiseXor" || op == "Or" || op == "Xor") {
    HandleElementwise(n, data_inputs);
  } else if (op == "Mul" || op == "Div") {
    if (data_inputs.size() == 1 && (op == "Mul" || data_inputs[0] == 0)) {
      HandleTransparent(n, data_inputs[0]);  // QAT scale / quantize step
    } else {
      MakeHost(n, "");
    }
  } else if (op == "Clip" || op == "Min" || op == "Max") {
    HandleClamp(n, data_inputs);
  } else if (op == "Round" || op == "Floor" || op == "Ceil" || op == "Cast" || op == "Reshape" || op == "Flatten" ||
             op == "Squeeze" || op == "Unsqueeze") {
    if (data_inputs.size() == 1 && data_inputs[0] == 0) {
      HandleTransparent(n, 0);
    } else {
      MakeHost(n, "");
    }
  } else if (op == "Pad") {
    HandlePad(n, data_inputs);
  } else if (op == "Concat") {
    HandleConcat(n, data_inputs);
  } else {
    MakeHost(n, "");
  }
}

// Neg(x): remembered on the value, so that Add(a, Neg(b)) becomes a - b.
void Builder::HandleNeg(const Node& n) {
  Value v = *Get(n.inputs[0]);
  if (v.refs.size() != 1) {
    MakeHost(n, "");
    return;
  }
  v.neg = true;
  Set(n.outputs[0], v);
}

// Add / Sub / Or / Xor of two data tensors; adding or subtracting constant zeros is transparent.
void Builder::HandleElementwise(const Node& n, const std::vector<size_t>& data_inputs) {
  const std::string& op = n.op_type;
  if (data_inputs.size() == 2) {
    EltwiseOp e = op == "Add"                          ? EltwiseOp::kAdd
                  : op == "Sub"                        ? EltwiseOp::kSub
                  : (op == "BitwiseOr" || op == "Or") ? EltwiseOp::kOr
                                                       : EltwiseOp::kXor;
    HandleEltwise(n, e);
  } else if ((op == "Add" || op == "Sub") && AllConstZero(n.inputs[1 - data_inputs[0]])) {
    HandleTransparent(n, data_inputs[0]);
  } else {
    MakeHost(n, "element-wise with a constant");
  }
}

// The QAT clamp: transparent; Clip(x, -32768) / Max(x, -32768) marks the conv/linear before it as
// 32-bit wide (docs/specs/ai8x-izer-rules.md §2.3).
void Builder::HandleClamp(const Node& n, const std::vector<size_t>& data_inputs) {
  if (data_inputs.size() != 1 || data_inputs[0] != 0) {
    MakeHost(n, "");
    return;
  }
  saw_clamp_ = true;
  std::optional<float> lo;
  if ((n.op_type == "Clip" || n.op_type == "Max") && n.has_input(1)) lo = ScalarConst(n.inputs[1]);
  if (lo && *lo == -32768.0f) {
    for (int r : Get(n.inputs[0])->refs) {
      Layer* l = net_.Find(r);
      // through a stand-alone activation to its conv
      if (l != nullptr && l->is_activation_only() && l->inputs.size() == 1) l = net_.Find(l->inputs[0]);
      if (l != nullptr && l->has_weights()) l->output_width = 32;
    }
  }
  HandleTransparent(n, 0);
}

// Zero padding is transparent (ai8x AvgPool exports Pad(zeros) + AveragePool).
void Builder::HandlePad(const Node& n, const std::vector<size_t>& data_inputs) {
  std::string mode = n.GetString("mode", "constant").ok() ? *n.GetString("mode", "constant") : "";
  const onnx_fe::ConstantData* pads = g_.ConstantInput(n, 1);
  bool zero = mode == "constant" && pads != nullptr;
  if (pads != nullptr) {
    for (int64_t p : pads->ints()) zero &= p == 0;
    if (pads->ints().empty()) {
      for (float f : pads->floats()) zero &= f == 0.0f;
    }
  }
  if (zero && data_inputs.size() == 1 && data_inputs[0] == 0) {
    HandleTransparent(n, 0);
  } else {
    MakeHost(n, "non-zero padding");
  }
}

// Concatenation along channels: the consumer reads the parts (`in_sequences`).
void Builder::HandleConcat(const Node& n, const std::vector<size_t>& data_inputs) {
  auto axis = n.GetInt("axis", 1);
  Value out;
  bool ok = axis.ok() && (*axis == 1 || *axis == -3) && data_inputs.size() == n.inputs.size();
  for (size_t i : data_inputs) {
    const Value* v = Get(n.inputs[i]);
    if (v->neg) ok = false;
    out.refs.insert(out.refs.end(), v->refs.begin(), v->refs.end());
  }
  if (ok) {
    Set(n.outputs[0], out);
  } else {
    MakeHost(n, "concatenation other than along channels");
  }
}

// What the whole model tells: no layer at all, host work, what the export does not carry.
// Conv/linear layers are emitted in topological (module call) order; CheckWeightOrder compares
// that with the weight (state_dict) order.
void Builder::Finish() {
  if (net_.layers.empty()) {
    rules::ReportNoLayers(net_, host_ops_);
    return;
  }
  rules::ReportHostOps(net_, host_ops_, dropped_hw_ops_);
  // Output widths without clamps, bit widths without a QAT weight chain.
  for (Layer& l : net_.layers) {
    if (l.has_weights() && !saw_clamp_) l.output_width_known = false;
  }
  rules::ReportNotDerived(net_, saw_clamp_);
}

}  // namespace build

void BuildLayers(const onnx_fe::Graph& graph, Network& net) {
  build::Builder b(graph, net);
  b.Run();
  net.Reindex();
}

}  // namespace kiln::ai8x
