// The reference backend against the PyTorch / ONNX-spec computed cases of tests/data/conv-cases
// (manifest.json there): every case whose graph is made
// of backend ops only — Conv, ConvTranspose, MaxPool, AveragePool (1-D as 2-D with H = 1), with
// Relu / Sigmoid / Clip(0, 6) / bound-less Clip fused into the conv that feeds them. The ONNX
// model is read with onnx::ModelProto directly (test code only); auto_pad and ConvTranspose
// output_shape are resolved with device/backends/conv_geometry.h. Tolerance: the manifest's
// tolerance.fp32_reference (|y - e| <= atol + rtol·|e|).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "device/backends/conv_geometry.h"
#include "device/backends/reference/reference_backend.h"
#include "device/npy.h"

namespace kiln::device {
namespace {

const std::string kDir = std::string(KILN_TEST_DATA) + "/conv-cases/";

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// tolerance.fp32_reference of `name` from manifest.json (plain string search; the manifest is
// machine-written with a fixed key order).
std::pair<double, double> Tolerance(const std::string& name) {
  static const std::string manifest = ReadFile(kDir + "manifest.json");
  const std::size_t at = manifest.find("\"name\": \"" + name + "\"");
  EXPECT_NE(at, std::string::npos) << name << " not in manifest";
  const std::size_t tol = manifest.find("\"fp32_reference\"", at);
  const std::size_t r = manifest.find("\"rtol\":", tol), a = manifest.find("\"atol\":", tol);
  return {std::stod(manifest.substr(r + 7, 32)), std::stod(manifest.substr(a + 7, 32))};
}

Result<Tensor> DecodeTensor(const onnx::TensorProto& t) {
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  if (t.data_type() != onnx::TensorProto::FLOAT) {
    return Unimplemented("tensor " + t.name() + ": data_type " + std::to_string(t.data_type()));
  }
  if (t.has_raw_data()) {
    const std::string& raw = t.raw_data();
    return Tensor::FromBytes(dims, DataType::kFloat32,
                             std::span<const std::byte>(reinterpret_cast<const std::byte*>(raw.data()), raw.size()));
  }
  std::vector<float> v(t.float_data().begin(), t.float_data().end());
  return Tensor::FromFloats(dims, v);
}

struct Attrs {
  std::map<std::string, const onnx::AttributeProto*> a;
  std::vector<int64_t> ints(const std::string& k, std::vector<int64_t> def) const {
    auto it = a.find(k);
    return it == a.end() ? def : std::vector<int64_t>(it->second->ints().begin(), it->second->ints().end());
  }
  int64_t i(const std::string& k, int64_t def) const {
    auto it = a.find(k);
    return it == a.end() ? def : it->second->i();
  }
  std::string s(const std::string& k) const {
    auto it = a.find(k);
    return it == a.end() ? "" : it->second->s();
  }
};

Attrs AttrsOf(const onnx::NodeProto& n) {
  Attrs at;
  for (const auto& a : n.attribute()) at.a[a.name()] = &a;
  return at;
}

// Spatial parameters of a 1-D or 2-D node, lifted to 2-D (H axis = 1 for 1-D).
struct Spatial {
  int rank = 2;
  std::array<int64_t, 2> kernel{1, 1}, strides{1, 1}, dilations{1, 1}, out_pad{0, 0};
  std::array<int64_t, 4> pads{0, 0, 0, 0};
};

Spatial Lift(int rank, const std::vector<int64_t>& kernel, const Attrs& at) {
  Spatial s;
  s.rank = rank;
  const int off = rank == 1 ? 1 : 0;
  auto k = kernel;
  auto st = at.ints("strides", std::vector<int64_t>(rank, 1));
  auto dl = at.ints("dilations", std::vector<int64_t>(rank, 1));
  auto pd = at.ints("pads", std::vector<int64_t>(2 * rank, 0));
  auto op = at.ints("output_padding", std::vector<int64_t>(rank, 0));
  for (int i = 0; i < rank; ++i) {
    s.kernel[off + i] = k[i];
    s.strides[off + i] = st[i];
    s.dilations[off + i] = dl[i];
    s.out_pad[off + i] = op[i];
    s.pads[off + i] = pd[i];
    s.pads[2 + off + i] = pd[rank + i];
  }
  return s;
}

Result<Tensor> To4d(const Tensor& t) {
  if (t.rank() == 4) return t;
  if (t.rank() == 3) return t.Reshaped({t.dim(0), t.dim(1), 1, t.dim(2)});
  return InvalidArgument("rank " + std::to_string(t.rank()) + " tensor");
}

class ConvCaseRunner {
 public:
  explicit ConvCaseRunner(Backend& backend) : backend_(backend) {}

