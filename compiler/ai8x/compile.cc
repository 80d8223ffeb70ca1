#include "compiler/ai8x/compile.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <limits>
#include <map>
#include <tuple>
#include <unordered_map>

#include "compiler/ai8x/passes.h"

namespace kiln::ai8x {
namespace {

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Unsigned decimal or 0x hex, '_' separators allowed; values above 2^64-1 are out of range.
Result<uint64_t> ParseUnsigned(const std::string& text) {
  std::string t = text;
  t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
  int base = 10;
  size_t start = 0;
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X')) {
    base = 16;
    start = 2;
  }
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(t.data() + start, t.data() + t.size(), v, base);
  if (ec == std::errc::result_out_of_range) return InvalidArgument("'" + text + "' is out of range (above 2^64-1)");
  if (!t.empty() && t[0] == '-') return InvalidArgument("'" + text + "' is negative");
  if (ec != std::errc() || p != t.data() + t.size() || start == t.size()) {
    return InvalidArgument("'" + text + "' is not an integer");
  }
  return v;
}

// An integer in [lo, hi] (checked before any narrowing).
Result<int64_t> ParseInt(const std::string& text, int64_t lo = 0, int64_t hi = INT64_MAX) {
  auto v = ParseUnsigned(text);
  if (!v.ok()) return v.status();
  if (*v > static_cast<uint64_t>(hi) || static_cast<int64_t>(*v) < lo) {
    return InvalidArgument("'" + text + "' is out of range (" + std::to_string(lo) + ".." + std::to_string(hi) + ")");
  }
  return static_cast<int64_t>(*v);
}

Result<bool> ParseBool(const std::string& text) {
  std::string t = Lower(text);
  if (t == "true" || t == "1" || t == "yes") return true;
  if (t == "false" || t == "0" || t == "no") return false;
  return InvalidArgument("'" + text + "' is not a boolean");
}

// INVALID_ARGUMENT naming the override (layer, key and value) and what is wrong with it.
Status BadOverride(const LayerOverride& o, const std::string& why) {
  return InvalidArgument("override " + o.layer + "." + o.key + "=" + o.value + ": " + why);
}

// The override names no layer: list the names it could have meant.
Status NoSuchLayer(const Network& net, const LayerOverride& o) {
  std::string names;
  for (size_t i = 0; i < net.layers.size() && i < 24; ++i) names += (i ? ", " : "") + net.layers[i].name;
  if (net.layers.size() > 24) names += ", ...";
  return BadOverride(o, "no such layer (layers: " + names + "; an index or 'last' works too)");
}

bool IsStructureKey(const std::string& k) { return k == "output_width" || k == "quantization" || k == "activate"; }
bool IsPlacementKey(const std::string& k) {
  return k == "streaming" || k == "processors" || k == "output_processors" || k == "out_offset";
}

// LAYER: name, index, or "last"; among layers that have weights when `weights_only`.
Layer* FindLayer(Network& net, const std::string& which) {
  if (net.layers.empty()) return nullptr;
  if (which == "last") return &net.layers.back();
  for (Layer& l : net.layers) {
    if (l.name == which) return &l;
  }
  auto idx = ParseInt(which);
  if (idx.ok() && *idx >= 0 && *idx < static_cast<int64_t>(net.layers.size())) return &net.layers[*idx];
  return nullptr;
}

}  // namespace

Result<InputFormat> ParseInputFormat(const std::string& text) {
  std::string t = Lower(text);
  if (t.empty() || t == "auto") return InputFormat::kAuto;
  if (t == "hwc") return InputFormat::kHWC;
  if (t == "chw") return InputFormat::kCHW;
  return InvalidArgument("input format must be auto, HWC or CHW, not '" + text + "'");
}

Status ApplyStructureOverrides(Network& net, const std::vector<LayerOverride>& overrides) {
  for (const LayerOverride& o : overrides) {
    if (!IsStructureKey(o.key) && !IsPlacementKey(o.key)) {
      return BadOverride(o, "unknown key '" + o.key +
                                "' (known: output_width, quantization, activate, streaming, processors, "
                                "output_processors, out_offset)");
    }
    if (!IsStructureKey(o.key)) continue;
    Layer* l = FindLayer(net, o.layer);
    if (l == nullptr) return NoSuchLayer(net, o);
    if (!l->has_weights() && o.key != "output_width") {
      return BadOverride(o, "layer " + l->name + " has no weights");
    }
    if (o.key == "output_width") {
      auto v = ParseInt(o.value);
      if (!v.ok() || (*v != 8 && *v != 32)) return BadOverride(o, "output_width must be 8 or 32");
      l->output_width = static_cast<int>(*v);
      l->output_width_known = true;
    } else if (o.key == "quantization") {
      auto v = ParseInt(o.value);
      if (!v.ok() || (*v != 1 && *v != 2 && *v != 4 && *v != 8)) {
        return BadOverride(o, "quantization must be 1, 2, 4 or 8");
      }
      l->quantization = static_cast<int>(*v);
      l->quantization_known = true;
    } else if (o.key == "activate") {
      std::string v = Lower(o.value);
      if (v == "none") {
        l->activation = Activation::kNone;
      } else if (v == "relu") {
        l->activation = Activation::kRelu;
      } else if (v == "abs") {
        l->activation = Activation::kAbs;
      } else {
        return BadOverride(o, "activate must be none, relu or abs");
      }
    }
  }
  return Status::Ok();
}

