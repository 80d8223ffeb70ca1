// One focused test per recognised export pattern and per model-level diagnostic, on small ONNX
// models built in the test (kiln_test_support) and loaded through the real ONNX front end.
#include <bit>
#include <cctype>
#include <set>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "compiler/ai8x/compile.h"
#include "compiler/onnx/loader.h"
#include "tests/support/onnx_model_builder.h"

namespace kiln::ai8x {
namespace {

using kiln::testing::OnnxModelBuilder;
using kiln::testing::SetInt;
using kiln::testing::SetInts;
using kiln::testing::SetString;

// Builds ai8x-style exports: node names carry the module scope (/conv1/Conv), weights are
// `<layer>.op.weight` initializers, optionally behind the QAT weight-quantize chain.
class Export {
 public:
  explicit Export(std::vector<kiln::testing::TestDim> input_dims, int opset = 13) : b_(opset) {
    b_.Input("x", onnx::TensorProto::FLOAT, std::move(input_dims));
  }

  // Weight tensor name to feed the op: plain initializer, or the QAT chain with 2^(bits-1).
  std::string Weight(const std::string& layer, std::vector<int64_t> dims, int qat_bits = 0) {
    size_t n = 1;
    for (int64_t d : dims) n *= static_cast<size_t>(d);
    std::string w = layer + ".op.weight";
    b_.FloatInitializer(w, dims, kiln::testing::RandomFloats(n, seed_++));
    if (qat_bits == 0) return w;
    std::string s = "/" + layer + "/quantize_weight/";
    Const(s + "c", static_cast<float>(1 << (qat_bits - 1)));
    b_.Node("Mul", {w, s + "c"}, {s + "mul"}, s + "Mul");
    b_.Node("Round", {s + "mul"}, {s + "round"}, s + "Round");
    b_.Node("Div", {s + "round", s + "c"}, {s + "div"}, s + "Div");
    return s + "div";
  }

  std::string Conv(const std::string& layer, const std::string& in, int cin, int cout, std::vector<int64_t> k,
                   int pad, int qat_bits = 0, int group = 1, bool bias = false) {
    std::vector<int64_t> wd{cout, cin / group};
    wd.insert(wd.end(), k.begin(), k.end());
    std::string w = Weight(layer, wd, qat_bits);
    std::vector<std::string> ins{in, w};
    if (bias) {
      b_.FloatInitializer(layer + ".op.bias", {cout}, kiln::testing::RandomFloats(cout, seed_++));
      ins.push_back(layer + ".op.bias");
    }
    std::string out = "/" + layer + "/Conv_output_0";
    auto& n = b_.Node("Conv", ins, {out}, "/" + layer + "/Conv");
    SetInts(n, "kernel_shape", k);
    SetInts(n, "pads", std::vector<int64_t>(k.size() * 2, pad));
    SetInt(n, "group", group);
    return out;
  }

  std::string Unary(const std::string& op, const std::string& scope, const std::string& in) {
    std::string out = scope + "/" + op + "_output_0";
    b_.Node(op, {in}, {out}, scope + "/" + op);
    return out;
  }

  std::string Binary(const std::string& op, const std::string& scope, const std::string& a, const std::string& c) {
    std::string out = scope + "/" + op + "_output_0";
    b_.Node(op, {a, c}, {out}, scope + "/" + op);
    return out;
  }

  std::string Pool(const std::string& op, const std::string& scope, const std::string& in, int k, int dims = 2) {
    std::string out = scope + "/" + op + "_output_0";
    auto& n = b_.Node(op, {in}, {out}, scope + "/" + op);
    SetInts(n, "kernel_shape", std::vector<int64_t>(dims, k));
    SetInts(n, "strides", std::vector<int64_t>(dims, k));
    return out;
  }

  // ai8x clamp: Clip(x, lo, none) then Clip(x, none, hi).
  std::string Clamp(const std::string& scope, const std::string& in, float lo, float hi) {
    Const(scope + "/lo", lo);
    Const(scope + "/hi", hi);
    b_.Node("Clip", {in, scope + "/lo", ""}, {scope + "/c0"}, scope + "/Clip");
    b_.Node("Clip", {scope + "/c0", "", scope + "/hi"}, {scope + "/c1"}, scope + "/Clip_1");
    return scope + "/c1";
  }

  void Const(const std::string& name, float v) {
    if (consts_.insert(name).second) b_.FloatInitializer(name, {}, {v});
  }

  OnnxModelBuilder& b() { return b_; }

  Result<Ai8xCompileResult> Compile(const std::string& output, Chip d = Chip::kMAX78000,
                                    std::vector<LayerOverride> overrides = {}) {
    b_.Output(output);
    auto model = onnx_fe::LoadModel(b_.Serialize());
    if (!model.ok()) return model.status();
    Ai8xOptions o;
    o.chip = d;
    o.arch = "test";
    o.dataset = "test";
    o.input_format = InputFormat::kHWC;
    o.overrides = std::move(overrides);
    return CompileAi8x(**model, o);
  }

