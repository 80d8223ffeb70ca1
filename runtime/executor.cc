#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <iomanip>
#include <new>
#include <set>
#include <sstream>
#include <unordered_map>

#include "common/reactor.h"
#include "compiler/convplan/host_tensor.h"
#include "device/backends/builtin.h"
#include "device/backends/reference/reference_backend.h"
#include "runtime/accuracy.h"
#include "runtime/device_op_runner.h"
#include "runtime/host_kernels/registry.h"
#include "runtime/prepared_convs.h"

namespace kiln::runtime {

namespace fe = onnx_fe;
using convplan::ConvPlan;
using convplan::DeviceOp;
using convplan::PlanOp;
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

Result<Tensor> ConstantToTensor(const ConvPlan& plan, const std::string& name) {
  if (plan.model == nullptr) return NotFound("tensor '" + name + "' has no value");
  const fe::Tensor* t = plan.model->graph().FindTensor(name);
  if (t == nullptr || !t->constant) return NotFound("tensor '" + name + "' has no value");
  return convplan::ConstantTensor(*t);
}

// Device ops compute in fp32 (device/backends/backend.h): other floating types are converted on
// the way in (and the results back to the input's type, as ONNX's Conv keeps T).
// `owned` keeps the converted copies (reserved up front, so `views` into it stay valid while the
// caller holds it).
Status ToFp32(const std::vector<const Tensor*>& ins, std::vector<Tensor>& owned, std::vector<const Tensor*>& views) {
  owned.clear();
  owned.reserve(ins.size());
  views = ins;
  for (size_t i = 0; i < ins.size(); ++i) {
    if (ins[i] == nullptr || ins[i]->dtype() == device::DataType::kFloat32) continue;
    auto f = ins[i]->ToFloat32();
    if (!f.ok()) return f.status();
    owned.push_back(std::move(*f));
    views[i] = &owned.back();
  }
  return Status::Ok();
}

std::vector<std::vector<int64_t>> Shapes(const std::vector<const Tensor*>& ts) {
  std::vector<std::vector<int64_t>> s;
  for (const Tensor* t : ts) s.push_back(t != nullptr ? t->shape() : std::vector<int64_t>{});
  return s;
}

Status CastAll(std::vector<Tensor>& ts, device::DataType type) {
  if (type == device::DataType::kFloat32) return Status::Ok();
  for (Tensor& t : ts) {
    auto c = t.CastTo(type);
    if (!c.ok()) return c.status();
    t = std::move(*c);
  }
  return Status::Ok();
}

void Record(const Comparison& c, LayerReport& rep) {
  rep.compared = true;
  rep.pcc = c.pcc;
  rep.max_abs_error = c.max_abs_error;
  rep.threshold = c.threshold;
  rep.pass = c.pass;
}

// One run: the op loop over the device chain (dev_vals_) and the fp32 reference chain
// (ref_vals_), with value lifetime.
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
    result.backend_sources = dev_.capabilities().sources;
    result.precision = opt_.precision;
    result.precision.fp32_dest_acc_en = opt_.precision.EffectiveFp32DestAcc();
    result.mode = opt_.mode;
    with_ref_ = opt_.compare_to_reference || opt_.mode == RunMode::kPerLayer;
    result.compared = with_ref_;
    per_layer_ = opt_.mode == RunMode::kPerLayer;
    KILN_RETURN_IF_ERROR(opt_.precision.Validate());
    KILN_RETURN_IF_ERROR(CheckLayerPrecisionNames(plan_, opt_.layer_precision));
    for (const auto& [name, p] : opt_.layer_precision) {
      KILN_RETURN_IF_ERROR(p.Validate().WithContext("layer_precision['" + name + "']"));
    }

    auto resolved = ResolveInputs(plan_.inputs, inputs, opt_.input_seed);
    if (!resolved.ok()) return resolved.status();
    result.generated_inputs = std::move(resolved->generated);
    result.folded_nodes = plan_.folded_nodes;
    for (auto& [name, t] : resolved->values) {
      if (with_ref_) ref_vals_[name] = t;
      if (!per_layer_) dev_vals_[name] = std::move(t);
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
      op_index_ = i;
      try {
        s = op.on_device() ? RunDevice(op, rep) : RunHost(op, rep);
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
      if (opt_.on_layer) opt_.on_layer(i + 1, plan_.ops.size(), rep);
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
      auto rm = RowMajor(*t);
      if (!rm.ok()) return rm.status();
      result.outputs.emplace_back(o.name, std::move(*rm));
    }
    result.total_seconds = Since(t0);
    return result;
  }

