#include "api/run_conv.h"

#include <algorithm>
#include <chrono>
#include <cctype>
#include <climits>
#include <exception>

#include "api/convert.h"
#include "api/lanes.h"
#include "api/models.h"
#include "api/version.h"
#include "common/memory.h"
#include "common/reactor.h"
#include "compiler/onnx/loader.h"
#include "device/backends/builtin.h"
#include "runtime/host_kernels/registry.h"
#include "runtime/inputs.h"

namespace kiln::api {

Result<std::shared_ptr<const convplan::ConvPlan>> PlanModel(std::string_view bytes, const std::string& model_name,
                                                            const std::map<std::string, int64_t>& bind_symbols,
                                                            const convplan::PlanOptions& options) {
  AssertNotOnReactor("PlanModel");
  onnx_fe::LoadOptions load;
  load.model_name = model_name;
  load.bind_symbols = bind_symbols;
  auto model = onnx_fe::LoadModel(bytes, load);
  if (!model.ok()) return model.status();
  auto plan = convplan::BuildConvPlan(*model, runtime::HostKernels(), options);
  if (!plan.ok()) return plan.status().WithContext("model '" + model_name + "'");
  return std::make_shared<const convplan::ConvPlan>(std::move(plan).value());
}

convplan::PlanOptions PlanOptionsForRequest(const kiln::v1::RunConvLayersRequest& request) {
  convplan::PlanOptions o;
  // A Concat → Conv is ttnn.concat then one conv unless the request asks for Kiln's K-split.
  if (!request.precision().concat_k_split()) o.disabled_passes.push_back("KSplitConcat");
  return o;
}

std::map<std::string, int64_t> SymbolBindings(const onnx_fe::Graph& graph, const kiln::v1::RunConvLayersRequest& request) {
  std::map<std::string, int64_t> b;
  for (const std::string& name : graph.inputs()) {
    const onnx_fe::Tensor* in = graph.FindTensor(name);
    if (in == nullptr || !in->shape.has_rank()) continue;
    const kiln::v1::Tensor* given = nullptr;
    for (const auto& t : request.inputs()) {
      if (t.name() == name) given = &t;
    }
    // A given tensor of another rank is refused later by runtime/inputs.h; bind nothing then.
    if (given != nullptr && given->shape_size() != static_cast<int>(in->shape.rank())) continue;
    for (size_t i = 0; i < in->shape.rank(); ++i) {
      const onnx_fe::Dim& d = in->shape.dim(i);
      if (!d.is_symbol()) continue;
      const int64_t v = given != nullptr ? given->shape(static_cast<int>(i)) : 1;
      if (v >= 0) b.emplace(d.symbol(), v);
    }
  }
  return b;
}

Result<std::shared_ptr<const convplan::ConvPlan>> PlanForRequest(std::string_view bytes, const std::string& model_name,
                                                                 const kiln::v1::RunConvLayersRequest& request) {
  AssertNotOnReactor("PlanForRequest");
  onnx_fe::LoadOptions load;
  load.model_name = model_name;
  auto model = onnx_fe::LoadModel(bytes, load);
  if (!model.ok()) return model.status();
  const auto bindings = SymbolBindings((*model)->graph(), request);
  const convplan::PlanOptions options = PlanOptionsForRequest(request);
  if (!bindings.empty()) return PlanModel(bytes, model_name, bindings, options);
  auto plan = convplan::BuildConvPlan(*model, runtime::HostKernels(), options);
  if (!plan.ok()) return plan.status().WithContext("model '" + model_name + "'");
  return std::make_shared<const convplan::ConvPlan>(std::move(plan).value());
}

std::string PlanCacheKey(const std::string& model_id, const kiln::v1::RunConvLayersRequest& request) {
  std::map<std::string, std::string> shapes;  // sorted by name: the key does not depend on order
  for (const auto& t : request.inputs()) {
    std::string s;
    for (int64_t d : t.shape()) s += (s.empty() ? "" : "x") + std::to_string(d);
    shapes.emplace(t.name(), s);
  }
  std::string k = model_id;
  for (const auto& [name, s] : shapes) k += "|" + name + "=" + s;
  if (request.precision().concat_k_split()) k += "|ksplit";  // PlanOptionsForRequest
  return k;
}

Result<PreparedConvRun> PrepareConvRun(std::string_view bytes, const std::string& model_name,
                                       const kiln::v1::RunConvLayersRequest& request) {
  auto plan = PlanForRequest(bytes, model_name, request);
  if (!plan.ok()) return plan.status();
  return PrepareConvRun(std::move(plan).value(), request);
}
Result<std::string> ResolveTtEmuLevel(const kiln::v1::RunConvLayersRequest& request,
                                      const std::map<std::string, std::string>& device_settings) {
  const std::string backend = request.backend().empty() ? device::DefaultBackendName() : request.backend();
  const std::string& asked = request.tt_emu_level();
  if (backend != device::kTtEmuBackend) {
    if (!asked.empty()) {
      return InvalidArgument("tt_emu_level: '" + asked + "' applies to backend " + device::kTtEmuBackend +
                             " only, this run is on " + backend);
    }
    return std::string();
  }
  const auto& registry = device::DefaultBackendRegistry();
  if (!asked.empty()) {
    // The backend's own parser decides which levels exist (device/backends/tt_emu/tt_conv.h).
    device::BackendOptions bo;
    bo.settings[device::kTtEmuLevelSetting] = asked;
    auto probe = registry.Create(backend, bo);
    if (!probe.ok()) return probe.status().WithContext("tt_emu_level");
    std::string level = asked;  // the parser ignores case: report the name as --tt-emu-level spells it
    for (char& c : level) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return level;
  }
  if (auto it = device_settings.find(device::kTtEmuLevelSetting); it != device_settings.end()) return it->second;
  auto declared = registry.Settings(backend);
  if (declared.ok()) {
    for (const auto& s : *declared) {
      if (s.key == device::kTtEmuLevelSetting) return s.default_value;
    }
  }
  return std::string();  // a build without tt-emu: the run is refused as NOT_FOUND later
}

Result<PreparedConvRun> PrepareConvRun(std::shared_ptr<const convplan::ConvPlan> plan,
                                       const kiln::v1::RunConvLayersRequest& request) {
  KILN_RETURN_IF_ERROR(CheckEnumValues(request));
  KILN_RETURN_IF_ERROR(ResolveTtEmuLevel(request, {}).status());
  PreparedConvRun run;
  run.plan = std::move(plan);
  run.backend = request.backend().empty() ? device::DefaultBackendName() : request.backend();
  auto precision = FromProto(request.precision());
  if (!precision.ok()) return precision.status().WithContext("precision");
  run.options.precision = *precision;
  for (const auto& [name, layer] : request.layer_precision()) {
    // Whole-run settings: the plan is built once (concat_k_split, PlanOptionsForRequest) and a run
    // is on one card (arch, board).
    if (layer.concat_k_split() || layer.arch() != kiln::v1::ARCH_UNSPECIFIED ||
        layer.board() != kiln::v1::BOARD_UNSPECIFIED) {
      return InvalidArgument("layer_precision[" + name +
                             "]: concat_k_split, arch and board apply to the whole run; set them in precision");
    }
    auto merged = FromProto(MergePrecision(request.precision(), layer));
    if (!merged.ok()) return merged.status().WithContext("layer_precision[" + name + "]");
    run.options.layer_precision.emplace(name, *merged);
  }
  KILN_RETURN_IF_ERROR(runtime::CheckLayerPrecisionNames(*run.plan, run.options.layer_precision));
  run.options.mode = request.mode() == kiln::v1::PER_LAYER ? runtime::RunMode::kPerLayer
                                                           : runtime::RunMode::kChained;
  run.options.compare_to_reference = !request.skip_reference();
  run.options.input_seed = request.seed();
  for (const auto& t : request.inputs()) {
    if (run.inputs.count(t.name())) {
      return InvalidArgument("input tensor '" + t.name() + "' given twice");
    }
    auto tensor = FromProto(t);
    if (!tensor.ok()) return tensor.status();
    // A wrong shape is the request's mistake: say so before the memory estimate judges its size.
    for (const convplan::PlanInput& in : run.plan->inputs) {
      if (in.name == t.name()) KILN_RETURN_IF_ERROR(runtime::CheckInputShape(in, tensor->shape()));
    }
    run.inputs.emplace(t.name(), std::move(tensor).value());
  }
  run.memory = runtime::EstimateRunMemory(*run.plan, run.inputs, run.options);
  return run;
}

void LayerReportToProto(const runtime::LayerReport& l, kiln::v1::LayerReport* p) {
  p->set_name(l.name);
  p->set_op(l.op);
  if (!l.input_shapes.empty()) {
    for (int64_t d : l.input_shapes.front()) p->add_input_shape(d);
  }
  if (!l.output_shapes.empty()) {
    for (int64_t d : l.output_shapes.front()) p->add_output_shape(d);
  }
  p->set_device_seconds(l.seconds);
  p->set_pcc(l.pcc);
  p->set_max_abs_error(l.max_abs_error);
  p->set_pcc_threshold(l.threshold);
  p->set_pass(l.pass);
  p->set_passed(l.pass);
  p->set_compared(l.compared);
  std::string detail = l.on_device ? "device" : "host";
  if (!l.activation.empty() && l.activation != "none") {
    detail += " act=" + l.activation + (l.activation_on_host ? "(host fp32)" : "");
  }
  if (l.k_parts > 1) detail += " k_split=" + std::to_string(l.k_parts);
  if (!l.blocking.empty()) detail += " " + l.blocking;
  p->set_detail(detail);
  if (l.program) ToProto(*l.program, p->mutable_program());
  if (l.precision) {  // as FillRunResponse shows the run's precision
    ToProto(*l.precision, p->mutable_precision());
    p->set_resolved_precision(l.precision->Resolved().ToString());
    p->set_layer_precision_set(l.layer_precision_set);
  }
}

Status CheckRunMemory(const PreparedConvRun& run, const std::string& model_name, uint64_t budget_bytes) {
  if (budget_bytes == 0 || static_cast<uint64_t>(run.memory.peak_bytes) <= budget_bytes) return Status::Ok();
  return ResourceExhausted("run of model '" + model_name + "' needs ~" +
                           FormatBytes(static_cast<uint64_t>(run.memory.peak_bytes)) + " at layer '" +
                           run.memory.peak_op + "' (which allocates ~" +
                           FormatBytes(static_cast<uint64_t>(run.memory.peak_op_bytes)) +
                           "), over the memory budget of " + FormatBytes(budget_bytes) + " (--memory-budget)");
}

Status CheckRunOutputs(const PreparedConvRun& run, const kiln::v1::RunConvLayersRequest& request,
                       const std::string& model_name, int64_t max_result_bytes) {
  if (max_result_bytes <= 0 || request.omit_outputs() || run.memory.output_bytes <= max_result_bytes) {
    return Status::Ok();
  }
  return ResourceExhausted("run of model '" + model_name + "' would return ~" +
                           FormatBytes(static_cast<uint64_t>(run.memory.output_bytes)) +
                           " of outputs, over the result limit of " +
                           FormatBytes(static_cast<uint64_t>(max_result_bytes)) +
                           " (--max-message-bytes); run with omit_outputs");
}

int64_t PlanBytes(const convplan::ConvPlan& plan, int64_t model_bytes) {
  auto add = [](int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; };
  int64_t total = std::max<int64_t>(model_bytes, 0);
  if (plan.model) {
    for (const auto& [name, t] : plan.model->graph().tensors()) {
      if (!t.constant) continue;
      const auto& c = *t.constant;
      total = add(total, static_cast<int64_t>(c.floats().size() * sizeof(float) + c.ints().size() * sizeof(int64_t) +
                                              c.doubles().size() * sizeof(double)));
    }
  }
  for (const auto& op : plan.ops) {
    if (!op.on_device()) continue;
    for (const auto& w : op.device().weights) total = add(total, static_cast<int64_t>(w.size_bytes()));
    if (op.device().bias) total = add(total, static_cast<int64_t>(op.device().bias->size_bytes()));
  }
  for (const auto& [name, t] : plan.host_constants) {
    if (t) total = add(total, static_cast<int64_t>(t->size_bytes()));
  }
  return total;
}

void FillRunResponse(const runtime::RunResult& result, bool omit_outputs,
                     kiln::v1::RunConvLayersResponse* response) {
  if (!omit_outputs) {
    for (const auto& [name, tensor] : result.outputs) ToProto(name, tensor, response->add_outputs());
  }
  for (const auto& l : result.layers) LayerReportToProto(l, response->add_layers());
  response->set_pass(result.all_pass);
  response->set_passed(result.all_pass);
  response->set_backend(result.backend);
  response->set_resolved_precision(result.precision.Resolved().ToString());
  ToProto(result.precision, response->mutable_precision());
  response->set_kiln_version(KilnVersion());
  response->set_run_seconds(result.total_seconds);
  response->set_folded_nodes(result.folded_nodes);
  response->set_backend_sources(result.backend_sources);
  response->set_mode(result.mode == runtime::RunMode::kPerLayer ? kiln::v1::PER_LAYER : kiln::v1::CHAINED);
  EnsureUtf8(response);  // layer names, ops and output names come from the model (api/models.h)
}

void FillPassedFromPass(kiln::v1::LayerReport* layer) { layer->set_passed(layer->pass()); }

void FillPassedFromPass(kiln::v1::RunConvLayersResponse* response) {
  response->set_passed(response->pass());
  for (auto& l : *response->mutable_layers()) FillPassedFromPass(&l);
}

sched::JobFn MakeRunJob(std::shared_ptr<const convplan::ConvPlan> plan, runtime::RunInputs inputs,
                        runtime::RunOptions options, std::shared_ptr<runtime::RunResult> result) {
  return [plan = std::move(plan), inputs = std::move(inputs), options, result = std::move(result)](
             device::Backend& backend, sched::JobContext& ctx) -> Status {
    if (!plan || !result) return InvalidArgument("MakeRunJob: null plan or result");
    runtime::RunOptions o = options;
    // A run on the reference backend is its own reference (a stage on its own lane could wait
    // for the very worker it occupies).
    if (o.reference != nullptr && o.reference->name() == backend.name()) o.reference = nullptr;
    auto r = runtime::RunConvPlan(*plan, inputs, backend, o, ctx.cancel, ctx.progress);
    if (!r.ok()) return r.status();
    *result = std::move(*r);
    return Status::Ok();
  };
}

Result<kiln::v1::RunConvLayersResponse> RunConvLocal(std::string_view bytes, const std::string& model_name,
                                                     const kiln::v1::RunConvLayersRequest& request,
                                                     const std::map<std::string, std::string>& backend_settings) {
  auto level = ResolveTtEmuLevel(request, backend_settings);
  if (!level.ok()) return level.status();
  auto prepared = PrepareConvRun(bytes, model_name, request);
  if (!prepared.ok()) return prepared.status();
  device::BackendOptions bo;
  bo.settings = backend_settings;
  if (!level->empty()) bo.settings[device::kTtEmuLevelSetting] = *level;
  auto backend = device::DefaultBackendRegistry().Create(prepared->backend, bo);
  if (!backend.ok()) return backend.status();
  prepared->options.reference_threads = 0;  // in process: every core
  auto result = runtime::RunConvPlan(*prepared->plan, prepared->inputs, **backend, prepared->options);
  if (!result.ok()) return result.status();
  kiln::v1::RunConvLayersResponse response;
  FillRunResponse(*result, request.omit_outputs(), &response);
  response.set_device(prepared->backend + " (in process)");
  response.set_tt_emu_level(*level);
  return response;
}

std::shared_ptr<const convplan::ConvPlan> PlanCache::Get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = plans_.begin(); it != plans_.end(); ++it) {
    if (it->key == key) {
      plans_.splice(plans_.begin(), plans_, it);
      return plans_.front().plan;
    }
  }
  return nullptr;
}