  // Runs the model; returns graph outputs by name. `override_pads` replaces the pads of every
  // ConvTranspose (for the disputed output_shape split).
  Result<std::map<std::string, Tensor>> Run(const std::string& name,
                                            std::optional<std::array<int64_t, 4>> override_pads = {}) {
    onnx::ModelProto model;
    if (!model.ParseFromString(ReadFile(kDir + name + ".onnx"))) return DataLoss("cannot parse " + name + ".onnx");
    const auto& g = model.graph();
    std::map<std::string, Tensor> values;
    for (const auto& init : g.initializer()) {
      auto t = DecodeTensor(init);
      if (!t.ok()) return t.status();
      values[init.name()] = std::move(*t);
    }
    std::vector<std::string> real_inputs;
    for (const auto& in : g.input()) {
      if (!values.count(in.name())) real_inputs.push_back(in.name());
    }
    for (const auto& in : real_inputs) {
      std::string file = kDir + name + ".input.npy";
      if (real_inputs.size() > 1) file = kDir + name + ".input." + in + ".npy";
      auto t = ReadNpy(file);
      if (!t.ok()) return t.status();
      values[in] = std::move(*t);
    }
    // Consumers per value; graph outputs count as a consumer.
    std::map<std::string, int> consumers;
    for (const auto& n : g.node())
      for (const auto& i : n.input()) ++consumers[i];
    for (const auto& o : g.output()) ++consumers[o.name()];
    std::map<std::string, int> producer;
    for (int i = 0; i < g.node_size(); ++i)
      for (const auto& o : g.node(i).output()) producer[o] = i;

    // Fuse activations into the conv producing their only input.
    std::map<int, Activation> fused_act;       // conv node → activation
    std::map<int, std::string> fused_out;      // conv node → name of the activation's output
    std::set<int> absorbed;                    // activation nodes folded away
    for (int i = 0; i < g.node_size(); ++i) {
      const auto& n = g.node(i);
      std::optional<Activation> act;
      if (n.op_type() == "Relu") act = Activation::kRelu;
      if (n.op_type() == "Sigmoid") act = Activation::kSigmoid;
      if (n.op_type() == "Clip") {
        std::vector<std::optional<float>> bounds;
        for (int k = 1; k < 3; ++k) {
          if (k >= n.input_size() || n.input(k).empty()) {
            bounds.push_back(std::nullopt);
            continue;
          }
          std::optional<float> v = ConstantScalar(g, values, n.input(k));
          if (!v) return Unimplemented("Clip bound " + n.input(k) + " is not a constant");
          bounds.push_back(v);
        }
        if (!bounds[0] && !bounds[1]) act = Activation::kNone;
        else if (bounds[0] && bounds[1] && *bounds[0] == 0.f && *bounds[1] == 6.f) act = Activation::kRelu6;
        else return Unimplemented("Clip other than (0, 6) or unbounded");
      }
      if (!act) continue;
      auto p = producer.find(n.input(0));
      if (p == producer.end()) return Unimplemented(n.op_type() + " on a graph input");
      const std::string& pop = g.node(p->second).op_type();
      if ((pop != "Conv" && pop != "ConvTranspose") || consumers[n.input(0)] != 1 || fused_act.count(p->second)) {
        return Unimplemented(n.op_type() + " not fusable into its producer");
      }
      fused_act[p->second] = *act;
      fused_out[p->second] = n.output(0);
      absorbed.insert(i);
    }

    // Execute in dependency order (the graph may be stored unsorted).
    std::set<int> done = absorbed;
    bool progress = true;
    while (progress && static_cast<int>(done.size()) < g.node_size()) {
      progress = false;
      for (int i = 0; i < g.node_size(); ++i) {
        if (done.count(i)) continue;
        const auto& n = g.node(i);
        bool ready = true;
        for (const auto& in : n.input()) ready &= in.empty() || values.count(in) > 0;
        if (!ready) continue;
        const Activation act = fused_act.count(i) ? fused_act[i] : Activation::kNone;
        auto y = Exec(n, values, act, override_pads);
        if (!y.ok()) return y.status().WithContext("node " + n.name() + " (" + n.op_type() + ")");
        values[fused_out.count(i) ? fused_out[i] : n.output(0)] = std::move(*y);
        done.insert(i);
        progress = true;
      }
    }
    if (static_cast<int>(done.size()) != g.node_size()) return InvalidArgument("graph has a cycle or missing input");
    std::map<std::string, Tensor> outputs;
    for (const auto& o : g.output()) outputs[o.name()] = values[o.name()];
    return outputs;
  }

  int ops_run() const { return ops_run_; }

