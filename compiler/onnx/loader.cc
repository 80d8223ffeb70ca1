// LoadModel(): the driver that runs the loader's stages (compiler/onnx/load_stages.h) over one
// LoadContext (compiler/onnx/load_context.h) and turns whatever escapes them into a Status.
#include "compiler/onnx/loader.h"

#include <algorithm>
#include <cassert>
#include <exception>
#include <iterator>
#include <new>
#include <utility>

#include "common/reactor.h"
#include "compiler/onnx/load_stages.h"

namespace kiln::onnx_fe {

const char* LoadStageName(LoadStage stage) {
  switch (stage) {
    case LoadStage::kLimits: return "limits";
    case LoadStage::kParse: return "parse";
    case LoadStage::kStructure: return "structure";
    case LoadStage::kShapeInference: return "shape inference";
    case LoadStage::kChecker: return "checker";
    case LoadStage::kBuild: return "build";
  }
  return "?";
}

Status LoadError::ToStatus() const {
  std::string m;
  if (!model.empty()) m += "model '" + model + "': ";
  if (!node.empty()) {
    m += "node '" + node + "'";
    if (!op_type.empty()) m += " (" + op_type + ")";
    m += ": ";
  } else if (!op_type.empty()) {
    m += "unnamed " + op_type + " node" + (node_output.empty() ? "" : " (output '" + node_output + "')") + ": ";
  }
  if (!attribute.empty()) m += "attribute '" + attribute + "': ";
  if (!tensor.empty()) m += "tensor '" + tensor + "': ";
  m += message;
  return Status(code == StatusCode::kOk ? StatusCode::kInternal : code, std::move(m));
}

namespace {

struct Stage {
  LoadStage reports;  // the LoadStage of this stage's failures (LoaderLimits caps: kLimits)
  Status (*run)(internal::LoadContext&);
};

// The loader's stages in the order they run: the one place this order is written. Each stage
// assumes what the ones before it established (compiler/onnx/load_stages.h).
constexpr Stage kStages[] = {
    {LoadStage::kLimits, internal::CheckSize},                   // load_parse.cc
    {LoadStage::kParse, internal::Parse},                        // load_parse.cc
    {LoadStage::kStructure, internal::ValidateModel},            // load_validate.cc
    {LoadStage::kStructure, internal::HoistConstants},           // load_constants.cc
    {LoadStage::kStructure, internal::ValidateGraphs},           // load_validate.cc
    {LoadStage::kStructure, internal::ResolveScopes},            // load_scopes.cc
    {LoadStage::kShapeInference, internal::RunShapeInference},  // load_infer.cc
    {LoadStage::kChecker, internal::RunChecker},                 // load_infer.cc
    {LoadStage::kBuild, internal::BuildModel},                   // load_build.cc
};
// LoadStage (compiler/onnx/loader.h) lists the stages in the order they run.
static_assert(std::is_sorted(std::begin(kStages), std::end(kStages),
                             [](const Stage& a, const Stage& b) { return a.reports < b.reports; }));

Status RunStages(internal::LoadContext& ctx) {
  for (const Stage& stage : kStages) {
    ctx.stage = stage.reports;
    KILN_RETURN_IF_ERROR(stage.run(ctx));
  }
  return Status::Ok();
}

LoadError Unexpected(const LoadOptions& options, StatusCode code, std::string message) {
  LoadError err;
  err.model = options.model_name;
  err.code = code;
  err.stage = LoadStage::kBuild;
  err.message = std::move(message);
  return err;
}

}  // namespace

Result<std::shared_ptr<const Model>> LoadModel(std::string_view bytes, const LoadOptions& options, LoadError* error) {
  AssertNotOnReactor("LoadModel");
  LoadError local;
  LoadError& err = error != nullptr ? *error : local;
  try {
    internal::LoadContext ctx(bytes, options);
    const Status status = RunStages(ctx);
    if (status.ok()) return std::move(ctx.result);
    assert(ctx.error.code == status.code() && "a stage failed without LoadContext::Fail");
    err = std::move(ctx.error);
  } catch (const std::bad_alloc&) {
    err = Unexpected(options, StatusCode::kResourceExhausted, "out of memory while loading the model");
  } catch (const std::exception& e) {
    err = Unexpected(options, StatusCode::kInvalidArgument,
                     std::string("the model could not be loaded: ") + internal::FirstLines(e.what()));
  }
  return err.ToStatus();
}

Result<std::shared_ptr<const Model>> LoadModel(std::string_view bytes, const LoaderLimits& limits, LoadError* error) {
  LoadOptions options;
  options.limits = limits;
  return LoadModel(bytes, options, error);
}

}  // namespace kiln::onnx_fe