 private:
  OnnxModelBuilder b_;
  uint32_t seed_ = 1;
  std::set<std::string> consts_;
};

// Layer l2: a 4 -> 4 3x3 ConvTranspose, stride 2, pad 1, output padding 1 (2x upsampling), reading
// `in`; returns its output.
std::string UpsamplingConvTranspose(Export& e, const std::string& in) {
  auto w = e.Weight("l2", {4, 4, 3, 3});
  auto& n = e.b().Node("ConvTranspose", {in, w}, {"/l2/out"}, "/l2/ConvTranspose");
  SetInts(n, "kernel_shape", {3, 3});
  SetInts(n, "strides", {2, 2});
  SetInts(n, "pads", {1, 1, 1, 1});
  SetInts(n, "output_padding", {1, 1});
  return "/l2/out";
}

const Diagnostic* Find(const Ai8xCompileResult& r, const std::string& code) {
  for (const Diagnostic& d : r.diagnostics) {
    if (d.code == code) return &d;
  }
  return nullptr;
}

std::string Dump(const Ai8xCompileResult& r) {
  std::string s = r.yaml;
  for (const Diagnostic& d : r.diagnostics) s += "\n" + d.code + ": " + d.message;
  return s;
}

TEST(Ai8xPatterns, QatWeightBitsFromQuantizeChain) {
  Export e({1, 8, 16, 16});
  auto c1 = e.Conv("conv1", "x", 8, 16, {3, 3}, 1, /*bits=*/4);
  auto r1 = e.Unary("Relu", "/conv1/activate", c1);
  auto c2 = e.Conv("conv2", r1, 16, 16, {3, 3}, 1, /*bits=*/8);
  auto r = e.Compile(c2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  YAML::Node l = YAML::Load(r->yaml)["layers"];
  ASSERT_EQ(l.size(), 2u) << Dump(*r);
  EXPECT_EQ(l[0]["quantization"].as<int>(), 4);
  EXPECT_FALSE(l[1]["quantization"]);  // 8-bit is the default: not written
  EXPECT_EQ(Find(*r, "AI8X_BITS_NOT_DERIVED"), nullptr);
  EXPECT_TRUE(r->needs_quantized_checkpoint);  // izer/onnxcp.py does not follow QAT chains
}

TEST(Ai8xPatterns, PlainWeightsWarnBitsNotDerived) {
  Export e({1, 8, 16, 16});
  auto c1 = e.Conv("conv1", "x", 8, 16, {3, 3}, 1);
  auto cl = e.Clamp("/conv1/clamp", c1, -1.0f, 127.0f / 128);
  auto r = e.Compile(cl);
  ASSERT_TRUE(r.ok());
  const Diagnostic* d = Find(*r, "AI8X_BITS_NOT_DERIVED");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->severity, Severity::kWarning);
  EXPECT_FALSE(r->needs_quantized_checkpoint);  // plain initializers: the .onnx is the checkpoint
}

// izer/onnxcp.py (ab4f4c0) numbers the YAML's layers by the graph's Conv/Gemm nodes and checks
// each weight's kernel against a list with one entry per initializer, biases included
// (compiler/ai8x/onnx_checkpoint.cc): the .onnx can be the checkpoint of a plain chain of 2-D convs
// of one kernel size (with biases), but not after a passthrough layer, with biased convs of two
// kernel sizes, with a Conv1d or with a ConvTranspose; each reason names the layer or node.
TEST(Ai8xPatterns, OnnxCheckpointOnlyWhereTheIzersOnnxReaderNumbersTheLayersRight) {
  {
    Export e({1, 8, 16, 16});
    auto c1 = e.Conv("conv1", "x", 8, 16, {3, 3}, 1, 0, 1, /*bias=*/true);
    auto c2 = e.Conv("conv2", c1, 16, 16, {3, 3}, 1, 0, 1, /*bias=*/true);
    auto r = e.Compile(c2);
    ASSERT_TRUE(r.ok() && r->ok) << (r.ok() ? Dump(*r) : r.status().ToString());
    EXPECT_FALSE(r->needs_quantized_checkpoint) << r->quantized_checkpoint_reason;
    EXPECT_EQ(r->quantized_checkpoint_reason, "");
  }
  {  // a residual add with the input: the gap_input copy is layer 0, before conv1's layer
    Export e({1, 16, 8, 8});
    auto a = e.Conv("conv1", "x", 16, 16, {3, 3}, 1);
    auto z = e.Binary("Add", "/resid", a, "x");
    auto c2 = e.Conv("conv2", z, 16, 16, {3, 3}, 1);
    auto r = e.Compile(c2);
    ASSERT_TRUE(r.ok() && r->ok) << (r.ok() ? Dump(*r) : r.status().ToString());
    EXPECT_TRUE(r->needs_quantized_checkpoint);
    EXPECT_NE(r->quantized_checkpoint_reason.find("a layer without weights"), std::string::npos)
        << r->quantized_checkpoint_reason;
    EXPECT_NE(r->quantized_checkpoint_reason.find("output_shift of Conv/Gemm node number 0 ('/conv1/Conv') to YAML layer 0 ('gap_input'"),
              std::string::npos)
        << r->quantized_checkpoint_reason;
  }
  {  // biased 3x3 then 1x1: the second weight meets the first conv's bias entry
    Export e({1, 8, 16, 16});
    auto c1 = e.Conv("conv1", "x", 8, 16, {3, 3}, 1, 0, 1, /*bias=*/true);
    auto c2 = e.Conv("conv2", c1, 16, 16, {1, 1}, 0, 0, 1, /*bias=*/true);
    auto r = e.Compile(c2);
    ASSERT_TRUE(r.ok() && r->ok) << (r.ok() ? Dump(*r) : r.status().ToString());
    EXPECT_TRUE(r->needs_quantized_checkpoint);
    EXPECT_NE(r->quantized_checkpoint_reason.find("kernel of YAML layer 1 ('conv2'"), std::string::npos)
        << r->quantized_checkpoint_reason;
  }
  {  // the same without biases: one entry per conv, so the list stays aligned
    Export e({1, 8, 16, 16});
    auto c1 = e.Conv("conv1", "x", 8, 16, {3, 3}, 1);
    auto c2 = e.Conv("conv2", c1, 16, 16, {1, 1}, 0);
    auto r = e.Compile(c2);
    ASSERT_TRUE(r.ok() && r->ok) << (r.ok() ? Dump(*r) : r.status().ToString());
    EXPECT_FALSE(r->needs_quantized_checkpoint) << r->quantized_checkpoint_reason;
  }
  {  // Conv1d: its kernel_shape has one value
    Export e({1, 16, 64});
    auto c1 = e.Conv("conv1", "x", 16, 32, {5}, 2);
    auto r = e.Compile(c1);
    ASSERT_TRUE(r.ok() && r->ok) << (r.ok() ? Dump(*r) : r.status().ToString());
    EXPECT_TRUE(r->needs_quantized_checkpoint);
    EXPECT_NE(r->quantized_checkpoint_reason.find("Conv1d"), std::string::npos) << r->quantized_checkpoint_reason;
  }
  {  // ConvTranspose is not read at all
    Export e({1, 4, 8, 8});
    auto c1 = e.Conv("l1", "x", 4, 4, {1, 1}, 0);
    auto r = e.Compile(UpsamplingConvTranspose(e, c1));
    ASSERT_TRUE(r.ok() && r->ok) << (r.ok() ? Dump(*r) : r.status().ToString());
    EXPECT_TRUE(r->needs_quantized_checkpoint);
    EXPECT_NE(r->quantized_checkpoint_reason.find("YAML layer 1 ('l2', ONNX node '/l2/ConvTranspose') is a convtranspose2d"),
              std::string::npos)
        << r->quantized_checkpoint_reason;
  }
}

// auto_pad stands for explicit pads (SAME_UPPER on a 3x3, stride 1: pad 1; VALID: 0); a value
// ONNX does not define and a bias of the wrong length are errors naming the node (kiln run
// refused both while kiln compile wrote a YAML).
TEST(Ai8xPatterns, AutoPadAndBiasShapeOfAConv) {
  auto conv = [](const std::string& auto_pad, int64_t bias_len) {
    Export e({1, 8, 16, 16});
    auto w = e.Weight("conv1", {16, 8, 3, 3});
    std::vector<std::string> ins{"x", w};
    if (bias_len > 0) {
      e.b().FloatInitializer("conv1.op.bias", {bias_len}, kiln::testing::RandomFloats(bias_len, 5));
      ins.push_back("conv1.op.bias");
    }
    auto& n = e.b().Node("Conv", ins, {"/conv1/Conv_output_0"}, "/conv1/Conv");
    SetInts(n, "kernel_shape", {3, 3});
    SetString(n, "auto_pad", auto_pad);
    return e.Compile("/conv1/Conv_output_0");
  };
  {
    auto r = conv("SAME_UPPER", 16);
    ASSERT_TRUE(r.ok() && r->ok) << (r.ok() ? Dump(*r) : r.status().ToString());
    EXPECT_EQ(YAML::Load(r->yaml)["layers"][0]["pad"].as<int>(), 1);
  }
  {
    auto r = conv("VALID", 0);
    ASSERT_TRUE(r.ok() && r->ok) << (r.ok() ? Dump(*r) : r.status().ToString());
    EXPECT_EQ(YAML::Load(r->yaml)["layers"][0]["pad"].as<int>(), 0);
  }
  // Refused, with the code and a message naming the conv's node.
  auto refused = [&](const std::string& auto_pad, int bias, const char* code, const std::string& text) {
    auto r = conv(auto_pad, bias);
    ASSERT_TRUE(r.ok());
    const Diagnostic* d = Find(*r, code);
    ASSERT_NE(d, nullptr) << Dump(*r);
    EXPECT_EQ(d->onnx_node, "/conv1/Conv");
    EXPECT_NE(d->message.find(text), std::string::npos) << d->message;
    EXPECT_FALSE(r->ok);
  };
  refused("BOGUS", 0, "AI8X_PAD", "auto_pad 'BOGUS'");
  refused("NOTSET", 3, "AI8X_SHAPE", "bias [3] for 16 output channels");
}

TEST(Ai8xPatterns, WideClampMarksOutputWidth32) {
  Export e({1, 8, 8, 8});
  auto c1 = e.Conv("conv1", "x", 8, 16, {3, 3}, 1);
  auto r1 = e.Unary("Relu", "/conv1/activate", c1);
  auto q1 = e.Clamp("/conv1/clamp", r1, -1.0f, 127.0f / 128);
  auto c2 = e.Conv("conv2", q1, 16, 10, {1, 1}, 0);
  auto q2 = e.Clamp("/conv2/clamp", c2, -32768.0f, 32768.0f);
  auto r = e.Compile(q2);
  ASSERT_TRUE(r.ok());
  YAML::Node l = YAML::Load(r->yaml)["layers"];
  EXPECT_FALSE(l[0]["output_width"]);
  EXPECT_EQ(l[1]["output_width"].as<int>(), 32);
  EXPECT_EQ(Find(*r, "AI8X_WIDTH_NOT_DERIVED"), nullptr);
}

TEST(Ai8xPatterns, NoClampsWarnWidthNotDerivedAndOverrideSetsIt) {
  auto compile = [](std::vector<LayerOverride> overrides) {
    Export e({1, 8, 8, 8});
    auto c1 = e.Conv("conv1", "x", 8, 16, {3, 3}, 1);
    auto c2 = e.Conv("conv2", c1, 16, 10, {1, 1}, 0);
    return e.Compile(c2, Chip::kMAX78000, std::move(overrides));
  };
  auto plain = compile({});
  ASSERT_TRUE(plain.ok());
  ASSERT_NE(Find(*plain, "AI8X_WIDTH_NOT_DERIVED"), nullptr);
  EXPECT_EQ(Find(*plain, "AI8X_WIDTH_NOT_DERIVED")->message.find("as overridden for"), std::string::npos);
  auto r = compile({{"last", "output_width", "32"}});
  ASSERT_TRUE(r.ok());
  // Still a warning (the width is the user's, not the model's), naming what the override set.
  const Diagnostic* d = Find(*r, "AI8X_WIDTH_NOT_DERIVED");
  ASSERT_NE(d, nullptr);
  EXPECT_NE(d->message.find("overridden for conv2"), std::string::npos) << d->message;
  EXPECT_EQ(YAML::Load(r->yaml)["layers"][1]["output_width"].as<int>(), 32);
}

TEST(Ai8xPatterns, BitsWarningSaysWhichLayersTheOverridesLeft) {
  auto compile = [](std::vector<LayerOverride> overrides) {
    Export e({1, 8, 16, 16});
    auto c1 = e.Conv("conv1", "x", 8, 16, {3, 3}, 1);
    auto q1 = e.Clamp("/conv1/clamp", c1, -1.0f, 127.0f / 128);
    auto c2 = e.Conv("conv2", q1, 16, 16, {3, 3}, 1);
    auto q2 = e.Clamp("/conv2/clamp", c2, -1.0f, 127.0f / 128);
    return e.Compile(q2, Chip::kMAX78000, std::move(overrides));
  };
  auto some = compile({{"conv1", "quantization", "4"}});
  ASSERT_TRUE(some.ok()) << some.status().ToString();
  const Diagnostic* d = Find(*some, "AI8X_BITS_NOT_DERIVED");
  ASSERT_NE(d, nullptr);
  EXPECT_NE(d->message.find("1 layer(s) without an override (conv2)"), std::string::npos) << d->message;
  auto all = compile({{"conv1", "quantization", "4"}, {"conv2", "quantization", "2"}});
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  // Every weight layer has its width from an override: nothing left to warn about.
  EXPECT_EQ(Find(*all, "AI8X_BITS_NOT_DERIVED"), nullptr) << Dump(*all);
  YAML::Node l = YAML::Load(all->yaml)["layers"];
  EXPECT_EQ(l[0]["quantization"].as<int>(), 4);
  EXPECT_EQ(l[1]["quantization"].as<int>(), 2);
}

TEST(Ai8xPatterns, SubExportedAsNegAddIsEltwiseSubWithOperandOrder) {
  // Seed defect (docs/specs/ai8x-izer-rules.md §2.5): y = c2(c1(x)); z = y - c1(x) became `eltwise:
  // Add`.
  Export e({1, 16, 8, 8});
  auto a = e.Conv("conv1", "x", 16, 16, {3, 3}, 1);
  auto y = e.Conv("conv2", a, 16, 16, {3, 3}, 1);
  auto neg = e.Unary("Neg", "/sub", a);
  auto z = e.Binary("Add", "/sub", y, neg);
  auto c3 = e.Conv("conv3", z, 16, 16, {3, 3}, 1);
  auto r = e.Compile(c3);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->ok) << Dump(*r);
  YAML::Node l = YAML::Load(r->yaml)["layers"];
  // conv1, gap_conv1 (conv1 also feeds conv2), conv2 (write_gap), conv3 (+sub)
  ASSERT_EQ(l.size(), 4u) << r->yaml;
  EXPECT_EQ(l[3]["eltwise"].as<std::string>(), "sub");
  ASSERT_EQ(l[3]["in_sequences"].size(), 2u);
  // minuend first: y (conv2), then the copy of conv1
  EXPECT_EQ(l[l[3]["in_sequences"][0].as<int>()]["name"].as<std::string>(), "conv2");
  EXPECT_EQ(l[l[3]["in_sequences"][1].as<int>()]["name"].as<std::string>(), "gap_conv1");
}

TEST(Ai8xPatterns, ResidualOffsetsAreInterleaved) {
  // Seed defect: residual operands in different ping-pong halves, no in_offset.
  Export e({1, 16, 8, 8});
  auto a = e.Conv("conv1", "x", 16, 16, {3, 3}, 1);
  auto y = e.Conv("conv2", a, 16, 16, {3, 3}, 1);
  auto z = e.Binary("Add", "/resid", a, y);
  auto c3 = e.Conv("conv3", z, 16, 16, {3, 3}, 1);
  auto r = e.Compile(c3);
  ASSERT_TRUE(r.ok() && r->ok) << (r.ok() ? Dump(*r) : r.status().ToString());
  YAML::Node l = YAML::Load(r->yaml)["layers"];
  const YAML::Node& add = l[3];
  int base = add["in_offset"].as<int>();
  int p0 = add["in_sequences"][0].as<int>(), p1 = add["in_sequences"][1].as<int>();
  EXPECT_EQ(l[p0]["out_offset"].as<int>(), base);
  EXPECT_EQ(l[p1]["out_offset"].as<int>(), base + 4);
  EXPECT_EQ(l[p0]["write_gap"].as<int>(), 1);
  EXPECT_EQ(l[p1]["write_gap"].as<int>(), 1);
}

TEST(Ai8xPatterns, BiasLessLinearAsTransposeMatMulWithFlatten) {
  Export e({1, 8, 4, 4});
  auto c1 = e.Conv("conv1", "x", 8, 12, {3, 3}, 1);
  e.b().Node("Reshape", {c1, "shape"}, {"/Reshape_output_0"}, "/Reshape");
  e.b().Initializer(kiln::testing::Int64Tensor("shape", {2}, {1, -1}));
  auto w = e.Weight("fc", {10, 12 * 16});
  auto& t = e.b().Node("Transpose", {w}, {"/fc/Transpose_output_0"}, "/fc/Transpose");
  SetInts(t, "perm", {1, 0});
  auto mm = e.Binary("MatMul", "/fc", "/Reshape_output_0", "/fc/Transpose_output_0");
  auto r = e.Compile(mm);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  YAML::Node l = YAML::Load(r->yaml)["layers"];
  ASSERT_EQ(l.size(), 2u) << Dump(*r);
  EXPECT_EQ(l[1]["op"].as<std::string>(), "linear");
  EXPECT_TRUE(l[1]["flatten"].as<bool>());
  EXPECT_EQ(l[1]["name"].as<std::string>(), "fc");
  EXPECT_EQ(std::popcount(l[1]["processors"].as<uint64_t>()), 12);  // channels before flattening
  EXPECT_FALSE(l[1]["kernel_size"]);  // fatal for linear layers in the izer
  EXPECT_EQ(r->layers[1].bias_bytes, 0);
}

TEST(Ai8xPatterns, AvgPoolAsPadPlusAveragePoolFusesIntoConv) {
  Export e({1, 8, 16, 16});
  auto c1 = e.Conv("conv1", "x", 8, 16, {3, 3}, 1);
  e.b().Initializer(kiln::testing::Int64Tensor("/conv2/pool/pads", {8}, {0, 0, 0, 0, 0, 0, 0, 0}));
  e.b().Node("Pad", {c1, "/conv2/pool/pads"}, {"/conv2/pool/Pad_output_0"}, "/conv2/pool/Pad");
  auto p = e.Pool("AveragePool", "/conv2/pool", "/conv2/pool/Pad_output_0", 2);
  auto c2 = e.Conv("conv2", p, 16, 16, {3, 3}, 1);
  auto r = e.Compile(c2);
  ASSERT_TRUE(r.ok());
  YAML::Node l = YAML::Load(r->yaml)["layers"];
  ASSERT_EQ(l.size(), 2u) << Dump(*r);
  EXPECT_EQ(l[1]["avg_pool"].as<int>(), 2);
  EXPECT_EQ(l[1]["pool_stride"].as<int>(), 2);
}

TEST(Ai8xPatterns, AbsActivation) {
  Export e({1, 8, 8, 8});
  auto c1 = e.Conv("conv1", "x", 8, 8, {3, 3}, 1);
  auto a = e.Unary("Abs", "/conv1/activate", c1);
  auto r = e.Compile(a);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(YAML::Load(r->yaml)["layers"][0]["activate"].as<std::string>(), "Abs");
}

TEST(Ai8xPatterns, Conv1dWithIntegerKernelSize) {
  Export e({1, 16, 64});
  auto c1 = e.Conv("conv1", "x", 16, 32, {5}, 2);
  auto r1 = e.Unary("Relu", "/conv1/activate", c1);
  auto p = e.Pool("MaxPool", "/conv2/pool", r1, 2, 1);
  auto c2 = e.Conv("conv2", p, 32, 32, {3}, 0);
  auto r = e.Compile(c2);
  ASSERT_TRUE(r.ok());
  YAML::Node l = YAML::Load(r->yaml)["layers"];
  ASSERT_EQ(l.size(), 2u) << Dump(*r);
  EXPECT_EQ(l[0]["op"].as<std::string>(), "conv1d");
  EXPECT_EQ(l[0]["kernel_size"].as<int>(), 5);
  EXPECT_EQ(l[0]["pad"].as<int>(), 2);
  EXPECT_EQ(l[1]["max_pool"].as<int>(), 2);
  EXPECT_NE(r->yaml.find("# input shape: (16, 64)"), std::string::npos);
}

TEST(Ai8xPatterns, ReshapeBetweenLayersEmitsInDim) {
  // Conv1d output (8 x 64) viewed as 8 x 8 x 8 for a Conv2d.
  Export e({1, 8, 64});
  auto c1 = e.Conv("conv1", "x", 8, 8, {3}, 1);
  e.b().Initializer(kiln::testing::Int64Tensor("shape", {4}, {1, 8, 8, 8}));
  e.b().Node("Reshape", {c1, "shape"}, {"/r"}, "/Reshape");
  auto c2 = e.Conv("conv2", "/r", 8, 8, {3, 3}, 1);
  auto r = e.Compile(c2);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ok) << Dump(*r);
  YAML::Node l = YAML::Load(r->yaml)["layers"];
  ASSERT_EQ(l[1]["in_dim"].size(), 2u) << r->yaml;
  EXPECT_EQ(l[1]["in_dim"][0].as<int>(), 8);
  EXPECT_EQ(r->layers[1].in_shape, "(8, 8, 8)");
}

