// Rule family "processors" (AI8X_PROCESSORS, AI8X_INPUT_FORMAT, AI8X_PASSTHROUGH_MAP,
// AI8X_CONCAT): processor maps (max7800x.py L442-450, L915-962, L1003-1004; izer.py L449-451;
// docs/specs/ai8x-izer-rules.md §1.5).
#include <cstdio>

#include "compiler/ai8x/rules/checks.h"

namespace kiln::ai8x::rules {
namespace {

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void Err(Network& net, const char* code, const Layer& l, const std::string& msg) {
  net.Report(Severity::kError, code, &l, msg);
}

}  // namespace

void ReportChwNotPossible(Network& net, const Layer& first) {
  Err(net, code::kInputFormat, first,
      "CHW input needs a first layer that alone reads the network input, with at most 16 "
      "channels (izer.py L449-451)");
}

void CheckSharedMapCount(Network& net, const Layer& l, int need, int group_count) {
  if (need != group_count) {
    Err(net, code::kProcessors, l,
        "layers that read the same data need the same processor count (" + std::to_string(need) + " vs " +
            std::to_string(group_count) + ")");
  }
  if (need > 64) Err(net, code::kProcessors, l, "needs more than 64 processors");
}

void ReportConcatAlsoReadElsewhere(Network& net, const Layer& l) {
  Err(net, code::kConcat, l,
      "this output is concatenated and also read elsewhere; a layer writes one output map, so "
      "the concatenation cannot take it (copy it with a separate layer first)");
}

void ReportUnevenMultipassConcat(Network& net, const Layer& concat, int passes, int processors) {
  Err(net, code::kConcat, concat,
      "a concatenation of " + std::to_string(concat.in_shape.c) + " channels is read in " + std::to_string(passes) +
          " passes of " + std::to_string(processors) + " channels, so it needs " + std::to_string(passes) +
          " parts of " + std::to_string(processors) +
          " channels each (pass k is the k-th interleaved word, max7800x.py L451-468): a part of more channels "
          "writes several words per pixel, and `write_gap` interleaves its words one by one "
          "(izer/unload.py: word (pixel * out_expand + pass) * (write_gap + 1)), so its passes cannot sit next "
          "to each other in the concatenation; what would help: concatenate parts of at most " +
          std::to_string(processors) + " channels (e.g. split each expand conv in two)");
}

// Processor counts (max7800x.py L915-941) and CHW input maps (L442-450, izer.py L449-451).
void CheckProcessorMaps(RuleContext& c, const Layer& l, size_t i) {
  Network& net = c.net;
  int in_ch = l.in_shape.c;
  int expect_in = l.placed.chw_input ? in_ch : ComputePasses(in_ch).processors;
  if (std::popcount(l.placed.processors) != expect_in) {
    Err(net, code::kProcessors, l,
        std::to_string(in_ch) + " input channels need " + std::to_string(expect_in) + " processors, map " +
            Hex(l.placed.processors) + " has " + std::to_string(std::popcount(l.placed.processors)) + " (max7800x.py L915-924)");
  }
  Passes outp = ComputePasses(l.out_shape.c);
  if (std::popcount(l.placed.output_processors) != outp.processors) {
    Err(net, code::kProcessors, l,
        std::to_string(l.out_shape.c) + " output channels need " + std::to_string(outp.processors) +
            " output processors, map " + Hex(l.placed.output_processors) + " has " +
            std::to_string(std::popcount(l.placed.output_processors)) + " (max7800x.py L934-941)");
  }
  if (!l.placed.chw_input) return;
  for (int g = 0; g < 16; ++g) {
    if (std::popcount((l.placed.processors >> (4 * g)) & 0xf) > 1) {
      Err(net, code::kProcessors, l, "CHW input allows one processor per group of 4 (max7800x.py L442-450)");
      break;
    }
  }
  if (i != 0) Err(net, code::kInputFormat, l, "CHW data is allowed only in the first layer (izer.py L449-451)");
  if (in_ch > 16) Err(net, code::kInputFormat, l, "CHW input takes at most 16 channels");
}

// Passthrough output map per x16 (max7800x.py L945-962).
void CheckPassthroughMap(RuleContext& c, const Layer& l, size_t) {
  if (l.op != OpKind::kNone) return;
  for (int g = 0; g < 4; ++g) {
    uint64_t in_pro = (uint64_t{1} << std::popcount((l.placed.processors >> (16 * g)) & 0xffff)) - 1;
    uint64_t out_pro = (l.placed.output_processors >> (16 * g)) & 0xffff;
    if (out_pro != 0) out_pro >>= std::countr_zero(out_pro);
    if (out_pro != in_pro) {
      Err(c.net, code::kPassthroughMap, l,
          "a passthrough layer's output processors must be a packed version of its input processors in each "
          "group of 16: input " + Hex(l.placed.processors) + ", output " + Hex(l.placed.output_processors) +
              " (max7800x.py L945-962)");
      return;
    }
  }
}

// Concatenation: all but the last part need a multiple of 4 channels (izer README limits).
void CheckConcat(RuleContext& c, const Layer& l, size_t) {
  if (l.operands > 1 || l.inputs.size() <= 1) return;
  for (size_t k = 0; k + 1 < l.inputs.size(); ++k) {
    if (c.net.OutputShapeOf(l.inputs[k]).c % 4 != 0) {
      Err(c.net, code::kConcat, l, "all but the last concatenated input need a multiple of 4 channels");
      return;
    }
  }
}

// Some layer must use quadrant 0 (max7800x.py L1003-1004).
void CheckQuadrant0(RuleContext& c) {
  bool quadrant0 = false;
  for (const Layer& l : c.net.layers) quadrant0 |= (l.placed.processors & 0xffff) != 0;
  quadrant0 |= (c.net.layers.back().placed.output_processors & 0xffff) != 0;
  if (!quadrant0) {
    c.net.Report(Severity::kError, code::kProcessors, nullptr,
                 "no layer uses quadrant 0 (processors 0-15); the izer requires it (max7800x.py L1003-1004)");
  }
}

}  // namespace kiln::ai8x::rules
