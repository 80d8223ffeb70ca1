// Rule family "data memory" (AI8X_DATA_MEMORY): every region inside one data-memory instance
// (max7800x.py L469-479, L601-609), and the planner's failures (ChooseInputFormatAndStreaming,
// PlanDataMemory in compiler/ai8x/passes.h).
#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/rules/checks.h"

namespace kiln::ai8x::rules {
namespace {

void Err(Network& net, const Layer& l, const std::string& msg) { net.Report(Severity::kError, code::kDataMemory, &l, msg); }

bool LastStreaming(const Network& net, const Layer& l, size_t i) {
  return l.placed.streaming && (i + 1 == net.layers.size() || !net.layers[i + 1].placed.streaming);
}

}  // namespace

void ReportStreamingCannotHelp(Network& net, const Layer& big, const std::string& why) {
  const int64_t inst = net.spec().data_instance_bytes;
  Err(net, big,
      "layer data does not fit a " + std::to_string(inst) + "-byte data-memory instance (input " +
          std::to_string(DataInBytes(net, big)) + " B, output " + std::to_string(DataOutBytes(net, big)) +
          " B per instance) and streaming cannot help: " + why +
          ". What would help: a smaller input, fewer channels, pooling earlier, or CHW input");
}

void ReportInputTooLarge(Network& net, const Layer& first, int64_t bytes) {
  Err(net, first,
      "the network input needs " + std::to_string(bytes) + " B per data-memory instance, more than " +
          std::to_string(net.spec().data_instance_bytes) +
          " B; what would help: CHW input (--input-format CHW), streaming "
          "(HWC input with at most 16 channels), or a smaller input");
}

void ReportNoRoom(Network& net, const Layer& l, int64_t bytes, const Layer* reader) {
  if (reader != nullptr) {
    bool eltwise = reader->operands > 1;
    Err(net, l,
        "no room for the " + std::to_string(bytes) + "-byte " + (eltwise ? "interleaved element-wise" : "concatenation") +
            " input of layer " + reader->name +
            " next to the data still live in its memory instances; what would help: fewer channels, smaller feature "
            "maps, or fewer tensors live across the branch");
    return;
  }
  Err(net, l,
      "no room for the " + std::to_string(bytes) + "-byte output (per data-memory instance of " +
          std::to_string(net.spec().data_instance_bytes) +
          " B) next to the data still live in its memory instances; what would "
          "help: fewer channels, pooling earlier, streaming, or CHW input");
}

void CheckDataMemoryBounds(RuleContext& c, const Layer& l, size_t i) {
  Network& net = c.net;
  const int64_t inst = c.spec.data_instance_bytes;
  if (!l.placed.streaming) {
    int64_t in_size = DataInBytes(net, l);
    if (l.placed.in_offset + in_size > inst) {
      Err(net, l, "input of " + std::to_string(in_size) + " B at offset " + std::to_string(l.placed.in_offset) +
                      " exceeds the " + std::to_string(inst) + "-byte data-memory instance");
    }
  }
  if (!l.placed.streaming || LastStreaming(net, l, i)) {
    int64_t out_size = DataOutBytes(net, l);
    if (l.placed.out_offset + out_size > inst) {
      Err(net, l, "output of " + std::to_string(out_size) + " B at offset " + std::to_string(l.placed.out_offset) +
                      " exceeds the " + std::to_string(inst) + "-byte data-memory instance");
    }
  }
  if (l.placed.out_offset % 4 != 0 || l.placed.in_offset % 4 != 0) Err(net, l, "offsets must be multiples of 4");
}

}  // namespace kiln::ai8x::rules
