// Pass PlanDataMemory (compiler/ai8x/passes.h): every tensor's region (its bytes per data-memory
// instance, the instances its processors touch, its live interval from writer to last reader) is
// known before any offset is chosen, so the offsets come from an offline allocation over those
// intervals: best fit (the tightest hole that takes the region), tried in several region orders
// for networks of up to kExactOrders regions, keeping the plan with fewest failures and lowest peak.
// A layer's output may overlap the input it is the last reader of when it is written behind the
// rows still to be read (InPlaceLag); the izer then needs --overlap-data (its overwrite check,
// izer/unload.py verify_unload check_overwrite, rejects any write over the previous layer's
// output), so overlap is only used when the plan fails without it.
#include <algorithm>
#include <climits>
#include <numeric>
#include <unordered_map>

#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/resources.h"
#include "compiler/ai8x/rules/rules.h"

namespace kiln::ai8x {
namespace {

constexpr int kForever = INT_MAX;
constexpr size_t kExactOrders = 256;  // above: one time-ordered sweep (bench chains of 10^4 layers)
constexpr size_t kExactLayers = 128;    // exact search when best fit fails, up to this many layers
constexpr int64_t kSearchBudget = 200000;  // ... and this many placements

// One tensor's bytes in some instances over its live interval.
struct Piece {
  uint32_t instances = 0;
  int64_t size = 0;
  int t0 = 0, t1 = 0;  // live from position t0 (its writer; -1: before layer 0) to t1 (last reader)
};

// What gets one offset: a tensor, or the parts of a multi-input reader's input (one piece per
// part: each is live from its own writer and lies in its own instances, at the common base).
struct Region {
  std::vector<Piece> pieces;
  int64_t size = 0;       // largest piece
  int owner = -1;         // layer position (-1: network input)
  int reader = -1;        // grouped region: the element-wise / concatenating reader's position
  bool fixed0 = false;    // must start at 0 (FIFO input)
  int in_region = -1;     // the region this layer reads and is the last reader of (may overlap)
  int64_t lag = 0;        // ... when in.start - start >= lag
  int64_t guard = 0;      // bytes kept free on both sides (a streaming buffer, kStreamGuardBytes)
  int64_t start = -1;
};

// The izer compares a streaming layer's input buffer (in_offset .. in_offset + rollover * 4) with
// the other streaming buffers and with the last streaming layer's output as closed ranges
// (izer/utils.py overlap(): both ends included; max7800x.py "overlaps streaming buffer"), so a
// region that ends where a streaming buffer starts, or starts where one ends, is refused: keep one
// data word between them.
constexpr int64_t kStreamGuardBytes = 4;

bool Live(const Piece& a, const Piece& b) { return (a.instances & b.instances) && !(a.t1 < b.t0 || b.t1 < a.t0); }
bool Live(const Region& a, const Region& b) {
  for (const Piece& p : a.pieces) {
    for (const Piece& q : b.pieces) {
      if (Live(p, q)) return true;
    }
  }
  return false;
}
// Whether a at `sa` and b at `sb` share a live byte.
bool Clash(const Region& a, int64_t sa, const Region& b, int64_t sb) {
  int64_t g = std::max(a.guard, b.guard);
  for (const Piece& p : a.pieces) {
    for (const Piece& q : b.pieces) {
      if (Live(p, q) && sa < sb + q.size + g && sb < sa + p.size + g) return true;
    }
  }
  return false;
}
Region Single(uint32_t instances, int64_t size, int t0, int t1) {
  Region r;
  r.pieces.push_back({instances, size, t0, t1});
  r.size = size;
  return r;
}

// Slack added to the exact in-place distance: the accelerator reads a few pixels ahead of the one
// it writes. The hand-written camvid-unet-large.yaml of ai8x-synthesis runs with 18 pixels of slack
// on a 3x3 layer (dec0: 0x1b0 bytes between input and output where 90 pixels are needed); Kiln
// keeps 16 pixels more than the exact rule, which the placement test replays.
constexpr int64_t kInPlaceSlackBytes = 64;

}  // namespace

int64_t InPlaceLag(const Layer& l) {
  if (l.placed.streaming || l.placed.chw_input || l.flatten || l.write_gap != 0 || l.read_gap != 0 || l.operands > 1) {
    return -1;
  }
  if (l.op != OpKind::kConv2d && l.op != OpKind::kConv1d && l.op != OpKind::kNone) return -1;
  if (ComputePasses(l.in_shape.c).passes > 1 || ComputePasses(l.out_shape.c).passes > 1) return -1;
  const int64_t ob = 4 * l.output_width / 8;
  int64_t lag = 0;
  for (int r = 0; r < l.out_shape.h; ++r) {
    for (int c = 0; c < l.out_shape.w; ++c) {
      int64_t k = int64_t{r} * l.out_shape.w + c;
      lag = std::max(lag, ob * (k + 1) - 4 * InPlaceFirstPixelRead(l, r, c));
    }
  }
  return (lag + kInPlaceSlackBytes + 3) / 4 * 4;
}

int64_t InPlaceFirstPixelRead(const Layer& l, int r, int c) {
  const int pad = l.op == OpKind::kNone ? 0 : l.pad;
  const int ps_h = l.pool == PoolType::kNone ? 1 : l.pool_stride_h;
  const int ps_w = l.pool == PoolType::kNone ? 1 : (l.one_d ? 1 : l.pool_stride_w);
  int64_t row = int64_t{ps_h} * std::max(0, r * l.stride - pad);
  int64_t col = l.one_d ? 0 : int64_t{ps_w} * std::max(0, c * l.stride - pad);
  return row * l.in_shape.w + col;
}

namespace {

class Planner {
 public:
  Planner(Network& net, bool overlap) : net_(net), n_(net.layers.size()), inst_(net.spec().data_instance_bytes) {
    for (size_t i = 0; i < n_; ++i) {
      for (int in : net.layers[i].inputs) {
        last_use_[in] = std::max(last_use_[in], static_cast<int>(i));
        if (net.layers[i].inputs.size() > 1) multi_reader_.emplace(in, static_cast<int>(i));  // first one
      }
      if (net.layers[i].placed.streaming) last_stream_ = static_cast<int>(i);
    }
    BuildRegions(overlap);
  }

