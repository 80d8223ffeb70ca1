// The `--set LAYER.KEY=VALUE` overrides (compiler/ai8x/compile.h LayerOverride): structure keys
// after fusion, placement keys after planning (passes ApplyStructureOverrides and
// ApplyPlacementOverrides of compiler/ai8x/pipeline.cc).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <limits>

#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/rules/rules.h"

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
  // The not-derived warnings stay warnings (the values are the user's, not the model's) but say
  // what the overrides settled.
  std::vector<std::string> widened;
  for (const LayerOverride& o : overrides) {
    Layer* l = o.key == "output_width" ? FindLayer(net, o.layer) : nullptr;
    if (l != nullptr && std::find(widened.begin(), widened.end(), l->name) == widened.end()) widened.push_back(l->name);
  }
  rules::RewordNotDerived(net, widened);
  return Status::Ok();
}

Status ApplyPlacementOverrides(Network& net, const std::vector<LayerOverride>& overrides) {
  for (const LayerOverride& o : overrides) {
    if (!IsPlacementKey(o.key)) continue;
    Layer* l = FindLayer(net, o.layer);
    if (l == nullptr) return NoSuchLayer(net, o);
    if (o.key == "streaming") {
      auto v = ParseBool(o.value);
      if (!v.ok()) return BadOverride(o, v.status().message());
      l->placed.streaming = *v;
      if (*v) {
        net.use_fifo = true;
        net.RequireIzerFlag("--fifo", "--set " + o.layer + ".streaming=true: streamed input comes through the FIFOs");
      }
    } else if (o.key == "out_offset") {
      auto v = ParseInt(o.value, 0, std::numeric_limits<int>::max());
      if (!v.ok()) return BadOverride(o, v.status().message());
      l->placed.out_offset = static_cast<int>(*v);
    } else {
      auto v = ParseUnsigned(o.value);  // a 64-bit processor mask
      if (!v.ok()) return BadOverride(o, v.status().message());
      if (o.key == "processors") l->placed.processors = *v;
      if (o.key == "output_processors") l->placed.output_processors = *v;
    }
  }
  return Status::Ok();
}

}  // namespace kiln::ai8x
