// Rule family "streaming" (AI8X_STREAMING, AI8X_FIFO): the streaming prefix and FIFO input
// (izer.py L446-448, max7800x.py L314-380; docs/specs/ai8x-izer-rules.md §1.8).
#include "compiler/ai8x/rules/checks.h"

namespace kiln::ai8x::rules {
namespace {

void Err(Network& net, const char* code, const Layer& l, const std::string& msg) {
  net.Report(Severity::kError, code, &l, msg);
}

}  // namespace

void ReportStreamingPrefix(Network& net, const Layer& last, int last_index) {
  net.Report(Severity::kInfo, code::kStreaming, &last,
             "layers 0-" + std::to_string(last_index) +
                 " stream (their data does not fit one data-memory instance); run the izer with --fifo");
}

void CheckStreaming(RuleContext& c, const Layer& l, size_t i) {
  if (!l.placed.streaming) return;
  Network& net = c.net;
  const ChipSpec& spec = c.spec;
  bool last_stream = i + 1 == c.n || !net.layers[i + 1].placed.streaming;
  if (i > 0 && !net.layers[i - 1].placed.streaming) {
    Err(net, code::kStreaming, l, "streaming layers must form a prefix (izer.py L446-448)");
  }
  if (static_cast<int>(i) >= spec.max_stream_layers) Err(net, code::kStreaming, l, "at most 8 layers can stream");
  if (last_stream && l.pad == 0 && spec.chip == Chip::kMAX78000 &&
      !(l.op == OpKind::kConv2d && l.kernel_h == 1 && l.kernel_w == 1)) {  // 1x1: emulated as padded 3x3
    Err(net, code::kStreaming, l, "the final streaming layer must be padded on MAX78000 (max7800x.py L365-370)");
  }
  if (!spec.support_streaming_passthrough && l.op == OpKind::kNone) {
    Err(net, code::kStreaming, l, "passthrough layers cannot stream on this device");
  }
  // kbias.py L222-224: the izer warns for every streaming layer with a bias on a chip without
  // SUPPORT_STREAM_BIAS (depthwise biases are placed per quadrant and not warned about).
  if (l.has_bias && l.groups == 1 && !spec.support_stream_bias) {
    net.Report(Severity::kWarning, code::kStreaming, &l,
               "a streaming layer with a bias may not compute correctly on " + std::string(spec.name) +
                   " (the izer warns \"Combining streaming and a bias. THIS COMBINATION MIGHT NOT FUNCTION "
                   "CORRECTLY!!!\", kbias.py L222-224); what would help: no bias on the streaming layers, or "
                   "MAX78002 (SUPPORT_STREAM_BIAS)");
  }
}

void CheckFifoInput(RuleContext& c, const Layer& l, size_t i) {
  if (i != 0 || !c.net.use_fifo) return;
  int ch = l.in_shape.c;
  if ((l.placed.chw_input && ch > 4) || (!l.placed.chw_input && ch > 16)) {
    Err(c.net, code::kFifo, l, "FIFO input takes at most 16 HWC / 4 CHW channels (max7800x.py L314-344)");
  }
  uint64_t allowed = l.placed.chw_input ? 0x0001000100010001ULL : 0x000f000f000f000fULL;
  if (l.placed.processors & ~allowed) {
    Err(c.net, code::kFifo, l,
        "FIFO input processors must be within 0-3/16-19/32-35/48-51 (HWC) or 0/16/32/48 (CHW)");
  }
}

}  // namespace kiln::ai8x::rules
