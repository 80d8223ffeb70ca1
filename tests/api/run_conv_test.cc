// api/: a prepared run as a scheduler job (MakeRunJob), the plan cache, the staged RunConvJob,
// the CLI's flag parsers and the compile name. Real models from tests/data/conv-cases.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "api/compile_ai8x.h"
#include "api/convert.h"
#include "api/lanes.h"
#include "api/run_conv.h"
#include "common/reactor.h"
#include "common/sha256.h"
#include "device/backends/builtin.h"
#include "compiler/onnx/loader.h"
#include "tests/support/onnx_model_builder.h"
#include "tests/api/conv_cases.h"

namespace kiln::api {
namespace {

using testing::ReadCase;

double MaxDiff(const runtime::RunResult& a, const runtime::RunResult& b) {
  double m = 0;
  EXPECT_EQ(a.outputs.size(), b.outputs.size());
  for (size_t i = 0; i < a.outputs.size() && i < b.outputs.size(); ++i) {
    auto x = a.outputs[i].second.span<float>();
    auto y = b.outputs[i].second.span<float>();
    EXPECT_EQ(x.size(), y.size());
    for (size_t e = 0; e < x.size() && e < y.size(); ++e) m = std::max(m, std::abs(double(x[e]) - y[e]));
  }
  return m;
}

TEST(RunConvApi, RunsAsASchedulerJobLikeInProcess) {
  const std::string bytes = ReadCase("conv_relu.onnx");
  auto plan = PlanModel(bytes, "conv_relu");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  kiln::v1::RunConvLayersRequest req;
  req.set_backend("reference");
  req.set_seed(7);
  auto prepared = PrepareConvRun(*plan, req);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  EXPECT_EQ(prepared->backend, "reference");

  sched::SchedulerOptions so;
  so.devices = {{"reference", 1}};
  auto scheduler = sched::Scheduler::Create(so);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status().ToString();
  auto result = std::make_shared<runtime::RunResult>();
  std::atomic<int> progress{0};
  sched::JobRequest job;
  job.lane = "reference";
  auto options = prepared->options;
  options.reference = &(*scheduler)->Reference();  // its own reference: never a stage on its own lane
  job.work = MakeRunJob(prepared->plan, prepared->inputs, options, result);
  job.progress = [&](const device::JobProgress&) { ++progress; };
  auto h = (*scheduler)->Submit(std::move(job));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_TRUE((*h)->Wait().ok()) << (*h)->status().ToString();
  EXPECT_EQ(progress.load(), static_cast<int>(result->layers.size()));
  ASSERT_FALSE(result->layers.empty());
  EXPECT_TRUE(result->all_pass);

  auto dev = device::DefaultBackendRegistry().Create("reference");
  ASSERT_TRUE(dev.ok());
  auto direct = runtime::RunConvPlan(*prepared->plan, prepared->inputs, **dev, prepared->options);
  ASSERT_TRUE(direct.ok()) << direct.status().ToString();
  EXPECT_EQ(MaxDiff(*result, *direct), 0.0);

  // The same run through RunConvLocal, as `kiln run --local` does, fills the response.
  auto local = RunConvLocal(bytes, "conv_relu", req, {});
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  EXPECT_EQ(local->layers_size(), static_cast<int>(direct->layers.size()));
  EXPECT_EQ(local->outputs_size(), 1);
  EXPECT_EQ(local->device(), "reference (in process)");
}

// `pass` is a Python keyword, so the report carries the same value as `passed` too
// (kiln/v1/device.proto): a real tt-emu run under an unreachable threshold (PCC 1.0 is never
// reached in bf16) has failing device layers and passing host ones; every row and the response
// carry the same value in both fields.
TEST(RunConvApi, ReportFillsPassAndPassedAlike) {
  const std::string bytes = ReadCase("conv_flatten_gemm_transb_alpha_beta.onnx");
  kiln::v1::RunConvLayersRequest req;
  req.set_backend("tt-emu");
  auto prepared = PrepareConvRun(bytes, "conv_flatten_gemm", req);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  prepared->options.pcc_threshold = 1.0;
  auto dev = device::DefaultBackendRegistry().Create("tt-emu");
  ASSERT_TRUE(dev.ok());
  auto result = runtime::RunConvPlan(*prepared->plan, prepared->inputs, **dev, prepared->options);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_FALSE(result->all_pass);
  kiln::v1::RunConvLayersResponse resp;
  FillRunResponse(*result, true, &resp);
  EXPECT_FALSE(resp.pass());
  EXPECT_FALSE(resp.passed());
  int failed = 0, passed = 0;
  ASSERT_EQ(resp.layers_size(), static_cast<int>(result->layers.size()));
  for (int i = 0; i < resp.layers_size(); ++i) {
    const auto& l = resp.layers(i);
    EXPECT_EQ(l.pass(), result->layers[static_cast<size_t>(i)].pass) << l.name();
    EXPECT_EQ(l.passed(), l.pass()) << l.name();
    (l.pass() ? passed : failed) += 1;
  }
  EXPECT_GT(failed, 0);
  EXPECT_GT(passed, 0);  // the host Flatten and Gemm rows

  // A report stored by a kilnd from before `passed` (job results, events) gets it on reading.
  kiln::v1::RunConvLayersResponse old;
  old.set_pass(true);
  old.add_layers()->set_pass(true);
  old.add_layers()->set_pass(false);
  FillPassedFromPass(&old);
  EXPECT_TRUE(old.passed());
  EXPECT_TRUE(old.layers(0).passed());
  EXPECT_FALSE(old.layers(1).passed());
}

TEST(RunConvApi, StagedJobPlansOnceThenUsesTheCache) {
  auto dir = std::filesystem::temp_directory_path() / ("kiln_api_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  store::ModelStoreOptions so;
  so.dir = dir;
  auto st = store::ModelStore::Open(so);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  const std::string bytes = ReadCase("conv_sigmoid.onnx");
  auto up = (*st)->BeginUpload("sig", bytes.size(), Sha256Hex(bytes));
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  ASSERT_TRUE((*up)->Append(bytes.data(), bytes.size()).ok());
  auto info = (*up)->Commit();
  ASSERT_TRUE(info.ok()) << info.status().ToString();

  sched::SchedulerOptions o;
  o.devices = {{"tt-emu", 1}};
  o.cpu_lanes = KilndCpuLanes({});
  o.reference_threads = 1;
  auto scheduler = sched::Scheduler::Create(o);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status().ToString();
  PlanCache plans(int64_t{1} << 30);
  std::atomic<int> planned{0};
  SetPlanStageHookForTesting([&](const std::string& id) {
    EXPECT_EQ(id, info->model_id);
    ++planned;
  });
  kiln::v1::RunConvLayersRequest req;
  req.set_backend("tt-emu");
  for (int round = 0; round < 2; ++round) {
    kiln::v1::RunConvLayersResponse resp;
    std::promise<Status> done;
    auto job = RunConvJob::Start({st->get(), scheduler->get(), &plans, nullptr}, *info, &req, &resp, "test", std::nullopt,
                                 [&](const Status& s, int64_t) { done.set_value(s); });
    Status s = done.get_future().get();
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(resp.model_id(), info->model_id);
    EXPECT_EQ(resp.device(), "tt-emu:0");
    EXPECT_EQ(resp.backend(), "tt-emu");
    EXPECT_TRUE(resp.pass());
    EXPECT_TRUE(resp.passed());
    EXPECT_GT(resp.layers_size(), 0);
  }
  EXPECT_EQ(planned.load(), 1);  // the second run found the plan in the cache
  EXPECT_NE(plans.Get(info->model_id), nullptr);

  // A backend that does not exist is refused before anything is planned.
  {
    kiln::v1::RunConvLayersRequest nowhere;
    nowhere.set_backend("plan");  // a CPU lane is no backend
    kiln::v1::RunConvLayersResponse resp;
    std::promise<Status> done;
    PlanCache fresh(1);
    const int before = planned.load();
    auto job = RunConvJob::Start({st->get(), scheduler->get(), &fresh, nullptr}, *info, &nowhere, &resp, "test", std::nullopt,
                                 [&](const Status& s, int64_t) { done.set_value(s); });
    Status s = done.get_future().get();
    EXPECT_EQ(s.code(), StatusCode::kNotFound);
    EXPECT_NE(s.message().find("no device for backend 'plan' (configured: tt-emu)"), std::string::npos) << s.ToString();
    EXPECT_EQ(planned.load(), before);
  }

  // Cancelled before its plan stage runs: CANCELLED, nothing runs.
  PlanCache empty(1);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  SetPlanStageHookForTesting([gate](const std::string&) { gate.wait(); });
  kiln::v1::RunConvLayersResponse resp;
  std::promise<Status> done;
  auto job = RunConvJob::Start({st->get(), scheduler->get(), &empty, nullptr}, *info, &req, &resp, "test", std::nullopt,
                               [&](const Status& s, int64_t) { done.set_value(s); });
  job->Cancel();
  release.set_value();
  EXPECT_EQ(done.get_future().get().code(), StatusCode::kCancelled);
  SetPlanStageHookForTesting(nullptr);

  // Cancelled as each stage starts, before the job has recorded it: the stage is cancelled and the
  // job still ends, rather than never calling back. CANCELLED for the plan stage (the job checks
  // between the stages); the device stage may already have run this small model to its end.
  for (const std::string lane : {"plan", "tt-emu"}) {
    std::atomic<int> cancels{0};
    SetStageSubmittedHookForTesting([&cancels, lane](RunConvJob& job, const std::string& l) {
      if (l != lane) return;
      ++cancels;
      job.Cancel();
    });
    kiln::v1::RunConvLayersResponse r;
    PlanCache uncached(1);  // the plan stage plans (and takes a while), the device stage follows it
    std::promise<Status> ended;
    std::future<Status> end = ended.get_future();
    auto cancelled = RunConvJob::Start({st->get(), scheduler->get(), &uncached, nullptr}, *info, &req, &r, "test",
                                       std::nullopt, [&](const Status& s, int64_t) { ended.set_value(s); });
    ASSERT_EQ(end.wait_for(std::chrono::seconds(30)), std::future_status::ready) << lane << ": the job never ended";
    const Status ended_with = end.get();
    if (lane == "plan") {
      EXPECT_EQ(ended_with.code(), StatusCode::kCancelled) << ended_with.ToString();
    } else {
      EXPECT_TRUE(ended_with.ok() || ended_with.code() == StatusCode::kCancelled) << ended_with.ToString();
    }
    EXPECT_EQ(cancels.load(), 1) << lane;
    SetStageSubmittedHookForTesting(nullptr);
  }
  (*scheduler)->Shutdown(true);
  std::filesystem::remove_all(dir);
}

TEST(RunConvApi, PlanningOnAReactorThreadIsCounted) {
  const std::string bytes = ReadCase("conv_relu.onnx");
  const uint64_t before = ReactorViolations();
  {
    ReactorScope on_reactor;
    EXPECT_TRUE(OnReactorThread());
#ifdef NDEBUG
    EXPECT_TRUE(PlanModel(bytes, "conv_relu").ok());
#endif
  }
  EXPECT_FALSE(OnReactorThread());
#ifdef NDEBUG
  EXPECT_GT(ReactorViolations(), before);
#else
  EXPECT_DEATH((void)[&] { ReactorScope r; (void)PlanModel(bytes, "x"); }(), "PlanModel");
  (void)before;
#endif
  const uint64_t now = ReactorViolations();
  EXPECT_TRUE(PlanModel(bytes, "conv_relu").ok());  // off the reactor: not counted
  EXPECT_EQ(ReactorViolations(), now);
}

TEST(ConvertApi, PrecisionFlagsSetOnlyWhatIsGiven) {
  PrecisionFlags f;
  auto none = ParsePrecisionFlags(f);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->math_fidelity(), kiln::v1::MATH_FIDELITY_UNSPECIFIED);
  EXPECT_FALSE(none->has_fp32_dest_acc_en());
  f.math_fidelity = "LoFi";
  f.weights_dtype = "bfloat8_b";
  f.arch = "blackhole";
  f.packer_l1_acc = "on";
  f.act_block_w = 4;
  auto p = ParsePrecisionFlags(f);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->math_fidelity(), kiln::v1::LOFI);
  EXPECT_EQ(p->weights_dtype(), kiln::v1::BFLOAT8_B);
  EXPECT_EQ(p->arch(), kiln::v1::BLACKHOLE);
  EXPECT_TRUE(p->has_packer_l1_acc() && p->packer_l1_acc());
  EXPECT_FALSE(p->has_math_approx_mode());
  EXPECT_EQ(p->act_block_w(), 4);
  // Round trip through the domain type keeps the given values.
  auto c = FromProto(*p);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  kiln::v1::Precision back;
  ToProto(*c, &back);
  EXPECT_EQ(back.math_fidelity(), kiln::v1::LOFI);
  EXPECT_EQ(back.weights_dtype(), kiln::v1::BFLOAT8_B);
  f.fp32_dest_acc_en = "maybe";
  auto bad = ParsePrecisionFlags(f);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--fp32-dest-acc-en"), std::string::npos);
  PrecisionFlags g;
  g.output_dtype = "int8";
  auto bad2 = ParsePrecisionFlags(g);
  EXPECT_NE(bad2.status().message().find("--output-dtype"), std::string::npos) << bad2.status().ToString();
}

// The Conv2dConfig knobs, the board and the tree-version switches travel flag → proto → domain →
// proto unchanged; unset weights / output dtypes stay unset (TT-NN's defaults depend on the tensors).
TEST(ConvertApi, ConvConfigKnobsRoundTrip) {
  PrecisionFlags f;
  f.shard_layout = "block";
  f.act_block_w_div = 2;
  f.act_block_h_override = 64;
  f.full_inner_dim = "true";
  f.input_layout = "tile";
  f.arch = "blackhole";
  f.board = "p150";
  f.bfp8_pack_precise = "1";
  f.host_add = "true";
  f.depthwise_program = "dense_conv";
  f.fp32_partial_reload = "lossless";
  f.fused_hardswish = "applied";
  auto p = ParsePrecisionFlags(f);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto c = FromProto(*p);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->shard_layout, device::ShardLayout::kBlock);
  EXPECT_EQ(c->act_block_w_div, 2);
  EXPECT_EQ(c->act_block_h_override, 64);
  EXPECT_TRUE(c->full_inner_dim);
  EXPECT_EQ(c->input_layout, device::InputLayout::kTile);
  EXPECT_EQ(c->board, device::Board::kP150);
  EXPECT_TRUE(c->bfp8_pack_precise);
  EXPECT_TRUE(c->host_add);
  EXPECT_EQ(c->depthwise_program, device::DepthwiseProgram::kDenseConv);
  EXPECT_EQ(c->fp32_partial_reload, device::PartialReload::kLossless);
  EXPECT_EQ(c->fused_hardswish, device::FusedHardswish::kApplied);
  EXPECT_FALSE(c->weights_dtype.has_value());
  EXPECT_FALSE(c->output_dtype.has_value());
  kiln::v1::Precision back;
  ToProto(*c, &back);
  EXPECT_EQ(back.shard_layout(), kiln::v1::BLOCK_SHARDED);
  EXPECT_EQ(back.board(), kiln::v1::P150);
  EXPECT_EQ(back.fused_hardswish(), kiln::v1::HARDSWISH_APPLIED);
  EXPECT_EQ(back.weights_dtype(), kiln::v1::FLOAT32);  // resolved: the host weights' dtype
  EXPECT_EQ(back.output_dtype(), kiln::v1::BFLOAT16);  // resolved: the input dtype
  // A board of the other arch is refused when the config is built (a job is refused, not failed).
  f.arch = "wormhole_b0";
  auto other = FromProto(*ParsePrecisionFlags(f));
  EXPECT_EQ(other.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(other.status().message().find("board p150 is not a wormhole_b0 board"), std::string::npos)
      << other.status().ToString();
  f.arch = "blackhole";
  // act_block_w with act_block_w_div > 1 is TT-NN-incompatible: refused when the config is built.
  f.act_block_w = 3;
  auto both = FromProto(*ParsePrecisionFlags(f));
  EXPECT_EQ(both.status().code(), StatusCode::kInvalidArgument) << both.status().ToString();
  PrecisionFlags g;
  g.fp32_partial_reload = "sometimes";
  auto bad = ParsePrecisionFlags(g);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--fp32-partial-reload"), std::string::npos) << bad.status().ToString();
}

TEST(CompileApi, FlagsAndTheCompileName) {
  CompileFlags f;
  f.device = "ai87";
  f.input_format = "hwc";
  f.sets = {"conv.1.processors=0xff"};
  auto o = ParseCompileFlags(f);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->device(), kiln::v1::MAX78002);
  EXPECT_EQ(o->input_format(), kiln::v1::INPUT_FORMAT_HWC);
  ASSERT_EQ(o->overrides_size(), 1);
  EXPECT_EQ(o->overrides(0).layer(), "conv.1");
  EXPECT_EQ(o->overrides(0).key(), "processors");
  EXPECT_EQ(o->overrides(0).value(), "0xff");
  f.sets = {"noequals"};
  EXPECT_NE(ParseCompileFlags(f).status().message().find("LAYER.KEY=VALUE"), std::string::npos);
  f.sets.clear();
  f.device = "MAX7";
  EXPECT_EQ(ParseCompileFlags(f).status().code(), StatusCode::kInvalidArgument);

