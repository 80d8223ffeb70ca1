#include "compiler/convplan/plan.h"

#include <algorithm>
#include <exception>
#include <new>
#include <set>
#include <sstream>

#include "common/reactor.h"
#include "compiler/convplan/fold_constants.h"
#include "compiler/convplan/host_tensor.h"
#include "compiler/convplan/passes/pass_manager.h"
#include "device/backends/conv_geometry.h"

namespace kiln::convplan {

namespace fe = onnx_fe;

const char* DeviceOpKindName(DeviceOpKind kind) {
  switch (kind) {
    case DeviceOpKind::kConv2d: return "conv2d";
    case DeviceOpKind::kConvTranspose2d: return "conv_transpose2d";
    case DeviceOpKind::kAdd: return "add";
  }
  return "?";
}

device::Activation DeviceOp::activation() const {
  switch (kind) {
    case DeviceOpKind::kConv2d: return conv.activation;
    case DeviceOpKind::kConvTranspose2d: return conv_transpose.activation;
    case DeviceOpKind::kAdd: return add_activation;
  }
  return device::Activation::kNone;
}

void DeviceOp::set_activation(device::Activation a) {
  switch (kind) {
    case DeviceOpKind::kConv2d: conv.activation = a; break;
    case DeviceOpKind::kConvTranspose2d: conv_transpose.activation = a; break;
    case DeviceOpKind::kAdd: add_activation = a; break;
  }
}

int64_t DeviceOp::group() const { return kind == DeviceOpKind::kConv2d ? conv.group : conv_transpose.group; }

int64_t DeviceOp::out_channels() const {
  if (kind == DeviceOpKind::kAdd) return outputs.empty() ? 0 : outputs[0].channel_end - outputs[0].channel_begin;
  if (weights.empty()) return 0;
  const device::Tensor& w = weights[0];
  return kind == DeviceOpKind::kConv2d ? w.dim(0) : w.dim(1) * conv_transpose.group;
}

int64_t DeviceOp::in_channels() const {
  int64_t c = 0;
  for (const device::Tensor& w : weights) {
    c += kind == DeviceOpKind::kConv2d ? w.dim(1) * conv.group : w.dim(0);
  }
  return c;
}

std::pair<int64_t, int64_t> DeviceOp::kernel() const {
  if (weights.empty()) return {0, 0};
  return {weights[0].dim(2), weights[0].dim(3)};
}

std::vector<std::string> PlanOp::Inputs() const {
  std::vector<std::string> out;
  if (on_device()) {
    out = device().inputs;
    if (!device().residual.empty()) out.push_back(device().residual);
  } else {
    for (const std::string& in : host().node.inputs) {
      if (!in.empty()) out.push_back(in);
    }
  }
  return out;
}

std::vector<std::string> PlanOp::Outputs() const {
  std::vector<std::string> out;
  if (on_device()) {
    for (const OutputSlice& s : device().outputs) out.push_back(s.tensor);
  } else {
    for (const std::string& o : host().node.outputs) {
      if (!o.empty()) out.push_back(o);
    }
  }
  return out;
}

size_t ConvPlan::num_device_ops() const {
  return static_cast<size_t>(std::count_if(ops.begin(), ops.end(), [](const PlanOp& op) { return op.on_device(); }));
}

const fe::ConstantData* ConvPlan::FindConstant(const std::string& name) const {
  if (!model) return nullptr;
  const fe::Tensor* t = model->graph().FindTensor(name);
  return t != nullptr && t->constant ? t->constant.get() : nullptr;
}

std::string ConvPlan::ToString() const {
  std::ostringstream os;
  for (const PlanOp& op : ops) {
    os << op.name << " " << op.op << " [";
    std::vector<std::string> ins = op.Inputs();
    for (size_t i = 0; i < ins.size(); ++i) os << (i ? ", " : "") << ins[i];
    os << "] -> [";
    std::vector<std::string> outs = op.Outputs();
    for (size_t i = 0; i < outs.size(); ++i) os << (i ? ", " : "") << outs[i];
    os << "]";
    if (op.on_device()) {
      const DeviceOp& d = op.device();
      os << " act=" << device::ActivationName(d.activation());
      if (d.kind != DeviceOpKind::kAdd && d.inputs.size() > 1) os << " ksplit=" << d.inputs.size();
      if (!d.residual.empty()) os << " residual=" << d.residual << " then " << device::ActivationName(d.residual_activation);
    }
    if (!op.fusions.empty()) {
      os << " (";
      for (size_t i = 0; i < op.fusions.size(); ++i) os << (i ? ", " : "") << op.fusions[i];
      os << ")";
    }
    os << "\n";
  }
  return os.str();
}

namespace {

bool IsDefaultDomain(const std::string& domain) { return domain.empty() || domain == "ai.onnx"; }

std::string NodeLabel(const fe::Node& n) {
  std::string label = n.domain.empty() ? n.op_type : n.domain + "." + n.op_type;
  return label + " '" + (n.original_name.empty() ? n.name : n.original_name) + "'";
}

Status NodeError(const fe::Node& n, const std::string& msg) {
  return InvalidArgument(n.Describe() + ": " + msg);
}

// Constant data of `name`, also through a Cast to FLOAT / DOUBLE of a constant (how exporters
// store FLOAT16 / BFLOAT16 weights: initializer -> Cast(to=FLOAT) -> Conv; the loader already
// decoded the low-precision values exactly to fp32, so the cast is exact). nullptr otherwise.
const fe::ConstantData* ConstantThroughCast(const fe::Graph& g, const std::string& name) {
  const fe::Tensor* t = g.FindTensor(name);
  if (t != nullptr && t->constant) return t->constant.get();
  auto p = g.Producer(name);
  if (!p) return nullptr;
  const fe::Node& cast = g.node(*p);
  if (cast.op_type != "Cast" || !IsDefaultDomain(cast.domain) || cast.inputs.empty()) return nullptr;
  auto to = cast.GetInt("to");
  if (!to.ok() || (*to != static_cast<int64_t>(fe::DataType::kFloat) && *to != static_cast<int64_t>(fe::DataType::kDouble))) {
    return nullptr;
  }
  const fe::Tensor* src = g.FindTensor(cast.inputs[0]);
  return src != nullptr && src->constant ? src->constant.get() : nullptr;
}

Result<device::Tensor> ConstantTensor(const fe::Graph& g, const fe::Node& n, size_t i, std::vector<int64_t> shape) {
  const fe::ConstantData* c = ConstantThroughCast(g, n.inputs[i]);
  if (c == nullptr) return NodeError(n, "input '" + n.inputs[i] + "' must be a constant (initializer)");
  return device::Tensor::FromFloats(std::move(shape), c->floats());
}

// Spatial attribute (ints) of length `rank` or its fallback; error naming the node otherwise.
Result<std::vector<int64_t>> SpatialInts(const fe::Node& n, const char* attr, size_t rank, int64_t fill) {
  auto v = n.GetInts(attr, std::vector<int64_t>(rank, fill));
  if (!v.ok()) return v.status();
  if (v->empty()) return std::vector<int64_t>(rank, fill);
  if (v->size() != rank) {
    return NodeError(n, std::string("attribute '") + attr + "' has " + std::to_string(v->size()) +
                            " values, expected " + std::to_string(rank));
  }
  return *v;
}

struct ConvAttrs {
  device::AutoPad auto_pad = device::AutoPad::kNotSet;
  std::vector<int64_t> strides, dilations, pads;  // pads: begin..., end...
  int64_t group = 1;
};

Result<ConvAttrs> ReadConvAttrs(const fe::Node& n, size_t rank, const std::vector<int64_t>& kernel) {
  ConvAttrs a;
  auto ap = n.GetString("auto_pad", "NOTSET");
  if (!ap.ok()) return ap.status();
  auto mode = device::ParseAutoPad(*ap);
  if (!mode.ok()) return NodeError(n, mode.status().message());
  a.auto_pad = *mode;
  auto s = SpatialInts(n, "strides", rank, 1);
  if (!s.ok()) return s.status();
  auto d = SpatialInts(n, "dilations", rank, 1);
  if (!d.ok()) return d.status();
  auto p = SpatialInts(n, "pads", 2 * rank, 0);
  if (!p.ok()) return p.status();
  auto g = n.GetInt("group", 1);
  if (!g.ok()) return g.status();
  a.strides = *s;
  a.dilations = *d;
  a.pads = *p;
  a.group = *g;
  auto ks = n.GetInts("kernel_shape", kernel);
  if (!ks.ok()) return ks.status();
  if (!ks->empty() && *ks != kernel) {
    return NodeError(n, "kernel_shape does not match the weight shape");
  }
  // Far above any real model, and small enough that the backends' size arithmetic cannot
  // overflow (a stride of 2^62 used to reach oneDNN and come back as INTERNAL).
  constexpr int64_t kMaxGeometry = 65535;
  for (size_t i = 0; i < rank; ++i) {
    if (a.strides[i] < 1 || a.dilations[i] < 1) return NodeError(n, "strides and dilations must be >= 1");
    if (a.pads[i] < 0 || a.pads[i + rank] < 0) return NodeError(n, "pads must be >= 0");
    if (a.strides[i] > kMaxGeometry || a.dilations[i] > kMaxGeometry || a.pads[i] > kMaxGeometry ||
        a.pads[i + rank] > kMaxGeometry) {
      return NodeError(n, "strides, dilations and pads must be <= " + std::to_string(kMaxGeometry) +
                              " (got strides " + std::to_string(a.strides[i]) + ", dilations " +
                              std::to_string(a.dilations[i]) + ", pads " + std::to_string(a.pads[i]) +
                              "/" + std::to_string(a.pads[i + rank]) + ")");
    }
  }
  if (a.group < 1) return NodeError(n, "group must be >= 1");
  return a;
}

// Spatial input sizes (needed to resolve auto_pad / output_shape).
Result<std::vector<int64_t>> SpatialInputSizes(const fe::Graph& g, const fe::Node& n, size_t rank) {
  const fe::Tensor* x = g.FindTensor(n.inputs[0]);
  if (x == nullptr || !x->shape.has_rank() || x->shape.rank() != rank + 2) {
    return NodeError(n, "input '" + n.inputs[0] + "' must have rank " + std::to_string(rank + 2));
  }
  std::vector<int64_t> out;
  for (size_t i = 0; i < rank; ++i) {
    const fe::Dim& d = x->shape.dim(2 + i);
    if (!d.is_known()) {
      return NodeError(n, "auto_pad / output_shape need a known spatial size of input '" + n.inputs[0] + "'");
    }
    out.push_back(d.value());
  }
  return out;
}

// Where a Conv / ConvTranspose runs: a DeviceOp when its weights and bias have values at plan
// time (a device prepares weights ahead of the run: TT-NN converts and tiles them on the host) and
// it is 1-D or 2-D (the rank-4 device API, device/backends/backend.h); otherwise a HostOp run by
// the host kernel (runtime/host_kernels/conv.cc), on every backend. Only more than 3 spatial dims
// run nowhere (oneDNN's convolutions stop at 3-D).
Result<bool> ConvOnDevice(const fe::Graph& g, const fe::Node& n) {
  if (n.inputs.size() < 2 || n.inputs[0].empty() || n.inputs[1].empty()) return NodeError(n, "needs inputs X and W");
  size_t rank = 0;  // known tensor rank of X or W, 0 when neither is known
  for (size_t i = 0; i < 2 && rank == 0; ++i) {
    const fe::Tensor* t = g.FindTensor(n.inputs[i]);
    if (t != nullptr && t->shape.has_rank()) rank = t->shape.rank();
  }
  if (rank > 5) {
    return NodeError(n, std::to_string(rank - 2) + "-D convolution: only 1-D, 2-D and 3-D convolutions are supported");
  }
  const bool constant = ConstantThroughCast(g, n.inputs[1]) != nullptr &&
                        (!n.has_input(2) || ConstantThroughCast(g, n.inputs[2]) != nullptr);
  return constant && (rank == 3 || rank == 4) && g.StaticInputShape(n, 1).ok();
}

Result<PlanOp> LowerConv(const fe::Graph& g, const fe::Node& n) {
  const bool transpose = n.op_type == "ConvTranspose";
  auto as_host_op = [&n] {
    PlanOp op;
    op.name = n.name;
    op.op = n.op_type;
    op.source_nodes = {n.name};
    op.body = HostOp{n};
    return op;
  };
  auto on_device = ConvOnDevice(g, n);
  if (!on_device.ok()) return on_device.status();
  if (!*on_device) return as_host_op();
  auto wshape = g.StaticInputShape(n, 1);
  if (!wshape.ok()) return wshape.status();
  const size_t rank = wshape->size() - 2;
  std::vector<int64_t> kernel(wshape->begin() + 2, wshape->end());
  auto attrs = ReadConvAttrs(n, rank, kernel);
  if (!attrs.ok()) return attrs.status();
  ConvAttrs& a = *attrs;

  // Explicit pads per axis.
  std::vector<int64_t> pb(rank), pe(rank), out_pad(rank, 0);
  for (size_t i = 0; i < rank; ++i) {
    pb[i] = a.pads[i];
    pe[i] = a.pads[i + rank];
  }
  if (transpose) {
    auto op = SpatialInts(n, "output_padding", rank, 0);
    if (!op.ok()) return op.status();
    out_pad = *op;
    auto oshape = n.GetInts("output_shape", {});
    if (!oshape.ok()) return oshape.status();
    std::vector<int64_t> os = *oshape;
    if (os.size() == rank + 2) os.erase(os.begin(), os.begin() + 2);  // full N,C,... form
    if (!os.empty() && os.size() != rank) return NodeError(n, "output_shape must have one value per spatial axis");
    if (!os.empty() || a.auto_pad == device::AutoPad::kSameUpper || a.auto_pad == device::AutoPad::kSameLower) {
      auto in = SpatialInputSizes(g, n, rank);
      if (!in.ok()) return in.status();
      for (size_t i = 0; i < rank; ++i) {
        // ONNX ConvTranspose-11: output_shape given → pads derived from it (auto_pad decides the
        // split); SAME_* without output_shape → output = input * stride.
        int64_t target = os.empty() ? (*in)[i] * a.strides[i] : os[i];
        // An output longer than the full one (negative total padding) has positions that hold
        // only the bias: no device call computes them, the host kernel does.
        if (target > a.strides[i] * ((*in)[i] - 1) + out_pad[i] + device::DilatedKernel(kernel[i], a.dilations[i])) {
          return as_host_op();
        }
        auto p = device::ConvTransposePadsForOutput(a.auto_pad, (*in)[i], kernel[i], a.strides[i], a.dilations[i],
                                                    out_pad[i], target);
        if (!p.ok()) return NodeError(n, p.status().message());
        pb[i] = p->first;
        pe[i] = p->second;
      }
    } else if (a.auto_pad == device::AutoPad::kValid) {
      std::fill(pb.begin(), pb.end(), 0);
      std::fill(pe.begin(), pe.end(), 0);
    }
  } else if (a.auto_pad != device::AutoPad::kNotSet) {
    auto in = SpatialInputSizes(g, n, rank);
    if (!in.ok()) return in.status();
    for (size_t i = 0; i < rank; ++i) {
      auto p = device::ConvAutoPad(a.auto_pad, (*in)[i], kernel[i], a.strides[i], a.dilations[i]);
      if (!p.ok()) return NodeError(n, p.status().message());
      pb[i] = p->first;
      pe[i] = p->second;
    }
  }

  // Rank-4 weights (1-D: H = 1).
  std::vector<int64_t> w4 = *wshape;
  if (rank == 1) w4.insert(w4.begin() + 2, 1);
  auto w = ConstantTensor(g, n, 1, w4);
  if (!w.ok()) return w.status();

  DeviceOp d;
  d.kind = transpose ? DeviceOpKind::kConvTranspose2d : DeviceOpKind::kConv2d;
  d.spatial_rank = static_cast<int>(rank);
  d.inputs = {n.inputs[0]};
  const int64_t out_channels = transpose ? w4[1] * a.group : w4[0];
  if (n.has_input(2)) {
    auto b = ConstantTensor(g, n, 2, {out_channels});
    if (!b.ok()) return NodeError(n, "bias: " + b.status().message());
    d.bias = std::move(*b);
  }
  d.weights.push_back(std::move(*w));
  auto axis = [&](const std::vector<int64_t>& v, int64_t one) -> std::array<int64_t, 2> {
    return rank == 1 ? std::array<int64_t, 2>{one, v[0]} : std::array<int64_t, 2>{v[0], v[1]};
  };
  std::array<int64_t, 4> pads = rank == 1 ? std::array<int64_t, 4>{0, pb[0], 0, pe[0]}
                                          : std::array<int64_t, 4>{pb[0], pb[1], pe[0], pe[1]};
  if (transpose) {
    d.conv_transpose.strides = axis(a.strides, 1);
    d.conv_transpose.dilations = axis(a.dilations, 1);
    d.conv_transpose.pads = pads;
    d.conv_transpose.output_padding = axis(out_pad, 0);
    d.conv_transpose.group = a.group;
  } else {
    d.conv.strides = axis(a.strides, 1);
    d.conv.dilations = axis(a.dilations, 1);
    d.conv.pads = pads;
    d.conv.group = a.group;
  }
  d.outputs.push_back(OutputSlice{n.outputs[0], 0, out_channels});

  PlanOp op;
  op.name = n.name;
  op.op = DeviceOpKindName(d.kind);
  op.source_nodes = {n.name};
  op.body = std::move(d);
  return op;
}

}  // namespace

Status CheckSupported(const fe::Graph& graph, const HostOpSupport& host_ops) {
  // Grouped by (op type, reason) in first-appearance order, so the message stays short however
  // many nodes a model has (a QAT export has hundreds of scale nodes).
  struct Group {
    std::string key;
    int64_t count = 0;
    std::vector<std::string> names;
  };
  std::vector<Group> groups;
  int64_t bad = 0;
  for (const fe::Node& n : graph.nodes()) {
    std::string why;
    if (!IsDefaultDomain(n.domain)) {
      why = "domain " + n.domain;
    } else if (n.op_type != "Conv" && n.op_type != "ConvTranspose") {
      why = host_ops.CheckHostNode(n, graph);
    }
    if (why.empty()) continue;
    ++bad;
    const std::string key = n.op_type + (why == "not a host op" ? "" : " (" + why + ")");
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.key == key; });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{key, 0, {}});
    ++it->count;
    if (it->names.size() < kUnsupportedNamesPerType) it->names.push_back(NodeLabel(n));
  }
  if (bad == 0) return Status::Ok();
  std::string msg = "model has " + std::to_string(bad) + " unsupported node(s): ";
  for (size_t i = 0; i < groups.size(); ++i) {
    if (msg.size() > kUnsupportedMessageBytes - 160) {
      msg += ", and " + std::to_string(groups.size() - i) + " more op type(s)";
      break;
    }
    const Group& g = groups[i];
    msg += (i ? "; " : "") + g.key + " x" + std::to_string(g.count) + ": ";
    for (size_t k = 0; k < g.names.size(); ++k) {
      std::string name = g.names[k];
      if (name.size() > 48) name = name.substr(0, 45) + "...";
      msg += (k ? ", " : "") + name;
    }
    if (g.count > static_cast<int64_t>(g.names.size())) msg += ", ...";
  }
  msg += " (device ops: Conv, ConvTranspose; " + std::to_string(host_ops.HostOpTypes().size()) +
         " op types run on the host)";
  return InvalidArgument(msg);
}