  // Allocates; returns the number of regions that fit nowhere (then `peak` is meaningless).
  int Allocate(const std::vector<int>& order, int64_t& peak) {
    for (Region& r : regions_) r.start = -1;
    int failed = 0;
    peak = 0;
    // Regions dead before every region still to place starts are dropped from `placed` (keeps the
    // time-ordered sweep linear in the layer count).
    std::vector<int> later_t0(order.size() + 1, kForever);
    for (size_t j = order.size(); j-- > 0;) later_t0[j] = std::min(later_t0[j + 1], FirstT(regions_[order[j]]));
    std::vector<int> placed;
    for (size_t j = 0; j < order.size(); ++j) {
      int k = order[j];
      Region& r = regions_[k];
      placed.erase(std::remove_if(placed.begin(), placed.end(),
                                  [&](int o) { return LastT(regions_[o]) < later_t0[j]; }),
                   placed.end());
      if (!BestFit(k, placed)) {
        ++failed;
        continue;
      }
      placed.push_back(k);
      peak = std::max(peak, r.start + r.size);
    }
    return failed;
  }

  std::vector<std::vector<int>> Orders() const {
    std::vector<int> base(regions_.size());
    std::iota(base.begin(), base.end(), 0);
    std::vector<std::vector<int>> orders{base};  // time order
    if (regions_.size() > kExactOrders) return orders;
    // reverse time order: a chain of in-place layers is stacked from its last layer up
    orders.emplace_back(base.rbegin(), base.rend());
    auto by = [&](auto key) {
      std::vector<int> o = base;
      std::stable_sort(o.begin(), o.end(), [&](int a, int b) { return key(regions_[a]) > key(regions_[b]); });
      orders.push_back(std::move(o));
    };
    by([](const Region& r) { return r.size; });
    by([](const Region& r) {
      int64_t a = 0;
      for (const Piece& p : r.pieces) a += p.size * (std::min(p.t1, 1 << 20) - p.t0 + 1);
      return a;
    });
    by([](const Region& r) {
      uint32_t m = 0;
      for (const Piece& p : r.pieces) m |= p.instances;
      return static_cast<int64_t>(std::popcount(m)) * r.size;
    });
    return orders;
  }

