// Pass PlanDataMemory (compiler/ai8x/passes.h): per data-memory instance, a first fit of every
// layer's output region over the regions still live (liveness by layer position).
#include <algorithm>
#include <climits>
#include <unordered_map>

#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/resources.h"
#include "compiler/ai8x/rules/rules.h"

namespace kiln::ai8x {
namespace {

constexpr int kForever = INT_MAX;

struct Region {
  uint32_t instances;
  int64_t start, end;  // [start, end) bytes within each instance
  int t0, t1;          // live from layer t0 (its writer) to t1 (its last reader), inclusive
  int owner;           // layer position, -1 for the network input
};

class DataMemoryPlanner {
 public:
  explicit DataMemoryPlanner(Network& net) : net_(net), n_(net.layers.size()), inst_(net.spec().data_instance_bytes) {
    for (size_t i = 0; i < n_; ++i) {
      for (int in : net.layers[i].inputs) {
        last_use_[in] = std::max(last_use_[in], static_cast<int>(i));
        readers_of_[in].push_back(net.layers[i].id);
      }
      if (net.layers[i].placed.streaming) last_stream_ = static_cast<int>(i);
    }
  }

  void Run() {
    PlaceNetworkInput();
    for (size_t i = 0; i < n_; ++i) {
      Prune(static_cast<int>(i));
      PlanLayer(i);
    }
  }

 private:
  bool Conflicts(const Region& r, int64_t start) const {
    for (const Region& o : active_) {
      if ((o.instances & r.instances) == 0) continue;
      if (o.t1 < r.t0 || r.t1 < o.t0) continue;
      if (start < o.end && o.start < start + (r.end - r.start)) return true;
    }
    return false;
  }

  // First fit of `r` (size r.end - r.start) at `fixed`, or else at 0 or right after a live
  // region; returns the start, -1 when it fits nowhere.
  int64_t Place(Region r, int64_t fixed = -1) {
    int64_t size = r.end - r.start;
    std::vector<int64_t> cands;
    if (fixed >= 0) {
      cands.push_back(fixed);
    } else {
      cands.push_back(0);
      for (const Region& o : active_) {
        if ((o.instances & r.instances) && !(o.t1 < r.t0 || r.t1 < o.t0)) cands.push_back((o.end + 3) / 4 * 4);
      }
      std::sort(cands.begin(), cands.end());
    }
    for (int64_t s : cands) {
      if (s + size > inst_) continue;
      if (!Conflicts(r, s)) {
        r.start = s;
        r.end = s + size;
        active_.push_back(r);
        return s;
      }
    }
    return -1;
  }

  void Prune(int now) {
    active_.erase(std::remove_if(active_.begin(), active_.end(), [&](const Region& r) { return r.t1 < now; }),
                  active_.end());
  }

  // The network input, at 0 (the izer loads it at in_offset 0 of layer 0 by default).
  void PlaceNetworkInput() {
    const Layer& first = net_.layers.front();
    Region r{};
    r.instances = InstanceMask(first.placed.processors);
    for (const Layer& l : net_.layers) {
      if (std::find(l.inputs.begin(), l.inputs.end(), kNetworkInput) != l.inputs.end()) {
        r.instances |= InstanceMask(l.placed.processors);
      }
    }
    Layer probe = first;
    probe.operands = 1;
    int64_t size = first.placed.streaming && net_.use_fifo ? StreamBufferBytes(first) : DataInBytes(net_, probe);
    r.start = 0;
    r.end = size;
    r.t0 = -1;
    r.t1 = first.placed.streaming ? last_stream_ : (last_use_.count(kNetworkInput) ? last_use_[kNetworkInput] : 0);
    r.owner = -1;
    if (size > inst_) {
      rules::ReportInputTooLarge(net_, first, size);
    } else {
      Place(r, 0);
    }
  }