void PlanCache::Put(const std::string& key, std::shared_ptr<const convplan::ConvPlan> plan, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = plans_.begin(); it != plans_.end();) {
    if (it->key == key) {
      bytes_ -= it->bytes;
      it = plans_.erase(it);
    } else {
      ++it;
    }
  }
  bytes = std::max<int64_t>(bytes, 0);
  if (bytes > max_bytes_) return;  // would evict everything and still not fit
  plans_.push_front({key, std::move(plan), bytes});
  bytes_ += bytes;
  while (bytes_ > max_bytes_ && !plans_.empty()) {
    bytes_ -= plans_.back().bytes;
    plans_.pop_back();
  }
}

int64_t PlanCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t PlanCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return plans_.size();
}

namespace {

using SteadyClock = std::chrono::steady_clock;

std::mutex hook_mu;
std::function<void(const std::string&)> plan_hook;
std::function<void(RunConvJob&, const std::string&)> submitted_hook;

void StageSubmitted(RunConvJob& job, const std::string& lane) {
  std::function<void(RunConvJob&, const std::string&)> hook;
  {
    std::lock_guard<std::mutex> lock(hook_mu);
    hook = submitted_hook;
  }
  if (hook) hook(job, lane);
}

}  // namespace

void SetPlanStageHookForTesting(std::function<void(const std::string& model_id)> hook) {
  std::lock_guard<std::mutex> lock(hook_mu);
  plan_hook = std::move(hook);
}

