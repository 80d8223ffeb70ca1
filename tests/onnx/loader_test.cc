// Loader tests: every malformed or unusual model gives the right IR or an error status, never a
// crash. Models are built with tests/support's OnnxModelBuilder.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <cmath>
#include <atomic>
#include <random>
#include <set>
#include <thread>

#include "compiler/onnx/loader.h"
#include "tests/support/onnx_model_builder.h"

namespace kiln::onnx_fe {
namespace {

using kiln::testing::OnnxModelBuilder;
using onnx::TensorProto;
namespace kt = kiln::testing;

const Node* FindNode(const Graph& g, std::string_view op) {
  for (const Node& n : g.nodes()) {
    if (n.op_type == op) return &n;
  }
  return nullptr;
}

std::vector<int64_t> StaticShape(const Graph& g, const std::string& name) {
  const Tensor* t = g.FindTensor(name);
  if (t == nullptr) return {-999};
  auto v = t->shape.values();
  return v ? *v : std::vector<int64_t>{-1};
}

// x[1,3,8,8] -> Conv(W[4,3,3,3], B[4]) -> y[1,4,6,6]
OnnxModelBuilder ConvModel(int64_t opset = 13) {
  OnnxModelBuilder b(opset);
  b.Input("x", TensorProto::FLOAT, {1, 3, 8, 8});
  b.FloatInitializer("W", {4, 3, 3, 3}, kt::RandomFloats(108, 1));
  b.FloatInitializer("B", {4}, {0.1f, 0.2f, 0.3f, 0.4f});
  return b;
}

Result<std::shared_ptr<const Model>> Load(const OnnxModelBuilder& b, LoadError* err = nullptr,
                                           const LoadOptions& opt = {}) {
  return LoadModel(b.Serialize(), opt, err);
}

TEST(OnnxLoader, ConvLoadsWithShapesAndDefaults) {
  auto b = ConvModel();
  b.Node("Conv", {"x", "W", "B"}, {"y"}, "conv1");
  b.Output("y");
  auto m = Load(b);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Graph& g = (*m)->graph();
  ASSERT_EQ(g.nodes().size(), 1u);
  const Node& conv = g.nodes()[0];
  EXPECT_EQ(conv.name, "conv1");
  EXPECT_EQ(conv.opset_version, 13);
  EXPECT_EQ(StaticShape(g, "y"), (std::vector<int64_t>{1, 4, 6, 6}));
  EXPECT_EQ(g.inputs(), (std::vector<std::string>{"x"}));
  // auto_pad / group have schema defaults; pads has none.
  auto auto_pad = conv.GetString("auto_pad");
  ASSERT_TRUE(auto_pad.ok());
  EXPECT_EQ(*auto_pad, "NOTSET");
  EXPECT_TRUE(conv.FindAttribute("auto_pad")->from_default);
  EXPECT_EQ(*conv.GetInt("group"), 1);
  EXPECT_EQ(conv.FindAttribute("pads"), nullptr);
  EXPECT_EQ(*conv.GetInts("pads", {0, 0, 0, 0}), (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_FALSE(conv.GetInt("pads").ok());
  EXPECT_FALSE(conv.GetFloat("group").ok());  // wrong type
  const ConstantData* w = g.ConstantInput(conv, 1);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->size(), 108u);
  EXPECT_EQ(w->original_type(), DataType::kFloat);
  EXPECT_FLOAT_EQ(w->floats()[0], kt::RandomFloats(108, 1)[0]);
  EXPECT_EQ(g.ConstantInput(conv, 0), nullptr);
  EXPECT_EQ(*g.StaticInputShape(conv, 1), (std::vector<int64_t>{4, 3, 3, 3}));
  EXPECT_EQ(g.Producer("y"), std::optional<NodeIndex>(0));
  EXPECT_EQ(g.Consumers("x").size(), 1u);
  EXPECT_TRUE(g.IsGraphOutput("y"));
}

TEST(OnnxLoader, ReluListedBeforeTheConvThatFeedsIt) {
  auto b = ConvModel();
  b.Node("Relu", {"y"}, {"z"}, "relu");
  b.Node("Conv", {"x", "W", "B"}, {"y"}, "conv");
  b.Output("z");
  auto m = Load(b);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Graph& g = (*m)->graph();
  ASSERT_EQ(g.nodes().size(), 2u);
  EXPECT_EQ(g.nodes()[0].op_type, "Conv");
  EXPECT_EQ(g.nodes()[1].op_type, "Relu");
  EXPECT_EQ(StaticShape(g, "z"), (std::vector<int64_t>{1, 4, 6, 6}));
  EXPECT_EQ(*g.Producer("z"), 1u);
  ASSERT_EQ(g.Consumers("y").size(), 1u);
  EXPECT_EQ(g.Consumers("y")[0], 1u);
}

TEST(OnnxLoader, DuplicateNodeNamesGetUniqueNames) {
  auto b = ConvModel();
  b.Node("Conv", {"x", "W", "B"}, {"y"}, "conv");
  b.Node("Relu", {"y"}, {"z"}, "conv");
  b.Output("z");
  auto m = Load(b);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Graph& g = (*m)->graph();
  ASSERT_EQ(g.nodes().size(), 2u);
  EXPECT_EQ(g.nodes()[0].name, "conv");
  EXPECT_NE(g.nodes()[1].name, "conv");
  EXPECT_FALSE(g.nodes()[1].name.empty());
  EXPECT_EQ(g.nodes()[1].original_name, "conv");
  // Tensor names never change.
  EXPECT_EQ(g.nodes()[1].outputs[0], "z");
}

TEST(OnnxLoader, AllNamesEmptyGetGeneratedUniqueNames) {
  auto b = ConvModel();
  b.Node("Conv", {"x", "W", "B"}, {"y"});
  b.Node("Relu", {"y"}, {"z"});
  b.Node("Relu", {"z"}, {"z2"});
  b.Output("z2");
  auto m = Load(b);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::set<std::string> names;
  for (const Node& n : (*m)->graph().nodes()) {
    EXPECT_FALSE(n.name.empty());
    EXPECT_TRUE(n.original_name.empty());
    names.insert(n.name);
  }
  EXPECT_EQ(names.size(), 3u);
}

TEST(OnnxLoader, ConvWithOnlyXIsAnError) {
  auto b = ConvModel();
  b.Node("Conv", {"x"}, {"y"}, "lonely");
  b.Output("y");
  LoadError err;
  auto m = Load(b, &err);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err.node, "lonely");
  EXPECT_EQ(err.op_type, "Conv");
  EXPECT_EQ(err.stage, LoadStage::kStructure);
  EXPECT_NE(m.status().message().find("input size 1"), std::string::npos) << m.status().message();
}

TEST(OnnxLoader, ConvWhoseXIsEmptyIsAnError) {
  auto b = ConvModel();
  b.Node("Conv", {"", "W", "B"}, {"y"}, "noinput");
  b.Output("y");
  LoadError err;
  auto m = Load(b, &err);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err.node, "noinput");
  EXPECT_NE(m.status().message().find("empty"), std::string::npos) << m.status().message();
}

TEST(OnnxLoader, AddWithOneInputIsAnError) {
  OnnxModelBuilder b;
  b.Input("a", TensorProto::FLOAT, {2});
  b.Node("Add", {"a"}, {"c"}, "add");
  b.Output("c");
  auto m = Load(b);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
}

OnnxModelBuilder ReluChain(size_t n, bool reversed) {
  OnnxModelBuilder b;
  b.Input("t0", TensorProto::FLOAT, {1, 8});
  std::vector<std::pair<std::string, std::string>> edges;
  for (size_t i = 0; i < n; ++i) edges.emplace_back("t" + std::to_string(i), "t" + std::to_string(i + 1));
  if (reversed) std::reverse(edges.begin(), edges.end());
  auto* nodes = b.graph().mutable_node();
  nodes->Reserve(static_cast<int>(n));
  for (auto& [in, out] : edges) b.Node("Relu", {in}, {out});
  b.Output("t" + std::to_string(n));
  return b;
}

TEST(OnnxLoader, LongReluChainLoadsWithoutRecursion) {
  constexpr size_t kNodes = 200'000;
  auto b = ReluChain(kNodes, /*reversed=*/true);
  const auto start = std::chrono::steady_clock::now();
  auto m = Load(b);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Graph& g = (*m)->graph();
  ASSERT_EQ(g.nodes().size(), kNodes);
  EXPECT_EQ(g.nodes().front().inputs[0], "t0");
  EXPECT_EQ(g.nodes().back().outputs[0], "t" + std::to_string(kNodes));
  EXPECT_EQ(StaticShape(g, "t" + std::to_string(kNodes)), (std::vector<int64_t>{1, 8}));
  EXPECT_LT(secs, 30.0);  // linear-time: a few seconds even on a loaded 2-core machine
}

TEST(OnnxLoader, NodeCountLimit) {
  auto b = ReluChain(100, false);
  LoadOptions opt;
  opt.limits.max_nodes = 99;
  auto m = Load(b, nullptr, opt);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(m.status().message().find("max_nodes"), std::string::npos);
  opt.limits.max_nodes = 100;
  EXPECT_TRUE(Load(b, nullptr, opt).ok());
}

TEST(OnnxLoader, TruncatedFileIsAnErrorAtEveryLength) {
  auto b = ConvModel();
  b.Node("Conv", {"x", "W", "B"}, {"y"}, "conv1");
  b.Output("y");
  const std::string bytes = b.Serialize();
  auto half = LoadModel(std::string_view(bytes).substr(0, bytes.size() / 2));
  ASSERT_FALSE(half.ok());
  EXPECT_EQ(half.status().code(), StatusCode::kInvalidArgument);
  size_t loaded = 0;
  for (size_t len = 0; len < bytes.size(); ++len) {
    auto m = LoadModel(std::string_view(bytes).substr(0, len));
    if (m.ok()) ++loaded;  // some prefixes end on a field boundary; they must then be whole models
  }
  EXPECT_EQ(loaded, 0u);  // every prefix lacks the graph output or more
  EXPECT_TRUE(LoadModel(bytes).ok());
}

TEST(OnnxLoader, RandomBytesAreAnError) {
  for (uint32_t seed = 0; seed < 64; ++seed) {
    std::mt19937 rng(seed);
    std::string junk(1024, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    auto m = LoadModel(junk);
    ASSERT_FALSE(m.ok()) << "seed " << seed;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << m.status().ToString();
  }
  EXPECT_EQ(LoadModel("").status().code(), StatusCode::kInvalidArgument);
}

// If(cond) { then: If(cond) {...} else: Identity-free Relu } nested `depth` deep.
OnnxModelBuilder NestedIf(size_t depth) {
  // Innermost branch: y_d = Relu(x) (x captured from the main graph).
  auto branch = [](const std::string& out, const std::string& op_in) {
    onnx::GraphProto g;
    g.set_name("b_" + out);
    auto* n = g.add_node();
    n->set_op_type("Relu");
    n->add_input(op_in);
    n->add_output(out);
    auto* o = g.add_output();
    o->set_name(out);
    o->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::FLOAT);
    return g;
  };
  onnx::GraphProto inner = branch("r" + std::to_string(depth), "x");
  for (size_t d = depth; d-- > 0;) {
    onnx::GraphProto g;
    g.set_name("level" + std::to_string(d));
    auto* n = g.add_node();
    n->set_op_type("If");
    n->add_input("cond");
    n->add_output("r" + std::to_string(d));
    auto* then_attr = n->add_attribute();  // moved in, not copied: building stays linear
    then_attr->set_name("then_branch");
    then_attr->set_type(onnx::AttributeProto::GRAPH);
    then_attr->mutable_g()->Swap(&inner);
    kt::SetGraph(*n, "else_branch", branch("e" + std::to_string(d), "x"));
    auto* o = g.add_output();
    o->set_name("r" + std::to_string(d));
    o->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::FLOAT);
    inner = std::move(g);
  }
  OnnxModelBuilder b;
  b.Input("x", TensorProto::FLOAT, {2, 2});
  b.Input("cond", TensorProto::BOOL, {});
  b.graph().mutable_node()->Swap(inner.mutable_node());
  b.Output("r0");
  return b;
}