 private:
  // A value of the chain `v`, or a model constant (converted once), or nullptr.
  const Tensor* Find(Values& v, const std::string& name) {
    auto it = v.find(name);
    if (it != v.end()) return &it->second;
    if (auto h = plan_.host_constants.find(name); h != plan_.host_constants.end()) return h->second.get();
    auto c = consts_.find(name);
    if (c != consts_.end()) return &c->second;
    auto t = ConstantToTensor(plan_, name);
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

  // Value lifetime: release_[i] = tensors last read by op i (graph outputs are kept).
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

  Status RunDevice(const PlanOp& op, LayerReport& rep) {
    const DeviceOp& d = op.device();
    auto lp = opt_.layer_precision.find(op.name);
    const device::PrecisionConfig& precision = lp != opt_.layer_precision.end() ? lp->second : opt_.precision;
    if (dev_caps_.honours_precision) {
      rep.precision = precision;
      rep.precision->fp32_dest_acc_en = precision.EffectiveFp32DestAcc();
      rep.layer_precision_set = lp != opt_.layer_precision.end();
    }
    rep.activation = device::ActivationName(d.activation());
    rep.residual = d.residual;
    if (!d.residual.empty()) rep.residual_activation = device::ActivationName(d.residual_activation);
    rep.k_parts = d.kind == convplan::DeviceOpKind::kAdd ? 1 : static_cast<int>(d.inputs.size());
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
    const device::DataType out_type = !ins->empty() && (*ins)[0] != nullptr ? (*ins)[0]->dtype() : device::DataType::kFloat32;
    std::vector<const Tensor*> fins, fres_v;
    std::vector<Tensor> fowned, fres_owned;
    KILN_RETURN_IF_ERROR(ToFp32(*ins, fowned, fins));
    *ins = fins;
    KILN_RETURN_IF_ERROR(ToFp32({res}, fres_owned, fres_v));
    res = fres_v[0];
    // Without a reference chain the device values are read by this loop only: they stay in the
    // backend's layout between device ops (RowMajor converts them for host ops and outputs).
    auto dr = RunDeviceOp(d, dev_, dev_caps_, *ins, res, precision, cancel_, Prepared(dev_), op_index_,
                          !with_ref_);
    if (!dr.ok()) return dr.status().WithContext("op '" + op.name + "' (" + op.op + ") on " + dev_.name());
    rep.seconds = dr->device_seconds;
    rep.host_seconds = dr->host_seconds;
    rep.macs = dr->macs;
    rep.implementation = dr->implementation;
    rep.blocking = dr->blocking;
    rep.program = dr->program;
    rep.activation_on_host = dr->activation_on_host;
    auto dev_out = SplitOutputs(d, std::move(dr->y));
    if (!dev_out.ok()) return dev_out.status();
    KILN_RETURN_IF_ERROR(CastAll(*dev_out, out_type));
    for (const auto& t : *dev_out) rep.output_shapes.push_back(t.shape());

    if (with_ref_) {
      std::vector<const Tensor*> rins = *ins;
      const Tensor* rres = res;
      std::vector<Tensor> rowned, rres_owned;
      if (!per_layer_) {
        auto g = Gather(ref_vals_, d.inputs);
        if (!g.ok()) return g.status();
        KILN_RETURN_IF_ERROR(ToFp32(*g, rowned, rins));
        if (!d.residual.empty()) {
          std::vector<const Tensor*> v;
          KILN_RETURN_IF_ERROR(ToFp32({Find(ref_vals_, d.residual)}, rres_owned, v));
          rres = v[0];
        }
      }
      auto rr = RunDeviceOp(d, ref_, ref_caps_, rins, rres, precision, cancel_, Prepared(ref_), op_index_);
      if (!rr.ok()) return rr.status().WithContext("op '" + op.name + "' (" + op.op + ") on the fp32 reference");
      auto ref_out = SplitOutputs(d, std::move(rr->y));
      if (!ref_out.ok()) return ref_out.status();
      KILN_RETURN_IF_ERROR(CastAll(*ref_out, out_type));
      auto c = CompareOutputs(*dev_out, *ref_out, PccThreshold(d, precision, opt_.pcc_threshold), rep.name,
                              RoundsToOutputDType(d, precision) ? std::optional(precision.EffectiveOutputDType())
                                                     : std::nullopt);
      if (!c.ok()) return c.status();
      Record(*c, rep);
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

  // RunOptions::prepared when it holds this plan's convs on `backend`, else null (unprepared).
  PreparedConvs* Prepared(const device::Backend& backend) const {
    return opt_.prepared != nullptr && opt_.prepared->Serves(plan_, backend) ? opt_.prepared : nullptr;
  }

  // `t` as a row-major (NCHW) tensor: device ops may leave values in their backend's layout.
  static Result<Tensor> RowMajor(const Tensor& t) { return ConvertLayout(t, device::Layout::kNCHW); }

  Status RunHost(const PlanOp& op, LayerReport& rep) {
    const fe::Node& n = op.host().node;
    const HostKernelRegistry& kernels = HostKernels();
    const HostKernelContext ctx{ref_, cancel_};
    Values& src = per_layer_ ? ref_vals_ : dev_vals_;
    for (const std::string& name : n.inputs) {  // host kernels read row-major tensors
      auto it = src.find(name);
      if (it == src.end() || it->second.layout() == device::Layout::kNCHW) continue;
      auto rm = RowMajor(it->second);
      if (!rm.ok()) return rm.status();
      it->second = std::move(*rm);
    }
    auto ins = Gather(src, n.inputs);
    if (!ins.ok()) return ins.status();
    rep.input_shapes = Shapes(*ins);
    const auto t0 = Clock::now();
    auto out = kernels.Run(n, *ins, ctx);
    rep.seconds = Since(t0);
    if (!out.ok()) return out.status();
    for (const auto& t : *out) rep.output_shapes.push_back(t.shape());
    if (with_ref_ && !per_layer_) {
      auto rins = Gather(ref_vals_, n.inputs);
      if (!rins.ok()) return rins.status();
      auto rout = kernels.Run(n, *rins, ctx);
      if (!rout.ok()) return rout.status();
      auto c = CompareOutputs(*out, *rout, 0.0, rep.name);
      if (!c.ok()) return c.status();
      Record(*c, rep);
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
  size_t op_index_ = 0;  // index in plan_.ops of the op being run
  Values dev_vals_, ref_vals_, dev_out_, consts_;
  std::set<std::string> graph_outputs_;
  device::BackendCapabilities dev_caps_, ref_caps_;
  // Whether device op `d`'s output is in the precision's output dtype, so its reference is cast to
  // it before comp_pcc (runtime/accuracy.h): not on a backend that ignores precision, nor for an add
  // done in fp32 on the host (host_add).
  bool RoundsToOutputDType(const convplan::DeviceOp& d, const device::PrecisionConfig& precision) const {
    return dev_caps_.honours_precision && !(d.kind == convplan::DeviceOpKind::kAdd && precision.host_add);
  }
  std::vector<std::vector<std::string>> release_;
};

}  // namespace

Status CheckLayerPrecisionNames(const ConvPlan& plan,
                                const std::map<std::string, device::PrecisionConfig>& layer_precision) {
  if (layer_precision.empty()) return Status::Ok();
  std::set<std::string> device_ops;
  std::string some;  // the first few, for the message
  int listed = 0;
  for (const PlanOp& op : plan.ops) {
    if (!op.on_device()) continue;
    device_ops.insert(op.name);
    if (listed < 8) some += (listed++ > 0 ? ", " : "") + op.name;
  }
  if (device_ops.size() > 8) some += ", ...";
  for (const auto& [name, p] : layer_precision) {
    if (device_ops.count(name) == 0) {
      return InvalidArgument("layer_precision: '" + name + "' is no device layer of the model (its device layers: " +
                             (some.empty() ? std::string("none") : some) + ")");
    }
  }
  return Status::Ok();
}

Result<RunResult> RunConvPlan(const ConvPlan& plan, const RunInputs& inputs, device::Backend& device,
                              const RunOptions& options, const device::CancelToken* cancel,
                              const ProgressFn& progress) {
  AssertNotOnReactor("RunConvPlan");
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

}  // namespace kiln::runtime
