// Rule family "model": what the ONNX export is and what it carries (AI8X_INPUT, AI8X_NO_LAYERS,
// AI8X_HOST_OPS, AI8X_HOST_AFTER_HOST, AI8X_WIDTH_NOT_DERIVED, AI8X_BITS_NOT_DERIVED,
// AI8X_WEIGHT_ORDER, AI8X_SHAPE, AI8X_RESHAPE, AI8X_HOST_TAIL). Decided while the layers are built
// (compiler/ai8x/build_layers.cc) and by the FlattenViews, CutHostTail and CheckWeightOrder passes.
#include <algorithm>
#include <climits>
#include <set>

#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/rules/rules.h"

namespace kiln::ai8x {
namespace rules {
namespace {

// "a, b, c" of at most 8 names, then ", ...".
std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 8; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 8) s += ", ...";
  return s;
}

// Weight layers still without a bit width, and how many weight layers there are.
std::vector<std::string> LayersWithoutBits(const Network& net, size_t* weight_layers) {
  std::vector<std::string> no_bits;
  *weight_layers = 0;
  for (const Layer& l : net.layers) {
    if (!l.has_weights()) continue;
    ++*weight_layers;
    if (!l.quantization_known) no_bits.push_back(l.name);
  }
  return no_bits;
}

}  // namespace

void ReportInput(Network& net, std::string message) {
  net.Report(Severity::kError, code::kInput, nullptr, std::move(message));
}

void ReportNoLayers(Network& net, const std::vector<std::string>& host_ops) {
  std::string first;  // what the data meets first: the user's clue
  for (size_t i = 0; i < host_ops.size() && i < 3; ++i) first += (i ? ", " : "") + host_ops[i];
  net.Report(Severity::kError, code::kNoLayers, nullptr,
             "no operation of this model runs on the accelerator (first data op must be a "
             "Conv/Gemm/MatMul/pooling)" +
                 (first.empty() ? std::string() : "; the input is first read by host work: " + first));
}

void ReportHostOps(Network& net, const std::vector<std::string>& host_ops, const std::vector<std::string>& dropped) {
  if (!host_ops.empty()) {
    std::string msg = "the accelerator part ends here; the host must still compute: ";
    for (size_t i = 0; i < host_ops.size(); ++i) msg += (i ? ", " : "") + host_ops[i];
    net.Report(Severity::kInfo, code::kHostOps, nullptr, std::move(msg));
  }
  if (!dropped.empty()) {
    std::string msg = "these operations follow host-side work and are left to the host as well: ";
    for (size_t i = 0; i < dropped.size(); ++i) msg += (i ? ", " : "") + dropped[i];
    net.Report(Severity::kWarning, code::kHostAfterHost, nullptr, std::move(msg));
  }
}

void ReportNotDerived(Network& net, bool saw_clamp) {
  size_t weight_layers = 0;
  std::vector<std::string> no_bits = LayersWithoutBits(net, &weight_layers);
  if (!saw_clamp) net.Report(Severity::kWarning, code::kWidthNotDerived, nullptr, WidthNotDerivedMessage({}));
  if (!no_bits.empty()) {
    net.Report(Severity::kWarning, code::kBitsNotDerived, nullptr, BitsNotDerivedMessage(no_bits, weight_layers));
  }
}

void RewordNotDerived(Network& net, const std::vector<std::string>& widened) {
  size_t weight_layers = 0;
  std::vector<std::string> no_bits = LayersWithoutBits(net, &weight_layers);
  for (Diagnostic& d : net.diagnostics) {
    if (d.code == code::kWidthNotDerived) d.message = WidthNotDerivedMessage(widened);
    if (d.code == code::kBitsNotDerived) d.message = BitsNotDerivedMessage(no_bits, weight_layers);
  }
  // Overrides that give every weight layer its bit width leave nothing to warn about.
  if (no_bits.empty()) std::erase_if(net.diagnostics, [](const Diagnostic& d) { return d.code == code::kBitsNotDerived; });
}

std::string WidthNotDerivedMessage(const std::vector<std::string>& overridden) {
  if (!overridden.empty()) {
    return "the export has no activation clamps (simplified form), so 32-bit wide outputs cannot be "
           "derived; output_width is as overridden for " + JoinNames(overridden) + " and 8-bit elsewhere";
  }
  return "the export has no activation clamps (simplified form), so 32-bit wide outputs "
         "(`output_width: 32`) cannot be derived; all layers assumed 8-bit unless overridden "
         "(--set LAYER.output_width=32)";
}

