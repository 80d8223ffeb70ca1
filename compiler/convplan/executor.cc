#include "compiler/convplan/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <iomanip>
#include <new>
#include <sstream>
#include <set>
#include <unordered_map>

#include "compiler/convplan/host_ops.h"
#include "device/backends/builtin.h"
#include "device/backends/reference/reference_backend.h"
#include "device/numerics/pcc.h"

namespace kiln::convplan {

namespace fe = onnx_fe;
using device::Activation;
using device::Tensor;

const char* RunModeName(RunMode mode) { return mode == RunMode::kPerLayer ? "per_layer" : "chained"; }

Result<RunMode> ParseRunMode(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (s == "chained") return RunMode::kChained;
  if (s == "per_layer" || s == "per-layer" || s == "perlayer") return RunMode::kPerLayer;
  return InvalidArgument("unknown run mode '" + std::string(name) + "' (expected chained or per_layer)");
}

namespace {

using Clock = std::chrono::steady_clock;
using Values = std::unordered_map<std::string, Tensor>;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Seeded uniform [-1, 1) data: splitmix64 over (seed, name hash, index) — platform independent.
uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

Result<Tensor> RandomInput(const PlanInput& in, uint64_t seed) {
  if (!in.shape.has_rank()) return InvalidArgument("input '" + in.name + "' is absent and its rank is unknown");
  std::vector<int64_t> shape;
  for (const fe::Dim& d : in.shape.dims()) {
    if (d.is_known()) {
      shape.push_back(d.value());
    } else if (d.is_symbol()) {
      shape.push_back(1);
    } else {
      return InvalidArgument("input '" + in.name + "' is absent and has an unknown dim " + in.shape.ToString() +
                             "; give it explicitly");
    }
  }
  auto t = Tensor::Zeros(shape);
  if (!t.ok()) return t.status();
  uint64_t state = SplitMix(seed ^ Fnv1a(in.name));
  for (float& v : t->span<float>()) {
    state = SplitMix(state);
    v = static_cast<float>(static_cast<double>(state >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
  }
  return t;
}

Result<Tensor> PrepareInput(const PlanInput& in, const Tensor& given) {
  auto f = given.ToFloat32();
  if (!f.ok()) return f.status();
  auto t = f->ToLayout(device::Layout::kNCHW);
  if (!t.ok()) return t.status();
  if (in.shape.has_rank()) {
    if (static_cast<size_t>(t->rank()) != in.shape.rank()) {
      return InvalidArgument("input '" + in.name + "' has shape " + device::ShapeToString(t->shape()) +
                             ", the model declares " + in.shape.ToString());
    }
    for (size_t i = 0; i < in.shape.rank(); ++i) {
      const fe::Dim& d = in.shape.dim(i);
      if (d.is_known() && d.value() != t->dim(static_cast<int>(i))) {
        return InvalidArgument("input '" + in.name + "' has shape " + device::ShapeToString(t->shape()) +
                               ", the model declares " + in.shape.ToString());
      }
    }
  }
  return t;
}


Result<Tensor> ConstantToTensor(const fe::Graph& g, const std::string& name) {
  const fe::Tensor* t = g.FindTensor(name);
  if (t == nullptr || !t->constant) return NotFound("tensor '" + name + "' has no value");
  std::vector<int64_t> shape;
  if (t->shape.is_static()) {
    shape = *t->shape.values();
  } else {
    shape = {static_cast<int64_t>(t->constant->size())};
  }
  return Tensor::FromFloats(shape, t->constant->floats());
}

// Result of one device op on one backend (before the output split).
struct ConvRun {
  Tensor y;
  double device_seconds = 0.0;
  double host_seconds = 0.0;
  int64_t macs = 0;
  std::string implementation;
  std::string blocking;
  bool activation_on_host = false;
};

class Runner {
 public:
  Runner(const ConvPlan& plan, device::Backend& dev, device::Backend& ref, const RunOptions& opt,
         const device::CancelToken* cancel, const ProgressFn& progress)
      : plan_(plan), dev_(dev), ref_(ref), opt_(opt), cancel_(cancel), progress_(progress) {}

  Result<RunResult> Run(const RunInputs& inputs) {
    const auto t0 = Clock::now();
    RunResult result;
    result.backend = dev_.name();
    result.backend_honours_precision = dev_.capabilities().honours_precision;
    result.precision = opt_.precision;
    result.precision.fp32_dest_acc_en = opt_.precision.EffectiveFp32DestAcc();
    result.mode = opt_.mode;
    with_ref_ = opt_.compare_to_reference || opt_.mode == RunMode::kPerLayer;
    result.compared = with_ref_;
    per_layer_ = opt_.mode == RunMode::kPerLayer;
    KILN_RETURN_IF_ERROR(opt_.precision.Validate());

    // Inputs.
    for (const auto& [name, t] : inputs) {
      if (std::none_of(plan_.inputs.begin(), plan_.inputs.end(), [&](const PlanInput& i) { return i.name == name; })) {
        std::string known;
        for (const PlanInput& i : plan_.inputs) known += (known.empty() ? "" : ", ") + i.name;
        return InvalidArgument("unknown input '" + name + "' (model inputs: " + known + ")");
      }
    }
    for (const PlanInput& in : plan_.inputs) {
      auto it = inputs.find(in.name);
      Result<Tensor> t = it == inputs.end() ? RandomInput(in, opt_.input_seed) : PrepareInput(in, it->second);
      if (!t.ok()) return t.status();
      if (it == inputs.end()) result.generated_inputs.push_back(in.name);
      if (with_ref_) ref_vals_[in.name] = *t;
      if (!per_layer_) dev_vals_[in.name] = std::move(*t);
    }
    ComputeLastUse();
    for (const fe::GraphOutput& o : plan_.outputs) graph_outputs_.insert(o.tensor);
    dev_caps_ = dev_.capabilities();
    ref_caps_ = &ref_ == &dev_ ? dev_caps_ : ref_.capabilities();

    const int64_t total = static_cast<int64_t>(plan_.ops.size());
    for (size_t i = 0; i < plan_.ops.size(); ++i) {
      if (cancel_ != nullptr) KILN_RETURN_IF_ERROR(cancel_->Check());
      const PlanOp& op = plan_.ops[i];
      LayerReport rep;
      rep.name = op.name;
      rep.op = op.op;
      rep.on_device = op.on_device();
      rep.source_nodes = op.source_nodes;
      Status s;
      try {
        s = op.on_device() ? RunDeviceOp(op, rep) : RunHost(op, rep);
      } catch (const std::bad_alloc&) {
        s = ResourceExhausted("out of memory");
      }
      if (!s.ok()) {
        // Name the layer unless the backend's message already does.
        if (s.message().find("'" + op.name + "'") != std::string::npos) return s;
        return Status(s.code(), "op '" + op.name + "' (" + op.op + "): " + s.message());
      }
      if (rep.compared && !rep.pass) result.all_pass = false;
      ReleaseAfter(i);
      if (progress_) {
        std::ostringstream msg;
        msg << op.name << " " << op.op << " " << std::fixed << std::setprecision(2) << rep.seconds * 1e3 << " ms";
        if (rep.compared) msg << " pcc=" << std::setprecision(6) << rep.pcc;
        progress_(device::JobProgress{static_cast<int64_t>(i) + 1, total, msg.str()});
      }
      result.layers.push_back(std::move(rep));
    }

    for (const fe::GraphOutput& o : plan_.outputs) {
      const Tensor* t = nullptr;
      if (per_layer_) {
        auto it = dev_out_.find(o.tensor);
        t = it != dev_out_.end() ? &it->second : Find(ref_vals_, o.tensor);
      } else {
        t = Find(dev_vals_, o.tensor);
      }
      if (t == nullptr) return Internal("graph output '" + o.name + "' was not computed");
      result.outputs.emplace_back(o.name, *t);
    }
    result.total_seconds = Since(t0);
    return result;
  }

 private:
  // A value of the chain `v`, or a model constant (converted once), or nullptr.
  const Tensor* Find(Values& v, const std::string& name) {
    auto it = v.find(name);
    if (it != v.end()) return &it->second;
    auto c = consts_.find(name);
    if (c != consts_.end()) return &c->second;
    if (plan_.model == nullptr) return nullptr;
    auto t = ConstantToTensor(plan_.model->graph(), name);
    if (!t.ok()) return nullptr;
    return &consts_.emplace(name, std::move(*t)).first->second;
  }

  Result<std::vector<const Tensor*>> Gather(Values& v, const std::vector<std::string>& names) {
    std::vector<const Tensor*> out;
    for (const std::string& n : names) {
      if (n.empty()) {
        out.push_back(nullptr);
        continue;
      }
      const Tensor* t = Find(v, n);
      if (t == nullptr) return Internal("tensor '" + n + "' is not available");
      out.push_back(t);
    }
    return out;
  }

  void ComputeLastUse() {
    std::unordered_map<std::string, size_t> last;
    for (size_t i = 0; i < plan_.ops.size(); ++i) {
      for (const std::string& n : plan_.ops[i].Inputs()) last[n] = i;
    }
    for (const fe::GraphOutput& o : plan_.outputs) last.erase(o.tensor);
    release_.assign(plan_.ops.size(), {});
    for (auto& [n, i] : last) release_[i].push_back(n);
  }

  void ReleaseAfter(size_t i) {
    for (const std::string& n : release_[i]) {
      dev_vals_.erase(n);
      ref_vals_.erase(n);
    }
  }

  // Runs a device op's computation on `be`.
  Result<ConvRun> Conv(const DeviceOp& d, device::Backend& be, const std::vector<const Tensor*>& ins,
                       const Tensor* residual) {
    ConvRun r;
    const bool ksplit = d.inputs.size() > 1;
    const auto& caps = &be == &dev_ ? dev_caps_ : ref_caps_;
    // The activation runs on the host (fp32) for K-splits (it applies to the sum) and when the
    // backend does not offer it as a fused activation.
    const bool host_act = ksplit || std::find(caps.activations.begin(), caps.activations.end(), d.activation()) ==
                                        caps.activations.end();
    r.activation_on_host = host_act && d.activation() != Activation::kNone;
    for (size_t k = 0; k < d.inputs.size(); ++k) {
      const Tensor& x = *ins[k];
      if (x.rank() != d.spatial_rank + 2) {
        return InvalidArgument("input '" + d.inputs[k] + "' has shape " + device::ShapeToString(x.shape()) +
                               ", expected rank " + std::to_string(d.spatial_rank + 2));
      }
      Tensor x4;
      const Tensor* xp = &x;
      if (d.spatial_rank == 1) {
        auto t = x.Reshaped({x.dim(0), x.dim(1), 1, x.dim(2)});
        if (!t.ok()) return t.status();
        x4 = std::move(*t);
        xp = &x4;
      }
      device::OpReport rep;
      device::ExecContext ctx;
      ctx.precision = opt_.precision;
      ctx.cancel = cancel_;
      ctx.report = &rep;
      const Tensor* bias = !ksplit && d.bias ? &*d.bias : nullptr;
      Result<Tensor> y = Status(StatusCode::kUnknown, "unset");
      if (d.kind == DeviceOpKind::kConv2d) {
        device::Conv2dParams p = d.conv;
        if (host_act) p.activation = Activation::kNone;
        y = be.Conv2d(*xp, d.weights[k], bias, p, ctx);
      } else {
        device::ConvTranspose2dParams p = d.conv_transpose;
        if (host_act) p.activation = Activation::kNone;
        y = be.ConvTranspose2d(*xp, d.weights[k], bias, p, ctx);
      }
      if (!y.ok()) return y.status();
      auto yn = y->ToLayout(device::Layout::kNCHW);
      if (!yn.ok()) return yn.status();
      r.device_seconds += rep.seconds;
      r.macs += rep.macs;
      if (r.implementation.empty()) r.implementation = rep.implementation;
      if (r.blocking.empty()) r.blocking = rep.blocking;
      if (k == 0) {
        r.y = std::move(*yn);
      } else {
        const auto th = Clock::now();
        if (yn->shape() != r.y.shape()) return Internal("K-split parts produced different shapes");
        float* acc = r.y.data<float>();
        const float* p = yn->data<float>();
        for (int64_t e = 0; e < r.y.num_elements(); ++e) acc[e] += p[e];
        r.host_seconds += Since(th);
      }
    }
    const auto th = Clock::now();
    if (ksplit || host_act) {
      const Tensor* hb = ksplit && d.bias ? &*d.bias : nullptr;  // single part: bias added on the device
      const int64_t O = r.y.dim(1);
      const int64_t inner = r.y.num_elements() / std::max<int64_t>(1, r.y.dim(0) * O);
      float* y = r.y.data<float>();
      for (int64_t n = 0; n < r.y.dim(0); ++n) {
        for (int64_t o = 0; o < O; ++o) {
          const float b = hb != nullptr ? hb->data<float>()[o] : 0.0f;
          float* row = y + (n * O + o) * inner;
          for (int64_t e = 0; e < inner; ++e) row[e] = device::ApplyActivation(d.activation(), row[e] + b);
        }
      }
    }
    if (d.spatial_rank == 1) {
      auto t = r.y.Reshaped({r.y.dim(0), r.y.dim(1), r.y.dim(3)});
      if (!t.ok()) return t.status();
      r.y = std::move(*t);
    }
    if (residual != nullptr) {
      if (residual->shape() != r.y.shape()) {
        return InvalidArgument("residual '" + d.residual + "' has shape " + device::ShapeToString(residual->shape()) +
                               ", the conv output " + device::ShapeToString(r.y.shape()));
      }
      float* y = r.y.data<float>();
      const float* q = residual->data<float>();
      for (int64_t e = 0; e < r.y.num_elements(); ++e) y[e] = device::ApplyActivation(d.residual_activation, y[e] + q[e]);
    }
    r.host_seconds += Since(th);
    return r;
  }

  // Splits `y` into the op's output slices.
  static Result<std::vector<Tensor>> Split(const DeviceOp& d, Tensor y) {
    std::vector<Tensor> out;
    if (d.outputs.size() == 1 && d.outputs[0].channel_begin == 0 && d.outputs[0].channel_end == y.dim(1)) {
      out.push_back(std::move(y));
      return out;
    }
    const int64_t N = y.dim(0), C = y.dim(1);
    const int64_t inner = y.num_elements() / std::max<int64_t>(1, N * C);
    for (const OutputSlice& s : d.outputs) {
      std::vector<int64_t> shape = y.shape();
      shape[1] = s.channel_end - s.channel_begin;
      auto t = Tensor::Zeros(shape);
      if (!t.ok()) return t.status();
      for (int64_t n = 0; n < N; ++n) {
        std::memcpy(t->data<float>() + n * shape[1] * inner, y.data<float>() + (n * C + s.channel_begin) * inner,
                    sizeof(float) * shape[1] * inner);
      }
      out.push_back(std::move(*t));
    }
    return out;
  }

  double Threshold(const DeviceOp& d) const {
    if (opt_.pcc_threshold > 0) return opt_.pcc_threshold;
    const device::PrecisionConfig& p = opt_.precision;
    const bool fp32 = p.EffectiveFp32DestAcc();
    const bool bfp8 = p.output_dtype == device::DeviceDType::kBFloat8B;
    if (d.kind == DeviceOpKind::kConvTranspose2d) {
      return numerics::ConvTransposePccThreshold(fp32, p.math_fidelity, bfp8);
    }
    numerics::ConvPccRuleInput in;
    in.fp32_accum = fp32;
    in.fidelity = p.math_fidelity;
    in.bfp8_output = bfp8;
    in.activation = d.activation();
    in.cin_kh_kw = d.in_channels() * d.kernel().first * d.kernel().second;
    return numerics::ConvPccThreshold(in);
  }

  Status Compare(const std::vector<Tensor>& dev, const std::vector<Tensor>& ref, double threshold, LayerReport& rep) {
    std::vector<float> a, b;
    for (size_t k = 0; k < dev.size(); ++k) {
      if (dev[k].empty() || ref[k].empty()) continue;
      if (dev[k].shape() != ref[k].shape()) {
        return Internal("op '" + rep.name + "': device and reference output shapes differ");
      }
      a.insert(a.end(), dev[k].span<float>().begin(), dev[k].span<float>().end());
      b.insert(b.end(), ref[k].span<float>().begin(), ref[k].span<float>().end());
    }
    auto pcc = numerics::CompPcc(b, a, threshold > 0 ? threshold : 0.99);
    if (!pcc.ok()) return pcc.status();
    rep.compared = true;
    rep.pcc = pcc->pcc;
    double mx = 0;
    for (size_t e = 0; e < a.size(); ++e) {
      const double diff = std::fabs(static_cast<double>(a[e]) - b[e]);
      if (std::isnan(diff)) {
        mx = diff;
        break;
      }
      mx = std::max(mx, diff);
    }
    rep.max_abs_error = mx;
    rep.threshold = threshold;
    rep.pass = threshold > 0 ? pcc->pass : true;
    return Status::Ok();
  }

  static std::vector<std::vector<int64_t>> Shapes(const std::vector<const Tensor*>& ts) {
    std::vector<std::vector<int64_t>> s;
    for (const Tensor* t : ts) s.push_back(t != nullptr ? t->shape() : std::vector<int64_t>{});
    return s;
  }

  Status RunDeviceOp(const PlanOp& op, LayerReport& rep) {
    const DeviceOp& d = op.device();
    rep.activation = device::ActivationName(d.activation());
    rep.residual = d.residual;
    if (!d.residual.empty()) rep.residual_activation = device::ActivationName(d.residual_activation);
    rep.k_parts = static_cast<int>(d.inputs.size());
    Values& src = per_layer_ ? ref_vals_ : dev_vals_;
    auto ins = Gather(src, d.inputs);
    if (!ins.ok()) return ins.status();
    const Tensor* res = nullptr;
    if (!d.residual.empty()) {
      res = Find(src, d.residual);
      if (res == nullptr) return Internal("residual '" + d.residual + "' is not available");
    }
    rep.input_shapes = Shapes(*ins);
    if (res != nullptr) rep.input_shapes.push_back(res->shape());
    auto dr = Conv(d, dev_, *ins, res);
    if (!dr.ok()) return dr.status().WithContext("op '" + op.name + "' (" + op.op + ") on " + dev_.name());
    rep.seconds = dr->device_seconds;
    rep.host_seconds = dr->host_seconds;
    rep.macs = dr->macs;
    rep.implementation = dr->implementation;
    rep.blocking = dr->blocking;
    rep.activation_on_host = dr->activation_on_host;
    auto dev_out = Split(d, std::move(dr->y));
    if (!dev_out.ok()) return dev_out.status();
    for (const auto& t : *dev_out) rep.output_shapes.push_back(t.shape());

    if (with_ref_) {
      std::vector<const Tensor*> rins = *ins;
      const Tensor* rres = res;
      if (!per_layer_) {
        auto g = Gather(ref_vals_, d.inputs);
        if (!g.ok()) return g.status();
        rins = *g;
        if (!d.residual.empty()) rres = Find(ref_vals_, d.residual);
      }
      auto rr = Conv(d, ref_, rins, rres);
      if (!rr.ok()) return rr.status().WithContext("op '" + op.name + "' (" + op.op + ") on the fp32 reference");
      auto ref_out = Split(d, std::move(rr->y));
      if (!ref_out.ok()) return ref_out.status();
      KILN_RETURN_IF_ERROR(Compare(*dev_out, *ref_out, Threshold(d), rep));
      for (size_t k = 0; k < d.outputs.size(); ++k) ref_vals_[d.outputs[k].tensor] = std::move((*ref_out)[k]);
    }
    for (size_t k = 0; k < d.outputs.size(); ++k) {
      const std::string& name = d.outputs[k].tensor;
      if (!per_layer_) {
        dev_vals_[name] = std::move((*dev_out)[k]);
      } else if (graph_outputs_.count(name) != 0) {
        dev_out_[name] = std::move((*dev_out)[k]);  // per_layer keeps device results of graph outputs only
      }
    }
    return Status::Ok();
  }

  Status RunHost(const PlanOp& op, LayerReport& rep) {
    const fe::Node& n = op.host().node;
    Values& src = per_layer_ ? ref_vals_ : dev_vals_;
    auto ins = Gather(src, n.inputs);
    if (!ins.ok()) return ins.status();
    rep.input_shapes = Shapes(*ins);
    const auto t0 = Clock::now();
    auto out = RunHostOp(n, *ins, ref_);
    rep.seconds = Since(t0);
    if (!out.ok()) return out.status();
    for (const auto& t : *out) rep.output_shapes.push_back(t.shape());
    if (with_ref_ && !per_layer_) {
      auto rins = Gather(ref_vals_, n.inputs);
      if (!rins.ok()) return rins.status();
      auto rout = RunHostOp(n, *rins, ref_);
      if (!rout.ok()) return rout.status();
      KILN_RETURN_IF_ERROR(Compare(*out, *rout, 0.0, rep));
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        if (!n.outputs[k].empty()) ref_vals_[n.outputs[k]] = std::move((*rout)[k]);
      }
    }
    Values& dst = per_layer_ ? ref_vals_ : dev_vals_;
    for (size_t k = 0; k < n.outputs.size() && k < out->size(); ++k) {
      if (!n.outputs[k].empty()) dst[n.outputs[k]] = std::move((*out)[k]);
    }
    return Status::Ok();
  }

  const ConvPlan& plan_;
  device::Backend& dev_;
  device::Backend& ref_;
  const RunOptions& opt_;
  const device::CancelToken* cancel_;
  const ProgressFn& progress_;
  bool with_ref_ = false;
  bool per_layer_ = false;
  Values dev_vals_, ref_vals_, dev_out_, consts_;
  std::set<std::string> graph_outputs_;
  device::BackendCapabilities dev_caps_, ref_caps_;
  std::vector<std::vector<std::string>> release_;
};

}  // namespace

Result<RunResult> RunConvPlan(const ConvPlan& plan, const RunInputs& inputs, device::Backend& device,
                              const RunOptions& options, const device::CancelToken* cancel,
                              const ProgressFn& progress) {
  try {
    device::Backend* ref = options.reference;
    std::unique_ptr<device::Backend> owned;
    if (ref == nullptr) {
      if (device::IsFp32Reference(device.name())) {
        ref = &device;
      } else {
        device::BackendOptions bo;
        if (options.reference_threads > 0) {
          bo.settings[device::kReferenceThreadsSetting] = std::to_string(options.reference_threads);
        }
        auto r = device::MakeReferenceBackend(bo);
        if (!r.ok()) return r.status();
        owned = std::move(*r);
        ref = owned.get();
      }
    }
    Runner runner(plan, device, *ref, options, cancel, progress);
    return runner.Run(inputs);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("RunConvPlan: out of memory");
  } catch (const std::exception& e) {
    return Internal(std::string("RunConvPlan: ") + e.what());
  }
}

std::string FormatReportTable(const RunResult& r) {
  std::ostringstream os;
  os << "backend " << r.backend << "  mode " << RunModeName(r.mode) << "  precision " << r.precision.ToString()
     << (r.backend_honours_precision ? "" : " (ignored: fp32 backend)") << "\n";
  os << std::left << std::setw(28) << "layer" << std::setw(18) << "op" << std::setw(22) << "output" << std::right
     << std::setw(10) << "ms" << std::setw(11) << "pcc" << std::setw(12) << "max_err" << std::setw(8) << "thr"
     << std::setw(6) << "pass" << "\n";
  for (const LayerReport& l : r.layers) {
    std::string name = l.name.size() > 27 ? l.name.substr(0, 24) + "..." : l.name;
    std::string op = l.op;
    if (l.on_device && l.activation != "none") op += "+" + l.activation;
    if (!l.residual.empty()) op += "+add";
    std::string shape = l.output_shapes.empty() ? "" : device::ShapeToString(l.output_shapes[0]);
    os << std::left << std::setw(28) << name << std::setw(18) << op << std::setw(22) << shape << std::right
       << std::fixed << std::setw(10) << std::setprecision(3) << (l.seconds + l.host_seconds) * 1e3;
    if (l.compared) {
      os << std::setw(11) << std::setprecision(6) << l.pcc << std::setw(12) << std::scientific << std::setprecision(2)
         << l.max_abs_error << std::fixed;
    } else {
      os << std::setw(11) << "-" << std::setw(12) << "-";
    }
    if (l.on_device && l.compared) {
      os << std::setw(8) << std::setprecision(4) << l.threshold << std::setw(6) << (l.pass ? "yes" : "NO");
    } else {
      os << std::setw(8) << "-" << std::setw(6) << "-";
    }
    os << "\n";
  }
  os << "total " << std::fixed << std::setprecision(3) << r.total_seconds * 1e3 << " ms, "
     << (r.compared ? (r.all_pass ? "all device ops pass" : "SOME DEVICE OPS FAIL") : "not compared") << "\n";
  return os.str();
}

}  // namespace kiln::convplan