  store::ModelInfo info;
  info.model_id = std::string(64, 'a');
  info.names = {"first", "second"};
  EXPECT_EQ(CompileModelName(info, "second"), "second");
  EXPECT_EQ(CompileModelName(info, info.model_id), "first");
  info.names.clear();
  EXPECT_EQ(CompileModelName(info, info.model_id), "aaaaaaaaaaaa");
}

// RunConvLayersRequest.tt_emu_level: the request's level, else the devices' setting, else the
// backend's declared default; refused for another backend or an unknown level.
TEST(RunConvApi, TtEmuLevelResolution) {
  kiln::v1::RunConvLayersRequest r;
  EXPECT_EQ(ResolveTtEmuLevel(r, {}).value(), "exact");  // default backend tt-emu, its default level
  EXPECT_EQ(ResolveTtEmuLevel(r, {{"level", "fast"}}).value(), "fast");
  r.set_tt_emu_level("Exact");
  EXPECT_EQ(ResolveTtEmuLevel(r, {{"level", "fast"}}).value(), "exact");
  r.set_tt_emu_level("Turbo");
  auto bad = ResolveTtEmuLevel(r, {});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "tt_emu_level: unknown tt-emu level 'Turbo' (expected exact, fast)");
  r.set_backend("reference");
  EXPECT_EQ(ResolveTtEmuLevel(r, {}).status().code(), StatusCode::kInvalidArgument);
  r.clear_tt_emu_level();
  EXPECT_EQ(ResolveTtEmuLevel(r, {{"level", "fast"}}).value(), "");  // not a tt-emu run
}