TEST(Ai8xPatterns, ConvTranspose2d) {
  Export e({1, 4, 8, 8});
  auto c1 = e.Conv("l1", "x", 4, 4, {1, 1}, 0);
  auto r = e.Compile(UpsamplingConvTranspose(e, c1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok) << Dump(*r);
  YAML::Node l = YAML::Load(r->yaml)["layers"];
  EXPECT_EQ(l[1]["op"].as<std::string>(), "convtranspose2d");
  EXPECT_EQ(r->layers[1].out_shape, "(4, 16, 16)");
}

TEST(Ai8xPatterns, DepthwiseOnlyOnMax78002) {
  for (Chip d : {Chip::kMAX78000, Chip::kMAX78002}) {
    Export e({1, 16, 8, 8});
    auto c1 = e.Conv("dw", "x", 16, 16, {3, 3}, 1, 0, /*group=*/16, /*bias=*/true);
    auto r = e.Compile(c1, d);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(YAML::Load(r->yaml)["layers"][0]["groups"].as<int>(), 16);
    const Diagnostic* g = Find(*r, "AI8X_GROUPS");
    if (d == Chip::kMAX78000) {
      ASSERT_NE(g, nullptr);
      EXPECT_EQ(g->onnx_node, "/dw/Conv");
      EXPECT_FALSE(r->ok);
    } else {
      EXPECT_EQ(g, nullptr) << Dump(*r);
      EXPECT_TRUE(r->ok) << Dump(*r);
    }
  }
}

TEST(Ai8xPatterns, MultipassProcessors) {
  Export e({1, 3, 8, 8});
  auto c1 = e.Conv("conv1", "x", 3, 100, {3, 3}, 1);
  auto c2 = e.Conv("conv2", c1, 100, 100, {1, 1}, 0);
  auto r = e.Compile(c2);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ok) << Dump(*r);
  YAML::Node l = YAML::Load(r->yaml)["layers"];
  EXPECT_EQ(std::popcount(l[1]["processors"].as<uint64_t>()), 52);  // 100 ch: 2 passes x 52
}

