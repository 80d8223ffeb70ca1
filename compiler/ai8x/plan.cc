// Passes 6-8: input format + streaming, processor allocation, data-memory planning; and the
// izer's per-layer resource formulas. See passes.h.
#include <algorithm>
#include <bit>
#include <climits>
#include <numeric>
#include <unordered_map>

#include "compiler/ai8x/passes.h"

namespace kiln::ai8x {
namespace {

int Ffs(uint64_t m) { return m == 0 ? -1 : std::countr_zero(m); }
int Fls(uint64_t m) { return m == 0 ? -1 : 63 - std::countl_zero(m); }

// Data-memory instances (one per 4 processors) touched by a processor map.
uint32_t InstanceMask(uint64_t procs) {
  uint32_t m = 0;
  for (int i = 0; i < 16; ++i) {
    if ((procs >> (4 * i)) & 0xf) m |= 1u << i;
  }
  return m;
}

uint64_t Run(int count, int shift) {
  if (count <= 0) return 0;
  uint64_t run = count >= 64 ? ~uint64_t{0} : ((uint64_t{1} << count) - 1);
  return shift >= 64 ? 0 : run << shift;
}

// Processors a layer reads with (IZER-RULES.md §1.5); CHW input: one processor per channel.
int InProcs(const Layer& l) {
  if (l.chw_input) return l.in_shape.c;
  return ComputePasses(l.in_shape.c).processors;
}

}  // namespace

uint64_t DefaultFinalOutputMap(int out_channels) {
  return Run(ComputePasses(out_channels).processors, 0);
}

int64_t DataInBytes(const Network& /*net*/, const Layer& l) {
  int passes = l.chw_input ? 1 : ComputePasses(l.in_shape.c).passes;
  return l.in_shape.pixels() * passes * l.operands * (l.chw_input ? 1 : 4);
}

int64_t DataOutBytes(const Network& /*net*/, const Layer& l) {
  int passes = ComputePasses(l.out_shape.c).passes;
  return l.out_shape.pixels() * passes * 4 * l.output_width / 8;
}

// izer/kernels.py L221-330 (IZER-RULES.md §1.7): 72-bit words per enabled input processor.
static int64_t KernLen(const Layer& l, uint64_t out_map) {
  if (!l.has_weights() || out_map == 0) return 0;
  int64_t ksize = int64_t{l.kernel_h} * l.kernel_w;
  int in_exp = l.chw_input ? 1 : ComputePasses(l.in_shape.c).passes;
  int out_exp = ComputePasses(l.out_shape.c).passes;
  int first = Ffs(out_map);
  int start_col = first % 4;
  if (out_exp > 1) first -= start_col;
  int64_t span = 1 + Fls(out_map) - first;
  int64_t kc;
  if (l.groups == 1) {
    kc = span * out_exp * (l.flatten ? 1 : in_exp);
  } else {
    kc = in_exp;
  }
  if (l.flatten) {
    int in_procs = ComputePasses(l.in_shape.c).processors;
    int64_t shape1 = in_procs > 0 ? (int64_t{l.in_channels_w} + in_procs - 1) / in_procs : 1;
    kc *= shape1;
    kc -= (int64_t{out_exp} * std::popcount(out_map) - l.out_shape.c) * shape1;
  }
  int bits = l.quantization > 0 ? l.quantization : 1;
  int qfactor = 8 / bits;
  int64_t res = (kc % qfactor) * ksize * (qfactor - 1);
  return (kc * ksize * bits + res + 71) / 72;
}

int64_t KernelWords(const Network& /*net*/, const Layer& l) { return KernLen(l, l.output_processors); }

int64_t BiasBytes(const Layer& l) { return l.has_bias ? l.out_shape.c : 0; }

// ---------------------------------------------------------------------------------------------
// Pass 6: input format and streaming.

// Rolling-buffer estimate for a streaming layer's input: a few padded input rows per pass
// (izer max7800x.py L2373-2410 computes `rollover` from the kernel, pooling and stride rows).
static int64_t StreamBufferBytes(const Layer& l) {
  int rows = l.kernel_h + l.pool_h + std::max({l.stride, l.pool_stride_h, 1}) + 1;
  int64_t width = l.in_shape.w + 2 * l.pad;
  int passes = ComputePasses(l.in_shape.c).passes;
  int64_t bytes = rows * width * passes * 4;
  return (bytes + 15) / 16 * 16;
}

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
        net.Report(Severity::kError, "AI8X_INPUT_FORMAT", &first,
                   "CHW input needs a first layer that alone reads the network input, with at most 16 "
                   "channels (izer.py L449-451)");
      }
      break;
    case InputFormat::kHWC:
      chw = false;
      break;
    case InputFormat::kAuto: {
      chw = can_chw && c <= 16;  // seed yamlwriter.py L476
      // memory may demand CHW: HWC input that does not fit one instance but fits as CHW
      Layer probe = first;
      probe.chw_input = false;
      int64_t hwc = DataInBytes(net, probe);
      probe.chw_input = true;
      int64_t chw_bytes = DataInBytes(net, probe);
      if (can_chw && hwc > inst && chw_bytes <= inst) chw = true;
      break;
    }
  }
  first.chw_input = chw && first_reads_input;
  net.chw_input = first.chw_input;

  // Streaming: the prefix of layers whose input or output does not fit one instance.
  int last_big = -1;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const Layer& l = net.layers[i];
    if (DataInBytes(net, l) > inst || DataOutBytes(net, l) > inst) last_big = static_cast<int>(i);
  }
  net.use_fifo = options.use_fifos;
  if (last_big < 0) return;
  const Layer& big = net.layers[last_big];
  auto fail = [&](const std::string& why) {
    std::string msg = "layer data does not fit a " + std::to_string(inst) + "-byte data-memory instance (input " +
                      std::to_string(DataInBytes(net, big)) + " B, output " + std::to_string(DataOutBytes(net, big)) +
                      " B per instance) and streaming cannot help: " + why +
                      ". What would help: a smaller input, fewer channels, pooling earlier, or CHW input";
    net.Report(Severity::kError, "AI8X_DATA_MEMORY", &big, msg);
  };
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
  if (c > 16) {
    fail("the first layer has " + std::to_string(c) + " input channels; the FIFO takes at most 16 (HWC)");
    return;
  }
  if (first.chw_input) {
    first.chw_input = false;  // FIFO streaming: HWC
    net.chw_input = false;
  }
  for (int i = 0; i <= k; ++i) net.layers[i].streaming = true;
  net.use_fifo = true;
  net.Report(Severity::kInfo, "AI8X_STREAMING", &net.layers[k],
             "layers 0-" + std::to_string(k) +
                 " stream (their data does not fit one data-memory instance); run the izer with --fifo");
}

