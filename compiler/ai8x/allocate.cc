// Pass AllocateProcessors (compiler/ai8x/passes.h; docs/specs/ai8x-izer-rules.md §1.5, §1.7):
// shared maps, then one map per group placed where kernel memory (KernelMemoryMap) stays lowest,
// then output maps.
#include <algorithm>
#include <climits>
#include <numeric>
#include <tuple>
#include <unordered_map>

#include "compiler/ai8x/kernel_memory.h"
#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/resources.h"
#include "compiler/ai8x/rules/rules.h"

namespace kiln::ai8x {
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

bool IsConcat(const Layer& l) { return l.inputs.size() > 1 && l.operands == 1; }

// Processors a layer reads with (docs/specs/ai8x-izer-rules.md §1.5); CHW input: one processor per
// channel.
int InProcs(const Layer& l) {
  if (l.placed.chw_input) return l.in_shape.c;
  return ComputePasses(l.in_shape.c).processors;
}

// Kernel words of `l` while placing: the output map is not known yet, so its span is taken as the
// packed count.
int64_t EstimatedWords(const Layer& l) {
  if (!l.has_weights()) return 0;
  return KernLen(l, ProcessorRun(ComputePasses(l.out_shape.c).processors, 0));
}

// EstimatedWords of a group's member, 0 for one that reuses an earlier member's kernels (the
// group shares one map: SameKernels is then KernelTwin).
int64_t MemberWords(const Network& net, const std::vector<int>& members, size_t k) {
  const Layer& l = net.layers[members[k]];
  for (size_t j = 0; j < k; ++j) {
    if (SameKernels(net.layers[members[j]], l)) return 0;
  }
  return EstimatedWords(l);
}

// A map of `count` processors at `shift`: contiguous (HWC), one per group of 4 / 16 (CHW), or on
// the FIFO processors 0-3/16-19/32-35/48-51.
uint64_t MakeMap(int count, int shift, bool chw, bool fifo) {
  if (chw) {
    int mult = count <= 4 ? 16 : 4;
    uint64_t m = 0;
    for (int i = 0; i < count; ++i) m |= uint64_t{1} << (mult * i);
    return m << shift;
  }
  if (fifo && count > 4) {
    uint64_t m = 0;
    for (int i = 0; i < count; ++i) m |= uint64_t{1} << ((i / 4) * 16 + i % 4);
    return m;
  }
  return ProcessorRun(count, shift);
}

// Layers that must share one input map: readers of the same data (element-wise operands write to
// their consumer's map), and passthrough / depthwise layers with their readers (output = packed
// input per x16, max7800x.py L945-962; depthwise broadcast mode moves no data across processors
// and then fills whole quadrants of bias memory the way kbias.py packs them, as in the
// hand-written MobileNetV2).
struct Groups {
  std::unordered_map<int, std::vector<int>> members;  // root -> layer positions, in order
  std::vector<int> order;                             // roots by their first member
  std::unordered_map<int, int> count;                 // root -> processors of the map
  int input_root = 0;
};

Groups GroupSharedMaps(Network& net, const std::unordered_map<int, std::vector<int>>& readers) {
  const size_t n = net.layers.size();
  UnionFind uf(n);
  for (const auto& [prod, rs] : readers) {
    int anchor = -1;
    for (int r : rs) {
      if (IsConcat(net.layers[r])) continue;
      if (anchor < 0) {
        anchor = r;
      } else {
        uf.Union(r, anchor);
      }
    }
  }
  // Layers applying one module again (SameKernels) read on one map, so the izer stores their
  // kernels once (izer/kdedup.py compares processor maps too).
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (SameKernels(net.layers[j], net.layers[i]) && InProcs(net.layers[j]) == InProcs(net.layers[i])) {
        uf.Union(static_cast<int>(i), static_cast<int>(j));
        break;
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const Layer& l = net.layers[i];
    if (l.op != OpKind::kNone && l.groups == 1) continue;
    auto it = readers.find(l.id);
    if (it == readers.end()) continue;
    for (int r : it->second) {
      if (!IsConcat(net.layers[r])) uf.Union(static_cast<int>(i), r);
    }
  }
  Groups g;
  for (size_t i = 0; i < n; ++i) {
    int r = uf.Find(static_cast<int>(i));
    std::vector<int>& m = g.members[r];
    if (m.empty()) g.order.push_back(r);
    m.push_back(static_cast<int>(i));
  }
  for (int r : g.order) {
    int cnt = -1;
    for (int m : g.members[r]) {
      int need = InProcs(net.layers[m]);
      if (cnt < 0) cnt = need;
      rules::CheckSharedMapCount(net, net.layers[m], need, cnt);
    }
    g.count[r] = std::clamp(cnt, 1, 64);
  }
  g.input_root = uf.Find(0);
  return g;
}

// The input group first, then by weight cost (seed yamlwriter step 10), heaviest first.
std::vector<int> AllocationOrder(const Network& net, Groups& g) {
  std::vector<int> rest;
  for (int r : g.order) {
    if (r != g.input_root) rest.push_back(r);
  }
  std::unordered_map<int, int64_t> weight;
  for (int r : rest) {
    int64_t w = 0;
    for (size_t k = 0; k < g.members[r].size(); ++k) w += MemberWords(net, g.members[r], k);
    weight[r] = w;
  }
  std::stable_sort(rest.begin(), rest.end(), [&](int a, int b) {
    int64_t wa = weight[a], wb = weight[b];
    if (wa != wb) return wa > wb;
    return g.count[a] > g.count[b];
  });
  std::vector<int> order{g.input_root};
  order.insert(order.end(), rest.begin(), rest.end());
  return order;
}

// The kernels of a group's weight layers, one after the other, all on `map` (twins once).
void PlaceKernels(const Network& net, const std::vector<int>& members, uint64_t map, KernelMemoryMap& memory) {
  for (size_t k = 0; k < members.size(); ++k) {
    int64_t w = MemberWords(net, members, k);
    if (w != 0) memory.Place(map, w);
  }
}

// Data-memory instances the group's producers read from (ping-pong across instances is preferred
// when kernel cost ties).
uint32_t ProducerInstances(const Network& net, const std::vector<int>& members) {
  uint32_t m = 0;
  for (int member : members) {
    for (int in : net.layers[member].inputs) {
      if (in == kNetworkInput) continue;
      int pi = net.IndexOf(in);
      if (pi >= 0 && net.layers[pi].placed.processors != 0) m |= InstanceMask(net.layers[pi].placed.processors);
    }
  }
  return m;
}

// The map a concatenation part must be written to when the reader reads `reader_map`: that map
// when it is read in passes (interleaved parts, concat_copy.cc), else consecutive partial maps,
// each part's offset being the channels of the earlier parts rounded up to a multiple of 4.
uint64_t ConcatPartMapFor(const Network& net, const Layer& reader, int part_id, uint64_t reader_map) {
  if (ComputePasses(reader.in_shape.c).passes > 1) return reader_map;
  int shift = FirstProcessor(reader_map);
  for (int part : reader.inputs) {
    int ch = net.OutputShapeOf(part).c;
    if (part == part_id) return ProcessorRun(ch, shift);
    shift += (ch + 3) / 4 * 4;
  }
  return 0;
}
uint64_t ConcatPartMap(const Network& net, const Layer& reader, int part_id) {
  return ConcatPartMapFor(net, reader, part_id, reader.placed.processors);
}

// Data a group's map receives (its members' inputs), for the data-memory pressure estimate: bytes
// per instance over positions [t0, t1]; a concatenation part lands on its part map.
struct DataShare {
  int64_t bytes;
  int t0, t1;
  const Layer* concat;  // non-null: a part of this concatenating reader
  int part;
};

// Live bytes per (instance, position) of the data already assigned to maps: a map whose data would
// not fit beside them is avoided when the kernel cost allows (PlaceGroup). A lower bound of what
// PlanDataMemory needs (no fragmentation); an output that may overwrite the input it is the last
// reader of (in place) counts from the next position.
class DataPressure {
 public:
  explicit DataPressure(const Network& net) : net_(net), n_(static_cast<int>(net.layers.size())), live_(16 * (n_ + 2), 0) {
    for (int i = 0; i < n_; ++i) {
      for (int in : net.layers[i].inputs) last_use_[in] = std::max(last_use_[in], i);
    }
  }