TEST(Ai8xPatterns, ConcatenationBecomesInSequences) {
  Export e({1, 8, 8, 8});
  auto a = e.Conv("a", "x", 8, 8, {3, 3}, 1);
  auto b = e.Conv("b", "x", 8, 8, {1, 1}, 0);
  auto& cat = e.b().Node("Concat", {a, b}, {"/cat/out"}, "/cat/Concat");
  SetInt(cat, "axis", 1);
  auto c = e.Conv("c", "/cat/out", 16, 8, {3, 3}, 1);
  auto r = e.Compile(c);
  ASSERT_TRUE(r.ok());
  YAML::Node l = YAML::Load(r->yaml)["layers"];
  ASSERT_EQ(l.size(), 3u) << Dump(*r);
  ASSERT_EQ(l[2]["in_sequences"].size(), 2u);
  EXPECT_EQ(std::popcount(l[2]["processors"].as<uint64_t>()), 16);
  // parts land on consecutive processors at one offset
  uint64_t pa = r->layers[0].output_processors, pb = r->layers[1].output_processors;
  EXPECT_EQ(pa & pb, 0u);
  EXPECT_EQ(pa | pb, r->layers[2].processors);
  EXPECT_EQ(r->layers[0].out_offset, r->layers[1].out_offset);
  EXPECT_TRUE(r->ok) << Dump(*r);
}