// AI8X_WIDTH_NOT_DERIVED / AI8X_BITS_NOT_DERIVED stay warnings when overrides supply the values
// (they are the user's, not the model's: issue 4 "Inputs"), but say what the overrides settled.
void NoteOverriddenValues(Network& net, const std::vector<LayerOverride>& overrides) {
  std::vector<std::string> wide;
  for (const LayerOverride& o : overrides) {
    Layer* l = o.key == "output_width" ? FindLayer(net, o.layer) : nullptr;
    if (l != nullptr && std::find(wide.begin(), wide.end(), l->name) == wide.end()) wide.push_back(l->name);
  }
  std::vector<std::string> no_bits;
  size_t weight_layers = 0;
  for (const Layer& l : net.layers) {
    if (!l.has_weights()) continue;
    ++weight_layers;
    if (!l.quantization_known) no_bits.push_back(l.name);
  }
  for (Diagnostic& d : net.diagnostics) {
    if (d.code == "AI8X_WIDTH_NOT_DERIVED") d.message = WidthNotDerivedMessage(wide);
    if (d.code == "AI8X_BITS_NOT_DERIVED") d.message = BitsNotDerivedMessage(no_bits, weight_layers);
  }
}

// Passes and the rule check can see one problem from two sides (an activation that cannot be fused
// is also an activation on a passthrough layer): one finding per severity, code and layer, with
// the other messages appended, so that one mistake reads as one error.
void MergeRepeatedFindings(std::vector<Diagnostic>& diagnostics) {
  std::vector<Diagnostic> kept;
  kept.reserve(diagnostics.size());
  std::map<std::tuple<int, std::string, std::string>, size_t> index;  // (severity, code, layer) -> kept
  for (Diagnostic& d : diagnostics) {
    if (d.layer_name.empty()) {
      kept.push_back(std::move(d));
      continue;
    }
    auto [it, fresh] = index.try_emplace({static_cast<int>(d.severity), d.code, d.layer_name}, kept.size());
    if (fresh) {
      kept.push_back(std::move(d));
    } else if (kept[it->second].message.find(d.message) == std::string::npos) {
      kept[it->second].message += "; also: " + d.message;
    }
  }
  diagnostics = std::move(kept);
}

Status ApplyPlacementOverrides(Network& net, const std::vector<LayerOverride>& overrides) {
  for (const LayerOverride& o : overrides) {
    if (!IsPlacementKey(o.key)) continue;
    Layer* l = FindLayer(net, o.layer);
    if (l == nullptr) return NoSuchLayer(net, o);
    if (o.key == "streaming") {
      auto v = ParseBool(o.value);
      if (!v.ok()) return BadOverride(o, v.status().message());
      l->streaming = *v;
      if (*v) net.use_fifo = true;
    } else if (o.key == "out_offset") {
      auto v = ParseInt(o.value, 0, std::numeric_limits<int>::max());
      if (!v.ok()) return BadOverride(o, v.status().message());
      l->out_offset = static_cast<int>(*v);
    } else {
      auto v = ParseUnsigned(o.value);  // a 64-bit processor mask
      if (!v.ok()) return BadOverride(o, v.status().message());
      if (o.key == "processors") l->processors = *v;
      if (o.key == "output_processors") l->output_processors = *v;
    }
  }
  return Status::Ok();
}