Result<ConvPlan> LowerModel(std::shared_ptr<const fe::Model> model, const HostOpSupport& host_ops) {
  if (!model) return InvalidArgument("BuildConvPlan: no model");
  const fe::Graph& g = model->graph();
  KILN_RETURN_IF_ERROR(CheckSupported(g, host_ops));
  ConvPlan plan;
  plan.model = model;
  for (const std::string& name : g.inputs()) {
    const fe::Tensor* t = g.FindTensor(name);
    PlanInput in;
    in.name = name;
    if (t != nullptr) {
      in.dtype = t->dtype;
      in.shape = t->shape;
    }
    plan.inputs.push_back(std::move(in));
  }
  plan.outputs = g.outputs();
  for (const fe::Node& n : g.nodes()) {
    if (n.op_type == "Conv" || n.op_type == "ConvTranspose") {
      auto op = LowerConv(g, n);
      if (!op.ok()) return op.status();
      plan.ops.push_back(std::move(*op));
    } else {
      PlanOp op;
      op.name = n.name;
      op.op = n.op_type;
      op.source_nodes = {n.name};
      op.body = HostOp{n};
      plan.ops.push_back(std::move(op));
    }
  }
  return plan;
}

namespace {

Status ConvertHostConstants(ConvPlan& plan) {
  const fe::Graph& g = plan.model->graph();
  for (const PlanOp& op : plan.ops) {
    if (op.on_device()) continue;
    for (const std::string& name : op.Inputs()) {
      if (plan.host_constants.count(name) != 0) continue;
      const fe::Tensor* t = g.FindTensor(name);
      if (t == nullptr || !t->constant) continue;
      auto c = convplan::ConstantTensor(*t);
      if (!c.ok()) return c.status();
      plan.host_constants.emplace(name, std::make_shared<const device::Tensor>(std::move(*c)));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<ConvPlan> BuildConvPlan(std::shared_ptr<const fe::Model> model, const HostOpSupport& host_ops,
                               const PlanOptions& options) {
  AssertNotOnReactor("BuildConvPlan");
  try {
    auto passes = PipelinePasses(options.disabled_passes);
    if (!passes.ok()) return passes.status();
    if (!model) return InvalidArgument("BuildConvPlan: no model");
    // Folding first: a node it removes (Shape of a static tensor) needs no host kernel. LowerModel
    // then checks what is left.
    auto folded = FoldConstants(std::move(model), host_ops);
    if (!folded.ok()) return folded.status();
    auto plan = LowerModel(std::move(folded->model), host_ops);
    if (!plan.ok()) return plan.status();
    plan->folded_nodes = folded->folded_nodes;
    auto done = RunPasses(std::move(*plan), *passes, options.max_rounds);
    if (!done.ok()) return done.status();
    KILN_RETURN_IF_ERROR(ConvertHostConstants(*done));
    return done;
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("BuildConvPlan: out of memory");
  } catch (const std::exception& e) {
    return Internal(std::string("BuildConvPlan: ") + e.what());
  }
}

}  // namespace kiln::convplan
