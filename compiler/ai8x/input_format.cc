// Pass ChooseInputFormatAndStreaming (compiler/ai8x/passes.h): the first layer's data format and
// the streaming prefix (docs/specs/ai8x-izer-rules.md §1.8).
#include <algorithm>

#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/rules/rules.h"

namespace kiln::ai8x {

void ChooseInputFormatAndStreaming(Network& net, const Ai8xOptions& options) {
  if (net.layers.empty()) return;
  const ChipSpec& spec = net.spec();
  const int64_t inst = spec.data_instance_bytes;
  std::vector<int> input_readers;
  for (const Layer& l : net.layers) {
    if (std::find(l.inputs.begin(), l.inputs.end(), kNetworkInput) != l.inputs.end()) input_readers.push_back(l.id);
  }
  Layer& first = net.layers.front();
  bool first_reads_input = first.inputs.size() == 1 && first.inputs[0] == kNetworkInput;
  int c = net.input_shape.c;
  bool can_chw = first_reads_input && input_readers.size() == 1 && c <= 16 && first.operands == 1;
  bool chw = false;
  switch (options.input_format) {
    case InputFormat::kCHW:
      chw = true;
      if (!can_chw) {
        rules::ReportChwNotPossible(net, first);
      }
      break;
    case InputFormat::kHWC:
      chw = false;
      break;
    case InputFormat::kAuto: {
      chw = can_chw && c <= 16;  // seed yamlwriter.py L476
      // memory may demand CHW: HWC input that does not fit one instance but fits as CHW
      Layer probe = first;
      probe.placed.chw_input = false;
      int64_t hwc = DataInBytes(net, probe);
      probe.placed.chw_input = true;
      int64_t chw_bytes = DataInBytes(net, probe);
      if (can_chw && hwc > inst && chw_bytes <= inst) chw = true;
      break;
    }
  }
  first.placed.chw_input = chw && first_reads_input;
  net.chw_input = first.placed.chw_input;

  // Streaming: the prefix of layers whose input or output does not fit one instance.
  int last_big = -1;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const Layer& l = net.layers[i];
    if (DataInBytes(net, l) > inst || DataOutBytes(net, l) > inst) last_big = static_cast<int>(i);
  }
  net.use_fifo = options.use_fifos;
  if (net.use_fifo) net.RequireIzerFlag("--fifo", "requested (use_fifos): layer 0 reads its input through the FIFOs");
  if (last_big < 0) return;
  const Layer& big = net.layers[last_big];
  auto fail = [&](const std::string& why) { rules::ReportStreamingCannotHelp(net, big, why); };
  if (last_big + 1 >= static_cast<int>(net.layers.size())) {
    fail("the layer is the network's last layer, whose output must fit memory");
    return;
  }
  if (last_big + 1 >= spec.max_stream_layers) {
    fail("more than " + std::to_string(spec.max_stream_layers) + " leading layers would have to stream");
    return;
  }
  for (int i = 0; i <= last_big + 1 && i < static_cast<int>(net.layers.size()); ++i) {
    const Layer& l = net.layers[i];
    bool chained = i == 0 ? first_reads_input : (l.inputs.size() == 1 && l.inputs[0] == net.layers[i - 1].id);
    if (!chained || l.operands > 1) {
      fail("streaming needs a plain chain of layers from the input, and layer " + std::to_string(i) + " (" + l.name +
           ") is not one");
      return;
    }
    if (l.flatten) {
      fail("layer " + std::to_string(i) + " (" + l.name + ") flattens (izer: flatten cannot stream)");
      return;
    }
    if (!spec.support_streaming_passthrough && l.op == OpKind::kNone) {
      fail("passthrough layers cannot stream on " + std::string(spec.name));
      return;
    }
  }
  // The last streaming layer is the first one whose output fits; it must be padded.
  int k = last_big;
  if (DataOutBytes(net, net.layers[k]) > inst) {
    // its reader streams too
    k = last_big + 1;
  }
  if (DataOutBytes(net, net.layers[k]) > inst) {
    fail("the last streaming layer's output does not fit either");
    return;
  }
  // The first layer after the prefix reads the last streaming layer's whole output. When that
  // input and its own output fit no instance together and cannot lie in different instances
  // (their maps need more than the 16 instances between them), it streams too, as the
  // hand-written ai87-pascalvoc-fpndetector.yaml streams layers 0-5 (a 64-channel 128x160 map
  // fills an instance).
  for (;;) {
    int nx = k + 1;
    if (nx + 1 >= static_cast<int>(net.layers.size()) || nx + 1 > spec.max_stream_layers) break;
    const Layer& l = net.layers[nx];
    bool chained = l.inputs.size() == 1 && l.inputs[0] == net.layers[k].id && l.operands == 1 && !l.flatten &&
                   (spec.support_streaming_passthrough || l.op != OpKind::kNone);
    int instances = (ComputePasses(l.in_shape.c).processors + 3) / 4 + (ComputePasses(l.out_shape.c).processors + 3) / 4;
    if (!chained || instances <= spec.num_data_instances || DataInBytes(net, l) + DataOutBytes(net, l) <= inst) break;
    k = nx;
  }
  if (c > 16) {
    fail("the first layer has " + std::to_string(c) + " input channels; the FIFO takes at most 16 (HWC)");
    return;
  }
  if (first.placed.chw_input) {
    first.placed.chw_input = false;  // FIFO streaming: HWC
    net.chw_input = false;
  }
  for (int i = 0; i <= k; ++i) net.layers[i].placed.streaming = true;
  net.use_fifo = true;
  net.RequireIzerFlag("--fifo", "layers 0-" + std::to_string(k) +
                                    " stream: the input does not fit one data-memory instance and comes through the FIFOs");
  rules::ReportStreamingPrefix(net, net.layers[k], k);
}

}  // namespace kiln::ai8x