TEST(Ai8xPatterns, ConcatenatedTensorReadElsewhereSharesThePartMap) {
  // `a` is read by `b` and concatenated with b's output: a writes its part map of the
  // concatenation (allocate.cc PinConcatParts) and b reads it from there (the hand-written
  // camvid-unet-large.yaml's enc1/enc2); no copy for a single-pass concatenation.
  Export e({1, 8, 8, 8});
  auto a = e.Conv("a", "x", 8, 8, {3, 3}, 1);
  auto b = e.Conv("b", a, 8, 8, {3, 3}, 1);
  auto& cat = e.b().Node("Concat", {a, b}, {"/cat/out"}, "/cat/Concat");
  SetInt(cat, "axis", 1);
  auto c = e.Conv("c", "/cat/out", 16, 8, {3, 3}, 1);
  auto r = e.Compile(c);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ok) << Dump(*r);
  EXPECT_EQ(Find(*r, "AI8X_CONCAT"), nullptr);
  ASSERT_EQ(r->layers.size(), 3u);
  EXPECT_EQ(r->layers[0].output_processors, r->layers[1].processors);
  EXPECT_EQ(r->layers[0].output_processors | r->layers[1].output_processors, r->layers[2].processors);
  EXPECT_EQ(r->layers[0].out_offset, r->layers[1].out_offset);
  EXPECT_EQ(r->layers[2].in_offset, r->layers[0].out_offset);
}

TEST(Ai8xPatterns, MultipassConcatenationPartReadElsewhereIsCopiedWithAWriteGap) {
  // 56 + 56 channels = two passes of 56: parts interleaved (write_gap 1); `a` is also read by
  // `b`, so a passthrough copy re-forms it (concat_copy.cc), as camvid-unet-large.yaml's `pt`.
  Export e({1, 56, 8, 8});
  auto a = e.Conv("a", "x", 56, 56, {3, 3}, 1);
  auto b = e.Conv("b", a, 56, 56, {3, 3}, 1);
  auto& cat = e.b().Node("Concat", {b, a}, {"/cat/out"}, "/cat/Concat");
  SetInt(cat, "axis", 1);
  auto c = e.Conv("c", "/cat/out", 112, 16, {3, 3}, 1);
  auto r = e.Compile(c);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ok) << Dump(*r);
  ASSERT_EQ(r->layers.size(), 4u) << Dump(*r);
  EXPECT_EQ(r->layers[2].name, "copy_a");
  EXPECT_EQ(r->layers[2].op, "passthrough");
  YAML::Node l = YAML::Load(r->yaml)["layers"];
  EXPECT_EQ(l[1]["write_gap"].as<int>(), 1);
  EXPECT_EQ(l[2]["write_gap"].as<int>(), 1);
  EXPECT_FALSE(l[0]["write_gap"]);
  EXPECT_EQ(r->layers[2].out_offset, r->layers[1].out_offset + 4);
  EXPECT_EQ(r->layers[3].in_offset, r->layers[1].out_offset);
  EXPECT_EQ(r->layers[1].output_processors, r->layers[3].processors);
  EXPECT_EQ(r->layers[2].output_processors, r->layers[3].processors);
}

TEST(Ai8xPatterns, HostTailIsReportedAndOutputsMarked) {
  // Detector-style tail: two heads reshaped, transposed and concatenated on the host.
  Export e({1, 8, 8, 8});
  auto a = e.Conv("base", "x", 8, 16, {3, 3}, 1);
  auto h1 = e.Conv("head1", a, 16, 8, {1, 1}, 0);
  auto h2 = e.Conv("head2", a, 16, 8, {1, 1}, 0);
  auto& t1 = e.b().Node("Transpose", {h1}, {"/t1"}, "/head1/Transpose");
  SetInts(t1, "perm", {0, 2, 3, 1});
  auto& t2 = e.b().Node("Transpose", {h2}, {"/t2"}, "/head2/Transpose");
  SetInts(t2, "perm", {0, 2, 3, 1});
  auto& cat = e.b().Node("Concat", {"/t1", "/t2"}, {"/out"}, "/Concat");
  SetInt(cat, "axis", 3);
  auto sm = e.Unary("Softmax", "/post", "/out");
  auto r = e.Compile(sm);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok) << Dump(*r);
  const Diagnostic* d = Find(*r, "AI8X_HOST_OPS");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->severity, Severity::kInfo);
  EXPECT_NE(d->message.find("Transpose '/head1/Transpose'"), std::string::npos) << d->message;
  YAML::Node l = YAML::Load(r->yaml)["layers"];
  ASSERT_EQ(l.size(), 3u);
  EXPECT_TRUE(l[1]["output"].as<bool>());
  EXPECT_TRUE(l[2]["output"].as<bool>());
  EXPECT_FALSE(l[0]["output"]);
}

TEST(Ai8xPatterns, LayerNameFromWeightWhenNodeHasNoScope) {
  Export e({1, 8, 8, 8});
  auto w = e.Weight("features.block1", {8, 8, 3, 3});
  auto& n = e.b().Node("Conv", {"x", w}, {"y"}, "");
  SetInts(n, "kernel_shape", {3, 3});
  SetInts(n, "pads", {1, 1, 1, 1});
  auto r = e.Compile("y");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(YAML::Load(r->yaml)["layers"][0]["name"].as<std::string>(), "features.block1");
}

TEST(Ai8xPatterns, ScopeNamesJoinNestedModules) {
  Export e({1, 8, 8, 8});
  std::string w = e.Weight("stage.1.1.conv1", {8, 8, 1, 1});
  auto& n = e.b().Node("Conv", {"x", w}, {"y"}, "/stage.1/stage.1.1/conv1/Conv");
  SetInts(n, "kernel_shape", {1, 1});
  auto r = e.Compile("y");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(YAML::Load(r->yaml)["layers"][0]["name"].as<std::string>(), "stage.1.1.conv1");
}

