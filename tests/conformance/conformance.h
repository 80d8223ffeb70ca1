// ONNX backend-test conformance runner (tests/conformance): the test directories of Debian's
// libonnx-testdata (onnx 1.12's onnx/backend/test/data/{node,pytorch-converted,pytorch-operator})
// run in process through Kiln's public API — onnx_fe::LoadModel → convplan::BuildConvPlan with
// runtime::HostKernels() → runtime::RunConvPlan on the "reference" backend — and compared with
// the shipped outputs the way onnx's runner compares them (onnx/backend/test/runner/__init__.py,
// assert_similar_outputs: same count, dtype and shape; numpy assert_allclose with rtol 1e-3,
// atol 1e-7, NaN equal to NaN). README.md here says how to run it.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "device/backends/backend.h"
#include "device/tensor.h"

namespace kiln::conformance {

// ---- Selection and the parameter table (cases.cc) ----

/// True when `op_type` (default domain) is in the CNN op set the conv path must cover.
bool InCnnOpSet(std::string_view op_type);

/// The first node (main graph, then subgraphs) whose op type is outside the CNN op set or whose
/// domain is not ai.onnx, as "Op" or "domain:Op"; empty when every node is in the set.
std::string FirstNodeOutsideOpSet(const onnx::GraphProto& graph);

/// True when input `index` of `op_type` is a parameter (weights, shapes, axes, pads, bounds) that
/// the "params" mode turns into an initializer. Input 0, the data input, never is.
bool IsParameterInput(std::string_view op_type, size_t index);

/// One test_data_set_N: input_K.pb / output_K.pb in K order.
struct DataSet {
  std::string name;  ///< "test_data_set_0"
  std::vector<onnx::TensorProto> inputs;
  std::vector<onnx::TensorProto> outputs;
};

/// One test directory.
struct TestCase {
  std::string suite;  ///< "node"
  std::string name;   ///< "test_conv_with_strides_padding"
  onnx::ModelProto model;
  std::vector<DataSet> data_sets;

  std::string id() const { return suite + "/" + name; }
};

/// Names of the test directories of `suite_dir` that have a model.onnx, sorted.
Result<std::vector<std::string>> ListTests(const std::string& suite_dir);

/// Parses `dir`/model.onnx.
Result<onnx::ModelProto> ReadModel(const std::string& dir);

/// Reads model.onnx and every test_data_set_*. A graph input or output that is not a tensor
/// (sequence, optional) is FAILED_PRECONDITION "... (sequence types)".
Result<TestCase> ReadTestCase(const std::string& suite, const std::string& dir);

/// The run-time inputs of the graph: graph.input minus initializers, in model order (the order
/// of input_K.pb, as onnx's runner feeds them).
std::vector<std::string> RuntimeInputs(const onnx::GraphProto& graph);

/// Indices into RuntimeInputs() of the inputs the params mode turns into initializers: every
/// input that some node (subgraphs included) reads at a parameter position and no node reads
/// anywhere else.
std::vector<size_t> ParameterInputs(const onnx::GraphProto& graph);

/// `model` with the runtime inputs `params` (indices into RuntimeInputs) turned into initializers
/// holding the values of `data`; they leave graph.input from IR 4 on (IR < 4 requires every
/// initializer to be listed there too).
onnx::ModelProto WithParametersAsInitializers(const onnx::ModelProto& model, const DataSet& data,
                                              const std::vector<size_t>& params);

// ---- Tensors (tensors.cc) ----

/// A TensorProto as a device::Tensor of the same element type, decoded by the ONNX front end's
/// decoder (compiler/onnx/tensor_decode.h). FAILED_PRECONDITION when device::Tensor has no such
/// element type (yet) or the payload is a STRING tensor.
Result<device::Tensor> ToDeviceTensor(const onnx::TensorProto& t);

/// onnx's backend-test tolerance (onnx/backend/test/loader/__init__.py, TestCase defaults).
inline constexpr double kRtol = 1e-3;
inline constexpr double kAtol = 1e-7;

/// Empty when `actual` matches `expected` in dtype, shape and values (|a - e| <= atol + rtol·|e|,
/// NaN == NaN, infinities equal only to themselves); otherwise the first difference.
std::string CompareTensor(const onnx::TensorProto& expected, const device::Tensor& actual);

// ---- Running (runner.cc) ----

enum class Mode { kShipped, kParams };
/// "shipped" / "params".
const char* ModeName(Mode mode);

/// Result of one test in one mode: pass, or the first error ("test_data_set_1: " prefixed when
/// not the first data set).
struct Outcome {
  bool pass = false;
  std::string error;
};

/// Runs every data set of `tc` in `mode` on `backend` (the reference backend). Never throws.
Outcome RunTestCase(const TestCase& tc, Mode mode, device::Backend& backend);

// ---- The expected-failures table (expected.cc) ----

/// Prefix of the temporary reason: failures of the current host kernels.
inline constexpr std::string_view kNotYetSupported = "not yet supported: ";

/// One line of expected_failures.txt: "<suite>/<test> <shipped|params> <reason>".
struct Expected {
  std::string id;
  Mode mode = Mode::kShipped;
  std::string reason;
};

/// True for the permanent reasons: "opset < 6", "string tensors", "sequence types", "random
/// Dropout masks", "training-mode BatchNormalization outputs", "onnx-1.12 test-data bug: <cite>".
bool IsPermanentReason(std::string_view reason);

/// Parses the table. INVALID_ARGUMENT naming the line for a malformed line, an unknown reason or a
/// repeated (test, mode).
Result<std::vector<Expected>> ParseExpected(const std::string& text);

/// The table text: `header` (comment lines, kept as read), then the entries sorted by id and mode.
std::string FormatExpected(const std::string& header, std::vector<Expected> entries);

/// The leading comment block of a table's text.
std::string ExpectedHeader(const std::string& text);

/// One line, at most ~200 characters, of an error message (for the table and the log).
std::string OneLine(std::string_view message);

/// The category of a first error for the histogram: names and numbers elided ("unsupported op
/// Resize", "dtype: expected INT64, got float32", ...).
std::string ErrorCategory(std::string_view error);

}  // namespace kiln::conformance