TEST(OnnxLoader, NestedIfThousandDeepIsRejectedByDepthCap) {
  auto b = NestedIf(1000);
  LoadError err;
  auto m = Load(b, &err);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(m.status().message().find("max_graph_depth"), std::string::npos) << m.status().message();
}

TEST(OnnxLoader, NestedIfWithinDepthCapLoads) {
  auto b = NestedIf(8);
  auto m = Load(b);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // The If reads x and cond only through its subgraphs: it still counts as their consumer.
  ASSERT_EQ((*m)->graph().Consumers("x").size(), 1u);
  EXPECT_EQ((*m)->graph().Consumers("x")[0], 0u);
  EXPECT_EQ((*m)->graph().Consumers("cond").size(), 1u);
  const Graph* g = &(*m)->graph();
  size_t levels = 0;
  while (true) {
    const Node* n = FindNode(*g, "If");
    if (n == nullptr) break;
    ASSERT_NE(n->FindAttribute("then_branch"), nullptr);
    g = n->FindAttribute("then_branch")->g.get();
    ++levels;
  }
  EXPECT_EQ(levels, 8u);
  EXPECT_EQ(g->captured(), (std::vector<std::string>{"x"}));
  EXPECT_EQ((*m)->total_node_count(), 8u + 8u + 1u);
}

TEST(OnnxLoader, NestedIfThousandDeepLoadsWhenCapRaised) {
  auto b = NestedIf(1000);
  LoadOptions opt;
  opt.limits.max_graph_depth = 1000;
  auto m = Load(b, nullptr, opt);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->total_node_count(), 2001u);
}

TEST(OnnxLoader, GraphOutputProducedByNoNode) {
  auto b = ConvModel();
  b.Node("Conv", {"x", "W", "B"}, {"y"}, "conv1");
  b.Output("y");
  b.Output("ghost");
  LoadError err;
  auto m = Load(b, &err);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err.tensor, "ghost");
}

TEST(OnnxLoader, ValueInfoForMissingTensor) {
  auto b = ConvModel();
  b.Node("Conv", {"x", "W", "B"}, {"y"}, "conv1");
  b.Output("y");
  b.ValueInfo("nowhere", TensorProto::FLOAT, {1, 2});
  LoadError err;
  auto m = Load(b, &err);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err.tensor, "nowhere");
}

TEST(OnnxLoader, UndefinedNodeInput) {
  auto b = ConvModel();
  b.Node("Conv", {"x", "W", "B"}, {"y"}, "conv1");
  b.Node("Add", {"y", "missing"}, {"z"}, "add");
  b.Output("z");
  LoadError err;
  auto m = Load(b, &err);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(err.node, "add");
  EXPECT_EQ(err.tensor, "missing");
}

TEST(OnnxLoader, CycleIsAnErrorNamingANodeOnIt) {
  OnnxModelBuilder b;
  b.Input("x", TensorProto::FLOAT, {2});
  b.Node("Add", {"x", "c"}, {"a"}, "n_a");
  b.Node("Relu", {"a"}, {"b"}, "n_b");
  b.Node("Relu", {"b"}, {"c"}, "n_c");
  b.Node("Relu", {"x"}, {"d"}, "n_d");
  b.Output("c");
  LoadError err;
  auto m = Load(b, &err);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(err.node == "n_a" || err.node == "n_b" || err.node == "n_c") << err.node;
  EXPECT_NE(m.status().message().find("cycle"), std::string::npos);
}