std::string BitsNotDerivedMessage(const std::vector<std::string>& missing, size_t weight_layers) {
  if (missing.size() < weight_layers) {
    return "weight bit widths cannot be derived (no QAT weight chain) for " + std::to_string(missing.size()) +
           " layer(s) without an override (" + JoinNames(missing) +
           "); kernel memory is checked for 8-bit weights there and the izer takes the widths from the "
           "checkpoint unless overridden (--set LAYER.quantization=N)";
  }
  return "weight bit widths cannot be derived (no QAT weight chain) for " + std::to_string(missing.size()) +
         " layer(s) (" + JoinNames(missing) +
         "); kernel memory is checked for 8-bit weights and the izer takes the widths from the "
         "checkpoint unless overridden (--set LAYER.quantization=N)";
}

void CheckConvWeightShape(Network& net, const Layer& l, const std::vector<int64_t>& wshape, int64_t w_in,
                          int64_t w_out, int out_c) {
  if (w_in != l.in_shape.c) {
    net.Report(Severity::kError, code::kShape, &l,
               "weights " + IntsString(wshape) + " with group " + std::to_string(l.groups) + " expect " +
                   std::to_string(w_in) + " input channels, but the input has " + std::to_string(l.in_shape.c) +
                   " (" + ShapeString(l.in_shape, false) + ")");
  } else if (out_c >= 0 && w_out != out_c) {
    net.Report(Severity::kError, code::kShape, &l,
               "weights " + IntsString(wshape) + " make " + std::to_string(w_out) +
                   " output channels, but the output has " + std::to_string(out_c));
  }
}

void CheckConvBiasShape(Network& net, const Layer& l, const std::vector<int64_t>& bshape, int64_t w_out) {
  if (bshape.size() == 1 && bshape[0] == w_out) return;
  net.Report(Severity::kError, code::kShape, &l,
             "bias " + IntsString(bshape) + " for " + std::to_string(w_out) + " output channels (it must be [" +
                 std::to_string(w_out) + "])");
}

void CheckLinearWeightShape(Network& net, const Layer& l, const std::vector<int64_t>& wshape, int64_t in_features,
                            const Shape3& src) {
  if (in_features == src.elements()) return;
  net.Report(Severity::kError, code::kShape, &l,
             "weights " + IntsString(wshape) + " take " + std::to_string(in_features) + " input features, but the input " +
                 ShapeString(src, false) + " has " + std::to_string(src.elements()) +
                 " values (inner dimensions differ)");
}

bool CheckReshape(Network& net, const Layer& l, const Shape3& to) {
  if (to.elements() != l.in_shape.elements()) {
    net.Report(Severity::kError, code::kReshape, &l,
               "the input is reshaped from " + ShapeString(l.in_shape, false) + " to " + ShapeString(to, false) +
                   " with a different element count");
    return false;
  }
  if (to.c != l.in_shape.c) {
    net.Report(Severity::kError, code::kReshape, &l,
               "the input is reshaped across channels (" + ShapeString(l.in_shape, false) + " -> " +
                   ShapeString(to, false) + "); the izer can only change the height/width view (`in_dim`)");
    return false;
  }
  return true;
}

void ReportChannelView(Network& net, const Layer& l, const std::string& why) {
  net.Report(Severity::kError, code::kReshape, &l,
             "the input is reshaped across channels (" + ShapeString(l.viewed_from, false) + " -> " +
                 ShapeString(l.in_shape, false) + "); the izer can only change the height/width view (`in_dim`) or "
                 "flatten into a 1x1 convolution (`flatten: true`), and " + why);
}

void ReportHostTail(Network& net, const Layer& cut, const std::string& host_must) {
  net.Report(Severity::kInfo, code::kHostTail, &cut, host_must);
}

void RestateBitsNotDerived(Network& net) {
  size_t weight_layers = 0;
  std::vector<std::string> no_bits = LayersWithoutBits(net, &weight_layers);
  auto& d = net.diagnostics;
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i].code != code::kBitsNotDerived) continue;
    if (no_bits.empty()) {
      d.erase(d.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      d[i].message = BitsNotDerivedMessage(no_bits, weight_layers);
    }
    break;
  }
}

}  // namespace rules

namespace {

// The model position of the weights layer `i` takes by position, or -1: none, or a layer applying
// an earlier one's module again (WeightSource, compiler/ai8x/resources.h), which takes its weights
// by `weight_source` from a quantized checkpoint, or per Conv node from the ONNX file.
int PositionalWeight(const Network& net, size_t i) {
  const Layer& l = net.layers[i];
  if (!l.has_weights() || l.weight_position < 0) return -1;
  if (WeightSource(net, i) >= 0) return -1;
  return l.weight_position;
}

bool InWeightOrder(const Network& net) {
  int max_pos = -1;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    int p = PositionalWeight(net, i);
    if (p < 0) continue;
    if (p < max_pos) return false;
    max_pos = p;
  }
  return true;
}

