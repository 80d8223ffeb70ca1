// Passes FuseActivation, FusePooling, FuseEltwise, InsertWriteGaps (compiler/ai8x/passes.h).
#include <algorithm>
#include <unordered_map>

#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/rules/rules.h"

namespace kiln::ai8x {
namespace {

// Reader lists by producer id, for one pass.
std::unordered_map<int, std::vector<int>> Readers(const Network& net) {
  std::unordered_map<int, std::vector<int>> r;
  r.reserve(net.layers.size() * 2);
  for (const Layer& l : net.layers) {
    for (int in : l.inputs) r[in].push_back(l.id);
  }
  return r;
}

void Compact(Network& net, const std::vector<bool>& removed) {
  size_t w = 0;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    if (removed[i]) continue;
    if (w != i) net.layers[w] = std::move(net.layers[i]);
    ++w;
  }
  net.layers.resize(w);
  net.Reindex();
}

void Rewire(Layer& l, const std::unordered_map<int, int>& replace) {
  if (replace.empty()) return;
  for (int& in : l.inputs) {
    auto it = replace.find(in);
    while (it != replace.end()) {
      in = it->second;
      it = replace.find(in);
    }
  }
}

std::string FusedComment(const Layer& a, const Layer& b) {
  // "<first> fused with <second>" / "<first> and <existing comment>"
  return a.name + " fused with " + b.name;
}

// Whether layer `l`'s output is never negative: it has an activation (ReLU and Abs give x >= 0),
// or it only pools (max or average) data that is never negative.
bool NonNegative(const Network& net, const Layer& l) {
  const Layer* x = &l;
  for (int depth = 0; depth < 64; ++depth) {  // a chain of pooling layers; ids never form a cycle
    if (x->activation != Activation::kNone) return true;
    if (!x->is_pool_only() || x->inputs.size() != 1 || x->inputs[0] == kNetworkInput) return false;
    int i = net.IndexOf(x->inputs[0]);
    if (i < 0) return false;
    x = &net.layers[static_cast<size_t>(i)];
  }
  return false;
}

}  // namespace

void FuseActivation(Network& net) {
  net.Reindex();
  auto readers = Readers(net);
  std::vector<bool> removed(net.layers.size(), false);
  std::unordered_map<int, int> replace;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    Layer& a = net.layers[i];
    Rewire(a, replace);
    if (!a.is_activation_only()) continue;
    int p = a.inputs.empty() ? kNetworkInput : a.inputs[0];
    int pi = p == kNetworkInput ? -1 : net.IndexOf(p);
    Layer* prod = pi < 0 ? nullptr : &net.layers[pi];
    // The activation of data that is never negative is the identity: its readers read the producer.
    if (prod != nullptr && NonNegative(net, *prod)) {
      prod->output = prod->output || a.output;
      prod->onnx_nodes.insert(prod->onnx_nodes.end(), a.onnx_nodes.begin(), a.onnx_nodes.end());
      prod->comment = (prod->comment.empty() ? prod->name : prod->comment) + " (" + a.name +
                      " dropped: its input is never negative)";
      auto& r = readers[p];
      r.erase(std::remove(r.begin(), r.end(), a.id), r.end());
      r.insert(r.end(), readers[a.id].begin(), readers[a.id].end());
      replace[a.id] = p;
      removed[i] = true;
      continue;
    }
    // Relu(maxpool(x)) = maxpool(Relu(x)): a Relu after a max-pooling layer moves into the
    // conv/linear the pooling reads, when neither has another reader.
    if (prod != nullptr && a.activation == Activation::kRelu && prod->is_pool_only() && prod->pool == PoolType::kMax &&
        readers[p].size() == 1 && !prod->output && prod->inputs.size() == 1 && prod->inputs[0] != kNetworkInput) {
      const int c_id = prod->inputs[0];
      const int ci = net.IndexOf(c_id);
      Layer* conv = ci < 0 ? nullptr : &net.layers[static_cast<size_t>(ci)];
      if (conv != nullptr && conv->has_weights() && conv->activation == Activation::kNone &&
          readers[c_id].size() == 1 && !conv->output) {
        conv->activation = Activation::kRelu;
        conv->onnx_nodes.insert(conv->onnx_nodes.end(), a.onnx_nodes.begin(), a.onnx_nodes.end());
        conv->comment = conv->comment.empty() ? FusedComment(*conv, a) : conv->comment + " and " + a.name;
        prod->comment = a.name + " moved before " + prod->name + " (ReLU commutes with max pooling)";
        prod->output = a.output;
        readers[p] = readers[a.id];
        replace[a.id] = p;
        removed[i] = true;
        continue;
      }
    }
    std::string why;
    if (prod == nullptr) {
      why = "it reads the network input";
    } else if (!prod->has_weights()) {
      why = "its input comes from a " + std::string(OpKindName(prod->op)) + " layer, not a conv/linear";
    } else if (prod->activation != Activation::kNone) {
      why = "its conv/linear already has an activation";
    } else if (readers[p].size() != 1 || prod->output) {
      why = "the conv/linear output is also read elsewhere before activation";
    }
    if (!why.empty()) {
      rules::ReportUnfusedActivation(net, a, why);
      continue;
    }
    prod->activation = a.activation;
    prod->out_shape = a.out_shape;
    prod->output = prod->output || a.output;
    prod->onnx_nodes.insert(prod->onnx_nodes.end(), a.onnx_nodes.begin(), a.onnx_nodes.end());
    prod->comment = prod->comment.empty() ? FusedComment(*prod, a) : prod->comment + " and " + a.name;
    readers[p] = readers[a.id];
    replace[a.id] = p;
    removed[i] = true;
  }
  Compact(net, removed);
}