// A node reading its own output is a cycle; the error names the node, an unnamed one by its op
// type and first output (not "node ''").
TEST(OnnxLoader, NodeReadingItsOwnOutputIsACycle) {
  for (const std::string name : {"self", ""}) {
    OnnxModelBuilder b;
    b.Input("x", TensorProto::FLOAT, {2});
    b.Node("Add", {"x", "a"}, {"a"}, name);
    b.Output("a");
    LoadError err;
    auto m = Load(b, &err);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(err.node, name);
    EXPECT_EQ(err.node_output, "a");
    EXPECT_NE(m.status().message().find("cycle"), std::string::npos);
    if (name.empty()) {
      EXPECT_NE(m.status().message().find("unnamed Add node (output 'a'): "), std::string::npos) << m.status().message();
      EXPECT_EQ(m.status().message().find("node ''"), std::string::npos) << m.status().message();
    }
  }
}

TEST(OnnxLoader, DuplicateOutputNameViolatesSsa) {
  OnnxModelBuilder b;
  b.Input("x", TensorProto::FLOAT, {2});
  b.Node("Relu", {"x"}, {"y"}, "r1");
  b.Node("Relu", {"x"}, {"y"}, "r2");
  b.Output("y");
  auto m = Load(b);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
}

// W stored as FLOAT16/BFLOAT16 feeds Conv through Cast(to=FLOAT).
void ExpectCastWeights(const onnx::TensorProto& w16, float tolerance) {
  const auto values = kt::RandomFloats(108, 7);
  OnnxModelBuilder b;
  b.Input("x", TensorProto::FLOAT, {1, 3, 8, 8});
  b.Initializer(w16);
  auto& cast = b.Node("Cast", {"W16"}, {"W"}, "cast");
  kt::SetInt(cast, "to", TensorProto::FLOAT);
  b.Node("Conv", {"x", "W"}, {"y"}, "conv");
  b.Output("y");
  auto m = Load(b);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Graph& g = (*m)->graph();
  const Node* c = FindNode(g, "Cast");
  ASSERT_NE(c, nullptr);
  const ConstantData* w = g.ConstantInput(*c, 0);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->original_type(), static_cast<DataType>(w16.data_type()));
  ASSERT_EQ(w->size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) EXPECT_NEAR(w->floats()[i], values[i], tolerance) << i;
  EXPECT_EQ(g.FindTensor("W")->dtype, DataType::kFloat);
  EXPECT_EQ(StaticShape(g, "W"), (std::vector<int64_t>{4, 3, 3, 3}));
  EXPECT_EQ(StaticShape(g, "y"), (std::vector<int64_t>{1, 4, 6, 6}));
}

TEST(OnnxLoader, WeightsFloatRaw) {
  const auto values = kt::RandomFloats(108, 7);
  OnnxModelBuilder b;
  b.Input("x", TensorProto::FLOAT, {1, 3, 8, 8});
  b.FloatInitializer("W", {4, 3, 3, 3}, values);
  b.Node("Conv", {"x", "W"}, {"y"}, "conv");
  b.Output("y");
  auto m = Load(b);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ConstantData* w = (*m)->graph().ConstantInput((*m)->graph().nodes()[0], 1);
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(w->floats()[i], values[i]);
  EXPECT_FALSE(w->is_integer());
}

TEST(OnnxLoader, WeightsFloatTypedField) {
  const auto values = kt::RandomFloats(108, 7);
  OnnxModelBuilder b;
  b.Input("x", TensorProto::FLOAT, {1, 3, 8, 8});
  b.Initializer(kt::FloatTensorTyped("W", {4, 3, 3, 3}, values));
  b.Node("Conv", {"x", "W"}, {"y"}, "conv");
  b.Output("y");
  auto m = Load(b);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ConstantData* w = (*m)->graph().ConstantInput((*m)->graph().nodes()[0], 1);
  ASSERT_NE(w, nullptr);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(w->floats()[i], values[i]);
}

TEST(OnnxLoader, WeightsFloat16RawThroughCast) {
  ExpectCastWeights(kt::Float16TensorRaw("W16", {4, 3, 3, 3}, kt::RandomFloats(108, 7)), 1e-3f);
}
TEST(OnnxLoader, WeightsFloat16Int32DataThroughCast) {
  ExpectCastWeights(kt::Float16TensorInt32("W16", {4, 3, 3, 3}, kt::RandomFloats(108, 7)), 1e-3f);
}
TEST(OnnxLoader, WeightsBFloat16RawThroughCast) {
  ExpectCastWeights(kt::BFloat16TensorRaw("W16", {4, 3, 3, 3}, kt::RandomFloats(108, 7)), 8e-3f);
}

TEST(OnnxLoader, Float16AndBFloat16DecodeSameValuesWithinRounding) {
  const auto values = kt::RandomFloats(108, 7);
  std::vector<std::vector<float>> decoded;
  for (const auto& t : {kt::Float16TensorRaw("W16", {4, 3, 3, 3}, values),
                        kt::Float16TensorInt32("W16", {4, 3, 3, 3}, values),
                        kt::BFloat16TensorRaw("W16", {4, 3, 3, 3}, values)}) {
    OnnxModelBuilder b;
    b.Input("x", TensorProto::FLOAT, {1, 3, 8, 8});
    b.Initializer(t);
    auto& cast = b.Node("Cast", {"W16"}, {"W"}, "cast");
    kt::SetInt(cast, "to", TensorProto::FLOAT);
    b.Node("Conv", {"x", "W"}, {"y"}, "conv");
    b.Output("y");
    auto m = Load(b);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    auto f = (*m)->graph().FindTensor("W16")->constant->floats();
    decoded.emplace_back(f.begin(), f.end());
  }
  // FLOAT16 raw and FLOAT16 in int32_data are bit-identical; BFLOAT16 is within its rounding.
  EXPECT_EQ(decoded[0], decoded[1]);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_NEAR(decoded[0][i], decoded[2][i], 8e-3f);
}


