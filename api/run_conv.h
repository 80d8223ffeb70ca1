// One conv run (kiln.v1.RunConvLayers), shared by DeviceService and `kiln run --local`:
//   PlanModel        bytes -> immutable ConvPlan (compiler/onnx LoadModel + convplan BuildConvPlan)
//   PrepareConvRun   request -> plan inputs, RunOptions, backend (defaults resolved here once)
//   MakeRunJob       a prepared run as a device-lane job of the scheduler (sched/scheduler.h)
//   FillRunResponse  the executor's RunResult -> response message
// and RunConvJob, the server's run as scheduler stages: plan (CPU lane "plan": the plan from
// PlanCache or planned, the request converted) -> device (the backend's lane), cancellable at any
// point.
#pragma once

#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/status.h"
#include "compiler/convplan/plan.h"
#include "kiln/v1/device.pb.h"
#include "runtime/executor.h"
#include "runtime/memory_estimate.h"
#include "sched/scheduler.h"
#include "store/model_store.h"

namespace kiln::api {

struct PreparedConvRun {
  std::shared_ptr<const convplan::ConvPlan> plan;
  runtime::RunInputs inputs;
  runtime::RunOptions options;
  std::string backend;  ///< request backend, defaulted to device::DefaultBackendName()
  /// What the run will hold (runtime/memory_estimate.h), for the memory budget (CheckRunMemory).
  runtime::MemoryEstimate memory;
};

/// The per-request memory check: OK when `run.memory` fits in `budget_bytes` (0: no budget), else
/// RESOURCE_EXHAUSTED "run of model 'm' needs ~4.1 GiB at layer 'conv1 (conv2d)' (which allocates
/// ~2.0 GiB), over the memory budget of 2.0 GiB (--memory-budget)" — refused before anything of
/// the run is allocated.
Status CheckRunMemory(const PreparedConvRun& run, const std::string& model_name, uint64_t budget_bytes);
/// RESOURCE_EXHAUSTED when the run's outputs (MemoryEstimate::output_bytes) exceed `max_result_bytes`
/// (> 0) and the request wants them (not omit_outputs): refused before the run, not after it.
Status CheckRunOutputs(const PreparedConvRun& run, const kiln::v1::RunConvLayersRequest& request,
                       const std::string& model_name, int64_t max_result_bytes);

/// The bytes a cached plan keeps alive: the model's bytes (`model_bytes`, held by the loaded
/// model), its constants as converted by the loader, the device ops' weights and the plan's host
/// constants.
int64_t PlanBytes(const convplan::ConvPlan& plan, int64_t model_bytes);

/// Loads and plans the model (`bytes`, named `model_name` in errors). Errors: the loader's
/// (INVALID_ARGUMENT / FAILED_PRECONDITION / RESOURCE_EXHAUSTED), INVALID_ARGUMENT listing every
/// unsupported node. A plan depends on the bytes and `bind_symbols` only, so callers may cache
/// it by PlanCacheKey.
/// Blocking (CPU lane).
Result<std::shared_ptr<const convplan::ConvPlan>> PlanModel(std::string_view bytes, const std::string& model_name,
                                                            const std::map<std::string, int64_t>& bind_symbols = {},
                                                            const convplan::PlanOptions& options = {});

/// The plan options a run request implies: KSplitConcat only when precision.concat_k_split (a
/// Concat → Conv is otherwise ttnn.concat then one conv, as a TT-NN port runs it).
convplan::PlanOptions PlanOptionsForRequest(const kiln::v1::RunConvLayersRequest& request);

/// The values the request binds the symbolic input dims of `graph` (a loaded model's main graph)
/// to: a given input's dim, 1 for an absent input (as runtime/inputs.h generates it); empty when
/// the graph inputs have no symbolic dims. The first input naming a symbol decides (a conflicting
/// later one is refused when the run checks its inputs).
std::map<std::string, int64_t> SymbolBindings(const onnx_fe::Graph& graph, const kiln::v1::RunConvLayersRequest& request);

/// The plan of `bytes` for `request`: with symbolic input dims bound as SymbolBindings says
/// (the model is loaded again with LoadOptions::bind_symbols, so shapes are re-inferred and Shape
/// chains fold), else PlanModel's. Errors as PlanModel's. Blocking (CPU lane).
Result<std::shared_ptr<const convplan::ConvPlan>> PlanForRequest(std::string_view bytes, const std::string& model_name,
                                                                 const kiln::v1::RunConvLayersRequest& request);

/// The PlanCache key of PlanForRequest's plan: the model id plus the given inputs' shapes
/// ("id|x=1x3x224x224"), which decide the symbol bindings.
std::string PlanCacheKey(const std::string& model_id, const kiln::v1::RunConvLayersRequest& request);

/// The tt-emu level a run of `request` uses (RunConvLayersRequest.tt_emu_level): the request's,
/// else `device_settings`' "level" (the settings the server's tt-emu devices were made with,
/// sched::Scheduler::DeviceSettings, or `kiln run --local`'s), else the backend's declared default;
/// "" when the run is not on tt-emu. INVALID_ARGUMENT "tt_emu_level: ..." for a level the tt-emu
/// backend does not know, or any level with another backend.
Result<std::string> ResolveTtEmuLevel(const kiln::v1::RunConvLayersRequest& request,
                                      const std::map<std::string, std::string>& device_settings);

/// Converts the request's inputs and precision for `plan`. INVALID_ARGUMENT for bad tensors or
/// precision values. Nothing runs on a device here.
Result<PreparedConvRun> PrepareConvRun(std::shared_ptr<const convplan::ConvPlan> plan,
                                       const kiln::v1::RunConvLayersRequest& request);

/// PlanForRequest then PrepareConvRun.
Result<PreparedConvRun> PrepareConvRun(std::string_view bytes, const std::string& model_name,
                                       const kiln::v1::RunConvLayersRequest& request);

/// Wraps a prepared run as a device-lane job: the job runs RunConvPlan with the worker's backend,
/// the job's cancel token and progress function, and on success moves the RunResult into
/// `*result`; the job's status is the run's. `plan` and `result` are shared so the job may outlive
/// the caller's stack frame; read `*result` only after the job is done and OK. `result` must not
/// be null.
sched::JobFn MakeRunJob(std::shared_ptr<const convplan::ConvPlan> plan, runtime::RunInputs inputs,
                        runtime::RunOptions options, std::shared_ptr<runtime::RunResult> result);

/// One row of the run report. Sets `pass` and `passed` alike (kiln/v1/device.proto LayerReport).
void LayerReportToProto(const runtime::LayerReport& layer, kiln::v1::LayerReport* out);

/// Fills the response from a finished run (outputs unless `omit_outputs`); `pass` and `passed`
/// alike, in the response and in every layer.
void FillRunResponse(const runtime::RunResult& result, bool omit_outputs, kiln::v1::RunConvLayersResponse* response);

/// Sets `passed` from `pass` in a report read back from storage (job results and job events):
/// one stored by a kilnd from before `passed` existed carries only `pass`.
void FillPassedFromPass(kiln::v1::RunConvLayersResponse* response);
void FillPassedFromPass(kiln::v1::LayerReport* layer);

/// In process, no server (`kiln run --local`): plan, prepare, run on a fresh backend of the
/// request's kind created with `backend_settings`, the fp32 reference on all cores. Blocking.
Result<kiln::v1::RunConvLayersResponse> RunConvLocal(std::string_view bytes, const std::string& model_name,
                                                     const kiln::v1::RunConvLayersRequest& request,
                                                     const std::map<std::string, std::string>& backend_settings);

/// Plans kept for recently run models, by PlanCacheKey (model id — content-addressed, so a plan
/// never goes stale — plus the symbol bindings it was built with), bounded in bytes (PlanBytes):
/// the least recently used plans are dropped until the cache holds at most `max_bytes`; a plan
/// larger than that is not kept. Thread-safe.
class PlanCache {
 public:
  explicit PlanCache(int64_t max_bytes) : max_bytes_(max_bytes) {}
  /// The cached plan of `key` (now the most recently used), or null.
  std::shared_ptr<const convplan::ConvPlan> Get(const std::string& key);
  /// Keeps `plan` (which holds `bytes`, PlanBytes) as the most recently used.
  void Put(const std::string& key, std::shared_ptr<const convplan::ConvPlan> plan, int64_t bytes);
  /// Bytes of the cached plans.
  int64_t bytes() const;
  size_t size() const;

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const convplan::ConvPlan> plan;
    int64_t bytes = 0;
  };
  const int64_t max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> plans_;  // MRU first
  int64_t bytes_ = 0;
};