 private:
  static std::optional<float> ConstantScalar(const onnx::GraphProto& g, const std::map<std::string, Tensor>& values,
                                             const std::string& name) {
    auto it = values.find(name);
    if (it != values.end() && it->second.num_elements() == 1) return it->second.data<float>()[0];
    for (const auto& n : g.node()) {
      if (n.op_type() == "Constant" && n.output(0) == name) {
        for (const auto& a : n.attribute()) {
          if (a.name() == "value") {
            auto t = DecodeTensor(a.t());
            if (t.ok() && t->num_elements() == 1) return t->data<float>()[0];
          }
        }
      }
    }
    return std::nullopt;
  }

  Result<Tensor> Exec(const onnx::NodeProto& n, std::map<std::string, Tensor>& values, Activation act,
                      const std::optional<std::array<int64_t, 4>>& override_pads) {
    const Attrs at = AttrsOf(n);
    const std::string& op = n.op_type();
    if (op == "Constant") {
      for (const auto& a : n.attribute())
        if (a.name() == "value") return DecodeTensor(a.t());
      return Unimplemented("Constant without 'value'");
    }
    const Tensor& x0 = values.at(n.input(0));
    const int rank = x0.rank() - 2;
    auto x = To4d(x0);
    if (!x.ok()) return x.status();
    Result<Tensor> y = Internal("unset");
    ++ops_run_;
    if (op == "Conv" || op == "ConvTranspose") {
      const Tensor& w0 = values.at(n.input(1));
      auto w = To4d(w0);
      if (!w.ok()) return w.status();
      const Tensor* b = n.input_size() > 2 && !n.input(2).empty() ? &values.at(n.input(2)) : nullptr;
      std::vector<int64_t> kshape(w0.shape().begin() + 2, w0.shape().end());
      Spatial s = Lift(rank, at.ints("kernel_shape", kshape), at);
      auto mode = ParseAutoPad(at.s("auto_pad"));
      if (!mode.ok()) return mode.status();
      const int off = rank == 1 ? 1 : 0;
      const auto out_shape = at.ints("output_shape", {});
      if (op == "Conv") {
        if (*mode != AutoPad::kNotSet) {
          for (int i = off; i < 2; ++i) {
            auto pr = ConvAutoPad(*mode, x->dim(2 + i), s.kernel[i], s.strides[i], s.dilations[i]);
            if (!pr.ok()) return pr.status();
            s.pads[i] = pr->first;
            s.pads[2 + i] = pr->second;
          }
        }
        Conv2dParams p;
        p.strides = s.strides;
        p.dilations = s.dilations;
        p.pads = s.pads;
        p.group = at.i("group", 1);
        p.activation = act;
        y = backend_.Conv2d(*x, *w, b, p, {});
      } else {
        if (!out_shape.empty() || *mode == AutoPad::kSameUpper || *mode == AutoPad::kSameLower) {
          for (int i = off; i < 2; ++i) {
            const int64_t in = x->dim(2 + i);
            const int64_t want = !out_shape.empty() ? out_shape[static_cast<std::size_t>(out_shape.size() - 2 + i)]
                                                    : in * s.strides[i];
            auto pr = ConvTransposePadsForOutput(*mode, in, s.kernel[i], s.strides[i], s.dilations[i],
                                                 s.out_pad[i], want);
            if (!pr.ok()) return pr.status();
            s.pads[i] = pr->first;
            s.pads[2 + i] = pr->second;
          }
        } else if (*mode == AutoPad::kValid) {
          s.pads = {0, 0, 0, 0};
        }
        if (override_pads) s.pads = *override_pads;
        ConvTranspose2dParams p;
        p.strides = s.strides;
        p.dilations = s.dilations;
        p.pads = s.pads;
        p.output_padding = s.out_pad;
        p.group = at.i("group", 1);
        p.activation = act;
        y = backend_.ConvTranspose2d(*x, *w, b, p, {});
      }
    } else if (op == "MaxPool" || op == "AveragePool") {
      Spatial s = Lift(rank, at.ints("kernel_shape", {}), at);
      auto mode = ParseAutoPad(at.s("auto_pad"));
      if (!mode.ok()) return mode.status();
      if (*mode != AutoPad::kNotSet) return Unimplemented("pool auto_pad in this test runner");
      Pool2dParams p;
      p.kind = op == "MaxPool" ? PoolKind::kMax : PoolKind::kAverage;
      p.kernel = s.kernel;
      p.strides = s.strides;
      p.dilations = s.dilations;
      p.pads = s.pads;
      p.ceil_mode = at.i("ceil_mode", 0) != 0;
      p.count_include_pad = at.i("count_include_pad", 0) != 0;
      y = backend_.Pool2d(*x, p, {});
    } else {
      return Unimplemented("op " + op + " is not a backend op");
    }
    if (!y.ok()) return y.status();
    if (rank == 1) return y->Reshaped({y->dim(0), y->dim(1), y->dim(3)});
    return y;
  }