void SetStageSubmittedHookForTesting(std::function<void(RunConvJob& job, const std::string& lane)> hook) {
  std::lock_guard<std::mutex> lock(hook_mu);
  submitted_hook = std::move(hook);
}

std::shared_ptr<RunConvJob> RunConvJob::Start(Env env, store::ModelInfo model,
                                              const kiln::v1::RunConvLayersRequest* request,
                                              kiln::v1::RunConvLayersResponse* response, std::string client_id,
                                              std::optional<sched::CancelToken::Clock::time_point> deadline,
                                              DoneFn done, Hooks hooks) {
  auto job = std::shared_ptr<RunConvJob>(new RunConvJob());
  job->hooks_ = std::move(hooks);
  job->env_ = env;
  job->model_ = std::move(model);
  job->request_ = request;
  job->response_ = response;
  job->client_id_ = std::move(client_id);
  job->deadline_ = deadline;
  job->done_ = std::move(done);
  // Out-of-range enums and a backend that does not exist are refused before anything is planned.
  if (Status enums = CheckEnumValues(*request); !enums.ok()) {
    job->Finish(enums);
    return job;
  }
  const std::string backend = request->backend().empty() ? device::DefaultBackendName() : request->backend();
  if (Status known = env.scheduler->CheckBackend(backend); !known.ok()) {
    job->Finish(known);
    return job;
  }
  // The server's tt-emu workers run at --tt-emu-level; a request for another level runs on a
  // tt-emu backend of its own level, on the same worker (so it still takes one device's turn).
  const auto device_settings = env.scheduler->DeviceSettings(backend);
  auto level = ResolveTtEmuLevel(*request, device_settings);
  if (!level.ok()) {
    job->Finish(level.status());
    return job;
  }
  job->tt_emu_level_ = *level;
  if (!request->tt_emu_level().empty()) {
    kiln::v1::RunConvLayersRequest plain;  // what the worker's backend runs at
    plain.set_backend(backend);
    auto worker_level = ResolveTtEmuLevel(plain, device_settings);
    if (!worker_level.ok() || *worker_level != *level) job->tt_emu_level_override_ = *level;
  }
  job->StartPlanStage();
  return job;
}

