// One conv run, shared by DeviceService and `kiln run --local`: request message -> plan, inputs
// and options (PrepareConvRun), then the executor's RunResult -> response message
// (FillRunResponse). The device work itself is compiler/convplan's RunConvPlan / MakeRunJob.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "compiler/convplan/executor.h"
#include "kiln/v1/device.pb.h"

namespace kiln::server {

struct PreparedConvRun {
  std::shared_ptr<const convplan::ConvPlan> plan;
  convplan::RunInputs inputs;
  convplan::RunOptions options;
  std::string backend;  ///< request backend, defaulted to "tt-emu"
};

/// Loads and plans the model (`bytes`, named `model_name` in errors). Errors: the loader's
/// (INVALID_ARGUMENT / FAILED_PRECONDITION / RESOURCE_EXHAUSTED), INVALID_ARGUMENT listing every
/// unsupported node. A plan depends on the bytes only, so callers may cache it by model id.
Result<std::shared_ptr<const convplan::ConvPlan>> PlanModel(std::string_view bytes,
                                                            const std::string& model_name);

/// Converts the request's inputs and precision for `plan`. INVALID_ARGUMENT for bad tensors or
/// precision values. Nothing runs on a device here.
Result<PreparedConvRun> PrepareConvRun(std::shared_ptr<const convplan::ConvPlan> plan,
                                       const kiln::v1::RunConvLayersRequest& request);

/// PlanModel then PrepareConvRun.
Result<PreparedConvRun> PrepareConvRun(std::string_view bytes, const std::string& model_name,
                                       const kiln::v1::RunConvLayersRequest& request);

/// Fills the response from a finished run (outputs unless `omit_outputs`).
void FillRunResponse(const convplan::RunResult& result, bool omit_outputs,
                     kiln::v1::RunConvLayersResponse* response);

}  // namespace kiln::server