  Backend& backend_;
  int ops_run_ = 0;
};

::testing::AssertionResult WithinTolerance(const Tensor& got, const Tensor& want, double rtol, double atol,
                                           double* max_abs) {
  if (got.shape() != want.shape()) {
    return ::testing::AssertionFailure() << "shape " << ShapeToString(got.shape()) << " vs expected "
                                         << ShapeToString(want.shape());
  }
  *max_abs = 0;
  std::size_t bad = 0, first = 0;
  const auto g = got.span<float>();
  const auto w = want.span<float>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double d = std::fabs(static_cast<double>(g[i]) - w[i]);
    *max_abs = std::max(*max_abs, d);
    if (!(d <= atol + rtol * std::fabs(w[i]))) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad) {
    return ::testing::AssertionFailure() << bad << " of " << g.size() << " elements out of tolerance; first at "
                                         << first << ": got " << g[first] << ", expected " << w[first];
  }
  return ::testing::AssertionSuccess();
}

class ConvCasesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ConvCasesTest, MatchesExpectedWithinManifestTolerance) {
  const std::string name = GetParam();
  auto backend = MakeReferenceBackend();
  ASSERT_TRUE(backend.ok());
  ConvCaseRunner runner(**backend);
  auto outputs = runner.Run(name);
  ASSERT_TRUE(outputs.ok()) << outputs.status().ToString();
  EXPECT_GE(runner.ops_run(), 1);
  const auto [rtol, atol] = Tolerance(name);
  for (const auto& [out_name, got] : *outputs) {
    std::string file = kDir + name + ".output.npy";
    if (outputs->size() > 1) file = kDir + name + ".output." + out_name + ".npy";
    auto want = ReadNpy(file);
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    double max_abs = 0;
    EXPECT_TRUE(WithinTolerance(got, *want, rtol, atol, &max_abs)) << name << " output " << out_name;
    RecordProperty("max_abs_err_" + out_name, std::to_string(max_abs));
    std::printf("[ conv-case ] %-40s %-4s max|err| %.3g (atol %.3g rtol %.3g)\n", name.c_str(), out_name.c_str(),
                max_abs, atol, rtol);
  }
}

INSTANTIATE_TEST_SUITE_P(
    SingleOpAndBackendOpChains, ConvCasesTest,
    ::testing::Values(
        // single Conv
        "conv_autopad_same_upper_s2", "conv_autopad_same_upper_s2_d2", "conv_autopad_same_lower_s2_d2",
        "conv_autopad_valid_s2_d2", "conv_autopad_same_upper_d2_s1", "conv_pads_asymmetric",
        "conv_dilation_stride_pads_hw", "conv_dilation21_nonsquare", "conv_group2", "conv_depthwise",
        "conv_depthwise_tall",
        // single ConvTranspose
        "convtranspose_s2_outpad1", "convtranspose_group2", "convtranspose_depthwise", "convtranspose_d2_s2",
        "convtranspose_output_shape_even", "convtranspose_output_shape_odd", "convtranspose_autopad_same_upper_s2",
        "convtranspose_autopad_same_upper_s1",
        // single pool (1-D)
        "avgpool_ceil_cip1_1d_values",
        // conv → pool chains (both ops on the backend)
        "avgpool_ceil_cip0_pads", "avgpool_ceil_cip1_pads", "avgpool_cip_default_pads", "conv1d_avgpool",
        "maxpool_ceil_k1_s2", "maxpool_ceil_pads", "maxpool_ceil_pads_dilation",
        // conv with a fused activation, unsorted graphs, sibling convs
        "conv_relu", "conv_sigmoid", "conv_clip_relu6_opset11", "conv_clip_no_bounds", "graph_unsorted_nodes",
        "sibling_convs"),
    [](const ::testing::TestParamInfo<std::string>& info) {
      std::string s = info.param;
      for (char& c : s)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      return s;
    });

// BC-03: the disputed odd output_shape split. The primary expectation (spec text, pads begin 1 /
// end 0) is checked above; the runtime behaviour (pads [0, 0, 1, 1]) must match output_alt.npy
// when the plan chooses that split explicitly.
TEST(ConvCasesDisputed, OutputShapeOddAlternativeSplit) {
  auto backend = MakeReferenceBackend();
  ASSERT_TRUE(backend.ok());
  ConvCaseRunner runner(**backend);
  auto outputs = runner.Run("convtranspose_output_shape_odd", std::array<int64_t, 4>{0, 0, 1, 1});
  ASSERT_TRUE(outputs.ok()) << outputs.status().ToString();
  auto want = ReadNpy(kDir + "convtranspose_output_shape_odd.output_alt.npy");
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  const auto [rtol, atol] = Tolerance("convtranspose_output_shape_odd");
  double max_abs = 0;
  EXPECT_TRUE(WithinTolerance(outputs->begin()->second, *want, rtol, atol, &max_abs));
}

}  // namespace
}  // namespace kiln::device