  std::vector<DataShare> SharesOf(const std::vector<int>& members) const {
    std::vector<DataShare> shares;
    std::vector<int> seen;
    for (int m : members) {
      const Layer& l = net_.layers[m];
      if (l.inputs.size() > 1 && l.operands == 1) {
        for (int part : l.inputs) {
          int p = part == kNetworkInput ? -1 : net_.IndexOf(part);
          int64_t bytes = p < 0 ? 0 : DataOutBytes(net_, net_.layers[p]);
          shares.push_back({bytes, Start(p), End(part, m), &l, part});
        }
        continue;
      }
      int64_t bytes = 0;
      int t0 = m;
      for (int in : l.inputs) {
        if (std::find(seen.begin(), seen.end(), in) != seen.end()) continue;
        seen.push_back(in);
        int p = in == kNetworkInput ? -1 : net_.IndexOf(in);
        bytes += p < 0 ? DataInBytes(net_, l) / std::max(1, l.operands) : DataOutBytes(net_, net_.layers[p]);
        t0 = std::min(t0, Start(p));
      }
      if (bytes > 0) shares.push_back({bytes, t0, l.inputs.empty() ? m : End(l.inputs[0], m), nullptr, 0});
    }
    return shares;
  }

  // Bytes beyond the instance size if `shares` went onto `map`.
  int64_t Overflow(const std::vector<DataShare>& shares, uint64_t map) const {
    const int64_t inst = net_.spec().data_instance_bytes;
    int64_t over = 0;
    for (const DataShare& d : shares) {
      uint32_t im = InstanceMask(d.concat ? ConcatPartMapFor(net_, *d.concat, d.part, map) : map);
      for (int k = 0; k < 16; ++k) {
        if (!(im >> k & 1)) continue;
        for (int t = d.t0; t <= d.t1; ++t) over += std::max<int64_t>(0, live_[Idx(k, t)] + d.bytes - inst);
      }
    }
    return over;
  }