/// Test hook: called with the model id when a plan stage plans a model (its plan was not
/// cached), on the plan worker. Tests use it to hold plan stages on a latch; null (the default) in
/// production.
void SetPlanStageHookForTesting(std::function<void(const std::string& model_id)> hook);
class RunConvJob;
/// Test hook: called with the job and the lane's name ("plan", or the device stage's backend) after
/// a stage was submitted to the scheduler and before the job records it, on the thread that
/// submitted it. Tests cancel there (a cancel that races the start of a stage); null in production.
void SetStageSubmittedHookForTesting(std::function<void(RunConvJob& job, const std::string& lane)> hook);

/// kilnd's run of one RunConvLayers request as scheduler stages (see the header comment).
class RunConvJob : public std::enable_shared_from_this<RunConvJob> {
 public:
  struct Env {
    store::ModelStore* store = nullptr;
    sched::Scheduler* scheduler = nullptr;
    PlanCache* plans = nullptr;
    /// Called with "run_memory_budget" when the plan stage refuses a run that can never fit in
    /// the memory budget (CheckRunMemory), "result_size" when its outputs could not be returned
    /// (CheckRunOutputs); optional (kilnd counts it, server/daemon.cc).
    std::function<void(std::string_view reason)> on_refused;
    /// Largest outputs a run may return (kilnd: --max-message-bytes); 0: not checked.
    int64_t max_result_bytes = 0;
  };
  // The memory budget is the scheduler's (sched/scheduler.h "Memory"): the plan stage refuses a
  // run that can never fit in it (CheckRunMemory); the device stage reserves its estimate.
  /// Final status; on OK `response` is filled. `retry_after_ms` > 0 with RESOURCE_EXHAUSTED: the
  /// scheduler's hint for the refused stage. Called exactly once, on a scheduler thread (or on
  /// the caller's thread when Start fails at once).
  using DoneFn = std::function<void(const Status& status, int64_t retry_after_ms)>;
  /// Optional observers (JobService's progress), called on the device worker's thread.
  struct Hooks {
    /// The device stage started on `device` ("tt-emu:0").
    std::function<void(const std::string& device)> on_device_start;
    /// A layer finished: 1-based index, layer count, its report row.
    std::function<void(size_t index, size_t total, const kiln::v1::LayerReport& row)> on_layer;
  };

