// Pass CutHostTail (compiler/ai8x/passes.h): trailing ai8x.SoftwareLinear layers run on the host.
//
// ai8x-training's SoftwareLinear (ai8x.py FusedSoftwareLinearReLU) is a plain nn.Linear: no QAT
// weight chain (its weights carry no bit widths) and, in the quantized simulation
// (ai8x.set_device(.., simulate=True)), its output is quantized by 2^7 and clamped to
// FC_ACTIVATION_BITS = 16 bits, a width the accelerator cannot produce. The model's own YAMLs in
// ai8x-synthesis leave it off; so does Kiln, with a note saying what the host computes.
#include <algorithm>
#include <string>
#include <unordered_set>

#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/rules/rules.h"

namespace kiln::ai8x {
namespace {

bool IsSoftwareLinear(const Layer& l) { return l.op == OpKind::kLinear && !l.quantization_known; }

std::string Describe(const Network& net, const Layer& fc) {
  std::string src;
  Shape3 s = fc.in_shape;
  bool one_d = fc.one_d;
  for (int in : fc.inputs) {
    const Layer* p = net.Find(in);
    src += (src.empty() ? "" : ", ") + (p != nullptr ? "'" + p->name + "'" : std::string("the network input"));
    s = net.OutputShapeOf(in);
    one_d = p != nullptr ? p->one_d : net.input_one_d;
  }
  // The diagnostic names the layer and its ONNX node; the message says what the host does.
  return std::string("an ai8x.SoftwareLinear (its weights carry no QAT bit widths while the other layers' do), ") +
         "left off the YAML: the host computes it from the accelerator output of " + src +
         " (" + std::to_string(s.elements()) + " int8 values " + ShapeString(s, one_d) +
         ", flattened in C, H, W order): y = W x" + (fc.has_bias ? " + b" : "") + " with the checkpoint's '" +
         (fc.weight_initializer.empty() ? fc.name + ".weight" : fc.weight_initializer) + "' (" +
         std::to_string(fc.out_shape.c) + "x" + std::to_string(fc.in_channels_w) + ")" +
         (fc.activation == Activation::kRelu ? ", then ReLU" : "") +
         ", then, as ai8x-training's quantized simulation does, floor(y / 128 + 0.5) clamped to 16 bits "
         "[-32768, 32767] (ai8x.py FusedSoftwareLinearReLU, FC_ACTIVATION_BITS)";
}

}  // namespace

void CutHostTail(Network& net) {
  // Only an export that carries bit widths elsewhere tells a SoftwareLinear from a float Linear.
  bool any_bits = std::any_of(net.layers.begin(), net.layers.end(),
                              [](const Layer& l) { return l.has_weights() && l.quantization_known; });
  if (!any_bits) return;
  std::unordered_set<int> cut;
  // From the back: a layer is host tail when every reader is and it is a SoftwareLinear (its ReLU
  // fused: FusedSoftwareLinearReLU).
  for (size_t k = net.layers.size(); k-- > 1;) {
    const Layer& l = net.layers[k];
    std::vector<int> readers = net.ConsumersOf(l.id);
    bool tail_only = std::all_of(readers.begin(), readers.end(), [&](int r) { return cut.count(r) > 0; });
    if (!tail_only || !IsSoftwareLinear(l) || l.activation == Activation::kAbs || l.pool != PoolType::kNone) break;
    cut.insert(l.id);
    rules::ReportHostTail(net, l, Describe(net, l));
  }
  if (cut.empty()) return;
  std::unordered_set<int> producers;
  for (const Layer& l : net.layers) {
    if (cut.count(l.id) == 0) continue;
    for (int in : l.inputs) {
      if (in != kNetworkInput && cut.count(in) == 0) producers.insert(in);
    }
  }
  std::erase_if(net.layers, [&](const Layer& l) { return cut.count(l.id) > 0; });
  net.Reindex();
  for (Layer& l : net.layers) {
    if (producers.count(l.id) > 0) l.output = true;
  }
  rules::RestateBitsNotDerived(net);
}

}  // namespace kiln::ai8x