  void Add(const std::vector<DataShare>& shares, uint64_t map, int64_t sign = 1) {
    for (const DataShare& d : shares) {
      uint32_t im = InstanceMask(d.concat ? ConcatPartMapFor(net_, *d.concat, d.part, map) : map);
      for (int k = 0; k < 16; ++k) {
        if (!(im >> k & 1)) continue;
        for (int t = d.t0; t <= d.t1; ++t) live_[Idx(k, t)] += sign * d.bytes;
      }
    }
  }
  void Remove(const std::vector<DataShare>& shares, uint64_t map) { Add(shares, map, -1); }

  // Bytes beyond the instance size, summed over instances and positions.
  int64_t TotalOverflow() const {
    const int64_t inst = net_.spec().data_instance_bytes;
    int64_t over = 0;
    for (int64_t v : live_) over += std::max<int64_t>(0, v - inst);
    return over;
  }

 private:
  size_t Idx(int k, int t) const { return static_cast<size_t>(k) * (n_ + 2) + static_cast<size_t>(t + 1); }
  // The producer at position p writes its output; in place when it is the last reader of its input.
  int Start(int p) const {
    if (p < 0) return -1;
    const Layer& l = net_.layers[p];
    bool in_place = l.inputs.size() == 1 && InPlaceLag(l) >= 0 && LastUse(l.inputs[0]) == p;
    return in_place ? std::min(p + 1, n_) : p;
  }
  int End(int id, int reader) const {
    int p = id == kNetworkInput ? -1 : net_.IndexOf(id);
    if (p >= 0 && (net_.layers[p].output || p + 1 == n_)) return n_;
    return std::max(reader, LastUse(id));
  }
  int LastUse(int id) const {
    auto it = last_use_.find(id);
    return it == last_use_.end() ? -1 : it->second;
  }