// Integer and double initializers from raw_data (little-endian) and from the typed fields.
TEST(OnnxLoader, IntegerAndDoubleTensorsDecode) {
  struct Case {
    int32_t type;
    std::string raw;
    std::vector<int64_t> ints;
    std::vector<float> floats;
  };
  auto le = [](auto... v) {
    std::string out;
    (
        [&](auto x) {
          char b[sizeof(x)];
          std::memcpy(b, &x, sizeof(x));
          out.append(b, sizeof(x));
        }(v),
        ...);
    return out;
  };
  const std::vector<Case> cases = {
      {TensorProto::INT8, le(int8_t{-128}, int8_t{5}), {-128, 5}, {-128.0f, 5.0f}},
      {TensorProto::UINT8, le(uint8_t{255}, uint8_t{0}), {255, 0}, {255.0f, 0.0f}},
      {TensorProto::INT32, le(int32_t{-70000}, int32_t{3}), {-70000, 3}, {-70000.0f, 3.0f}},
      {TensorProto::INT64, le(int64_t{-5}, int64_t{1} << 40), {-5, int64_t{1} << 40}, {-5.0f, 1099511627776.0f}},
      {TensorProto::DOUBLE, le(0.25, -1.5), {}, {0.25f, -1.5f}},
  };
  for (const Case& c : cases) {
    for (bool raw : {true, false}) {
      SCOPED_TRACE(std::to_string(c.type) + (raw ? " raw" : " typed"));
      onnx::TensorProto t;
      t.set_name("k");
      t.set_data_type(c.type);
      t.add_dims(2);
      if (raw) {
        t.set_raw_data(c.raw);
      } else if (c.type == TensorProto::INT64) {
        for (int64_t v : c.ints) t.add_int64_data(v);
      } else if (c.type == TensorProto::DOUBLE) {
        for (float v : c.floats) t.add_double_data(v);
      } else {
        for (int64_t v : c.ints) t.add_int32_data(static_cast<int32_t>(v));
      }
      OnnxModelBuilder b;
      b.Initializer(t);
      auto& cast = b.Node("Cast", {"k"}, {"y"}, "cast");
      kt::SetInt(cast, "to", TensorProto::FLOAT);
      b.Output("y");
      auto m = Load(b);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      const ConstantData* k = (*m)->graph().ConstantInput((*m)->graph().nodes()[0], 0);
      ASSERT_NE(k, nullptr);
      EXPECT_EQ(k->original_type(), static_cast<DataType>(c.type));
      EXPECT_EQ(std::vector<float>(k->floats().begin(), k->floats().end()), c.floats);
      EXPECT_EQ(k->ints(), c.ints);
      EXPECT_EQ(k->is_integer(), c.type != TensorProto::DOUBLE);
      EXPECT_EQ(StaticShape((*m)->graph(), "y"), (std::vector<int64_t>{2}));
    }
  }
}

TEST(OnnxLoader, StringTensorIsFailedPrecondition) {
  OnnxModelBuilder b;
  onnx::TensorProto t;
  t.set_name("s");
  t.set_data_type(TensorProto::STRING);
  t.add_dims(1);
  t.add_string_data("hello");
  b.Initializer(t);
  b.Node("Identity", {"s"}, {"y"}, "id");
  b.Output("y", TensorProto::STRING);
  LoadError err;
  auto m = Load(b, &err);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(err.tensor, "s");
}

// The size check happens before a single byte is read, so a 2 GiB+ mapping that is never touched
// (MAP_NORESERVE) is enough to prove the error.
TEST(OnnxLoader, ModelOf2GiBOrMoreIsAClearError) {
  const size_t size = (size_t{2} << 30) + 4096;
  void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  LoadOptions opt;
  opt.limits.max_model_bytes = size_t{4} << 30;
  auto m = LoadModel(std::string_view(static_cast<const char*>(p), size), opt);
  munmap(p, size);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(m.status().message().find("2 GiB"), std::string::npos) << m.status().message();
}

TEST(OnnxLoader, IrVersionNewerThanOnnx112IsFailedPrecondition) {
  OnnxModelBuilder b(13, /*ir_version=*/9);
  b.Input("x", TensorProto::FLOAT, {2});
  b.Node("Relu", {"x"}, {"y"}, "r");
  b.Output("y");
  auto m = Load(b);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(m.status().message().find("IR version 9"), std::string::npos) << m.status().message();
}

TEST(OnnxLoader, FloatWeightsFourBytesShort) {
  OnnxModelBuilder b;
  b.Input("x", TensorProto::FLOAT, {1, 3, 8, 8});
  auto w = kt::FloatTensorRaw("W", {4, 3, 3, 3}, kt::RandomFloats(108, 1));
  w.mutable_raw_data()->resize(w.raw_data().size() - 4);
  b.Initializer(w);
  b.Node("Conv", {"x", "W"}, {"y"}, "conv");
  b.Output("y");
  LoadError err;
  auto m = Load(b, &err);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err.tensor, "W");
  EXPECT_NE(m.status().message().find("428 bytes"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("432"), std::string::npos) << m.status().message();
}

TEST(OnnxLoader, TypedFieldCountMismatch) {
  OnnxModelBuilder b;
  b.Input("x", TensorProto::FLOAT, {1, 3, 8, 8});
  b.Initializer(kt::FloatTensorTyped("W", {4, 3, 3, 3}, kt::RandomFloats(107, 1)));
  b.Node("Conv", {"x", "W"}, {"y"}, "conv");
  b.Output("y");
  LoadError err;
  auto m = Load(b, &err);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(err.tensor, "W");
}

void ExpectExternalRejected(const std::string& location) {
  OnnxModelBuilder b;
  b.Input("x", TensorProto::FLOAT, {1, 3, 8, 8});
  onnx::TensorProto w;
  w.set_name("W");
  w.set_data_type(TensorProto::FLOAT);
  for (int64_t d : {4, 3, 3, 3}) w.add_dims(d);
  w.set_data_location(TensorProto::EXTERNAL);
  auto* e = w.add_external_data();
  e->set_key("location");
  e->set_value(location);
  b.Initializer(w);
  b.Node("Conv", {"x", "W"}, {"y"}, "conv");
  b.Output("y");
  LoadError err;
  auto m = Load(b, &err);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(err.tensor, "W");
  EXPECT_NE(m.status().message().find("external data"), std::string::npos) << m.status().message();
}

TEST(OnnxLoader, ExternalDataRelativePathRejected) { ExpectExternalRejected("../../etc/hostname"); }
TEST(OnnxLoader, ExternalDataAbsolutePathRejected) { ExpectExternalRejected("/etc/hostname"); }

TEST(OnnxLoader, ClipOpset6AttributesVsOpset13Inputs) {
  {
    OnnxModelBuilder b(6);
    b.Input("x", TensorProto::FLOAT, {1, 4});
    auto& clip = b.Node("Clip", {"x"}, {"y"}, "clip6");
    kt::SetFloat(clip, "min", 0.0f);
    kt::SetFloat(clip, "max", 6.0f);
    b.Output("y");
    auto m = Load(b);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const Node& n = (*m)->graph().nodes()[0];
    EXPECT_EQ(n.opset_version, 6);
    EXPECT_EQ(*n.GetFloat("min"), 0.0f);
    EXPECT_EQ(*n.GetFloat("max"), 6.0f);
    EXPECT_EQ(StaticShape((*m)->graph(), "y"), (std::vector<int64_t>{1, 4}));
  }
  {
    OnnxModelBuilder b(13);
    b.Input("x", TensorProto::FLOAT, {1, 4});
    b.Initializer(kt::FloatTensorRaw("hi", {}, {6.0f}));
    b.Node("Clip", {"x", "", "hi"}, {"y"}, "clip13");
    b.Output("y");
    auto m = Load(b);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const Graph& g = (*m)->graph();
    const Node& n = g.nodes()[0];
    EXPECT_FALSE(n.has_input(1));
    EXPECT_EQ(n.inputs[1], "");
    EXPECT_EQ(g.ConstantInput(n, 1), nullptr);
    ASSERT_NE(g.ConstantInput(n, 2), nullptr);
    EXPECT_EQ(g.ConstantInput(n, 2)->floats()[0], 6.0f);
    EXPECT_EQ(n.FindAttribute("min"), nullptr);
  }
}

TEST(OnnxLoader, DropoutOpset13IsTransparent) {
  auto b = ConvModel(13);
  b.Node("Conv", {"x", "W", "B"}, {"c"}, "conv");
  b.Initializer(kt::FloatTensorRaw("ratio", {}, {0.5f}));
  b.Node("Dropout", {"c", "ratio"}, {"d", "mask"}, "drop");
  b.Node("Relu", {"d"}, {"y"}, "relu");
  b.Output("y");
  auto m = Load(b);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Graph& g = (*m)->graph();
  ASSERT_EQ(g.nodes().size(), 2u);
  EXPECT_EQ(g.nodes()[1].op_type, "Relu");
  EXPECT_EQ(g.nodes()[1].inputs[0], "c");
  EXPECT_EQ(g.ResolveAlias("d"), "c");
  EXPECT_EQ(*g.Producer("d"), 0u);
  EXPECT_EQ(StaticShape(g, "y"), (std::vector<int64_t>{1, 4, 6, 6}));
}