// Another execution order of the layers: Kahn's algorithm over the producer edges, always taking
// the ready layer below which the smallest positional weight waits (ties: the exported order).
// Independent branches (the classification and regression heads of ai87fpndetector, which its
// forward() calls in the other order than its __init__ defines them) then run in weight order.
std::vector<size_t> WeightOrderSchedule(const Network& net) {
  const size_t n = net.layers.size();
  std::vector<int> key(n, INT_MAX), indegree(n, 0);
  std::vector<std::vector<size_t>> consumers(n);
  for (size_t i = 0; i < n; ++i) {
    for (int in : net.layers[i].inputs) {
      int p = in == kNetworkInput ? -1 : net.IndexOf(in);
      if (p < 0) continue;
      consumers[static_cast<size_t>(p)].push_back(i);
      ++indegree[i];
    }
  }
  for (size_t i = n; i-- > 0;) {  // producers come first in the exported order
    int own = PositionalWeight(net, i);
    if (own >= 0) key[i] = own;
    for (size_t c : consumers[i]) key[i] = std::min(key[i], key[c]);
  }
  std::set<std::pair<int, size_t>> ready;
  for (size_t i = 0; i < n; ++i) {
    if (indegree[i] == 0) ready.insert({key[i], i});
  }
  std::vector<size_t> order;
  order.reserve(n);
  while (!ready.empty()) {
    size_t i = ready.begin()->second;
    ready.erase(ready.begin());
    order.push_back(i);
    for (size_t c : consumers[i]) {
      if (--indegree[c] == 0) ready.insert({key[c], c});
    }
  }
  return order;
}

}  // namespace

void CheckWeightOrder(Network& net) {
  // With a quantized checkpoint (qat exports: the izer cannot read weights behind QAT chains from
  // the ONNX file) the order of independent branches is free; the izer's ONNX reader
  // (izer/onnxcp.py) takes weights in node order, so other exports keep theirs.
  if (net.qat_weight_chains && !InWeightOrder(net)) {
    std::vector<size_t> order = WeightOrderSchedule(net);
    if (order.size() == net.layers.size()) {
      std::vector<Layer> saved = net.layers;
      std::vector<Layer> reordered;
      reordered.reserve(order.size());
      for (size_t i : order) reordered.push_back(net.layers[i]);
      net.layers = std::move(reordered);
      net.Reindex();
      if (InWeightOrder(net)) {
        net.Report(Severity::kInfo, code::kWeightOrder, nullptr,
                   "independent branches run in the order the checkpoint lists their weights (state_dict order), "
                   "not in the exported node order, so that the izer assigns every layer its own weights");
        return;
      }
      net.layers = std::move(saved);
      net.Reindex();
    }
  }
  // Conv/linear layers in layer (= execution) order whose weights are assigned by position.
  std::vector<const Layer*> w;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    if (PositionalWeight(net, i) >= 0) w.push_back(&net.layers[i]);
  }
  // Layers whose weights precede those of an earlier-running layer.
  int out_of_order = 0;
  const Layer* first = nullptr;   // earlier-running layer of the first pair out of order
  const Layer* second = nullptr;  // the layer right after it, whose weights are listed earlier
  int max_pos = -1;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i]->weight_position < max_pos) ++out_of_order;
    max_pos = std::max(max_pos, w[i]->weight_position);
    if (second == nullptr && i > 0 && w[i]->weight_position < w[i - 1]->weight_position) {
      first = w[i - 1];
      second = w[i];
    }
  }
  if (second == nullptr) return;
  auto describe = [](const Layer& l) {
    std::string s = "`" + l.name + "`";
    if (!l.onnx_nodes.empty()) s += " (ONNX node " + l.onnx_nodes.front() + ")";
    return s;
  };
  std::string msg =
      "conv/linear layers are not in weight order: layer " + describe(*first) + " runs before layer " +
      describe(*second) + ", but the weights of `" + first->name + "` (`" + first->weight_initializer +
      "`) come after those of `" + second->name + "` (`" + second->weight_initializer +
      "`) in the model's initializer list (positions " + std::to_string(first->weight_position) +
      " and " + std::to_string(second->weight_position) + "; torch writes it in state_dict order, the checkpoint's order)";
  if (out_of_order > 1) {
    msg += "; " + std::to_string(out_of_order) + " layers in all have weights listed before an earlier layer's";
  }
  msg +=
      ". The izer assigns the checkpoint's weights to the YAML's conv/linear layers by position, so it would "
      "load them into the wrong layers, and the YAML's layer order is an execution order, which no reordering "
      "of independent branches can make match. Define the modules in the model's __init__ in the order forward() calls them (the "
      "existing checkpoint loads into the reordered model by name with load_state_dict; save it again) and "
      "re-export";
  net.Report(Severity::kError, code::kWeightOrder, second, std::move(msg));
}

}  // namespace kiln::ai8x