Result<Ai8xCompileResult> CompileAi8xNetwork(Network net, const Ai8xOptions& options) {
  Ai8xOptions resolved = options;
  if (resolved.arch.empty()) resolved.arch = resolved.default_arch.empty() ? "unknown" : resolved.default_arch;
  if (resolved.dataset.empty()) resolved.dataset = "unknown";
  net.chip = options.chip;
  net.lift_limits = options.lift_layer_limit;
  net.Reindex();

  bool build_failed = std::any_of(net.diagnostics.begin(), net.diagnostics.end(),
                                  [](const Diagnostic& d) { return d.severity == Severity::kError; }) ||
                      net.layers.empty();
  if (!net.layers.empty()) {
    CheckWeightOrder(net);  // an error here still lets CheckRules report the rest
    FuseActivation(net);
    FusePooling(net);
    FuseEltwise(net);
    InsertWriteGaps(net);
    KILN_RETURN_IF_ERROR(ApplyStructureOverrides(net, options.overrides));
    NoteOverriddenValues(net, options.overrides);
    ChooseInputFormatAndStreaming(net, options);
    AllocateProcessors(net, options);
    PlanDataMemory(net);
    KILN_RETURN_IF_ERROR(ApplyPlacementOverrides(net, options.overrides));
    if (!build_failed) CheckRules(net);
  }

  Ai8xCompileResult r;
  resolved.input_format = net.chw_input ? InputFormat::kCHW : InputFormat::kHWC;
  resolved.use_fifos = net.use_fifo;
  r.resolved = resolved;
  // Diagnostics name final layer positions.
  net.Reindex();
  std::unordered_map<std::string, int> by_name;
  bool named = std::any_of(net.diagnostics.begin(), net.diagnostics.end(),
                           [](const Diagnostic& d) { return !d.layer_name.empty(); });
  for (size_t i = 0; named && i < net.layers.size(); ++i) by_name[net.layers[i].name] = static_cast<int>(i);
  for (Diagnostic& d : net.diagnostics) {
    if (d.layer_name.empty()) continue;
    auto it = by_name.find(d.layer_name);
    d.layer = it == by_name.end() ? -1 : it->second;  // -1: the layer was fused away
  }
  MergeRepeatedFindings(net.diagnostics);
  r.ok = std::none_of(net.diagnostics.begin(), net.diagnostics.end(),
                      [](const Diagnostic& d) { return d.severity == Severity::kError; });
  if (!net.layers.empty()) r.yaml = EmitYaml(net, resolved);

  const ChipSpec& spec = net.spec();
  r.resources.layers = static_cast<int>(net.layers.size());
  r.resources.max_layers = spec.max_layers;
  r.resources.kernel_words_per_processor = spec.kernel_words_small;
  r.resources.bias_bytes_capacity = int64_t{spec.bias_bytes_per_group} * spec.num_groups;
  r.resources.data_instance_bytes = spec.data_instance_bytes;
  std::vector<int64_t> kfill(64, 0);
  r.layers.reserve(net.layers.size());
  for (size_t i = 0; i < net.layers.size(); ++i) {
    Layer& l = net.layers[i];  // not read after this loop: names and node lists move out
    Ai8xLayerSummary s;
    s.index = static_cast<int>(i);
    s.name = std::move(l.name);
    s.op = l.op == OpKind::kLinear ? "linear" : OpKindName(l.op);
    if (l.operands > 1) s.op += std::string("+") + EltwiseName(l.eltwise);
    if (l.pool != PoolType::kNone) s.op += l.pool == PoolType::kMax ? "+maxpool" : "+avgpool";
    s.onnx_nodes = std::move(l.onnx_nodes);
    s.in_channels = l.in_shape.c;
    s.out_channels = l.out_shape.c;
    s.in_shape = ShapeString(l.in_shape, l.one_d);
    s.out_shape = ShapeString(l.out_shape, l.one_d);
    s.processors = l.processors;
    s.output_processors = l.output_processors;
    s.in_offset = l.in_offset;
    s.out_offset = l.out_offset;
    s.data_in_bytes = DataInBytes(net, l);
    s.data_out_bytes = DataOutBytes(net, l);
    s.kernel_words = KernelWords(net, l);
    s.bias_bytes = BiasBytes(l);
    s.streaming = l.streaming;
    r.resources.bias_bytes_used += s.bias_bytes;
    r.resources.streaming_layers += l.streaming ? 1 : 0;
    r.resources.data_bytes_peak = std::max<int64_t>(r.resources.data_bytes_peak,
                                                    std::max<int64_t>(l.out_offset + s.data_out_bytes, l.in_offset + s.data_in_bytes));
    if (l.has_weights()) {
      int64_t off = 0;
      for (int p = 0; p < 64; ++p) {
        if ((l.processors >> p) & 1) off = std::max(off, kfill[p]);
      }
      off = (off + 3) / 4 * 4;
      for (int p = 0; p < 64; ++p) {
        if ((l.processors >> p) & 1) kfill[p] = off + s.kernel_words;
      }
    }
    r.layers.push_back(std::move(s));
  }
  r.resources.max_kernel_words_used = *std::max_element(kfill.begin(), kfill.end());
  r.izer_flags = {"--device", spec.name};
  if (net.use_fifo) r.izer_flags.push_back("--fifo");
  r.diagnostics = std::move(net.diagnostics);
  return r;
}

Result<Ai8xCompileResult> CompileAi8x(const onnx_fe::Model& model, const Ai8xOptions& options) {
  Network net;
  net.chip = options.chip;
  BuildLayers(model.graph(), net);
  return CompileAi8xNetwork(std::move(net), options);
}

}  // namespace kiln::ai8x