void FusePooling(Network& net) {
  net.Reindex();
  auto readers = Readers(net);
  std::vector<bool> removed(net.layers.size(), false);
  for (size_t i = 0; i < net.layers.size(); ++i) {
    Layer& q = net.layers[i];
    if (!q.is_pool_only() || q.output) continue;
    auto it = readers.find(q.id);
    if (it == readers.end() || it->second.size() != 1) continue;
    int ci = net.IndexOf(it->second[0]);
    if (ci < 0) continue;
    Layer& c = net.layers[ci];
    if (!(c.is_conv()) || c.pool != PoolType::kNone || c.eltwise != EltwiseOp::kNone || c.inputs.size() != 1 ||
        c.flatten || c.in_dim) {  // in_dim: reshaped after pooling, keep the pooling layer
      continue;
    }
    c.pool = q.pool;
    c.pool_h = q.pool_h;
    c.pool_w = q.pool_w;
    c.pool_stride_h = q.pool_stride_h;
    c.pool_stride_w = q.pool_stride_w;
    c.pool_dilation = q.pool_dilation;
    c.inputs = q.inputs;
    c.in_shape = q.in_shape;
    c.in_dim = q.in_dim;
    std::vector<std::string> nodes = q.onnx_nodes;
    // keep the conv first: diagnostics name the main node
    c.onnx_nodes.insert(c.onnx_nodes.end(), nodes.begin(), nodes.end());
    c.comment = c.comment.empty() ? FusedComment(q, c) : q.name + " and " + c.comment;
    for (int in : q.inputs) {
      auto& r = readers[in];
      std::replace(r.begin(), r.end(), q.id, c.id);
    }
    removed[i] = true;
  }
  Compact(net, removed);
}

