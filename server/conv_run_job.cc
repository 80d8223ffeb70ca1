#include "server/conv_run_job.h"

#include "common/sha256.h"
#include "compiler/onnx/loader.h"
#include "server/device_convert.h"

namespace kiln::server {

Result<std::shared_ptr<const convplan::ConvPlan>> PlanModel(std::string_view bytes,
                                                            const std::string& model_name) {
  onnx_fe::LoadOptions load;
  load.model_name = model_name;
  auto model = onnx_fe::LoadModel(bytes, load);
  if (!model.ok()) return model.status();
  auto plan = convplan::BuildConvPlan(*model);
  if (!plan.ok()) return plan.status().WithContext("model '" + model_name + "'");
  return std::make_shared<const convplan::ConvPlan>(std::move(plan).value());
}

Result<PreparedConvRun> PrepareConvRun(std::string_view bytes, const std::string& model_name,
                                       const kiln::v1::RunConvLayersRequest& request) {
  auto plan = PlanModel(bytes, model_name);
  if (!plan.ok()) return plan.status();
  return PrepareConvRun(std::move(plan).value(), request);
}

Result<PreparedConvRun> PrepareConvRun(std::shared_ptr<const convplan::ConvPlan> plan,
                                       const kiln::v1::RunConvLayersRequest& request) {
  PreparedConvRun run;
  run.plan = std::move(plan);
  run.backend = request.backend().empty() ? "tt-emu" : request.backend();
  auto precision = FromProto(request.precision());
  if (!precision.ok()) return precision.status().WithContext("precision");
  run.options.precision = *precision;
  run.options.mode = request.mode() == kiln::v1::PER_LAYER ? convplan::RunMode::kPerLayer
                                                           : convplan::RunMode::kChained;
  run.options.compare_to_reference = !request.skip_reference();
  run.options.input_seed = request.seed();
  // The reference chain runs on the job's own device thread: one OpenMP thread, so that devices
  // do not fight over the cores.
  run.options.reference_threads = 1;
  for (const auto& t : request.inputs()) {
    if (run.inputs.count(t.name())) {
      return InvalidArgument("input tensor '" + t.name() + "' given twice");
    }
    auto tensor = FromProto(t);
    if (!tensor.ok()) return tensor.status();
    run.inputs.emplace(t.name(), std::move(tensor).value());
  }
  return run;
}

void FillRunResponse(const convplan::RunResult& result, bool omit_outputs,
                     kiln::v1::RunConvLayersResponse* response) {
  if (!omit_outputs) {
    for (const auto& [name, tensor] : result.outputs) ToProto(name, tensor, response->add_outputs());
  }
  for (const auto& l : result.layers) {
    auto* p = response->add_layers();
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
    p->set_compared(l.compared);
    std::string detail = l.on_device ? "device" : "host";
    if (!l.activation.empty() && l.activation != "none") detail += " act=" + l.activation;
    if (!l.blocking.empty()) detail += " " + l.blocking;
    p->set_detail(detail);
  }
  response->set_pass(result.all_pass);
  response->set_backend(result.backend);
  response->set_resolved_precision(result.precision.ToString());
  ToProto(result.precision, response->mutable_precision());
  response->set_kiln_version(KILN_VERSION);
  response->set_run_seconds(result.total_seconds);
}

}  // namespace kiln::server