void RunConvJob::Cancel() {
  std::shared_ptr<sched::JobHandle> stage;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    stage = stage_;
  }
  if (stage) stage->Cancel();
}

void RunConvJob::SetStage(std::shared_ptr<sched::JobHandle> handle) {
  bool cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stage_ = handle;
    cancelled = cancelled_;
  }
  if (cancelled) handle->Cancel();
}

void RunConvJob::Finish(const Status& status, int64_t retry_after_ms) {
  DoneFn done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    done = std::move(done_);
    stage_.reset();
  }
  if (done) done(status, retry_after_ms);
}

void RunConvJob::Guarded(const char* what, const std::function<void()>& fn) {
  // A stage it may have submitted is cancelled: once finished, the job can no longer reach it.
  try {
    fn();
  } catch (const std::bad_alloc&) {
    Cancel();
    Finish(ResourceExhausted(std::string(what) + ": out of memory"));
  } catch (const std::exception& e) {
    Cancel();
    Finish(Internal(std::string(what) + ": " + e.what()));
  }
}

void RunConvJob::Refused(const Status& status, const std::string& lane) {
  int64_t ms = 0;
  if (status.code() == StatusCode::kResourceExhausted) ms = env_.scheduler->SuggestedRetryAfter(lane).count();
  Finish(status, ms);
}