TEST(LanesApi, KilndSchedulerFromItsConfiguration) {
  KilndSchedule k;
  k.devices = "tt-emu:1,reference:2";
  k.lanes = {.compile_workers = 3, .compile_queue = 0, .device_queue = 5};
  k.tt_emu_level = "fast";
  auto o = KilndSchedulerOptions(k);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_EQ(o->reference_threads, std::max(1, cores / 2));  // the cores shared by two reference workers
  EXPECT_EQ(o->backend_settings.at("reference").at("threads"), std::to_string(o->reference_threads));
  EXPECT_EQ(o->backend_settings.at("tt-emu").at("level"), "fast");
  EXPECT_EQ(o->queue_capacity, 5);
  ASSERT_EQ(o->cpu_lanes.size(), 3u);
  EXPECT_EQ(o->cpu_lanes[0].name, std::string(kCompileLane));
  EXPECT_EQ(o->cpu_lanes[0].workers, 3);
  EXPECT_EQ(o->cpu_lanes[0].queue_capacity, 0);  // no waiting compiles, as --compile-queue 0 says
  EXPECT_EQ(o->cpu_lanes[1].name, std::string(kPlanLane));
  // Every run the device lanes could hold (queue + devices per backend), no per-client quota.
  EXPECT_EQ(o->cpu_lanes[1].queue_capacity, (5 + 1) + (5 + 2));
  EXPECT_EQ(o->cpu_lanes[1].max_queued_per_client, (5 + 1) + (5 + 2));
  EXPECT_EQ(o->cpu_lanes[2].name, std::string(kStoreLane));
  k.reference_threads = 7;
  EXPECT_EQ(KilndSchedulerOptions(k)->reference_threads, 7);
  k.devices = "tt-emu:0";
  auto bad = KilndSchedulerOptions(k);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--devices"), std::string::npos);
  // The options make a working scheduler.
  k.devices = "reference:1";
  auto s = sched::Scheduler::Create(*KilndSchedulerOptions(k));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->Devices().size(), 1u);
}

}  // namespace
}  // namespace kiln::api