// ---------------------------------------------------------------------------------------------
// Pass 7: processor allocation.

namespace {

struct UnionFind {
  std::vector<int> p;
  explicit UnionFind(size_t n) : p(n) { std::iota(p.begin(), p.end(), 0); }
  int Find(int x) {
    while (p[x] != x) x = p[x] = p[p[x]];
    return x;
  }
  void Union(int a, int b) { p[Find(a)] = Find(b); }
};

}  // namespace

void AllocateProcessors(Network& net, const Ai8xOptions& options) {
  const size_t n = net.layers.size();
  if (n == 0) return;
  net.Reindex();
  // Readers of each producer (kNetworkInput included).
  std::unordered_map<int, std::vector<int>> readers;  // producer id -> reader positions
  for (size_t i = 0; i < n; ++i) {
    for (int in : net.layers[i].inputs) readers[in].push_back(static_cast<int>(i));
  }
  auto is_concat = [&](const Layer& l) { return l.inputs.size() > 1 && l.operands == 1; };
  UnionFind uf(n);
  // Layers reading the same data share a map; element-wise operands share the consumer's map.
  for (auto& [prod, rs] : readers) {
    int anchor = -1;
    for (int r : rs) {
      if (is_concat(net.layers[r])) continue;
      if (anchor < 0) {
        anchor = r;
      } else {
        uf.Union(r, anchor);
      }
    }
  }
  // Passthrough layers keep their map (output = packed input per x16, max7800x.py L945-962);
  // depthwise layers too (broadcast mode: no data moves across processors, and their bias bytes
  // then fill whole quadrants the way kbias.py packs them, as in the hand-written MobileNetV2).
  for (size_t i = 0; i < n; ++i) {
    const Layer& l = net.layers[i];
    if (l.op != OpKind::kNone && l.groups == 1) continue;
    auto it = readers.find(l.id);
    if (it == readers.end()) continue;
    for (int r : it->second) {
      if (!is_concat(net.layers[r])) uf.Union(static_cast<int>(i), r);
    }
  }
  // Groups.
  std::unordered_map<int, std::vector<int>> groups;
  std::vector<int> order;  // group roots in sequence order of their first member
  for (size_t i = 0; i < n; ++i) {
    int r = uf.Find(static_cast<int>(i));
    if (groups[r].empty()) order.push_back(r);
    groups[r].push_back(static_cast<int>(i));
  }
  std::unordered_map<int, uint64_t> group_map;
  std::unordered_map<int, int> group_count;
  for (int r : order) {
    int cnt = -1;
    for (int m : groups[r]) {
      int need = InProcs(net.layers[m]);
      if (cnt < 0) cnt = need;
      if (need != cnt) {
        net.Report(Severity::kError, "AI8X_PROCESSORS", &net.layers[m],
                   "layers that read the same data need the same processor count (" + std::to_string(need) +
                       " vs " + std::to_string(cnt) + ")");
      }
      if (need > 64) {
        net.Report(Severity::kError, "AI8X_PROCESSORS", &net.layers[m], "needs more than 64 processors");
      }
    }
    group_count[r] = std::clamp(cnt, 1, 64);
  }

  // Kernel-memory fill per processor (72-bit words) and the per-layer estimate used while
  // placing: the output map is not known yet, so its span is taken as the packed count.
  std::vector<int64_t> fill(64, 0);
  auto est_words = [&](const Layer& l) {
    if (!l.has_weights()) return int64_t{0};
    return KernLen(l, Run(ComputePasses(l.out_shape.c).processors, 0));
  };
  auto place_cost = [&](const std::vector<int>& members, const std::vector<uint64_t>& maps,
                        std::vector<int64_t>& f) {
    for (size_t k = 0; k < members.size(); ++k) {
      const Layer& l = net.layers[members[k]];
      int64_t w = est_words(l);
      if (w == 0) continue;
      int64_t off = 0;
      for (int p = 0; p < 64; ++p) {
        if ((maps[k] >> p) & 1) off = std::max(off, f[p]);
      }
      off = (off + 3) / 4 * 4;
      for (int p = 0; p < 64; ++p) {
        if ((maps[k] >> p) & 1) f[p] = off + w;
      }
    }
  };

  // Producers' input maps, to prefer memories the producer does not read (ping-pong across
  // instances) when kernel cost ties.
  auto producer_in_instances = [&](int root) {
    uint32_t m = 0;
    for (int member : groups[root]) {
      for (int in : net.layers[member].inputs) {
        if (in == kNetworkInput) continue;
        int pi = net.IndexOf(in);
        if (pi >= 0 && net.layers[pi].processors != 0) m |= InstanceMask(net.layers[pi].processors);
      }
    }
    return m;
  };

  auto make_map = [&](int count, int shift, bool chw, bool fifo) -> uint64_t {
    if (chw) {
      int mult = count <= 4 ? 16 : 4;
      uint64_t m = 0;
      for (int i = 0; i < count; ++i) m |= uint64_t{1} << (mult * i);
      return m << shift;
    }
    if (fifo && count > 4) {  // FIFO: processors 0-3/16-19/32-35/48-51
      uint64_t m = 0;
      for (int i = 0; i < count; ++i) m |= uint64_t{1} << ((i / 4) * 16 + i % 4);
      return m;
    }
    return Run(count, shift);
  };

  // Allocation order: the input group first, then by weight cost (seed step 10), heaviest first.
  int input_root = uf.Find(0);
  std::vector<int> rest;
  for (int r : order) {
    if (r != input_root) rest.push_back(r);
  }
  std::unordered_map<int, int64_t> group_weight;
  for (int r : rest) {
    int64_t w = 0;
    for (int m : groups[r]) w += est_words(net.layers[m]);
    group_weight[r] = w;
  }
  std::stable_sort(rest.begin(), rest.end(), [&](int a, int b) {
    int64_t wa = group_weight[a], wb = group_weight[b];
    if (wa != wb) return wa > wb;
    return group_count[a] > group_count[b];
  });
  std::vector<int> alloc_order{input_root};
  alloc_order.insert(alloc_order.end(), rest.begin(), rest.end());

  for (int r : alloc_order) {
    const std::vector<int>& members = groups[r];
    int cnt = group_count[r];
    bool chw = false;
    for (int m : members) chw |= net.layers[m].chw_input;
    bool is_input = r == input_root;
    bool fifo = is_input && net.use_fifo;
    int max_shift;
    if (chw) {
      int mult = cnt <= 4 ? 16 : 4;
      max_shift = 64 - (mult * (cnt - 1) + 1);
      max_shift = std::min(max_shift, mult == 16 ? 15 : 3);
    } else {
      max_shift = 64 - cnt;
    }
    bool pinned = is_input && (!options.move_l0 || fifo || chw);
    uint32_t avoid = producer_in_instances(r);
    std::tuple<int64_t, int64_t, int64_t, int, int> best{INT64_MAX, INT64_MAX, INT64_MAX, INT_MAX, 0};
    // Single weight layer (the common case): the fill only grows on the map's processors.
    int weighted = 0;
    int64_t single_words = 0;
    for (int m : members) {
      int64_t w = est_words(net.layers[m]);
      if (w > 0) {
        ++weighted;
        single_words = w;
      }
    }
    const int64_t global_before = *std::max_element(fill.begin(), fill.end());
    std::vector<int64_t> f;
    for (int shift = 0; shift <= std::max(0, max_shift); shift += 4) {
      std::vector<uint64_t> maps(members.size(), make_map(cnt, shift, chw, fifo));
      int64_t global = 0, local = 0;
      if (weighted <= 1) {
        int64_t off = 0;
        for (uint64_t b = maps[0]; b; b &= b - 1) off = std::max(off, fill[std::countr_zero(b)]);
        local = weighted ? (off + 3) / 4 * 4 + single_words : off;
        global = std::max(global_before, local);
      } else {
        f = fill;
        place_cost(members, maps, f);
        global = *std::max_element(f.begin(), f.end());
        for (uint64_t b = maps[0]; b; b &= b - 1) local = std::max(local, f[std::countr_zero(b)]);
      }
      int overlap = std::popcount(InstanceMask(maps[0]) & avoid);
      // Depthwise layers (broadcast mode) take bias bytes for every processor of each quadrant
      // they touch, rearranged per quadrant (kbias.py L90-180); maps that start at processor 0,
      // as in the hand-written MobileNetV2 file, waste the least (padding at the end is trimmed).
      int64_t dw_bias = 0;
      for (int m : members) {
        const Layer& ml = net.layers[m];
        if (ml.groups > 1 && ml.has_bias) dw_bias = shift;
      }
      std::tuple<int64_t, int64_t, int64_t, int, int> cost{global, dw_bias, local, overlap, shift};
      if (cost < best) best = cost;
      if (pinned || fifo) break;
    }
    uint64_t map = make_map(cnt, std::get<4>(best), chw, fifo);
    group_map[r] = map;
    std::vector<uint64_t> maps(members.size(), map);
    place_cost(members, maps, fill);
    for (int m : members) net.layers[m].processors = map;
  }

  // Output maps: the readers' map; concatenation parts: consecutive partial maps.
  for (size_t i = 0; i < n; ++i) {
    Layer& l = net.layers[i];
    auto it = readers.find(l.id);
    uint64_t out = 0;
    if (it != readers.end()) {
      bool concat_reader = false, other_reader = false;
      for (int r : it->second) (is_concat(net.layers[r]) ? concat_reader : other_reader) = true;
      if (concat_reader && (other_reader || it->second.size() > 1)) {
        net.Report(Severity::kError, "AI8X_CONCAT", &l,
                   "this output is concatenated and also read elsewhere; a layer writes one output map, so "
                   "the concatenation cannot take it (copy it with a separate layer first)");
      }
      for (int r : it->second) {
        const Layer& reader = net.layers[r];
        if (!is_concat(reader)) {
          out = reader.processors;
          break;
        }
        // concat part: offset = channels of earlier parts, each rounded up to a multiple of 4
        int shift = Ffs(reader.processors);
        for (int part : reader.inputs) {
          int ch = net.OutputShapeOf(part).c;
          if (part == l.id) {
            out = Run(ch, shift);
            break;
          }
          shift += (ch + 3) / 4 * 4;
        }
        break;
      }
    }
    if (out == 0) {
      // no reader: final/output-only layer. Passthrough keeps its map; others use the izer
      // default (packed from processor 0) for the final layer, the next layer's map otherwise.
      if (l.op == OpKind::kNone) {
        out = l.processors;
      } else if (i + 1 < n && std::popcount(net.layers[i + 1].processors) == ComputePasses(l.out_shape.c).processors) {
        out = net.layers[i + 1].processors;
      } else {
        out = DefaultFinalOutputMap(l.out_shape.c);
      }
    }
    l.output_processors = out;
  }
}