  const Network& net_;
  const int n_;
  std::vector<int64_t> live_;
  std::unordered_map<int, int> last_use_;
};

// The map of one group: every start at a multiple of 4, cheapest by (kernel memory of the whole
// chip, depthwise bias waste, kernel memory of the map, instances shared with the producer, start),
// maps whose data would overflow a data-memory instance (DataPressure) last.
uint64_t PlaceGroup(const Network& net, const std::vector<int>& members, int cnt, bool is_input,
                    const Ai8xOptions& options, const KernelMemoryMap& fill, DataPressure& pressure) {
  std::vector<DataShare> shares = pressure.SharesOf(members);
  bool chw = false;
  for (int m : members) chw |= net.layers[m].placed.chw_input;
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
  uint32_t avoid = ProducerInstances(net, members);
  // The group's weight layers go one after the other on its map (KernelMemoryMap::EndIfStacked):
  // only the map's processors grow.
  std::vector<int64_t> words;
  words.reserve(members.size());
  bool dw_biased = false;
  for (size_t k = 0; k < members.size(); ++k) {
    const Layer& ml = net.layers[members[k]];
    words.push_back(MemberWords(net, members, k));
    dw_biased |= ml.groups > 1 && ml.has_bias;
  }
  const int64_t global_before = fill.MaxFill();
  std::tuple<int64_t, int64_t, int64_t, int64_t, int, int> best{INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, INT_MAX, 0};
  for (int shift = 0; shift <= std::max(0, max_shift); shift += 4) {
    uint64_t map = MakeMap(cnt, shift, chw, fifo);
    int64_t local = fill.EndIfStacked(map, words);
    int64_t global = std::max(global_before, local);
    int overlap = std::popcount(InstanceMask(map) & avoid);
    // Depthwise layers (broadcast mode) take bias bytes for every processor of each quadrant they
    // touch, rearranged per quadrant (kbias.py L90-180); maps that start at processor 0, as in the
    // hand-written MobileNetV2 file, waste the least (padding at the end is trimmed).
    int64_t dw_bias = dw_biased ? shift : 0;
    // the kernel cost decides first only while it is within the chip: a map that overflows data
    // memory loses to any that does not
    int64_t over = pressure.Overflow(shares, map);
    std::tuple<int64_t, int64_t, int64_t, int64_t, int, int> cost{over > 0 ? 1 : 0, global, dw_bias, local, overlap, shift};
    if (cost < best) best = cost;
    if (pinned || fifo) break;
  }
  uint64_t chosen = MakeMap(cnt, std::get<5>(best), chw, fifo);
  pressure.Add(shares, chosen);
  return chosen;
}

// Output maps: the readers' map; concatenation parts their part map (which the part's other
// readers were pinned to, PinConcatParts).
void AssignOutputMaps(Network& net, const std::unordered_map<int, std::vector<int>>& readers) {
  const size_t n = net.layers.size();
  for (size_t i = 0; i < n; ++i) {
    Layer& l = net.layers[i];
    auto it = readers.find(l.id);
    uint64_t out = 0;
    if (it != readers.end()) {
      int concat_readers = 0;
      for (int r : it->second) concat_readers += IsConcat(net.layers[r]) ? 1 : 0;
      for (int r : it->second) {
        const Layer& reader = net.layers[r];
        if (concat_readers == 0 || IsConcat(reader)) {
          out = IsConcat(reader) ? ConcatPartMap(net, reader, l.id) : reader.placed.processors;
          break;
        }
      }
      bool consistent = concat_readers <= 1;
      if (concat_readers > 0) {
        for (int r : it->second) {
          if (!IsConcat(net.layers[r]) && net.layers[r].placed.processors != out) consistent = false;
        }
      }
      if (!consistent) rules::ReportConcatAlsoReadElsewhere(net, l);
    }
    if (out == 0) {
      // no reader: final/output-only layer. Passthrough keeps its map; others use the izer
      // default (packed from processor 0) for the final layer, the next layer's map otherwise.
      if (l.op == OpKind::kNone) {
        out = l.placed.processors;
      } else if (i + 1 < n && std::popcount(net.layers[i + 1].placed.processors) == ComputePasses(l.out_shape.c).processors) {
        out = net.layers[i + 1].placed.processors;
      } else {
        out = DefaultFinalOutputMap(l.out_shape.c);
      }
    }
    l.placed.output_processors = out;
  }
}

// A concatenation part is written to its part map (ConcatPartMap), so the group that must read
// the same map is pinned to it: the part's other readers, or, for a part whose output map is its
// input map (passthrough copies, depthwise), the part's own group. Root -> (concat position, part
// id); a group claimed by two different parts is reported (AI8X_CONCAT) and left unpinned.
std::unordered_map<int, std::pair<int, int>> PinConcatParts(Network& net, const Groups& g,
                                                            const std::unordered_map<int, std::vector<int>>& readers) {
  std::unordered_map<int, int> root_of;
  for (const auto& [root, members] : g.members) {
    for (int m : members) root_of[m] = root;
  }
  std::unordered_map<int, std::pair<int, int>> pins;
  std::vector<int> conflicted;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const Layer& c = net.layers[i];
    if (!IsConcat(c)) continue;
    for (int part : c.inputs) {
      int pi = part == kNetworkInput ? -1 : net.IndexOf(part);
      if (pi < 0) continue;
      const Layer& pl = net.layers[pi];
      int root = -1;
      if (pl.op == OpKind::kNone || pl.groups > 1) {
        root = root_of[pi];
      } else if (auto it = readers.find(part); it != readers.end()) {
        for (int r : it->second) {
          if (!IsConcat(net.layers[r])) {
            root = root_of[r];
            break;
          }
        }
      }
      if (root < 0) continue;
      auto [it, fresh] = pins.emplace(root, std::make_pair(static_cast<int>(i), part));
      if (!fresh && it->second != std::make_pair(static_cast<int>(i), part)) {
        rules::ReportConcatAlsoReadElsewhere(net, pl);
        conflicted.push_back(root);
      }
    }
  }
  for (int r : conflicted) pins.erase(r);
  return pins;
}

}  // namespace