  // in_offset from the producer(s), then the output region.
  void PlanLayer(size_t i) {
    Layer& l = net_.layers[i];
    if (!l.inputs.empty()) {
      if (l.inputs.size() > 1) {
        auto gb = group_base_.find(l.id);
        l.placed.in_offset = gb == group_base_.end() ? 0 : static_cast<int>(gb->second);
      } else if (l.inputs[0] == kNetworkInput) {
        l.placed.in_offset = 0;
      } else if (const Layer* p = net_.Find(l.inputs[0])) {
        l.placed.in_offset = p->placed.out_offset;
      }
    }
    auto rit = readers_of_.find(l.id);
    const Layer* reader = rit != readers_of_.end() && rit->second.size() == 1 ? net_.Find(rit->second[0]) : nullptr;
    int t1 = last_use_.count(l.id) ? last_use_[l.id] : static_cast<int>(i);
    if (l.output || i + 1 == n_) t1 = kForever;
    if (reader != nullptr && reader->inputs.size() > 1) {
      PlaceGroupedOutput(l, i, *reader);
      return;
    }
    Region r{};
    r.instances = InstanceMask(l.placed.output_processors);
    r.owner = static_cast<int>(i);
    r.t0 = static_cast<int>(i);
    r.t1 = t1;
    int64_t size = DataOutBytes(net_, l);
    if (l.placed.streaming && static_cast<int>(i) < last_stream_) {
      // rolling buffer for the next (streaming) layer's input
      size = StreamBufferBytes(net_.layers[i + 1]);
      r.t0 = -1;
      r.t1 = std::max(t1, last_stream_);
    }
    r.start = 0;
    r.end = size;
    int64_t off = Place(r);
    if (off < 0) {
      rules::ReportNoRoom(net_, l, size, nullptr);
      off = 0;
    }
    l.placed.out_offset = static_cast<int>(off);
  }

  // An element-wise operand (interleaved: base, base+4, ...) or a concatenation part (all at one
  // base): the first part reserves the reader's whole input region.
  void PlaceGroupedOutput(Layer& l, size_t i, const Layer& reader) {
    auto gb = group_base_.find(reader.id);
    int k = static_cast<int>(std::find(reader.inputs.begin(), reader.inputs.end(), l.id) - reader.inputs.begin());
    bool eltwise = reader.operands > 1;
    if (gb != group_base_.end()) {
      l.placed.out_offset = static_cast<int>(gb->second + (eltwise ? 4 * k : 0));
      return;
    }
    int first_pos = static_cast<int>(i);
    uint32_t inst_mask = 0;
    int64_t part = 0;
    for (int in : reader.inputs) {
      const Layer* p = net_.Find(in);
      if (p == nullptr) continue;
      first_pos = std::min(first_pos, net_.IndexOf(in));
      inst_mask |= InstanceMask(p->placed.output_processors);
      part = std::max(part, DataOutBytes(net_, *p));
    }
    Region r{};
    r.owner = static_cast<int>(i);
    r.instances = inst_mask;
    r.t0 = first_pos;
    r.t1 = net_.IndexOf(reader.id);
    if (reader.output) r.t1 = kForever;
    int64_t size = eltwise ? part * reader.operands : part;
    r.start = 0;
    r.end = size;
    int64_t base = Place(r);
    if (base < 0) {
      rules::ReportNoRoom(net_, l, size, &reader);
      base = 0;
    }
    group_base_[reader.id] = base;
    l.placed.out_offset = static_cast<int>(base + (eltwise ? 4 * k : 0));
  }

  Network& net_;
  const size_t n_;
  const int64_t inst_;
  std::unordered_map<int, int> last_use_;              // producer id -> last reader position
  std::unordered_map<int, std::vector<int>> readers_of_;  // producer id -> reader ids
  int last_stream_ = -1;
  std::vector<Region> active_;  // regions possibly live at the current position
  std::unordered_map<int, int64_t> group_base_;  // element-wise / concatenating reader id -> base
};

}  // namespace

void PlanDataMemory(Network& net) {
  if (net.layers.empty()) return;
  net.Reindex();
  DataMemoryPlanner(net).Run();
}

}  // namespace kiln::ai8x