  // Writes the offsets of the current allocation; reports the regions that did not fit.
  // Returns whether some layer's output overlaps its input.
  bool Apply() {
    bool overlapped = false;
    for (const Region& r : regions_) {
      if (r.start >= 0) continue;
      if (r.owner < 0) {
        rules::ReportInputTooLarge(net_, net_.layers.front(), r.size);
      } else {
        rules::ReportNoRoom(net_, net_.layers[r.owner], r.size, r.reader >= 0 ? &net_.layers[r.reader] : nullptr);
      }
    }
    for (size_t i = 0; i < n_; ++i) {
      Layer& l = net_.layers[i];
      auto it = out_region_.find(static_cast<int>(i));
      if (it != out_region_.end()) {
        const Region& r = regions_[it->second];
        int64_t base = std::max<int64_t>(r.start, 0);
        l.placed.out_offset = static_cast<int>(base + 4 * part_index_[static_cast<int>(i)]);
        if (r.in_region >= 0 && r.start >= 0) {
          const Region& in = regions_[r.in_region];
          overlapped |= in.start >= 0 && Live(r, in) && r.start < in.start + in.size && in.start < r.start + r.size;
        }
      }
      if (l.inputs.size() > 1) {
        auto g = group_of_reader_.find(static_cast<int>(i));
        l.placed.in_offset = g == group_of_reader_.end() ? 0 : static_cast<int>(std::max<int64_t>(regions_[g->second].start, 0));
      } else if (!l.inputs.empty()) {
        int p = l.inputs[0] == kNetworkInput ? -1 : net_.IndexOf(l.inputs[0]);
        l.placed.in_offset = p < 0 ? (input_region_ >= 0 ? static_cast<int>(std::max<int64_t>(regions_[input_region_].start, 0)) : 0)
                                   : net_.layers[p].placed.out_offset;
      }
    }
    return overlapped;
  }

 private:
  void BuildRegions(bool overlap) {
    const Layer& first = net_.layers.front();
    uint32_t in_inst = InstanceMask(first.placed.processors);
    for (const Layer& l : net_.layers) {
      if (std::find(l.inputs.begin(), l.inputs.end(), kNetworkInput) != l.inputs.end()) {
        in_inst |= InstanceMask(l.placed.processors);
      }
    }
    Layer probe = first;
    probe.operands = 1;
    bool fifo_in = first.placed.streaming && net_.use_fifo;
    Region in = Single(in_inst, fifo_in ? StreamBufferBytes(first) : DataInBytes(net_, probe), -1,
                       first.placed.streaming ? last_stream_ : (last_use_.count(kNetworkInput) ? last_use_[kNetworkInput] : 0));
    // At 0 (the izer's default in_offset of layer 0) unless overlapping needs it higher.
    in.fixed0 = !overlap || fifo_in || first.placed.streaming;
    if (first.placed.streaming) in.guard = kStreamGuardBytes;
    input_region_ = Add(in);
    std::unordered_map<int, int> region_of_layer;  // producer position -> its plain output region
    for (size_t i = 0; i < n_; ++i) {
      const Layer& l = net_.layers[i];
      int pos = static_cast<int>(i);
      int t1 = last_use_.count(l.id) ? last_use_[l.id] : pos;
      if (l.output || i + 1 == n_) t1 = kForever;
      const Layer* reader = SoleMultiInputReader(l);
      if (reader != nullptr) {
        PlaceInGroup(l, pos, *reader);
        continue;
      }
      Region r = Single(InstanceMask(l.placed.output_processors), DataOutBytes(net_, l), pos, t1);
      r.owner = pos;
      if (l.placed.streaming && pos < last_stream_) {  // rolling buffer for the next (streaming) layer's input
        r = Single(r.pieces[0].instances, StreamBufferBytes(net_.layers[i + 1]), -1, std::max(t1, last_stream_));
        r.owner = pos;
        r.guard = kStreamGuardBytes;
      }
      if (overlap && !l.inputs.empty()) {
        // the input region: the producer's, or the parts of a concatenation this layer reads
        int src = -1;
        if (l.inputs.size() > 1) {
          src = group_of_reader_.count(pos) ? group_of_reader_[pos] : -1;
        } else if (l.inputs[0] == kNetworkInput) {
          src = input_region_;
        } else if (region_of_layer.count(net_.IndexOf(l.inputs[0]))) {
          src = region_of_layer[net_.IndexOf(l.inputs[0])];
        }
        int64_t lag = InPlaceLag(l);
        bool dies_here = src >= 0 && !regions_[src].fixed0;
        if (dies_here) {
          for (const Piece& p : regions_[src].pieces) dies_here &= p.t1 == pos;
        }
        if (dies_here && lag >= 0) {
          r.in_region = src;
          r.lag = lag;
        }
      }
      int k = Add(r);
      out_region_[pos] = k;
      region_of_layer[pos] = k;
    }
  }

