// One test case in one mode through the public API: LoadModel → BuildConvPlan → RunConvPlan.
#include <algorithm>
#include <exception>

#include "compiler/convplan/plan.h"
#include "compiler/onnx/loader.h"
#include "runtime/executor.h"
#include "runtime/host_kernels/registry.h"
#include "tests/conformance/conformance.h"

namespace kiln::conformance {
namespace {

// The plan of `proto`, or null with `error` = "load: CODE: message" / "plan: CODE: message".
std::shared_ptr<const convplan::ConvPlan> Plan(const onnx::ModelProto& proto, std::string& error) {
  std::string bytes;
  if (!proto.SerializeToString(&bytes)) {
    error = "the edited model does not serialize";
    return nullptr;
  }
  auto model = onnx_fe::LoadModel(bytes);
  if (!model.ok()) {
    error = "load: " + model.status().ToString();
    return nullptr;
  }
  auto plan = convplan::BuildConvPlan(*model, runtime::HostKernels());
  if (!plan.ok()) {
    error = "plan: " + plan.status().ToString();
    return nullptr;
  }
  return std::make_shared<const convplan::ConvPlan>(std::move(*plan));
}

// Runs one data set on `plan`: empty when every output matches.
std::string RunDataSet(const convplan::ConvPlan& plan, const onnx::GraphProto& graph, const DataSet& ds,
                       device::Backend& backend) {
  const std::vector<std::string> names = RuntimeInputs(graph);
  if (names.size() != ds.inputs.size()) {
    return "the model has " + std::to_string(names.size()) + " runtime inputs, the data set " +
           std::to_string(ds.inputs.size());
  }
  runtime::RunInputs inputs;
  for (size_t k = 0; k < names.size(); ++k) {
    auto t = ToDeviceTensor(ds.inputs[k]);
    if (!t.ok()) return "input '" + names[k] + "': " + t.status().message();
    inputs.emplace(names[k], std::move(*t));
  }
  runtime::RunOptions options;
  options.compare_to_reference = false;  // the reference backend is its own reference
  options.reference_threads = 1;
  auto result = runtime::RunConvPlan(plan, inputs, backend, options);
  if (!result.ok()) return "run: " + result.status().ToString();
  if (result->outputs.size() != ds.outputs.size()) {
    return "the run returned " + std::to_string(result->outputs.size()) + " outputs, the data set has " +
           std::to_string(ds.outputs.size());
  }
  for (size_t k = 0; k < ds.outputs.size(); ++k) {
    const auto& [name, tensor] = result->outputs[k];
    if (k < static_cast<size_t>(graph.output_size()) && name != graph.output(static_cast<int>(k)).name()) {
      return "output " + std::to_string(k) + " is '" + name + "', the model declares '" +
             graph.output(static_cast<int>(k)).name() + "'";
    }
    std::string diff = CompareTensor(ds.outputs[k], tensor);
    if (!diff.empty()) return "output '" + name + "' " + diff;
  }
  return "";
}

Outcome Run(const TestCase& tc, Mode mode, device::Backend& backend) {
  const std::vector<size_t> params = mode == Mode::kParams ? ParameterInputs(tc.model.graph()) : std::vector<size_t>{};
  std::shared_ptr<const convplan::ConvPlan> shipped;
  for (size_t i = 0; i < tc.data_sets.size(); ++i) {
    const DataSet& ds = tc.data_sets[i];
    const std::string where = i == 0 ? "" : ds.name + ": ";
    // The params mode bakes each data set's parameters into its own model.
    onnx::ModelProto edited;
    const onnx::ModelProto* proto = &tc.model;
    if (mode == Mode::kParams) {
      edited = WithParametersAsInitializers(tc.model, ds, params);
      proto = &edited;
    }
    std::shared_ptr<const convplan::ConvPlan> plan = shipped;
    if (!plan) {
      std::string error;
      plan = Plan(*proto, error);
      if (!plan) return {false, where + error};
      if (mode == Mode::kShipped) shipped = plan;
    }
    DataSet fed = ds;
    if (mode == Mode::kParams) {
      // Only the inputs that stayed graph inputs are fed.
      fed.inputs.clear();
      for (size_t k = 0; k < ds.inputs.size(); ++k) {
        if (std::find(params.begin(), params.end(), k) == params.end()) fed.inputs.push_back(ds.inputs[k]);
      }
    }
    std::string err = RunDataSet(*plan, proto->graph(), fed, backend);
    if (!err.empty()) return {false, where + err};
  }
  return {true, ""};
}

}  // namespace

const char* ModeName(Mode mode) { return mode == Mode::kParams ? "params" : "shipped"; }

Outcome RunTestCase(const TestCase& tc, Mode mode, device::Backend& backend) {
  try {
    return Run(tc, mode, backend);
  } catch (const std::exception& e) {
    return {false, std::string("exception: ") + e.what()};
  }
}

}  // namespace kiln::conformance