// Stage 1, on the plan lane: the plan (from the cache, or read + loaded + planned) and the
// request's inputs and precision converted for it — all of it off the reactor, and a bad request
// is refused before it takes a place in a device queue.
void RunConvJob::StartPlanStage() {
  auto self = shared_from_this();
  auto prepared = std::make_shared<PreparedConvRun>();
  sched::JobRequest job;
  job.lane = kPlanLane;
  job.client_id = client_id_;
  job.deadline = deadline_;
  job.task = [self, prepared](sched::JobContext& ctx) -> Status {
    const std::string key = PlanCacheKey(self->model_.model_id, *self->request_);
    std::shared_ptr<const convplan::ConvPlan> plan = self->env_.plans->Get(key);
    if (!plan) {
      std::function<void(const std::string&)> hook;
      {
        std::lock_guard<std::mutex> lock(hook_mu);
        hook = plan_hook;
      }
      if (hook) hook(self->model_.model_id);
      KILN_RETURN_IF_ERROR(ctx.cancel->Check());
      auto reader = self->env_.store->OpenReader(self->model_.model_id);
      if (!reader.ok()) return reader.status();
      auto bytes = (*reader)->ReadAll();
      if (!bytes.ok()) return bytes.status();
      const std::string name =
          self->model_.names.empty() ? self->model_.model_id.substr(0, 12) : self->model_.names.front();
      Result<std::shared_ptr<const convplan::ConvPlan>> planned = Internal("not planned");
      try {
        planned = PlanForRequest(*bytes, name, *self->request_);
      } catch (const std::exception& e) {
        planned = Internal("planning model '" + name + "' failed: " + e.what());
      }
      if (!planned.ok()) return planned.status();
      plan = *planned;
      self->env_.plans->Put(key, plan, PlanBytes(*plan, static_cast<int64_t>(bytes->size())));
    }
    KILN_RETURN_IF_ERROR(ctx.cancel->Check());
    auto run = PrepareConvRun(std::move(plan), *self->request_);
    if (!run.ok()) return run.status();
    const std::string name =
        self->model_.names.empty() ? self->model_.model_id.substr(0, 12) : self->model_.names.front();
    if (Status mem = CheckRunMemory(*run, name, self->env_.scheduler->MemoryBudgetBytes()); !mem.ok()) {
      if (self->env_.on_refused) self->env_.on_refused("run_memory_budget");
      return mem;
    }
    if (Status out = CheckRunOutputs(*run, *self->request_, name, self->env_.max_result_bytes); !out.ok()) {
      if (self->env_.on_refused) self->env_.on_refused("result_size");
      return out;
    }
    *prepared = std::move(run).value();
    return Status::Ok();
  };
  auto handle = env_.scheduler->Submit(std::move(job));
  if (!handle.ok()) return Refused(handle.status(), kPlanLane);
  StageSubmitted(*this, kPlanLane);
  SetStage(*handle);  // a cancel that came first cancels it: its OnDone below reports that
  (*handle)->OnDone([self, prepared](const Status& status) {
    if (!status.ok()) return self->Finish(status);
    self->Guarded("starting the device stage", [&] { self->StartDeviceStage(prepared); });
  });
}