  /// `request` and `response` must stay valid until `done` has been called.
  static std::shared_ptr<RunConvJob> Start(Env env, store::ModelInfo model, const kiln::v1::RunConvLayersRequest* request,
                                           kiln::v1::RunConvLayersResponse* response, std::string client_id,
                                           std::optional<sched::CancelToken::Clock::time_point> deadline, DoneFn done,
                                           Hooks hooks = {});
  /// Cancels the current stage (queued or running) and every later one. Idempotent.
  void Cancel();

 private:
  RunConvJob() = default;
  void StartPlanStage();
  void StartDeviceStage(std::shared_ptr<PreparedConvRun> prepared);
  // Remembers the running stage, and cancels it when the job was cancelled before it started. The
  // caller registers the stage's OnDone either way: that callback reports the cancellation (without
  // it the job would never finish).
  void SetStage(std::shared_ptr<sched::JobHandle> handle);
  void Finish(const Status& status, int64_t retry_after_ms = 0);
  // Runs a stage's completion work; an exception (bad_alloc copying outputs) finishes the job with
  // it. The scheduler swallows what a callback throws, so without this the job would never end.
  void Guarded(const char* what, const std::function<void()>& fn);
  void Refused(const Status& status, const std::string& lane);

  Env env_;
  store::ModelInfo model_;
  const kiln::v1::RunConvLayersRequest* request_ = nullptr;
  kiln::v1::RunConvLayersResponse* response_ = nullptr;
  std::string client_id_;
  std::optional<sched::CancelToken::Clock::time_point> deadline_;
  DoneFn done_;
  Hooks hooks_;
  std::mutex mu_;
  std::shared_ptr<sched::JobHandle> stage_;
  std::string tt_emu_level_;          // ResolveTtEmuLevel's, echoed in the response
  std::string tt_emu_level_override_;  // non-empty: run on a tt-emu backend of this level, not the worker's
  bool cancelled_ = false;
  bool finished_ = false;
};

}  // namespace kiln::api