  // The element-wise or concatenating reader of `l`'s output, if any (AllocateProcessors already
  // reported a part read by two of them; the first one is taken then).
  const Layer* SoleMultiInputReader(const Layer& l) const {
    auto it = multi_reader_.find(l.id);
    return it == multi_reader_.end() ? nullptr : &net_.layers[it->second];
  }
  static int FirstT(const Region& r) {
    int t = kForever;
    for (const Piece& p : r.pieces) t = std::min(t, p.t0);
    return t;
  }
  static int LastT(const Region& r) {
    int t = -1;
    for (const Piece& p : r.pieces) t = std::max(t, p.t1);
    return t;
  }

  // An element-wise operand or a multi-pass concatenation part (interleaved: base, base+4, ...)
  // or a single-pass concatenation part (all at one base): one region for the reader's input.
  void PlaceInGroup(const Layer& l, int pos, const Layer& reader) {
    int rpos = net_.IndexOf(reader.id);
    bool interleaved = reader.operands > 1 || ComputePasses(reader.in_shape.c).passes > 1;
    int k = static_cast<int>(std::find(reader.inputs.begin(), reader.inputs.end(), l.id) - reader.inputs.begin());
    part_index_[pos] = interleaved ? k : 0;
    auto g = group_of_reader_.find(rpos);
    if (g != group_of_reader_.end()) {
      out_region_[pos] = g->second;
      return;
    }
    Region r;
    r.owner = pos;
    r.reader = rpos;
    int t1 = reader.output || rpos + 1 == static_cast<int>(n_) ? kForever : rpos;
    int64_t part = 0;
    for (int in : reader.inputs) {
      int p = in == kNetworkInput ? -1 : net_.IndexOf(in);
      if (p >= 0) part = std::max(part, DataOutBytes(net_, net_.layers[p]));
    }
    int64_t span = interleaved ? part * static_cast<int64_t>(reader.inputs.size()) : part;
    for (int in : reader.inputs) {
      int p = in == kNetworkInput ? -1 : net_.IndexOf(in);
      if (p < 0) continue;
      const Layer& pl = net_.layers[p];
      int pt1 = pl.output ? kForever : std::max(t1, last_use_.count(in) ? last_use_.at(in) : p);
      r.pieces.push_back({InstanceMask(pl.placed.output_processors), span, p, pt1});
    }
    r.size = span;
    int idx = Add(r);
    group_of_reader_[rpos] = idx;
    out_region_[pos] = idx;
  }

  int Add(const Region& r) {
    regions_.push_back(r);
    return static_cast<int>(regions_.size()) - 1;
  }

  // Whether region k at `s` may sit next to placed region o.
  bool Compatible(int k, int64_t s, int o) const {
    const Region& r = regions_[k];
    const Region& q = regions_[o];
    if (!Clash(r, s, q, q.start)) return true;
    if (r.in_region == o) return q.start - s >= r.lag;  // r is written behind its input q
    if (q.in_region == k) return s - q.start >= q.lag;  // q is written behind its input r
    return false;
  }

  // Feasible starts of region k next to the placed regions, tightest hole first (best fit).
  // Candidates: 0, the top, right above or right below a live region, and the in-place lag.
  std::vector<int64_t> FeasibleStarts(int k, const std::vector<int>& placed) const {
    const Region& r = regions_[k];
    if (r.size > inst_) return {};
    std::vector<int> live;
    for (int o : placed) {
      if (Live(r, regions_[o])) live.push_back(o);
    }
    std::vector<int64_t> cands{0};
    if (!r.fixed0) {
      cands.push_back((inst_ - r.size) / 4 * 4);
      for (int o : live) {
        const Region& q = regions_[o];
        int64_t g = std::max(r.guard, q.guard);
        cands.push_back((q.start + q.size + g + 3) / 4 * 4);
        cands.push_back((q.start - r.size - g) / 4 * 4);
        if (r.in_region == o) cands.push_back(q.start - r.lag);
        if (q.in_region == k) cands.push_back(q.start + q.lag);
      }
    }
    std::sort(cands.begin(), cands.end());
    cands.erase(std::unique(cands.begin(), cands.end()), cands.end());
    std::vector<std::pair<int64_t, int64_t>> fits;  // (hole, start)
    for (int64_t s : cands) {
      if (s < 0 || s + r.size > inst_) continue;
      bool ok = true;
      int64_t hole_end = inst_, hole_start = 0;  // the free hole around [s, s + size)
      for (int o : live) {
        if (!Compatible(k, s, o)) {
          ok = false;
          break;
        }
        const Region& q = regions_[o];
        if (q.start >= s + r.size) hole_end = std::min(hole_end, q.start);
        if (q.start + q.size <= s) hole_start = std::max(hole_start, q.start + q.size);
      }
      if (ok) fits.push_back({hole_end - hole_start, s});
    }
    std::sort(fits.begin(), fits.end());
    std::vector<int64_t> starts;
    starts.reserve(fits.size());
    for (const auto& f : fits) starts.push_back(f.second);
    return starts;
  }

