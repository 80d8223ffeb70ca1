// Real models: the ai8x-training exports (tests/data/onnx/ai8x; tests/data/ai8x/models/manifest.json names their factories and checkpoints)
// and the conv edge cases with PyTorch / ONNX-spec computed output shapes
// (tests/data/onnx/conv-cases, as in tests/data/conv-cases/manifest.json).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compiler/onnx/loader.h"
#include "tests/support/onnx_model_builder.h"

namespace kiln::onnx_fe {
namespace {

namespace fs = std::filesystem;
const std::string kData = std::string(KILN_TEST_DATA) + "/onnx";

std::vector<fs::path> OnnxFiles(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".onnx") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(OnnxModels, EveryAi8xModelLoadsWithConvShapesInferred) {
  const auto files = OnnxFiles(kData + "/ai8x");
  ASSERT_GE(files.size(), 32u);
  size_t convs = 0;
  for (const auto& f : files) {
    SCOPED_TRACE(f.filename().string());
    LoadOptions opt;
    opt.model_name = f.filename().string();
    auto m = LoadModel(kiln::testing::ReadFileBytes(f.string()), opt);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const Graph& g = (*m)->graph();
    EXPECT_EQ((*m)->opset(), 14);
    ASSERT_EQ(g.inputs().size(), 1u);
    EXPECT_TRUE(g.FindTensor(g.inputs()[0])->shape.is_static());
    size_t model_convs = 0;
    for (const Node& n : g.nodes()) {
      if (n.op_type != "Conv" && n.op_type != "ConvTranspose") continue;
      ++model_convs;
      auto in = g.StaticInputShape(n, 0);
      auto w = g.StaticInputShape(n, 1);
      auto out = g.StaticOutputShape(n, 0);
      ASSERT_TRUE(in.ok()) << in.status().ToString();
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(in->size(), out->size());
      // Output channels come from W: Conv W is [M, C/g, k...], ConvTranspose W is [C, M/g, k...].
      if (n.op_type == "Conv") {
        EXPECT_EQ((*out)[1], (*w)[0]) << n.name;
      }
      // In float exports W is an initializer; QAT exports compute it through quantization ops.
      if (f.string().find(".float.") != std::string::npos) {
        EXPECT_NE(g.ConstantInput(n, 1), nullptr) << n.name;
      }
    }
    EXPECT_GT(model_convs, 0u);
    convs += model_convs;
  }
  EXPECT_GT(convs, 100u);
}

TEST(OnnxModels, Ai8xMnistNet5Structure) {
  auto m = LoadModel(kiln::testing::ReadFileBytes(kData + "/ai8x/mnist-ai85net5.float.onnx"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Graph& g = (*m)->graph();
  EXPECT_EQ(g.FindTensor(g.inputs()[0])->shape.ToString(), "[1,1,28,28]");
  std::vector<std::vector<int64_t>> conv_out;
  for (const Node& n : g.nodes()) {
    if (n.op_type == "Conv") conv_out.push_back(*g.StaticOutputShape(n, 0));
  }
  ASSERT_EQ(conv_out.size(), 4u);
  EXPECT_EQ(conv_out[0], (std::vector<int64_t>{1, 60, 28, 28}));
  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(g.FindTensor(g.outputs()[0].tensor)->shape.ToString(), "[1,10]");
}

TEST(OnnxModels, ConvCasesGraphOutputShapesMatchReference) {
  std::ifstream in(kData + "/conv-cases/expected_output_shapes.txt");
  ASSERT_TRUE(in) << "missing expected_output_shapes.txt";
  std::string line;
  size_t checked = 0, pools_with_ceil = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string model, output, dims;
    ls >> model >> output >> dims;
    std::vector<int64_t> expected;
    std::stringstream ds(dims);
    for (std::string d; std::getline(ds, d, ',');) expected.push_back(std::stoll(d));
    SCOPED_TRACE(model);
    auto m = LoadModel(kiln::testing::ReadFileBytes(kData + "/conv-cases/" + model));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const Graph& g = (*m)->graph();
    const Tensor* t = g.FindTensor(output);
    ASSERT_NE(t, nullptr) << output;
    auto v = t->shape.values();
    ASSERT_TRUE(v.has_value()) << t->shape.ToString();
    EXPECT_EQ(*v, expected) << output;
    for (const Node& n : g.nodes()) {
      if ((n.op_type == "MaxPool" || n.op_type == "AveragePool") && *n.GetInt("ceil_mode") == 1) ++pools_with_ceil;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 48u);
  EXPECT_GE(pools_with_ceil, 6u);  // the ceil_mode cases (corrected rule, onnx PR #5741) are covered
}

TEST(OnnxModels, UnsortedGraphCaseIsSorted) {
  auto m = LoadModel(kiln::testing::ReadFileBytes(kData + "/conv-cases/graph_unsorted_nodes.onnx"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Graph& g = (*m)->graph();
  for (NodeIndex i = 0; i < g.nodes().size(); ++i) {
    for (const auto& in : g.nodes()[i].inputs) {
      auto p = g.Producer(in);
      if (p) {
        EXPECT_LT(*p, i) << g.nodes()[i].name;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::onnx_fe