void FuseEltwise(Network& net) {
  net.Reindex();
  const ChipSpec& spec = net.spec();
  auto readers = Readers(net);
  std::vector<bool> removed(net.layers.size(), false);
  for (size_t i = 0; i < net.layers.size(); ++i) {
    Layer& e = net.layers[i];
    if (!e.is_eltwise_only() || e.output) continue;
    auto it = readers.find(e.id);
    if (it == readers.end() || it->second.size() != 1) continue;
    int ci = net.IndexOf(it->second[0]);
    if (ci < 0) continue;
    Layer& c = net.layers[ci];
    if (c.op != OpKind::kConv2d && c.op != OpKind::kConvTranspose2d) continue;  // not Conv1d/Linear
    if (c.eltwise != EltwiseOp::kNone || c.inputs.size() != 1 || c.flatten || c.in_dim) continue;
    if (!spec.support_multipass_eltwise_conv_bias && c.has_bias) continue;
    int passes = ComputePasses(e.in_shape.c).passes;
    if (spec.emulate_eltwise_mp && passes > 1 && e.operands * passes != e.operands + passes) continue;
    c.eltwise = e.eltwise;
    c.operands = e.operands;
    c.inputs = e.inputs;
    c.in_shape = e.in_shape;
    c.pool_first = c.pool == PoolType::kNone;
    c.onnx_nodes.insert(c.onnx_nodes.end(), e.onnx_nodes.begin(), e.onnx_nodes.end());
    c.comment = c.comment.empty() ? FusedComment(e, c) : e.name + " and " + c.comment;
    for (int in : e.inputs) {
      auto& r = readers[in];
      std::replace(r.begin(), r.end(), e.id, c.id);
    }
    removed[i] = true;
  }
  Compact(net, removed);
}

namespace {

// Whether every reader of `source` other than the element-wise layer `eltwise_id` may read its
// output with `read_gap` (ChipSpec::support_read_gap): a single-pass Conv2d reading only that
// output (the use the hand-written MAX78002 networks make of it). A reader that is itself
// element-wise or a concatenation reads interleaved data its own way.
bool ReadGapReadersOnly(const Network& net, const std::vector<int>& readers, int eltwise_id, int source) {
  if (!net.spec().support_read_gap) return false;
  for (int r : readers) {
    if (r == eltwise_id) continue;
    const Layer* l = net.Find(r);
    if (l == nullptr || l->inputs.size() != 1 || l->inputs[0] != source || l->operands != 1) return false;
    if (l->op != OpKind::kConv2d) return false;
    if (l->read_gap != 0 || l->flatten || l->in_dim || l->channel_view) return false;
    if (ComputePasses(l->in_shape.c).passes > 1) return false;
  }
  return true;
}

}  // namespace