TEST(Ai8xPatterns, StrideTwoConvIsAnErrorNamingTheNode) {
  Export e({1, 8, 8, 8});
  auto w = e.Weight("conv1", {8, 8, 3, 3});
  auto& n = e.b().Node("Conv", {"x", w}, {"y"}, "/conv1/Conv");
  SetInts(n, "kernel_shape", {3, 3});
  SetInts(n, "pads", {1, 1, 1, 1});
  SetInts(n, "strides", {2, 2});
  auto r = e.Compile("y");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->ok);
  const Diagnostic* d = Find(*r, "AI8X_STRIDE");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->onnx_node, "/conv1/Conv");
  EXPECT_EQ(d->layer_name, "conv1");
  EXPECT_EQ(d->layer, 0);
}

TEST(Ai8xPatterns, HardwareOpsAfterHostWorkAreReported) {
  Export e({1, 8, 8, 8});
  auto c1 = e.Conv("conv1", "x", 8, 8, {3, 3}, 1);
  auto sm = e.Unary("Softmax", "/sm", c1);
  auto c2 = e.Conv("conv2", sm, 8, 8, {3, 3}, 1);
  auto r = e.Compile(c2);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ok) << Dump(*r);
  const Diagnostic* d = Find(*r, "AI8X_HOST_AFTER_HOST");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->severity, Severity::kWarning);
  EXPECT_NE(d->message.find("/conv2/Conv"), std::string::npos) << d->message;
  EXPECT_EQ(r->layers.size(), 1u);
}

TEST(Ai8xPatterns, TwoInputsAreAnError) {
  Export e({1, 8, 8, 8});
  e.b().Input("y", onnx::TensorProto::FLOAT, {1, 8, 8, 8});
  auto s = e.Binary("Add", "/add", "x", "y");
  auto r = e.Compile(s);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->ok);
  EXPECT_NE(Find(*r, "AI8X_INPUT"), nullptr);
}

TEST(Ai8xPatterns, EltwiseShapeMismatchIsAnError) {
  Export e({1, 8, 8, 8});
  auto a = e.Conv("a", "x", 8, 8, {3, 3}, 1);
  auto c = e.Conv("c", "x", 8, 1, {3, 3}, 1);  // 1 channel broadcasts in ONNX, not on the device
  auto s = e.Binary("Add", "/add", a, c);
  auto r = e.Compile(s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->ok);
  const Diagnostic* d = Find(*r, "AI8X_ELTWISE");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->onnx_node, "/add/Add");
}

TEST(Ai8xPatterns, NoHardwareOpIsAnError) {
  Export e({1, 8, 8, 8});
  auto s = e.Unary("Softmax", "/sm", "x");
  auto r = e.Compile(s);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->ok);
  const Diagnostic* d = Find(*r, "AI8X_NO_LAYERS");
  ASSERT_NE(d, nullptr);
  EXPECT_NE(d->message.find("host work: Softmax '/sm/Softmax'"), std::string::npos) << d->message;
}

// A Relu on the network input cannot be fused (fuse pass) and is an activation on a passthrough
// layer (rule check): one error for the one mistake, carrying both explanations.
TEST(Ai8xPatterns, OneMistakeIsOneErrorPerLayerAndCode) {
  Export e({1, 8, 8, 8});
  auto r1 = e.Unary("Relu", "/a", "x");
  auto c1 = e.Conv("conv1", r1, 8, 8, {3, 3}, 1);
  auto r = e.Compile(c1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->ok);
  int activation_errors = 0;
  for (const Diagnostic& d : r->diagnostics) {
    if (d.code != "AI8X_ACTIVATION") continue;
    ++activation_errors;
    EXPECT_NE(d.message.find("reads the network input"), std::string::npos) << d.message;
    EXPECT_NE(d.message.find("; also: activation on a passthrough layer"), std::string::npos) << d.message;
  }
  EXPECT_EQ(activation_errors, 1) << Dump(*r);
}

TEST(Ai8xPatterns, StreamingNeedsFifoFlag) {
  Export e({1, 3, 128, 128});
  auto c1 = e.Conv("conv1", "x", 3, 16, {3, 3}, 1);
  auto r1 = e.Unary("Relu", "/conv1/activate", c1);
  auto p = e.Pool("MaxPool", "/conv2/pool", r1, 2);
  auto c2 = e.Conv("conv2", p, 16, 32, {3, 3}, 1);
  auto p2 = e.Pool("MaxPool", "/conv3/pool", c2, 2);
  auto c3 = e.Conv("conv3", p2, 32, 32, {3, 3}, 1);
  auto r = e.Compile(c3);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ok) << Dump(*r);
  YAML::Node l = YAML::Load(r->yaml)["layers"];
  EXPECT_TRUE(l[0]["streaming"].as<bool>());
  EXPECT_TRUE(l[1]["streaming"].as<bool>());
  EXPECT_FALSE(l[2]["streaming"]);
  ASSERT_EQ(r->izer_flags.size(), 1u);
  EXPECT_EQ(r->izer_flags[0].flag, "--fifo");
  EXPECT_NE(r->izer_flags[0].reason.find("stream"), std::string::npos) << r->izer_flags[0].reason;
  EXPECT_NE(Find(*r, "AI8X_STREAMING"), nullptr);
}

// The izer assigns checkpoint weights to conv/linear layers by position
// (docs/specs/ai8x-izer-rules.md §1.3), so the layers (execution order) must be in weight
// (state_dict = initializer) order. Two QAT convs whose weight initializers the model lists in
// reverse order: AI8X_WEIGHT_ORDER, naming both layers and ONNX nodes; the same model with the
// initializers in order, or with exporter-generated (BN-folded, `onnx::Conv_N`) weight names whose
// position says nothing about the state_dict, passes.
TEST(Ai8xPatterns, WeightInitializersInReverseOrderAreAnError) {
  auto build = [](Export& e) {
    auto c1 = e.Conv("conv1", "x", 8, 16, {3, 3}, 1, /*bits=*/8);
    auto r1 = e.Unary("Relu", "/conv1/activate", c1);
    return e.Conv("conv2", r1, 16, 16, {3, 3}, 1, /*bits=*/8);
  };
  auto swap_weights = [](Export& e) {
    auto* inits = e.b().graph().mutable_initializer();
    int i1 = -1, i2 = -1;
    for (int i = 0; i < inits->size(); ++i) {
      if (inits->Get(i).name() == "conv1.op.weight") i1 = i;
      if (inits->Get(i).name() == "conv2.op.weight") i2 = i;
    }
    ASSERT_TRUE(i1 >= 0 && i2 > i1);
    inits->SwapElements(i1, i2);
  };
  {
    Export e({1, 8, 16, 16});
    auto out = build(e);
    auto r = e.Compile(out);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->ok) << Dump(*r);
    EXPECT_EQ(Find(*r, "AI8X_WEIGHT_ORDER"), nullptr) << Dump(*r);
  }
  {
    Export e({1, 8, 16, 16});
    auto out = build(e);
    swap_weights(e);
    auto r = e.Compile(out);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE(r->ok);
    const Diagnostic* d = Find(*r, "AI8X_WEIGHT_ORDER");
    ASSERT_NE(d, nullptr) << Dump(*r);
    EXPECT_EQ(d->severity, Severity::kError);
    EXPECT_EQ(d->layer_name, "conv2");
    EXPECT_EQ(d->layer, 1);
    EXPECT_EQ(d->onnx_node, "/conv2/Conv");
    for (const char* part : {"`conv1`", "/conv1/Conv", "`conv2`", "/conv2/Conv", "conv1.op.weight", "conv2.op.weight",
                             "Define the modules", "order forward() calls them"}) {
      EXPECT_NE(d->message.find(part), std::string::npos) << part << " not in: " << d->message;
    }
    // Only the order is wrong: it is the only error, and the layer list and YAML are complete.
    for (const Diagnostic& other : r->diagnostics) {
      if (&other != d) {
        EXPECT_NE(other.severity, Severity::kError) << other.code << ": " << other.message;
      }
    }
    EXPECT_EQ(r->layers.size(), 2u);
    EXPECT_FALSE(r->yaml.empty());
  }
  {
    // Folded-constant names: torch lists them after the named parameters in creation order; no
    // state_dict position to compare.
    Export e({1, 8, 16, 16});
    auto out = build(e);
    swap_weights(e);
    auto* g = &e.b().graph();
    for (auto& t : *g->mutable_initializer()) {
      if (t.name() == "conv1.op.weight") t.set_name("onnx::Conv_7");
      if (t.name() == "conv2.op.weight") t.set_name("onnx::Conv_9");
    }
    for (auto& n : *g->mutable_node()) {
      for (auto& in : *n.mutable_input()) {
        if (in == "conv1.op.weight") in = "onnx::Conv_7";
        if (in == "conv2.op.weight") in = "onnx::Conv_9";
      }
    }
    auto r = e.Compile(out);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->ok) << Dump(*r);
    EXPECT_EQ(Find(*r, "AI8X_WEIGHT_ORDER"), nullptr);
  }
}