  bool BestFit(int k, const std::vector<int>& placed) {
    std::vector<int64_t> starts = FeasibleStarts(k, placed);
    if (starts.empty()) return false;
    regions_[k].start = starts.front();
    return true;
  }

 public:
  // Exact search: depth first over every region's feasible starts (best fit first), in reverse
  // time order (a chain of in-place layers is stacked from its last layer up) and then in time
  // order, up to `budget` placements each. True when every region got a start.
  bool Search(int64_t budget) {
    std::vector<int> order(regions_.size());
    std::iota(order.begin(), order.end(), 0);
    for (int pass = 0; pass < 2; ++pass) {
      for (Region& r : regions_) r.start = -1;
      std::vector<int> placed;
      int64_t left = budget;
      if (Dfs(pass == 0 ? std::vector<int>(order.rbegin(), order.rend()) : order, 0, placed, left)) return true;
    }
    return false;
  }

 private:
  bool Dfs(const std::vector<int>& order, size_t idx, std::vector<int>& placed, int64_t& budget) {
    if (idx == order.size()) return true;
    int k = order[idx];
    for (int64_t s : FeasibleStarts(k, placed)) {
      if (--budget < 0) break;
      regions_[k].start = s;
      placed.push_back(k);
      if (Dfs(order, idx + 1, placed, budget)) return true;
      placed.pop_back();
    }
    regions_[k].start = -1;
    return false;
  }

  Network& net_;
  const size_t n_;
  const int64_t inst_;
  std::unordered_map<int, int> last_use_;  // producer id -> last reader position
  std::unordered_map<int, int> multi_reader_;  // producer id -> its first multi-input reader position
  int last_stream_ = -1;
  std::vector<Region> regions_;
  int input_region_ = -1;
  std::unordered_map<int, int> out_region_;       // layer position -> region it writes
  std::unordered_map<int, int> part_index_;       // layer position -> interleave slot
  std::unordered_map<int, int> group_of_reader_;  // multi-input reader position -> region
};

// Plans with or without overlap; returns failures (and leaves the best allocation in `planner`).
int PlanBest(Planner& planner) {
  int best_fail = INT_MAX;
  int64_t best_peak = INT64_MAX;
  std::vector<int> best_order;
  for (const std::vector<int>& order : planner.Orders()) {
    int64_t peak = 0;
    int fail = planner.Allocate(order, peak);
    if (fail < best_fail || (fail == best_fail && peak < best_peak)) {
      best_fail = fail;
      best_peak = peak;
      best_order = order;
    }
  }
  int64_t peak = 0;
  return planner.Allocate(best_order, peak);
}

}  // namespace

void PlanDataMemory(Network& net) {
  if (net.layers.empty()) return;
  net.Reindex();
  Planner plain(net, /*overlap=*/false);
  if (PlanBest(plain) == 0 || (net.layers.size() <= kExactLayers && plain.Search(kSearchBudget))) {
    plain.Apply();
    return;
  }
  Planner overlapping(net, /*overlap=*/true);
  if (PlanBest(overlapping) == 0 || (net.layers.size() <= kExactLayers && overlapping.Search(kSearchBudget))) {
    if (overlapping.Apply()) {
      net.RequireIzerFlag("--overlap-data",
                          "some layers write their output over the part of their input they have already read "
                          "(PlanDataMemory); the izer's overwrite check would reject that");
    }
    return;
  }
  PlanBest(plain);
  plain.Apply();  // report what does not fit in the plan without overlap
}

}  // namespace kiln::ai8x