void InsertWriteGaps(Network& net) {
  net.Reindex();
  auto readers = Readers(net);
  // Decide first, then insert (positions refer to the list before insertion).
  struct Insert {
    int anchor_id;  // insert after this layer (kNetworkInput: at the front) ...
    bool before;    // ... or before it
    Layer layer;
  };
  std::vector<Insert> inserts;
  // How an operand reaches its element-wise reader: written with write_gap by its producer, read
  // in place by the producer's other readers with read_gap, or re-formed by a `gap_*` copy.
  enum class Way { kWriteGap, kReadGap, kCopy };
  auto way = [&](const Layer& l, int s, const std::unordered_map<int, int>& gap_of_source, bool allow_read_gap) {
    const Layer* src = s == kNetworkInput ? nullptr : net.Find(s);
    int uses_here = static_cast<int>(std::count(l.inputs.begin(), l.inputs.end(), s));
    bool shared = src == nullptr || src->output || uses_here > 1 ||
                  readers[s].size() > static_cast<size_t>(uses_here) || gap_of_source.count(s) > 0;
    if (!shared) return Way::kWriteGap;
    if (allow_read_gap && src != nullptr && !src->output && uses_here == 1 && gap_of_source.count(s) == 0 &&
        ReadGapReadersOnly(net, readers[s], l.id, s)) {
      return Way::kReadGap;
    }
    return Way::kCopy;
  };
  // Copies, as the hand-written MAX78002 networks do (ai87-cifar100-mobilenet-v2-0.5.yaml), unless
  // they would take the network past the chip's layer limit: then read_gap wherever the chip and
  // the readers allow it (as ai87-pascalvoc-fpndetector.yaml does, 116 layers instead of 136).
  bool allow_read_gap = false;
  if (net.spec().support_read_gap) {
    std::unordered_map<int, int> dry;
    size_t copies = 0;
    for (const Layer& l : net.layers) {
      if (l.operands < 2) continue;
      for (int s : l.inputs) {
        Way w = way(l, s, dry, false);
        if (w == Way::kCopy) ++copies;
        if (w == Way::kWriteGap) dry[s] = l.operands - 1;
      }
    }
    allow_read_gap = net.layers.size() + copies > static_cast<size_t>(net.spec().max_layers);
  }
  std::unordered_map<int, int> gap_of_source;  // source id -> write_gap already applied
  for (Layer& l : net.layers) {
    if (l.operands < 2) continue;
    int gap = l.operands - 1;
    for (size_t k = 0; k < l.inputs.size(); ++k) {
      int s = l.inputs[k];
      Layer* src = s == kNetworkInput ? nullptr : net.Find(s);
      Way w = way(l, s, gap_of_source, allow_read_gap);
      if (w == Way::kWriteGap) {
        src->write_gap = gap;
        gap_of_source[s] = gap;
        continue;
      }
      if (w == Way::kReadGap) {
        src->write_gap = gap;
        gap_of_source[s] = gap;
        for (int r : readers[s]) {
          if (r != l.id) net.Find(r)->read_gap = gap;
        }
        continue;
      }
      Layer g;
      g.id = net.next_id++;
      std::string base = src == nullptr ? std::string("input") : src->name;
      g.name = "gap_" + base;
      g.op = OpKind::kNone;
      g.inputs = {s};
      g.in_shape = net.OutputShapeOf(s);
      g.out_shape = g.in_shape;
      g.one_d = src == nullptr ? net.input_one_d : src->one_d;
      g.write_gap = gap;
      g.gap_layer = true;
      g.onnx_nodes = {l.onnx_nodes.empty() ? std::string() : l.onnx_nodes.back()};
      g.comment = "re-form " + base + " with write_gap for " + l.name;
      l.inputs[k] = g.id;
      bool fused = l.op != OpKind::kNone;
      if (fused) {
        inserts.push_back({s, false, std::move(g)});
      } else {
        inserts.push_back({l.id, true, std::move(g)});
      }
    }
  }
  if (inserts.empty()) return;
  // Unique names.
  std::unordered_map<std::string, int> names;
  for (const Layer& l : net.layers) names[l.name] = 1;
  for (Insert& ins : inserts) {
    std::string base = ins.layer.name;
    std::string name = base;
    for (int n = 2; names.count(name); ++n) name = base + "_" + std::to_string(n);
    names[name] = 1;
    ins.layer.name = name;
  }
  // Build the new list in one sweep: O(N + inserts).
  std::unordered_map<int, std::vector<Layer*>> after, before;
  std::vector<Layer*> front;
  for (Insert& ins : inserts) {
    if (ins.before) {
      before[ins.anchor_id].push_back(&ins.layer);
    } else if (ins.anchor_id == kNetworkInput) {
      front.push_back(&ins.layer);
    } else {
      after[ins.anchor_id].push_back(&ins.layer);
    }
  }
  std::vector<Layer> out;
  out.reserve(net.layers.size() + inserts.size());
  for (Layer* g : front) out.push_back(std::move(*g));
  for (Layer& l : net.layers) {
    auto b = before.find(l.id);
    if (b != before.end()) {
      for (Layer* g : b->second) out.push_back(std::move(*g));
    }
    int id = l.id;
    out.push_back(std::move(l));
    auto a = after.find(id);
    if (a != after.end()) {
      for (Layer* g : a->second) out.push_back(std::move(*g));
    }
  }
  net.layers = std::move(out);
  net.Reindex();
}

}  // namespace kiln::ai8x