// Out-of-range and inconsistent shapes/attributes: an error diagnostic naming the ONNX node,
// never a wrapped value or an ok answer.
bool AnyMessageHasNegativeNumber(const Ai8xCompileResult& r) {
  for (const Diagnostic& d : r.diagnostics) {
    for (size_t i = 0; i + 1 < d.message.size(); ++i) {
      if (d.message[i] == '-' && std::isdigit(static_cast<unsigned char>(d.message[i + 1])) &&
          (i == 0 || d.message[i - 1] == ' ')) {
        return true;
      }
    }
  }
  return false;
}

TEST(Ai8xPatterns, HugePadIsAnErrorNotTruncated) {
  Export e({1, 8, 8, 8});
  std::string w = e.Weight("conv1", {8, 8, 3, 3});
  auto& n = e.b().Node("Conv", {"x", w}, {"/conv1/Conv_output_0"}, "/conv1/Conv");
  const int64_t big = int64_t{1} << 40;
  SetInts(n, "kernel_shape", {3, 3});
  SetInts(n, "pads", {big, big, big, big});
  auto r = e.Compile("/conv1/Conv_output_0");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->ok) << Dump(*r);
  const Diagnostic* d = Find(*r, "AI8X_PAD");
  ASSERT_NE(d, nullptr) << Dump(*r);
  EXPECT_EQ(d->severity, Severity::kError);
  EXPECT_EQ(d->onnx_node, "/conv1/Conv");
  EXPECT_NE(d->message.find(std::to_string(big)), std::string::npos) << d->message;
}

TEST(Ai8xPatterns, HugeInputDimensionsAreAnErrorNotWrapped) {
  const int64_t big = int64_t{1} << 31;
  Export e({1, 8, big, big});
  auto c1 = e.Conv("conv1", "x", 8, 8, {1, 1}, 0);
  auto r = e.Compile(c1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->ok) << Dump(*r);
  const Diagnostic* d = Find(*r, "AI8X_DIMENSIONS");
  ASSERT_NE(d, nullptr) << Dump(*r);
  EXPECT_EQ(d->severity, Severity::kError);
  EXPECT_NE(d->message.find(std::to_string(big)), std::string::npos) << d->message;
  EXPECT_FALSE(AnyMessageHasNegativeNumber(*r)) << Dump(*r);
}

TEST(Ai8xPatterns, ZeroInputDimensionIsAnError) {
  Export e({1, 8, 0, 8});
  auto c1 = e.Conv("conv1", "x", 8, 8, {1, 1}, 0);
  auto r = e.Compile(c1);
  if (!r.ok()) {  // the loader may refuse it first: that is fine as long as it is not accepted
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    return;
  }
  EXPECT_FALSE(r->ok) << Dump(*r);
  const Diagnostic* d = Find(*r, "AI8X_DIMENSIONS");
  ASSERT_NE(d, nullptr) << Dump(*r);
  EXPECT_EQ(d->severity, Severity::kError);
}

TEST(Ai8xPatterns, ConvWeightChannelsMustMatchInput) {
  Export e({1, 4, 8, 8});
  auto c1 = e.Conv("conv1", "x", /*cin=*/7, /*cout=*/4, {3, 3}, 1);  // weights [4,7,3,3]
  auto r = e.Compile(c1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->ok) << Dump(*r);
  const Diagnostic* d = Find(*r, "AI8X_SHAPE");
  ASSERT_NE(d, nullptr) << Dump(*r);
  EXPECT_EQ(d->severity, Severity::kError);
  EXPECT_EQ(d->onnx_node, "/conv1/Conv");
  EXPECT_EQ(d->layer_name, "conv1");
}

TEST(Ai8xPatterns, GemmInnerDimensionsMustAgree) {
  Export e({1, 16});
  e.b().FloatInitializer("fc.op.weight", {10, 12}, kiln::testing::RandomFloats(120, 7));
  auto& n = e.b().Node("Gemm", {"x", "fc.op.weight"}, {"/fc/Gemm_output_0"}, "/fc/Gemm");
  SetInt(n, "transB", 1);
  auto r = e.Compile("/fc/Gemm_output_0");
  if (!r.ok()) {  // the loader's shape inference may catch it first
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    return;
  }
  EXPECT_FALSE(r->ok) << Dump(*r);
  const Diagnostic* d = Find(*r, "AI8X_SHAPE");
  ASSERT_NE(d, nullptr) << Dump(*r);
  EXPECT_EQ(d->onnx_node, "/fc/Gemm");
}

TEST(Ai8xPatterns, MatchingGemmStillCompiles) {
  Export e({1, 16});
  e.b().FloatInitializer("fc.op.weight", {10, 16}, kiln::testing::RandomFloats(160, 7));
  auto& n = e.b().Node("Gemm", {"x", "fc.op.weight"}, {"/fc/Gemm_output_0"}, "/fc/Gemm");
  SetInt(n, "transB", 1);
  auto r = e.Compile("/fc/Gemm_output_0");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Find(*r, "AI8X_SHAPE"), nullptr) << Dump(*r);
  EXPECT_TRUE(r->ok) << Dump(*r);
}