// Stage 2, on the backend's device lane: the run, its fp32 reference on the reference lane.
void RunConvJob::StartDeviceStage(std::shared_ptr<PreparedConvRun> prepared) {
  bool cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled = cancelled_;
  }
  if (cancelled) return Finish(Cancelled("cancelled by client"));  // between the stages
  prepared->options.reference = &env_.scheduler->Reference();
  auto result = std::make_shared<runtime::RunResult>();
  auto started = std::make_shared<std::pair<std::mutex, std::pair<SteadyClock::time_point, std::string>>>();
  const auto submitted = SteadyClock::now();
  if (hooks_.on_layer) {
    prepared->options.on_layer = [fn = hooks_.on_layer](size_t index, size_t total, const runtime::LayerReport& l) {
      kiln::v1::LayerReport row;
      LayerReportToProto(l, &row);
      fn(index, total, row);
    };
  }
  sched::JobFn inner = MakeRunJob(prepared->plan, std::move(prepared->inputs), prepared->options, result);
  sched::JobRequest job;
  job.lane = prepared->backend;
  job.client_id = client_id_;
  job.deadline = deadline_;
  job.work = [inner, started, on_start = hooks_.on_device_start, level = tt_emu_level_override_](
                 device::Backend& backend, sched::JobContext& ctx) -> Status {
    {
      std::lock_guard<std::mutex> lock(started->first);
      started->second = {SteadyClock::now(), ctx.worker};
    }
    if (on_start) on_start(ctx.worker);
    if (level.empty()) return inner(backend, ctx);
    device::BackendOptions bo;
    bo.settings[device::kTtEmuLevelSetting] = level;
    auto own = device::DefaultBackendRegistry().Create(backend.name(), bo);
    if (!own.ok()) return own.status();
    return inner(**own, ctx);
  };
  for (const auto& t : request_->inputs()) job.cost_bytes += static_cast<int64_t>(t.raw_data().size());
  // What the run holds from now until it is done (CheckRunMemory let it through the plan stage).
  job.memory_bytes = prepared->memory.peak_bytes;
  auto handle = env_.scheduler->Submit(std::move(job));
  if (!handle.ok()) return Refused(handle.status(), prepared->backend);
  StageSubmitted(*this, prepared->backend);
  SetStage(*handle);
  auto self = shared_from_this();
  (*handle)->OnDone([self, result, started, submitted](const Status& status) {
    if (!status.ok()) return self->Finish(status);
    self->Guarded("filling the response", [&] {
      FillRunResponse(*result, self->request_->omit_outputs(), self->response_);
      {
        std::lock_guard<std::mutex> lock(started->first);
        self->response_->set_queue_seconds(std::chrono::duration<double>(started->second.first - submitted).count());
        self->response_->set_device(started->second.second);
      }
      self->response_->set_model_id(self->model_.model_id);
      self->response_->set_tt_emu_level(self->tt_emu_level_);
    });
    self->Finish(Status::Ok());  // a no-op when Guarded finished it with the error
  });
}

}  // namespace kiln::api