void AllocateProcessors(Network& net, const Ai8xOptions& options) {
  const size_t n = net.layers.size();
  if (n == 0) return;
  net.Reindex();
  std::unordered_map<int, std::vector<int>> readers;  // producer id (kNetworkInput too) -> reader positions
  for (size_t i = 0; i < n; ++i) {
    for (int in : net.layers[i].inputs) readers[in].push_back(static_cast<int>(i));
  }
  Groups groups = GroupSharedMaps(net, readers);
  auto pins = PinConcatParts(net, groups, readers);
  std::unordered_map<int, int> root_of;
  for (const auto& [root, members] : groups.members) {
    for (int m : members) root_of[m] = root;
  }
  const std::vector<int> order = AllocationOrder(net, groups);
  // One allocation; with `prior` (the maps of an earlier one) the data-memory pressure starts from
  // all of them, each group's own share taken out while it is placed again. Returns the estimated
  // overflow (DataPressure::TotalOverflow).
  auto run = [&](const std::unordered_map<int, uint64_t>* prior, std::unordered_map<int, uint64_t>& chosen) {
    KernelMemoryMap fill;
    DataPressure pressure(net);
    if (prior != nullptr) {
      for (const auto& [r, map] : *prior) {
        if (!pins.count(r)) pressure.Add(pressure.SharesOf(groups.members[r]), map);
      }
    }
    auto place = [&](int r) {
      const std::vector<int>& members = groups.members[r];
      if (prior != nullptr && prior->count(r)) pressure.Remove(pressure.SharesOf(members), prior->at(r));
      uint64_t map = PlaceGroup(net, members, groups.count[r], r == groups.input_root, options, fill, pressure);
      PlaceKernels(net, members, map, fill);
      for (int m : members) net.layers[m].placed.processors = map;
      chosen[r] = map;
    };
    std::vector<int> deferred;
    for (int r : order) {
      if (pins.count(r)) {
        deferred.push_back(r);
      } else {
        place(r);
      }
    }
    // Pinned groups once their concatenating reader has its map (a pinned reader first).
    std::unordered_map<int, bool> placed_root;
    for (const auto& [root, members] : groups.members) placed_root[root] = pins.count(root) == 0;
    for (bool progress = true; progress && !deferred.empty();) {
      progress = false;
      for (auto it = deferred.begin(); it != deferred.end();) {
        auto [concat_pos, part] = pins[*it];
        if (!placed_root[root_of[concat_pos]]) {
          ++it;
          continue;
        }
        uint64_t map = ConcatPartMap(net, net.layers[concat_pos], part);
        const std::vector<int>& members = groups.members[*it];
        if (std::popcount(map) != groups.count[*it]) {
          rules::ReportConcatAlsoReadElsewhere(net, net.layers[net.IndexOf(part)]);
          map = PlaceGroup(net, members, groups.count[*it], *it == groups.input_root, options, fill, pressure);
        }
        PlaceKernels(net, members, map, fill);
        for (int m : members) net.layers[m].placed.processors = map;
        chosen[*it] = map;
        placed_root[*it] = true;
        it = deferred.erase(it);
        progress = true;
      }
    }
    for (int r : deferred) place(r);  // a cycle of pins (cannot happen in a DAG)
    return pressure.TotalOverflow();
  };
  std::unordered_map<int, uint64_t> maps;
  int64_t over = run(nullptr, maps);
  // While the estimate overflows, place every group again knowing where all the others' data is
  // (a few rounds; the plan with the least overflow is kept).
  for (int round = 0; round < 3 && over > 0; ++round) {
    std::unordered_map<int, uint64_t> again;
    int64_t over2 = run(&maps, again);
    if (over2 >= over) {
      for (const auto& [r, map] : maps) {
        for (int m : groups.members[r]) net.layers[m].placed.processors = map;
      }
      break;
    }
    over = over2;
    maps = std::move(again);
  }
  AssignOutputMaps(net, readers);
}

}  // namespace kiln::ai8x
