// Rule family "eltwise" (AI8X_ELTWISE, AI8X_WRITE_GAP): element-wise operands (yamlcfg.py L411-417,
// max7800x.py L504-506, L525-528, L759-768, L984-990, L2074-2080; docs/specs/ai8x-izer-rules.md
// §1.6), and `read_gap` readers of an interleaved operand (izer.py L262-266, max7800x.py L687-692).
#include "compiler/ai8x/rules/checks.h"

namespace kiln::ai8x::rules {
namespace {

void Err(Network& net, const char* code, const Layer& l, const std::string& msg) {
  net.Report(Severity::kError, code, &l, msg);
}

}  // namespace

void CheckOperandShapes(Network& net, const Layer& l, const Shape3& other) {
  if (other == l.in_shape) return;
  Err(net, code::kEltwise, l,
      "element-wise operands differ in shape: " + ShapeString(l.in_shape, l.one_d) + " vs " + ShapeString(other, l.one_d));
}

void CheckNotWithConv1d(RuleContext& c, const Layer& l, size_t) {
  if (l.op == OpKind::kConv1d && l.operands > 1) {
    Err(c.net, code::kEltwise, l, "element-wise cannot be combined with Conv1d (max7800x.py L504-506)");
  }
}

void CheckOperands(RuleContext& c, const Layer& l, size_t) {
  if (l.operands <= 1) return;
  Network& net = c.net;
  const ChipSpec& spec = c.spec;
  if (l.operands > 16) Err(net, code::kEltwise, l, "at most 16 element-wise operands");
  if (!l.pool_first && l.pool != PoolType::kNone && l.operands > 2) {
    Err(net, code::kEltwise, l, "pooling after the element-wise operation allows at most 2 operands");
  }
  uint64_t first_map = 0;
  bool maps_reported = false;
  for (size_t k = 0; k < l.inputs.size(); ++k) {
    const Layer* p = net.Find(l.inputs[k]);
    uint64_t m = p ? p->placed.output_processors : l.placed.processors;
    if (k == 0) first_map = m;
    if ((m != first_map || m != l.placed.processors) && !maps_reported) {
      Err(net, code::kEltwise, l, "element-wise operands must share the consumer's processors (max7800x.py L759-768)");
      maps_reported = true;
    }
    if (p != nullptr && p->write_gap != l.operands - 1) {
      Err(net, code::kWriteGap, l,
          "operand " + p->name + " must be written with write_gap " + std::to_string(l.operands - 1) +
              " (interleaved element-wise input)");
    }
  }
  int passes = ComputePasses(l.in_shape.c).passes;
  if (spec.emulate_eltwise_mp && passes > 1 && l.operands * passes != l.operands + passes &&
      (l.op != OpKind::kNone || l.pool != PoolType::kNone)) {
    Err(net, code::kEltwise, l,
        "multi-pass element-wise beyond 2 passes cannot pool or convolve on MAX78000 (max7800x.py L984-990)");
  }
  if (!spec.support_multipass_eltwise_conv_bias && l.op != OpKind::kNone && l.has_bias) {
    Err(net, code::kEltwise, l,
        std::string("on ") + spec.name +
            " element-wise operations must be in a separate layer from convolutions with bias (max7800x.py L2074-2080)");
  }
}

void CheckReadGap(RuleContext& c, const Layer& l, size_t) {
  if (l.read_gap == 0) return;
  const Layer* p = l.inputs.size() == 1 ? c.net.Find(l.inputs[0]) : nullptr;
  if (!c.spec.support_read_gap) {
    Err(c.net, code::kWriteGap, l, std::string("`read_gap` must be 0 on ") + c.spec.name + " (max7800x.py L687-689)");
  } else if (ComputePasses(l.in_shape.c).passes > 1) {
    Err(c.net, code::kWriteGap, l, "`read_gap` must be 0 on a multi-pass input (max7800x.py L690-692)");
  } else if (p == nullptr || p->write_gap != l.read_gap) {
    Err(c.net, code::kWriteGap, l,
        "`read_gap` " + std::to_string(l.read_gap) + " does not match the `write_gap` of the layer that made its input " +
            "(izer.py L262-266)");
  }
}

}  // namespace kiln::ai8x::rules