// Inference-mode Dropout with its mask read is deterministic (mask all true, onnx Dropout-13):
// the node stays, for its host kernel to write the mask; so does a training-mode one with ratio 0.
TEST(OnnxLoader, DropoutWithItsMaskReadStaysANode) {
  auto b = ConvModel(13);
  b.Node("Conv", {"x", "W", "B"}, {"c"}, "conv");
  b.Node("Dropout", {"c"}, {"d", "mask"}, "drop");
  b.Output("d");
  b.Output("mask", TensorProto::BOOL);
  auto m = Load(b);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ((*m)->graph().nodes().size(), 2u);
  EXPECT_EQ((*m)->graph().nodes()[1].op_type, "Dropout");

  auto t = ConvModel(13);
  t.Node("Conv", {"x", "W", "B"}, {"c"}, "conv");
  t.Initializer(kt::BoolTensor("train", {}, {true}));
  t.FloatInitializer("ratio", {}, {0.0f});
  t.Node("Dropout", {"c", "ratio", "train"}, {"d"}, "drop");
  t.Output("d");
  auto mt = Load(t);
  ASSERT_TRUE(mt.ok()) << mt.status().ToString();
  EXPECT_EQ((*mt)->graph().nodes().size(), 2u);
}

TEST(OnnxLoader, DropoutTrainingModeTrueIsAnError) {
  auto b = ConvModel(13);
  b.Node("Conv", {"x", "W", "B"}, {"c"}, "conv");
  b.Initializer(kt::BoolTensor("train", {}, {true}));
  b.Node("Dropout", {"c", "", "train"}, {"d"}, "drop");
  b.Output("d");
  auto m = Load(b);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition);
}

// Dropout is removed while the IR is built (compiler/onnx/load_build.cc), after shape inference:
// its errors report kBuild, and a model that also fails inference reports the inference error.
TEST(OnnxLoader, DropoutErrorsComeFromTheBuildStage) {
  auto b = ConvModel(13);
  b.Node("Conv", {"x", "W", "B"}, {"c"}, "conv");
  b.Initializer(kt::BoolTensor("train", {}, {true}));
  b.Node("Dropout", {"c", "", "train"}, {"d"}, "drop");
  b.Output("d");
  LoadError err;
  ASSERT_FALSE(Load(b, &err).ok());
  EXPECT_EQ(err.stage, LoadStage::kBuild);
  EXPECT_EQ(err.node, "drop");
  EXPECT_EQ(err.tensor, "train");

  OnnxModelBuilder b2;
  b2.Input("x", TensorProto::FLOAT, {1, 3});
  b2.FloatInitializer("W", {4, 3, 3, 3}, kt::RandomFloats(108, 1));
  b2.Node("Conv", {"x", "W"}, {"c"}, "conv");  // ranks differ: inference fails
  b2.Initializer(kt::BoolTensor("train", {}, {true}));
  b2.Node("Dropout", {"c", "", "train"}, {"d"}, "drop");
  b2.Output("d");
  LoadError err2;
  ASSERT_FALSE(Load(b2, &err2).ok());
  EXPECT_EQ(err2.stage, LoadStage::kShapeInference);
  EXPECT_EQ(err2.node, "conv");
}

TEST(OnnxLoader, IdentityAndBatchNormChain) {
  auto b = ConvModel(13);
  b.Node("Conv", {"x", "W", "B"}, {"c"}, "conv");
  b.Node("Identity", {"c"}, {"i1"}, "id1");
  for (const char* p : {"scale", "bias", "mean", "var"}) b.FloatInitializer(p, {4}, {1.0f, 1.0f, 1.0f, 1.0f});
  b.Node("BatchNormalization", {"i1", "scale", "bias", "mean", "var"}, {"bn"}, "bn");
  b.Node("Identity", {"bn"}, {"i2"}, "id2");
  b.Node("Relu", {"i2"}, {"y"}, "relu");
  b.Node("Identity", {"y"}, {"out"}, "id3");
  b.Output("out");
  auto m = Load(b);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Graph& g = (*m)->graph();
  ASSERT_EQ(g.nodes().size(), 3u);
  EXPECT_EQ(g.nodes()[0].op_type, "Conv");
  EXPECT_EQ(g.nodes()[1].op_type, "BatchNormalization");
  EXPECT_EQ(g.nodes()[1].inputs[0], "c");
  EXPECT_EQ(g.nodes()[2].op_type, "Relu");
  EXPECT_EQ(g.nodes()[2].inputs[0], "bn");
  // BatchNormalization's epsilon/momentum come from the schema.
  EXPECT_FLOAT_EQ(*g.nodes()[1].GetFloat("epsilon"), 1e-5f);
  EXPECT_TRUE(g.nodes()[1].FindAttribute("epsilon")->from_default);
  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(g.outputs()[0].name, "out");
  EXPECT_EQ(g.outputs()[0].tensor, "y");
  EXPECT_TRUE(g.IsGraphOutput("y"));
  EXPECT_EQ(g.FindTensor("out"), g.FindTensor("y"));
  EXPECT_EQ(StaticShape(g, "out"), (std::vector<int64_t>{1, 4, 6, 6}));
  ASSERT_EQ(g.Consumers("c").size(), 1u);
  EXPECT_EQ(g.Consumers("c")[0], 1u);
}