// ---------------------------------------------------------------------------------------------
// Pass 8: data-memory planning.

namespace {

struct Region {
  uint32_t instances;
  int64_t start, end;  // [start, end) bytes within each instance
  int t0, t1;          // live from layer t0 (its writer) to t1 (its last reader), inclusive
  int owner;           // layer position, -1 for the network input
};

}  // namespace

void PlanDataMemory(Network& net) {
  const size_t n = net.layers.size();
  if (n == 0) return;
  net.Reindex();
  const int64_t inst = net.spec().data_instance_bytes;
  constexpr int kForever = INT_MAX;
  // Last reader position and readers of each producer.
  std::unordered_map<int, int> last_use;
  std::unordered_map<int, std::vector<int>> readers_of;
  for (size_t i = 0; i < n; ++i) {
    for (int in : net.layers[i].inputs) {
      last_use[in] = std::max(last_use[in], static_cast<int>(i));
      readers_of[in].push_back(net.layers[i].id);
    }
  }
  int last_stream = -1;
  for (size_t i = 0; i < n; ++i) {
    if (net.layers[i].streaming) last_stream = static_cast<int>(i);
  }
  std::vector<Region> regions;
  std::vector<Region> active;  // regions possibly live at the current position

  auto conflicts = [&](const Region& r, int64_t start) {
    for (const Region& o : active) {
      if ((o.instances & r.instances) == 0) continue;
      if (o.t1 < r.t0 || r.t1 < o.t0) continue;
      if (start < o.end && o.start < start + (r.end - r.start)) return true;
    }
    return false;
  };
  auto place = [&](Region r, int64_t fixed = -1) -> int64_t {
    int64_t size = r.end - r.start;
    std::vector<int64_t> cands;
    if (fixed >= 0) {
      cands.push_back(fixed);
    } else {
      cands.push_back(0);
      for (const Region& o : active) {
        if ((o.instances & r.instances) && !(o.t1 < r.t0 || r.t1 < o.t0)) cands.push_back((o.end + 3) / 4 * 4);
      }
      std::sort(cands.begin(), cands.end());
    }
    for (int64_t s : cands) {
      if (s + size > inst) continue;
      if (!conflicts(r, s)) {
        r.start = s;
        r.end = s + size;
        active.push_back(r);
        regions.push_back(r);
        return s;
      }
    }
    return -1;
  };
  auto prune = [&](int now) {
    active.erase(std::remove_if(active.begin(), active.end(), [&](const Region& r) { return r.t1 < now; }),
                 active.end());
  };

  // Network input (at 0: the izer loads it at in_offset 0 of layer 0 by default).
  const Layer& first = net.layers.front();
  {
    Region r{};
    r.instances = InstanceMask(first.processors);
    for (const Layer& l : net.layers) {
      if (std::find(l.inputs.begin(), l.inputs.end(), kNetworkInput) != l.inputs.end()) {
        r.instances |= InstanceMask(l.processors);
      }
    }
    Layer probe = first;
    probe.operands = 1;
    int64_t size = first.streaming && net.use_fifo ? StreamBufferBytes(first) : DataInBytes(net, probe);
    r.start = 0;
    r.end = size;
    r.t0 = -1;
    r.t1 = first.streaming ? last_stream : (last_use.count(kNetworkInput) ? last_use[kNetworkInput] : 0);
    r.owner = -1;
    if (size > inst) {
      net.Report(Severity::kError, "AI8X_DATA_MEMORY", &first,
                 "the network input needs " + std::to_string(size) + " B per data-memory instance, more than " +
                     std::to_string(inst) + " B; what would help: CHW input (--input-format CHW), streaming "
                                             "(HWC input with at most 16 channels), or a smaller input");
    } else {
      place(r, 0);
    }
  }

  // Group bases for element-wise operands and concatenation parts: reader id -> base.
  std::unordered_map<int, int64_t> group_base;
  for (size_t i = 0; i < n; ++i) {
    prune(static_cast<int>(i));
    Layer& l = net.layers[i];
    // in_offset from the producer(s)
    if (!l.inputs.empty()) {
      if (l.inputs.size() > 1) {
        auto gb = group_base.find(l.id);
        l.in_offset = gb == group_base.end() ? 0 : static_cast<int>(gb->second);
      } else if (l.inputs[0] == kNetworkInput) {
        l.in_offset = 0;
      } else if (const Layer* p = net.Find(l.inputs[0])) {
        l.in_offset = p->out_offset;
      }
    }
    // Who reads this layer's output?
    auto rit = readers_of.find(l.id);
    const Layer* reader = rit != readers_of.end() && rit->second.size() == 1 ? net.Find(rit->second[0]) : nullptr;
    bool grouped = reader != nullptr && reader->inputs.size() > 1;
    int t1 = last_use.count(l.id) ? last_use[l.id] : static_cast<int>(i);
    if (l.output || i + 1 == n) t1 = kForever;
    Region r{};
    r.instances = InstanceMask(l.output_processors);
    r.owner = static_cast<int>(i);
    r.t0 = static_cast<int>(i);
    r.t1 = t1;
    int64_t size = DataOutBytes(net, l);
    if (l.streaming && static_cast<int>(i) < last_stream) {
      // rolling buffer for the next (streaming) layer's input
      size = StreamBufferBytes(net.layers[i + 1]);
      r.t0 = -1;
      r.t1 = std::max(t1, last_stream);
    }
    if (grouped) {
      auto gb = group_base.find(reader->id);
      int k = static_cast<int>(std::find(reader->inputs.begin(), reader->inputs.end(), l.id) - reader->inputs.begin());
      bool eltwise = reader->operands > 1;
      if (gb != group_base.end()) {
        l.out_offset = static_cast<int>(gb->second + (eltwise ? 4 * k : 0));
        continue;
      }
      // reserve the whole interleaved / concatenated region now
      int first_pos = static_cast<int>(i);
      uint32_t inst_mask = 0;
      int64_t part = 0;
      for (int in : reader->inputs) {
        const Layer* p = net.Find(in);
        if (p == nullptr) continue;
        first_pos = std::min(first_pos, net.IndexOf(in));
        inst_mask |= InstanceMask(p->output_processors);
        part = std::max(part, DataOutBytes(net, *p));
      }
      r.instances = inst_mask;
      r.t0 = first_pos;
      r.t1 = net.IndexOf(reader->id);
      if (reader->output) r.t1 = kForever;
      size = eltwise ? part * reader->operands : part;
      r.start = 0;
      r.end = size;
      int64_t base = place(r);
      if (base < 0) {
        net.Report(Severity::kError, "AI8X_DATA_MEMORY", &l,
                   "no room for the " + std::to_string(size) + "-byte " + (eltwise ? "interleaved element-wise" : "concatenation") +
                       " input of layer " + reader->name + " next to the data still live in its memory instances; what would help: fewer channels, smaller feature maps, or fewer tensors live across the branch");
        base = 0;
      }
      group_base[reader->id] = base;
      l.out_offset = static_cast<int>(base + (eltwise ? 4 * k : 0));
      continue;
    }
    r.start = 0;
    r.end = size;
    int64_t off = place(r);
    if (off < 0) {
      net.Report(Severity::kError, "AI8X_DATA_MEMORY", &l,
                 "no room for the " + std::to_string(size) + "-byte output (per data-memory instance of " +
                     std::to_string(inst) + " B) next to the data still live in its memory instances; what would "
                     "help: fewer channels, pooling earlier, streaming, or CHW input");
      off = 0;
    }
    l.out_offset = static_cast<int>(off);
  }
}

}  // namespace kiln::ai8x