// ai8x.SoftwareLinear (ai8x.py FusedSoftwareLinearReLU): a Gemm with plain weights after QAT
// layers. It is host work (16-bit clamped output in ai8x-training's simulation): left off.
std::string SoftwareLinearTail(Export& e, int fc_bits) {
  auto c1 = e.Conv("conv1", "x", 8, 12, {3, 3}, 1, /*bits=*/8);
  auto r1 = e.Unary("Relu", "/conv1/activate", c1);
  auto q1 = e.Clamp("/conv1/clamp", r1, -1.0f, 127.0f / 128);
  e.b().Initializer(kiln::testing::Int64Tensor("shape", {2}, {1, -1}));
  e.b().Node("Reshape", {q1, "shape"}, {"/Reshape_output_0"}, "/Reshape");
  auto w = e.Weight("fc", {10, 12 * 16}, fc_bits);
  e.b().FloatInitializer("fc.op.bias", {10}, kiln::testing::RandomFloats(10, 99));
  auto& g = e.b().Node("Gemm", {"/Reshape_output_0", w, "fc.op.bias"}, {"/fc/op/Gemm_output_0"}, "/fc/op/Gemm");
  SetInt(g, "transB", 1);
  return e.Clamp("/fc/clamp", "/fc/op/Gemm_output_0", -1.0f, 127.0f / 128);
}

TEST(Ai8xPatterns, SoftwareLinearTailIsLeftToTheHost) {
  Export e({1, 8, 4, 4});
  auto r = e.Compile(SoftwareLinearTail(e, /*fc_bits=*/0));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->ok) << Dump(*r);
  YAML::Node l = YAML::Load(r->yaml)["layers"];
  ASSERT_EQ(l.size(), 1u) << r->yaml;
  EXPECT_EQ(l[0]["name"].as<std::string>(), "conv1");
  const Diagnostic* d = Find(*r, "AI8X_HOST_TAIL");
  ASSERT_NE(d, nullptr) << Dump(*r);
  EXPECT_EQ(d->severity, Severity::kInfo);
  EXPECT_EQ(d->layer, -1);  // not in the YAML
  EXPECT_EQ(d->onnx_node, "/fc/op/Gemm");
  EXPECT_NE(d->message.find("output of 'conv1' (192 int8 values (12, 4, 4)"), std::string::npos) << d->message;
  EXPECT_NE(d->message.find("y = W x + b"), std::string::npos) << d->message;
  EXPECT_NE(d->message.find("clamped to 16 bits"), std::string::npos) << d->message;
  // the only layer without bit widths is gone, so is the warning about it
  EXPECT_EQ(Find(*r, "AI8X_BITS_NOT_DERIVED"), nullptr) << Dump(*r);
}

TEST(Ai8xPatterns, QatLinearTailStaysOnTheAccelerator) {
  Export e({1, 8, 4, 4});
  auto r = e.Compile(SoftwareLinearTail(e, /*fc_bits=*/8));
  ASSERT_TRUE(r.ok() && r->ok) << (r.ok() ? Dump(*r) : r.status().ToString());
  YAML::Node l = YAML::Load(r->yaml)["layers"];
  ASSERT_EQ(l.size(), 2u) << r->yaml;
  EXPECT_EQ(l[1]["op"].as<std::string>(), "linear");
  EXPECT_EQ(Find(*r, "AI8X_HOST_TAIL"), nullptr);
}

TEST(Ai8xPatterns, FloatExportKeepsItsLinear) {
  // No layer carries bit widths: a SoftwareLinear cannot be told from an ai8x.Linear.
  Export e({1, 8, 4, 4});
  auto c1 = e.Conv("conv1", "x", 8, 12, {3, 3}, 1);
  e.b().Initializer(kiln::testing::Int64Tensor("shape", {2}, {1, -1}));
  e.b().Node("Reshape", {c1, "shape"}, {"/Reshape_output_0"}, "/Reshape");
  auto w = e.Weight("fc", {10, 12 * 16});
  auto& g = e.b().Node("Gemm", {"/Reshape_output_0", w}, {"/fc/op/Gemm_output_0"}, "/fc/op/Gemm");
  SetInt(g, "transB", 1);
  auto r = e.Compile("/fc/op/Gemm_output_0");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(YAML::Load(r->yaml)["layers"].size(), 2u) << Dump(*r);
  EXPECT_EQ(Find(*r, "AI8X_HOST_TAIL"), nullptr);
}

// ai85net6 (ai8x-training models/ai85net-test.py): x.view(N, -1, 1, 1) before a 1x1 conv is the
// izer's `flatten: true` (ai8x-synthesis tests/test-ai85-cifar10-hwc-1x1.yaml).
Result<Ai8xCompileResult> ChannelViewThenConv(int k, int pad) {
  Export e({1, 8, 4, 4});
  auto c1 = e.Conv("conv1", "x", 8, 12, {3, 3}, 1, /*bits=*/8);
  e.b().Initializer(kiln::testing::Int64Tensor("shape", {4}, {1, -1, 1, 1}));
  e.b().Node("Reshape", {c1, "shape"}, {"/Reshape_output_0"}, "/Reshape");
  auto c2 = e.Conv("conv2", "/Reshape_output_0", 192, 10, {k, k}, pad, /*bits=*/8);
  return e.Compile(c2);
}

TEST(Ai8xPatterns, ChannelViewBeforeOneByOneConvFlattens) {
  auto r = ChannelViewThenConv(1, 0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->ok) << Dump(*r);
  YAML::Node l = YAML::Load(r->yaml)["layers"];
  ASSERT_EQ(l.size(), 2u) << r->yaml;
  EXPECT_EQ(l[1]["op"].as<std::string>(), "conv2d");
  EXPECT_TRUE(l[1]["flatten"].as<bool>()) << r->yaml;
  EXPECT_FALSE(l[1]["in_dim"]);
  EXPECT_EQ(std::popcount(l[1]["processors"].as<uint64_t>()), 12);  // the producer's channels
  EXPECT_EQ(r->layers[1].in_shape, "(12, 4, 4)");
  EXPECT_EQ(Find(*r, "AI8X_RESHAPE"), nullptr);
}

TEST(Ai8xPatterns, ChannelViewBeforeThreeByThreeConvIsRefusedSayingWhy) {
  auto r = ChannelViewThenConv(3, 1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->ok);
  const Diagnostic* d = Find(*r, "AI8X_RESHAPE");
  ASSERT_NE(d, nullptr) << Dump(*r);
  EXPECT_NE(d->message.find("(12, 4, 4) -> (192, 1, 1)"), std::string::npos) << d->message;
  EXPECT_NE(d->message.find("kernel is 3x3, not 1x1"), std::string::npos) << d->message;
}

// A layer too big for kernel memory (800 output channels: 800 words per processor > 768). The
// bit-width note appears only when the layers filling that processor lack bit widths.
Result<Ai8xCompileResult> KernelMemoryHog(int bits) {
  Export e({1, 64, 4, 4});
  auto c1 = e.Conv("conv1", "x", 64, 800, {3, 3}, 1, bits);
  return e.Compile(c1);
}

TEST(Ai8xPatterns, KernelMemoryBitsNoteOnlyWhereBitsAreMissing) {
  auto with_bits = KernelMemoryHog(8);
  ASSERT_TRUE(with_bits.ok()) << with_bits.status().ToString();
  const Diagnostic* d = Find(*with_bits, "AI8X_KERNEL_MEMORY");
  ASSERT_NE(d, nullptr) << Dump(*with_bits);
  EXPECT_EQ(d->message.find("does not carry"), std::string::npos) << d->message;
  auto without = KernelMemoryHog(0);
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  d = Find(*without, "AI8X_KERNEL_MEMORY");
  ASSERT_NE(d, nullptr) << Dump(*without);
  EXPECT_NE(d->message.find("does not carry the weight bit widths of conv1"), std::string::npos) << d->message;
}

}  // namespace
}  // namespace kiln::ai8x