TEST(OnnxLoader, ConstantNodeFormsBecomeConstants) {
  OnnxModelBuilder b(13);
  b.Input("x", TensorProto::FLOAT, {2, 3});
  auto& c1 = b.Node("Constant", {}, {"k_tensor"}, "c1");
  kt::SetTensor(c1, "value", kt::FloatTensorRaw("", {3}, {1.0f, 2.0f, 3.0f}));
  auto& c2 = b.Node("Constant", {}, {"k_float"}, "c2");
  kt::SetFloat(c2, "value_float", 0.5f);
  auto& c3 = b.Node("Constant", {}, {"k_floats"}, "c3");
  kt::SetFloats(c3, "value_floats", {1.0f, 1.0f, 1.0f});
  auto& c4 = b.Node("Constant", {}, {"k_ints"}, "c4");
  kt::SetInts(c4, "value_ints", {3, 2});
  auto& c5 = b.Node("Constant", {}, {"k_int"}, "c5");
  kt::SetInt(c5, "value_int", 7);
  b.Node("Add", {"x", "k_tensor"}, {"a"}, "add");
  b.Node("Mul", {"a", "k_float"}, {"m"}, "mul");
  b.Node("Sub", {"m", "k_floats"}, {"s"}, "sub");
  b.Node("Reshape", {"s", "k_ints"}, {"r"}, "reshape");
  b.Output("r");
  b.Output("k_int", TensorProto::INT64);
  auto m = Load(b);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Graph& g = (*m)->graph();
  EXPECT_EQ(g.nodes().size(), 4u);
  EXPECT_EQ(FindNode(g, "Constant"), nullptr);
  EXPECT_EQ(StaticShape(g, "r"), (std::vector<int64_t>{3, 2}));
  const ConstantData* shape = g.ConstantInput(*FindNode(g, "Reshape"), 1);
  ASSERT_NE(shape, nullptr);
  EXPECT_TRUE(shape->is_integer());
  EXPECT_EQ(shape->ints(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(g.FindTensor("k_float")->constant->floats()[0], 0.5f);
  EXPECT_EQ(g.FindTensor("k_float")->shape.rank(), 0u);
  EXPECT_TRUE(g.FindTensor("k_float")->shape.has_rank());
  EXPECT_EQ(g.FindTensor("k_int")->constant->ints(), (std::vector<int64_t>{7}));
  EXPECT_EQ(g.FindTensor("k_tensor")->constant->floats()[2], 3.0f);
}

// Constant(value) nodes are hoisted to initializers before validation and inference (a third of
// a QAT export's nodes); at IR 3, where initializers must be graph inputs, they stay nodes. Either
// way the IR is the same: constant tensors, no Constant nodes, not in initializer_order().
TEST(OnnxLoader, ValueConstantsLoadTheSameAtEveryIrVersion) {
  for (int64_t ir : {3, 8}) {
    OnnxModelBuilder b(8, ir);
    b.Input("x", TensorProto::FLOAT, {2, 3});
    b.FloatInitializer("w", {3}, {2.0f, 3.0f, 4.0f}, /*list_as_input=*/true);
    auto& k = b.Node("Constant", {}, {"k"}, "k_node");
    kt::SetTensor(k, "value", kt::FloatTensorRaw("", {3}, {1.0f, 2.0f, 3.0f}));
    auto& shape = b.Node("Constant", {}, {"shape"}, "shape_node");
    kt::SetTensor(shape, "value", kt::Int64Tensor("", {2}, {3, 2}));
    b.Node("Add", {"x", "k"}, {"a"}, "add");
    b.Node("Mul", {"a", "w"}, {"m"}, "mul");
    b.Node("Reshape", {"m", "shape"}, {"r"}, "Constant_0");  // a name generated names must avoid
    b.Node("Relu", {"r"}, {"y"});                            // unnamed: gets a generated name
    b.Output("y");
    b.Output("k");  // a graph output read from a Constant (declared, so not hoisted)
    auto m = Load(b);
    ASSERT_TRUE(m.ok()) << "ir " << ir << ": " << m.status().ToString();
    const Graph& g = (*m)->graph();
    ASSERT_EQ(g.nodes().size(), 4u) << ir;
    EXPECT_EQ(FindNode(g, "Constant"), nullptr);
    EXPECT_EQ(g.initializer_order(), (std::vector<std::string>{"w"})) << ir;
    ASSERT_NE(g.ConstantInput(g.nodes()[0], 1), nullptr) << ir;
    EXPECT_EQ(g.ConstantInput(g.nodes()[0], 1)->floats()[1], 2.0f);
    EXPECT_EQ(g.FindTensor("shape")->constant->ints(), (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(StaticShape(g, "r"), (std::vector<int64_t>{3, 2})) << ir;  // inference read the constant
    EXPECT_EQ(StaticShape(g, "k"), (std::vector<int64_t>{3})) << ir;
    EXPECT_EQ(g.nodes()[2].name, "Constant_0");
    for (const Node& n : g.nodes()) {
      EXPECT_NE(n.name, "k_node");
      EXPECT_NE(n.name, "shape_node");
    }
    EXPECT_EQ(g.outputs().size(), 2u);
  }
}

// Where a hoisted initializer would not load exactly like the Constant node, the node stays: an If
// branch output read from a Constant and declared without a type (onnx 1.12 types subgraph outputs
// only from node inference), an untyped main-graph output, and a value_info declaring a weaker type
// (a declared type overrides an initializer's own, but is merged with a node's inferred one).
TEST(OnnxLoader, ConstantsKeepTheirInferredTypesWhereverDeclared) {
  {
    OnnxModelBuilder b;
    b.Input("x", TensorProto::FLOAT, {1, 3});
    b.Input("cond", TensorProto::BOOL, {});
    onnx::GraphProto then_g;
    then_g.set_name("then");
    auto* c = then_g.add_node();
    c->set_op_type("Constant");
    c->set_name("then_const");
    c->add_output("t");
    kt::SetTensor(*c, "value", kt::FloatTensorRaw("", {1, 3}, {1.0f, 2.0f, 3.0f}));
    then_g.add_output()->set_name("t");  // declared by name only
    onnx::GraphProto else_g;
    else_g.set_name("else");
    auto* r = else_g.add_node();
    r->set_op_type("Relu");
    r->add_input("x");
    r->add_output("e");
    else_g.add_output()->set_name("e");
    auto& n = b.Node("If", {"cond"}, {"r"}, "if");
    kt::SetGraph(n, "then_branch", then_g);
    kt::SetGraph(n, "else_branch", else_g);
    b.Node("Add", {"x", "r"}, {"y"}, "add");
    b.Output("y");
    auto m = Load(b);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(StaticShape((*m)->graph(), "y"), (std::vector<int64_t>{1, 3}));
  }
  for (bool value_info : {false, true}) {
    OnnxModelBuilder b;
    b.Input("x", TensorProto::FLOAT, {2, 3});
    auto& k = b.Node("Constant", {}, {"k"}, "k_node");
    kt::SetTensor(k, "value", kt::FloatTensorRaw("", {3}, {1.0f, 2.0f, 3.0f}));
    b.Node("Add", {"x", "k"}, {"a"}, "add");
    b.Node("Relu", {"a"}, {"y"}, "relu");
    b.Output("y");
    if (value_info) {
      auto* vi = b.graph().add_value_info();  // k declared FLOAT, shape unknown
      vi->set_name("k");
      vi->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::FLOAT);
    } else {
      b.graph().add_output()->set_name("k");  // an untyped graph output
    }
    auto m = Load(b);
    ASSERT_TRUE(m.ok()) << value_info << ": " << m.status().ToString();
    EXPECT_EQ(StaticShape((*m)->graph(), "k"), (std::vector<int64_t>{3})) << value_info;
    EXPECT_EQ(StaticShape((*m)->graph(), "y"), (std::vector<int64_t>{2, 3})) << value_info;
  }
}

// A Constant must not become an initializer that gives a graph input a default value or that
// silently wins over another definition: every redefinition stays an SSA error naming the node.
TEST(OnnxLoader, ConstantRedefiningANameIsStillAnError) {
  enum Clash { kInput, kInitializer, kConstant, kNodeOutput };
  for (Clash clash : {kInput, kInitializer, kConstant, kNodeOutput}) {
    OnnxModelBuilder b;
    b.Input("x", TensorProto::FLOAT, {3});
    b.FloatInitializer("w", {3}, {1.0f, 2.0f, 3.0f});
    const std::string name = clash == kInput ? "x" : clash == kInitializer ? "w" : "k";
    auto& k = b.Node("Constant", {}, {name}, "k_node");
    kt::SetTensor(k, "value", kt::FloatTensorRaw("", {3}, {1.0f, 1.0f, 1.0f}));
    if (clash == kConstant) {
      auto& k2 = b.Node("Constant", {}, {"k"}, "k2_node");
      kt::SetTensor(k2, "value", kt::FloatTensorRaw("", {3}, {2.0f, 2.0f, 2.0f}));
    }
    if (clash == kNodeOutput) b.Node("Relu", {"x"}, {"k"}, "relu");
    b.Node("Add", {"x", name}, {"y"}, "add");
    b.Output("y");
    LoadError err;
    auto m = Load(b, &err);
    ASSERT_FALSE(m.ok()) << clash;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << clash;
    EXPECT_NE(m.status().message().find("already defined"), std::string::npos) << clash << ": " << m.status().ToString();
    EXPECT_EQ(err.tensor, name) << clash;
  }
}

TEST(OnnxLoader, BadConstantPayloadNamesTheNode) {
  OnnxModelBuilder b;
  b.Input("x", TensorProto::FLOAT, {3});
  auto& k = b.Node("Constant", {}, {"k"}, "k_node");
  TensorProto t = kt::FloatTensorRaw("", {3}, {1.0f, 2.0f, 3.0f});
  t.mutable_raw_data()->resize(8);  // 2 floats for 3 elements
  kt::SetTensor(k, "value", t);
  b.Node("Add", {"x", "k"}, {"y"}, "add");
  b.Output("y");
  LoadError err;
  auto m = Load(b, &err);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << m.status().ToString();
  EXPECT_EQ(err.node, "k_node");
  EXPECT_EQ(err.attribute, "value");
  EXPECT_EQ(err.tensor, "k");
}

TEST(OnnxLoader, InitializerListedOrNotListedInGraphInput) {
  for (bool listed : {false, true}) {
    OnnxModelBuilder b;
    b.Input("x", TensorProto::FLOAT, {1, 3, 8, 8});
    b.FloatInitializer("W", {4, 3, 3, 3}, kt::RandomFloats(108, 1), listed);
    b.Node("Conv", {"x", "W"}, {"y"}, "conv");
    b.Output("y");
    auto m = Load(b);
    ASSERT_TRUE(m.ok()) << listed << ": " << m.status().ToString();
    EXPECT_EQ((*m)->graph().inputs(), (std::vector<std::string>{"x"}));
    EXPECT_TRUE((*m)->graph().FindTensor("W")->is_constant());
    EXPECT_EQ(StaticShape((*m)->graph(), "y"), (std::vector<int64_t>{1, 4, 6, 6}));
  }
}

// initializer_order() is the GraphProto.initializer order, not the order in which the nodes
// (topologically) read the tensors: here conv2's weight is listed first although conv1 runs first.
// Constant nodes are constants too, but not initializers; the order survives BindSymbols.
TEST(OnnxLoader, InitializerOrderIsModelOrderNotUseOrder) {
  OnnxModelBuilder b;
  b.Input("x", TensorProto::FLOAT, {"N", 3, 8, 8});
  b.FloatInitializer("conv2.weight", {4, 4, 3, 3}, kt::RandomFloats(144, 2));
  b.FloatInitializer("conv2.bias", {4}, kt::RandomFloats(4, 3));
  b.FloatInitializer("conv1.weight", {4, 3, 3, 3}, kt::RandomFloats(108, 1), /*list_as_input=*/true);
  auto& k = b.Node("Constant", {}, {"shift"}, "k");
  kt::SetFloat(k, "value_float", 0.5f);
  b.Node("Conv", {"x", "conv1.weight"}, {"y1"}, "/conv1/Conv");
  b.Node("Mul", {"y1", "shift"}, {"y1s"}, "/conv1/Mul");
  b.Node("Conv", {"y1s", "conv2.weight", "conv2.bias"}, {"y2"}, "/conv2/Conv");
  b.Output("y2");
  auto m = Load(b);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Graph& g = (*m)->graph();
  const std::vector<std::string> want{"conv2.weight", "conv2.bias", "conv1.weight"};
  EXPECT_EQ(g.initializer_order(), want);
  ASSERT_EQ(g.nodes().size(), 3u);
  EXPECT_EQ(g.nodes()[0].inputs[1], "conv1.weight");  // nodes stay in topological order
  EXPECT_EQ(g.nodes()[2].inputs[1], "conv2.weight");
  for (const std::string& name : g.initializer_order()) {
    ASSERT_NE(g.FindTensor(name), nullptr) << name;
    EXPECT_TRUE(g.FindTensor(name)->is_constant()) << name;
  }
  EXPECT_TRUE(g.FindTensor("shift")->is_constant());
  auto bound = (*m)->BindSymbols({{"N", 1}});
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  EXPECT_EQ((*bound)->graph().initializer_order(), want);

  // No initializers at all: empty.
  OnnxModelBuilder e;
  e.Input("x", TensorProto::FLOAT, {1, 4});
  e.Node("Relu", {"x"}, {"y"}, "relu");
  e.Output("y");
  auto me = Load(e);
  ASSERT_TRUE(me.ok()) << me.status().ToString();
  EXPECT_TRUE((*me)->graph().initializer_order().empty());
}

TEST(OnnxLoader, SymbolicBatchStaysSymbolAndCanBeBound) {
  OnnxModelBuilder b;
  b.Input("x", TensorProto::FLOAT, {"N", 3, 8, 8});
  b.FloatInitializer("W", {4, 3, 3, 3}, kt::RandomFloats(108, 1));
  b.Node("Conv", {"x", "W"}, {"y"}, "conv");
  b.Node("Relu", {"y"}, {"z"}, "relu");
  b.Output("z");
  auto m = Load(b);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Tensor* z = (*m)->graph().FindTensor("z");
  ASSERT_NE(z, nullptr);
  ASSERT_EQ(z->shape.rank(), 4u);
  EXPECT_TRUE(z->shape.dim(0).is_symbol());
  EXPECT_EQ(z->shape.dim(0).symbol(), "N");
  EXPECT_EQ(z->shape.ToString(), "[N,4,6,6]");
  EXPECT_EQ((*m)->Symbols(), (std::vector<std::string>{"N"}));
  EXPECT_FALSE((*m)->graph().StaticOutputShape((*m)->graph().nodes()[0], 0).ok());

  auto bound = (*m)->BindSymbols({{"N", 2}});
  ASSERT_TRUE(bound.ok());
  EXPECT_EQ(StaticShape((*bound)->graph(), "z"), (std::vector<int64_t>{2, 4, 6, 6}));
  EXPECT_TRUE((*m)->graph().FindTensor("z")->shape.dim(0).is_symbol());  // original untouched
  EXPECT_FALSE((*m)->BindSymbols({{"N", -1}}).ok());

  LoadOptions opt;
  opt.bind_symbols = {{"N", 5}};
  auto m5 = Load(b, nullptr, opt);
  ASSERT_TRUE(m5.ok()) << m5.status().ToString();
  EXPECT_EQ(StaticShape((*m5)->graph(), "z"), (std::vector<int64_t>{5, 4, 6, 6}));
  EXPECT_TRUE((*m5)->Symbols().empty());
}

// MaxPool 2x2 stride 2 pad 1 ceil_mode on 5x5: onnx 1.12 says 4, PR #5741 / PyTorch say 3.
OnnxModelBuilder CeilPool(const std::string& op, bool stale_value_info) {
  OnnxModelBuilder b(13);
  b.Input("x", TensorProto::FLOAT, {1, 1, 5, 5});
  auto& p = b.Node(op, {"x"}, {"p"}, "pool");
  kt::SetInts(p, "kernel_shape", {2, 2});
  kt::SetInts(p, "strides", {2, 2});
  kt::SetInts(p, "pads", {1, 1, 1, 1});
  kt::SetInt(p, "ceil_mode", 1);
  b.Node("Relu", {"p"}, {"y"}, "relu");
  if (stale_value_info) {
    b.ValueInfo("p", TensorProto::FLOAT, {1, 1, 4, 4});
    b.Output("y", TensorProto::FLOAT, {1, 1, 4, 4});
  } else {
    b.Output("y");
  }
  return b;
}

TEST(OnnxLoader, CeilModePoolUsesCorrectedRule) {
  for (const char* op : {"MaxPool", "AveragePool"}) {
    auto m = Load(CeilPool(op, false));
    ASSERT_TRUE(m.ok()) << op << ": " << m.status().ToString();
    EXPECT_EQ(StaticShape((*m)->graph(), "p"), (std::vector<int64_t>{1, 1, 3, 3})) << op;
    EXPECT_EQ(StaticShape((*m)->graph(), "y"), (std::vector<int64_t>{1, 1, 3, 3})) << op;
  }
}

TEST(OnnxLoader, CeilModeStaleDeclaredShapeDoesNotFailTheModel) {
  auto m = Load(CeilPool("MaxPool", true));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(StaticShape((*m)->graph(), "y"), (std::vector<int64_t>{1, 1, 3, 3}));
  EXPECT_FALSE((*m)->warnings().empty());
}

TEST(OnnxLoader, OpsetsOutsideSixToSeventeenAreRejected) {
  for (int64_t opset : {5, 18}) {
    OnnxModelBuilder b(opset);
    b.Input("x", TensorProto::FLOAT, {2});
    b.Node("Relu", {"x"}, {"y"}, "r");
    b.Output("y");
    auto m = Load(b);
    ASSERT_FALSE(m.ok()) << opset;
    EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(m.status().message().find("opset " + std::to_string(opset)), std::string::npos);
  }
  for (int64_t opset : {6, 11, 17}) {
    OnnxModelBuilder b(opset);
    b.Input("x", TensorProto::FLOAT, {2});
    b.Node("Relu", {"x"}, {"y"}, "r");
    b.Output("y");
    EXPECT_TRUE(Load(b).ok()) << opset;
  }
}

TEST(OnnxLoader, CustomZeroOutputNodeInsideSubgraphIsAnError) {
  OnnxModelBuilder b(13);
  b.Import("com.example", 1);
  b.Input("x", TensorProto::FLOAT, {2});
  b.Input("cond", TensorProto::BOOL, {});
  onnx::GraphProto then_g;
  then_g.set_name("then");
  auto* custom = then_g.add_node();
  custom->set_op_type("Sink");
  custom->set_domain("com.example");
  custom->add_input("x");
  auto* relu = then_g.add_node();
  relu->set_op_type("Relu");
  relu->add_input("x");
  relu->add_output("t");
  auto* o = then_g.add_output();
  o->set_name("t");
  o->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::FLOAT);
  onnx::GraphProto else_g = then_g;
  else_g.mutable_node()->DeleteSubrange(0, 1);
  auto& n = b.Node("If", {"cond"}, {"y"}, "if");
  kt::SetGraph(n, "then_branch", then_g);
  kt::SetGraph(n, "else_branch", else_g);
  b.Output("y");
  LoadError err;
  auto m = Load(b, &err);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err.op_type, "Sink");
}

TEST(OnnxLoader, CustomOperatorIsFailedPrecondition) {
  OnnxModelBuilder b(13);
  b.Import("com.example", 1);
  b.Input("x", TensorProto::FLOAT, {2});
  b.Node("Frobnicate", {"x"}, {"y"}, "f", "com.example");
  b.Output("y");
  LoadError err;
  auto m = Load(b, &err);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(err.op_type, "Frobnicate");
}

TEST(OnnxLoader, ZeroStrideIsRejectedBeforeInference) {
  auto b = ConvModel();
  auto& c = b.Node("Conv", {"x", "W", "B"}, {"y"}, "conv");
  kt::SetInts(c, "strides", {0, 1});
  b.Output("y");
  LoadError err;
  auto m = Load(b, &err);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err.attribute, "strides");
}

