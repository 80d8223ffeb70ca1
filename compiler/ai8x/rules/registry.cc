// The rule registry and CheckRules (compiler/ai8x/passes.h). The order below is the order of the
// findings of one layer.
#include <vector>

#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/rules/checks.h"

namespace kiln::ai8x {
namespace rules {
namespace {

constexpr Rule Layer_(std::string_view name, std::string_view file, void (*f)(RuleContext&, const Layer&, size_t)) {
  return Rule{name, file, Rule::kLayer, f, nullptr};
}
constexpr Rule Network_(std::string_view name, std::string_view file, Rule::Scope scope, void (*f)(RuleContext&)) {
  return Rule{name, file, scope, nullptr, f};
}

constexpr Rule kRules[] = {
    Network_("layer count", "rules/operators.cc", Rule::kNetworkFirst, CheckLayerCount),
    Layer_("processor maps", "rules/processors.cc", CheckProcessorMaps),
    Layer_("passthrough map", "rules/processors.cc", CheckPassthroughMap),
    Layer_("channels and dimensions", "rules/operators.cc", CheckChannelsAndDimensions),
    Layer_("kernel by operator", "rules/operators.cc", CheckKernelByOperator),
    Layer_("element-wise with Conv1d", "rules/eltwise.cc", CheckNotWithConv1d),
    Layer_("operator limits", "rules/operators.cc", CheckOperatorLimits),
    Layer_("convolution attributes", "rules/operators.cc", CheckConvAttributes),
    Layer_("pooling", "rules/pooling.cc", CheckPooling),
    Layer_("output size", "rules/output_size.cc", CheckOutputSize),
    Layer_("flatten", "rules/operators.cc", CheckFlatten),
    Layer_("output width and quantization", "rules/operators.cc", CheckOutputWidthAndQuantization),
    Layer_("element-wise operands", "rules/eltwise.cc", CheckOperands),
    Layer_("read_gap readers", "rules/eltwise.cc", CheckReadGap),
    Layer_("concatenation", "rules/processors.cc", CheckConcat),
    Layer_("data-memory bounds", "rules/data_memory.cc", CheckDataMemoryBounds),
    Layer_("streaming prefix", "rules/streaming.cc", CheckStreaming),
    Layer_("FIFO input", "rules/streaming.cc", CheckFifoInput),
    Layer_("kernel memory", "rules/kernel_memory.cc", CheckKernelMemory),
    Network_("quadrant 0", "rules/processors.cc", Rule::kNetworkLast, CheckQuadrant0),
    Network_("bias memory", "rules/bias_memory.cc", Rule::kNetworkLast, CheckBiasMemory),
};

}  // namespace

std::span<const Rule> Registry() { return kRules; }

}  // namespace rules

namespace {

// The registry split by scope, once.
struct ByScope {
  std::vector<void (*)(rules::RuleContext&)> first, last;
  std::vector<void (*)(rules::RuleContext&, const Layer&, size_t)> layer;
};

const ByScope& RulesByScope() {
  static const ByScope by = [] {
    ByScope b;
    for (const rules::Rule& r : rules::Registry()) {
      if (r.scope == rules::Rule::kNetworkFirst) b.first.push_back(r.network);
      if (r.scope == rules::Rule::kLayer) b.layer.push_back(r.layer);
      if (r.scope == rules::Rule::kNetworkLast) b.last.push_back(r.network);
    }
    return b;
  }();
  return by;
}

}  // namespace

void CheckRules(Network& net) {
  net.Reindex();
  if (net.layers.empty()) return;
  rules::RuleContext c(net);
  const ByScope& by = RulesByScope();
  for (auto* check : by.first) check(c);
  for (size_t i = 0; i < c.n; ++i) {
    const Layer& l = net.layers[i];
    for (auto* check : by.layer) check(c, l, i);
  }
  for (auto* check : by.last) check(c);
}

}  // namespace kiln::ai8x
