// Pass InsertConcatCopies (compiler/ai8x/passes.h). A concatenation of more than 64 channels is
// read in passes: pass k of every pixel is the k-th 32-bit word at the reader's in_offset, so part
// k must be written at base + 4k with `write_gap: parts-1` on the reader's processors (izer
// max7800x.py L451-468 multi-pass layout; unload.py verify_unload: offset = out_offset +
// (pixel * width + expand) * (write_gap + 1) * 4), as the hand-written camvid-unet-large.yaml of
// ai8x-synthesis does. A part that is also read elsewhere (or is the network input) cannot be
// written that way, so it is copied by a passthrough layer first ("pt" in that file). Single-pass
// concatenation parts are left to AllocateProcessors (the part's other readers read it from its
// partial map); only the network input, whose map layer 0 decides, is copied there too.
#include <algorithm>
#include <unordered_map>

#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/rules/rules.h"

namespace kiln::ai8x {

void InsertConcatCopies(Network& net) {
  net.Reindex();
  std::unordered_map<int, int> readers;  // producer id -> number of reads
  for (const Layer& l : net.layers) {
    for (int in : l.inputs) ++readers[in];
  }
  std::unordered_map<std::string, int> names;
  for (const Layer& l : net.layers) names[l.name] = 1;
  std::unordered_map<int, std::vector<Layer>> before;  // concat reader id -> copies to insert before it
  for (Layer& c : net.layers) {
    if (c.operands != 1 || c.inputs.size() < 2) continue;
    Passes p = ComputePasses(c.in_shape.c);
    bool multipass = p.passes > 1;
    if (multipass) {
      bool even = static_cast<int>(c.inputs.size()) == p.passes;
      for (int in : c.inputs) even &= net.OutputShapeOf(in).c == p.processors;
      if (!even) {
        rules::ReportUnevenMultipassConcat(net, c, p.passes, p.processors);
        continue;
      }
    }
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      int s = c.inputs[k];
      Layer* src = s == kNetworkInput ? nullptr : net.Find(s);
      bool shared = src == nullptr || readers[s] > 1 || src->output;
      if (!shared) {
        if (multipass) src->write_gap = p.passes - 1;
        continue;
      }
      if (!multipass && src != nullptr) continue;  // AllocateProcessors pins the other readers
      Layer g;
      g.id = net.next_id++;
      std::string base = "copy_" + (src == nullptr ? std::string("input") : src->name);
      g.name = base;
      for (int n = 2; names.count(g.name); ++n) g.name = base + "_" + std::to_string(n);
      names[g.name] = 1;
      g.op = OpKind::kNone;
      g.inputs = {s};
      g.in_shape = net.OutputShapeOf(s);
      g.out_shape = g.in_shape;
      g.one_d = src == nullptr ? net.input_one_d : src->one_d;
      g.write_gap = multipass ? p.passes - 1 : 0;
      g.onnx_nodes = {c.onnx_nodes.empty() ? std::string() : c.onnx_nodes.front()};
      g.comment = "copy of " + (src == nullptr ? std::string("the input") : src->name) + " for the concatenation of " +
                  c.name + (src == nullptr ? "" : " (also read elsewhere)");
      c.inputs[k] = g.id;
      --readers[s];
      ++readers[g.id];
      before[c.id].push_back(std::move(g));
    }
  }
  if (before.empty()) return;
  std::vector<Layer> out;
  out.reserve(net.layers.size() + before.size() * 2);
  for (Layer& l : net.layers) {
    auto b = before.find(l.id);
    if (b != before.end()) {
      for (Layer& g : b->second) out.push_back(std::move(g));
    }
    out.push_back(std::move(l));
  }
  net.layers = std::move(out);
  net.Reindex();
}

}  // namespace kiln::ai8x