// Found by the fuzzer (tests/fuzz/corpus/conv_input_rank2_weight_rank4): onnx 1.12's Conv
// inference reads dilations[i] out of bounds when X and W ranks differ.
TEST(OnnxLoader, ConvInputRankDifferentFromWeightRankIsAnError) {
  OnnxModelBuilder b;
  b.Input("x", TensorProto::FLOAT, {1, 3});
  b.FloatInitializer("W", {4, 3, 3, 3}, kt::RandomFloats(108, 1));
  b.Node("Conv", {"x", "W"}, {"y"}, "conv");
  b.Output("y");
  LoadError err;
  auto m = Load(b, &err);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err.stage, LoadStage::kShapeInference);
  EXPECT_EQ(err.node, "conv");
  EXPECT_NE(err.message.find("rank"), std::string::npos) << err.message;

  OnnxModelBuilder b2;
  b2.Input("x", TensorProto::FLOAT, {1, 3, 8, 8, 8});
  b2.FloatInitializer("W", {4, 3, 3, 3}, kt::RandomFloats(108, 1));
  b2.Node("Conv", {"x", "W"}, {"y"}, "conv3d");
  b2.Output("y");
  auto m2 = Load(b2, &err);
  ASSERT_FALSE(m2.ok());
  EXPECT_EQ(err.node, "conv3d");
}