namespace kiln::api {
namespace {

// A model with a symbolic batch: the plan for a request binds it (shapes re-inferred, the Shape
// of the conv output folded), and the cache keeps it under its own key.
TEST(RunConvApi, SymbolicInputDimsArePlannedPerBoundShape) {
  kiln::testing::OnnxModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, {"N", 3, 4, 4});
  b.FloatInitializer("w", {2, 3, 1, 1}, kiln::testing::RandomFloats(6, 5));
  b.Node("Conv", {"x", "w"}, {"y"}, "conv");
  b.Node("Shape", {"y"}, {"s"}, "shape");
  b.Node("Reshape", {"y", "s"}, {"z"}, "reshape");
  b.Output("z");
  const std::string bytes = b.Serialize();

  kiln::v1::RunConvLayersRequest req;
  req.set_backend("reference");
  auto* x = req.add_inputs();
  x->set_name("x");
  x->set_datatype("FP32");
  for (int64_t d : {2, 3, 4, 4}) x->add_shape(d);
  std::vector<float> v = kiln::testing::RandomFloats(2 * 3 * 4 * 4, 9);
  x->set_raw_data(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));

  auto model = onnx_fe::LoadModel(bytes);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ(SymbolBindings((*model)->graph(), req), (std::map<std::string, int64_t>{{"N", 2}}));
  EXPECT_EQ(PlanCacheKey("abc", req), "abc|x=2x3x4x4");
  kiln::v1::RunConvLayersRequest absent;  // generated input: N bound to 1
  EXPECT_EQ(SymbolBindings((*model)->graph(), absent), (std::map<std::string, int64_t>{{"N", 1}}));
  EXPECT_EQ(PlanCacheKey("abc", absent), "abc");

  auto prepared = PrepareConvRun(bytes, "sym", req);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  EXPECT_EQ(prepared->plan->folded_nodes, 1);
  auto local = RunConvLocal(bytes, "sym", req, {});
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  EXPECT_EQ(local->folded_nodes(), 1);
  ASSERT_EQ(local->outputs_size(), 1);
  EXPECT_EQ(std::vector<int64_t>(local->outputs(0).shape().begin(), local->outputs(0).shape().end()),
            (std::vector<int64_t>{2, 2, 4, 4}));
}

}  // namespace
}  // namespace kiln::api