TEST(OnnxLoader, PoolAttributeLengthMismatchIsAnError) {
  OnnxModelBuilder b;
  b.Input("x", TensorProto::FLOAT, {1, 1, 5, 5});
  auto& p = b.Node("MaxPool", {"x"}, {"y"}, "pool");
  kt::SetInts(p, "kernel_shape", {2, 2});
  kt::SetInts(p, "pads", {1, 1});
  b.Output("y");
  LoadError err;
  auto m = Load(b, &err);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(err.node, "pool");
  EXPECT_NE(err.message.find("pads"), std::string::npos) << err.message;
}

TEST(OnnxLoader, ShapeInferenceErrorNamesTheNode) {
  OnnxModelBuilder b;
  b.Input("x", TensorProto::FLOAT, {2, 3});
  b.Input("v", TensorProto::FLOAT, {4});
  b.Node("Add", {"x", "v"}, {"y"}, "badadd");  // [2,3] + [4] does not broadcast
  b.Node("Relu", {"y"}, {"z"}, "after");
  b.Output("z");
  LoadError err;
  auto m = Load(b, &err);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err.stage, LoadStage::kShapeInference);
  EXPECT_EQ(err.node, "badadd");
  EXPECT_EQ(err.op_type, "Add");
}

TEST(OnnxLoader, SizeAndTensorByteLimits) {
  auto b = ConvModel();
  b.Node("Conv", {"x", "W", "B"}, {"y"}, "conv1");
  b.Output("y");
  const std::string bytes = b.Serialize();
  LoadOptions opt;
  opt.limits.max_model_bytes = bytes.size() - 1;
  auto m = LoadModel(bytes, opt);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(m.status().message().find("max_model_bytes"), std::string::npos);
  opt = {};
  opt.limits.max_total_tensor_bytes = 108 * 4;  // W fits, W + B does not
  m = LoadModel(bytes, opt);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(m.status().message().find("max_total_tensor_bytes"), std::string::npos);
  opt.limits.max_total_tensor_bytes = 108 * 4 + 16;
  EXPECT_TRUE(LoadModel(bytes, opt).ok());
  // LoaderLimits overload.
  LoaderLimits limits;
  limits.max_total_tensor_bytes = 100;
  LoadError err;
  auto r = LoadModel(bytes, limits, &err);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(err.code, StatusCode::kResourceExhausted);
  EXPECT_EQ(err.stage, LoadStage::kLimits);
}

TEST(OnnxLoader, ErrorStatusCarriesModelName) {
  LoadOptions opt;
  opt.model_name = "upload-42";
  auto m = LoadModel("garbage!", opt);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message().rfind("model 'upload-42': ", 0), 0u) << m.status().message();
}

TEST(OnnxLoader, ModelLocalFunctionsAreRejected) {
  OnnxModelBuilder b;
  b.Input("x", TensorProto::FLOAT, {2});
  b.Node("Relu", {"x"}, {"y"}, "r");
  b.Output("y");
  auto* f = b.model().add_functions();
  f->set_name("F");
  f->set_domain("local");
  auto m = Load(b);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition);
}

TEST(OnnxLoader, ConcurrentLoadsAreIndependent) {
  auto b = ConvModel();
  b.Node("Conv", {"x", "W", "B"}, {"y"}, "conv1");
  b.Output("y");
  const std::string bytes = b.Serialize();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 10; ++k) {
        if (LoadModel(bytes).ok()) ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 40);
}

}  // namespace
}  // namespace kiln::onnx_fe
