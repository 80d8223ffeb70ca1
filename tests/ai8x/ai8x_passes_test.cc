// Unit tests of the compiler/ai8x passes on hand-built layer lists (no ONNX involved).
#include <bit>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "compiler/ai8x/compile.h"
#include "compiler/ai8x/passes.h"
#include "compiler/ai8x/pipeline.h"

namespace kiln::ai8x {
namespace {

// Tiny builder for primitive layer lists.
struct NetBuilder {
  Network net;
  explicit NetBuilder(Shape3 input, Chip d = Chip::kMAX78000) {
    net.chip = d;
    net.input_shape = input;
  }
  Shape3 shape_of(int id) const { return net.OutputShapeOf(id); }
  int Conv(const std::string& name, int in, int out_c, int k = 3, int pad = 1, bool bias = false) {
    Layer l;
    l.id = net.next_id++;
    l.name = name;
    l.onnx_nodes = {"/" + name + "/Conv"};
    l.op = OpKind::kConv2d;
    l.kernel_h = l.kernel_w = k;
    l.pad = pad;
    l.inputs = {in};
    l.in_shape = shape_of(in);
    l.out_shape = {out_c, l.in_shape.h + 2 * pad - k + 1, l.in_shape.w + 2 * pad - k + 1};
    l.has_bias = bias;
    l.in_channels_w = l.in_shape.c;
    l.weight_count = int64_t{out_c} * l.in_shape.c * k * k;
    net.layers.push_back(l);
    net.Reindex();
    return l.id;
  }
  int Linear(const std::string& name, int in, int out_f) {
    Layer l;
    l.id = net.next_id++;
    l.name = name;
    l.onnx_nodes = {"/" + name + "/Gemm"};
    l.op = OpKind::kLinear;
    l.one_d = true;
    l.inputs = {in};
    l.in_shape = shape_of(in);
    l.flatten = l.in_shape.pixels() > 1;
    l.in_channels_w = static_cast<int>(l.in_shape.elements());
    l.out_shape = {out_f, 1, 1};
    l.weight_count = int64_t{out_f} * l.in_channels_w;
    net.layers.push_back(l);
    net.Reindex();
    return l.id;
  }
  int Act(const std::string& name, int in, Activation a = Activation::kRelu) {
    Layer l;
    l.id = net.next_id++;
    l.name = name;
    l.onnx_nodes = {"/" + name + "/Relu"};
    l.activation = a;
    l.inputs = {in};
    l.in_shape = l.out_shape = shape_of(in);
    net.layers.push_back(l);
    net.Reindex();
    return l.id;
  }
  int Pool(const std::string& name, int in, int k, PoolType t = PoolType::kMax) {
    Layer l;
    l.id = net.next_id++;
    l.name = name;
    l.onnx_nodes = {"/" + name + "/MaxPool"};
    l.pool = t;
    l.pool_h = l.pool_w = l.pool_stride_h = l.pool_stride_w = k;
    l.inputs = {in};
    l.in_shape = shape_of(in);
    l.out_shape = {l.in_shape.c, l.in_shape.h / k, l.in_shape.w / k};
    net.layers.push_back(l);
    net.Reindex();
    return l.id;
  }
  int Eltwise(const std::string& name, int a, int b, EltwiseOp op = EltwiseOp::kAdd) {
    Layer l;
    l.id = net.next_id++;
    l.name = name;
    l.onnx_nodes = {"/" + name + "/Add"};
    l.eltwise = op;
    l.operands = 2;
    l.inputs = {a, b};
    l.in_shape = l.out_shape = shape_of(a);
    net.layers.push_back(l);
    net.Reindex();
    return l.id;
  }
  Layer& L(int id) { return *net.Find(id); }
};

bool HasCode(const Network& net, const std::string& code) {
  for (const Diagnostic& d : net.diagnostics) {
    if (d.code == code) return true;
  }
  return false;
}

bool HasError(const Network& net) {
  for (const Diagnostic& d : net.diagnostics) {
    if (d.severity == Severity::kError) return true;
  }
  return false;
}

TEST(Ai8xChip, ConstantsFromTornadocnn) {
  const ChipSpec& a = GetChipSpec(Chip::kMAX78000);
  const ChipSpec& b = GetChipSpec(Chip::kMAX78002);
  EXPECT_EQ(a.max_layers, 32);
  EXPECT_EQ(b.max_layers, 128);
  EXPECT_EQ(a.data_instance_bytes, 0x8000);
  EXPECT_EQ(b.data_instance_bytes, 0x14000);
  EXPECT_EQ(a.KernelWords(0), 768);
  EXPECT_EQ(b.KernelWords(16), 5120);
  EXPECT_EQ(b.KernelWords(17), 4096);
  EXPECT_EQ(a.bias_bytes_per_group, 512);
  EXPECT_EQ(b.bias_bytes_per_group, 2048);
  EXPECT_FALSE(a.support_depthwise);
  EXPECT_TRUE(b.support_depthwise);
  EXPECT_EQ(*ParseChip("ai87"), Chip::kMAX78002);
  EXPECT_EQ(*ParseChip("85"), Chip::kMAX78000);
  EXPECT_FALSE(ParseChip("MAX78003").ok());
}

TEST(Ai8xPasses, MultipassArithmetic) {
  // docs/specs/ai8x-izer-rules.md §1.5 examples.
  EXPECT_EQ(ComputePasses(100).passes, 2);
  EXPECT_EQ(ComputePasses(100).processors, 52);
  EXPECT_EQ(ComputePasses(512).processors, 64);
  EXPECT_EQ(ComputePasses(512).passes, 8);
  EXPECT_EQ(ComputePasses(96).processors, 48);
  EXPECT_EQ(ComputePasses(128).processors, 64);
  EXPECT_EQ(ComputePasses(3).processors, 3);
}

TEST(Ai8xPasses, FuseActivationIntoConv) {
  NetBuilder b({3, 8, 8});
  int c = b.Conv("conv1", kNetworkInput, 8);
  b.Act("conv1.activate", c);
  FuseActivation(b.net);
  ASSERT_EQ(b.net.layers.size(), 1u);
  EXPECT_EQ(b.net.layers[0].activation, Activation::kRelu);
  EXPECT_EQ(b.net.layers[0].comment, "conv1 fused with conv1.activate");
  EXPECT_FALSE(HasError(b.net));
}

// Relu(maxpool(x)) = maxpool(Relu(x)): the ReLU moves into conv1, and the pooling then fuses into
// conv2 as its max_pool (a model the izer takes as conv1 `activate: ReLU`, conv2 `max_pool: 2`).
TEST(Ai8xPasses, ReluAfterMaxPoolingMovesIntoTheConv) {
  NetBuilder b({3, 8, 8});
  int c = b.Conv("conv1", kNetworkInput, 8);
  int p = b.Pool("pool", c, 2);
  int a = b.Act("act", p);
  int c2 = b.Conv("conv2", a, 8);
  FuseActivation(b.net);
  EXPECT_FALSE(HasError(b.net));
  ASSERT_EQ(b.net.layers.size(), 3u);
  EXPECT_EQ(b.L(c).activation, Activation::kRelu);
  EXPECT_EQ(b.L(c).onnx_nodes, (std::vector<std::string>{"/conv1/Conv", "/act/Relu"}));
  EXPECT_EQ(b.L(p).activation, Activation::kNone);
  EXPECT_EQ(b.L(c2).inputs, std::vector<int>{p});
  FusePooling(b.net);
  ASSERT_EQ(b.net.layers.size(), 2u);
  EXPECT_EQ(b.L(c2).pool, PoolType::kMax);
}

// Average pooling does not commute with ReLU, Abs is not monotone, and a conv read elsewhere
// cannot take the activation: each stays the AI8X_ACTIVATION error it was.
TEST(Ai8xPasses, ActivationAfterPoolingIsAnErrorWhereItCannotMove) {
  struct Case {
    const char* what;
    PoolType pool;
    Activation act;
    bool shared;
  };
  for (const Case& k : {Case{"avg pool", PoolType::kAvg, Activation::kRelu, false},
                        Case{"abs", PoolType::kMax, Activation::kAbs, false},
                        Case{"conv read elsewhere", PoolType::kMax, Activation::kRelu, true}}) {
    NetBuilder b({3, 8, 8});
    int c = b.Conv("conv1", kNetworkInput, 8);
    int p = b.Pool("pool", c, 2, k.pool);
    if (k.shared) b.Conv("side", c, 8);
    b.Act("act", p, k.act);
    FuseActivation(b.net);
    EXPECT_TRUE(HasCode(b.net, "AI8X_ACTIVATION")) << k.what;
    EXPECT_EQ(b.L(c).activation, Activation::kNone) << k.what;
  }
}

// ReLU or Abs of data that is never negative is the identity: Relu(Relu(x)), and Abs after a max
// pooling of ReLU output, are dropped; their readers read the producer.
TEST(Ai8xPasses, ActivationOfNonNegativeDataIsDropped) {
  {
    NetBuilder b({3, 8, 8});
    int c = b.Conv("conv1", kNetworkInput, 8);
    int a1 = b.Act("relu1", c);
    int a2 = b.Act("relu2", a1);
    int c2 = b.Conv("conv2", a2, 8);
    FuseActivation(b.net);
    EXPECT_FALSE(HasError(b.net));
    ASSERT_EQ(b.net.layers.size(), 2u);
    EXPECT_EQ(b.L(c).activation, Activation::kRelu);
    EXPECT_EQ(b.L(c2).inputs, std::vector<int>{c});
  }
  {
    NetBuilder b({3, 8, 8});
    int c = b.Conv("conv1", kNetworkInput, 8);
    int a1 = b.Act("relu1", c);
    int p = b.Pool("pool", a1, 2);
    int a2 = b.Act("abs", p, Activation::kAbs);
    int c2 = b.Conv("conv2", a2, 8);
    FuseActivation(b.net);
    EXPECT_FALSE(HasError(b.net));
    ASSERT_EQ(b.net.layers.size(), 3u);
    EXPECT_EQ(b.L(c).activation, Activation::kRelu);
    EXPECT_EQ(b.L(p).activation, Activation::kNone);
    EXPECT_EQ(b.L(c2).inputs, std::vector<int>{p});
  }
}

TEST(Ai8xPasses, ActivationNotFusedWhenConvOutputIsShared) {
  NetBuilder b({3, 8, 8});
  int c = b.Conv("conv1", kNetworkInput, 8);
  int a = b.Act("act", c);
  b.Eltwise("add", a, c);
  FuseActivation(b.net);
  EXPECT_TRUE(HasCode(b.net, "AI8X_ACTIVATION"));
}

TEST(Ai8xPasses, FusePoolingIntoNextConv) {
  NetBuilder b({3, 16, 16});
  int c1 = b.Conv("conv1", kNetworkInput, 8);
  int p = b.Pool("conv2.pool", c1, 2);
  int c2 = b.Conv("conv2", p, 8);
  FusePooling(b.net);
  ASSERT_EQ(b.net.layers.size(), 2u);
  const Layer& l = b.L(c2);
  EXPECT_EQ(l.pool, PoolType::kMax);
  EXPECT_EQ(l.pool_h, 2);
  EXPECT_EQ(l.inputs, std::vector<int>{c1});
  EXPECT_EQ(l.in_shape.h, 16);
  EXPECT_EQ(l.pooled_shape().h, 8);
}

TEST(Ai8xPasses, PoolingNotFusedIntoFlatteningLinear) {
  NetBuilder b({3, 16, 16});
  int c1 = b.Conv("conv1", kNetworkInput, 8);
  int p = b.Pool("pool", c1, 4, PoolType::kAvg);
  b.Linear("fc", p, 10);
  FusePooling(b.net);
  EXPECT_EQ(b.net.layers.size(), 3u);  // pooling stays a passthrough layer
}

TEST(Ai8xPasses, FuseEltwiseIntoConvWithPoolLast) {
  NetBuilder b({16, 16, 16});
  int c1 = b.Conv("conv1", kNetworkInput, 16);
  int c2 = b.Conv("conv2", c1, 16);
  int add = b.Eltwise("resid", c1, c2);
  int p = b.Pool("conv3.pool", add, 2);
  int c3 = b.Conv("conv3", p, 16);
  FusePooling(b.net);
  FuseEltwise(b.net);
  const Layer& l = b.L(c3);
  EXPECT_EQ(l.eltwise, EltwiseOp::kAdd);
  EXPECT_EQ(l.operands, 2);
  EXPECT_FALSE(l.pool_first);  // element-wise, then pooling
  EXPECT_EQ(l.inputs, (std::vector<int>{c1, c2}));
  EXPECT_EQ(b.net.layers.size(), 3u);
}

TEST(Ai8xPasses, NoEltwiseFusionIntoBiasedConvOnMax78002) {
  NetBuilder b({16, 8, 8}, Chip::kMAX78002);
  int c1 = b.Conv("conv1", kNetworkInput, 16, 1, 0, true);
  int c2 = b.Conv("conv2", c1, 16, 1, 0, true);
  int add = b.Eltwise("resid", c2, c1);
  b.Conv("conv3", add, 32, 1, 0, true);
  FuseEltwise(b.net);
  EXPECT_EQ(b.net.layers.size(), 4u);  // SUPPORT_MULTIPASS_ELTWISE_CONV_BIAS is false on ai87
}

TEST(Ai8xPasses, WriteGapOnSoleProducerAndGapLayerForSharedSource) {
  // ressimplenet pattern: conv2 feeds conv3 and the residual add fused into conv4.
  NetBuilder b({3, 16, 16});
  int c1 = b.Conv("conv1", kNetworkInput, 16);
  int c2 = b.Conv("conv2", c1, 20);
  int c3 = b.Conv("conv3", c2, 20);
  int add = b.Eltwise("resid1", c2, c3);
  int c4 = b.Conv("conv4", add, 20);
  FuseEltwise(b.net);
  InsertWriteGaps(b.net);
  ASSERT_EQ(b.net.layers.size(), 5u);
  // gap layer right after its source (fused element-wise)
  EXPECT_EQ(b.net.layers[2].name, "gap_conv2");
  EXPECT_EQ(b.net.layers[2].op, OpKind::kNone);
  EXPECT_EQ(b.net.layers[2].write_gap, 1);
  EXPECT_EQ(b.L(c3).write_gap, 1);
  EXPECT_EQ(b.L(c2).write_gap, 0);
  EXPECT_EQ(b.L(c4).inputs, (std::vector<int>{b.net.layers[2].id, c3}));
}

TEST(Ai8xPasses, GapLayerBeforeStandaloneEltwise) {
  // MobileNetV2 pattern on MAX78002 with bias: the add stays a layer; the copy goes right before
  // it.
  NetBuilder b({16, 8, 8}, Chip::kMAX78002);
  int c0 = b.Conv("c0", kNetworkInput, 12, 1, 0, true);
  int c1 = b.Conv("c1", c0, 72, 1, 0, true);
  int c2 = b.Conv("c2", c1, 12, 1, 0, true);
  int add = b.Eltwise("resid", c2, c0);
  b.Conv("next", add, 72, 1, 0, true);
  FuseEltwise(b.net);
  InsertWriteGaps(b.net);
  ASSERT_EQ(b.net.layers.size(), 6u);
  EXPECT_EQ(b.net.layers[3].name, "gap_c0");
  EXPECT_EQ(b.net.layers[4].id, add);
  EXPECT_EQ(b.L(c2).write_gap, 1);
}

TEST(Ai8xPasses, SeedDefectGapPassthroughMapIsPacked) {
  // Seed defect: gap_* output map not the packed input map (docs/specs/ai8x-izer-baseline.md).
  // Ours: equal maps.
  NetBuilder b({3, 16, 16});
  int c1 = b.Conv("conv1", kNetworkInput, 16);
  int c2 = b.Conv("conv2", c1, 20);
  int c3 = b.Conv("conv3", c2, 20);
  int add = b.Eltwise("resid1", c2, c3);
  b.Conv("conv4", add, 20);
  FuseEltwise(b.net);
  InsertWriteGaps(b.net);
  ChooseInputFormatAndStreaming(b.net, {});
  AllocateProcessors(b.net, {});
  PlanDataMemory(b.net);
  CheckRules(b.net);
  const Layer& gap = b.net.layers[2];
  EXPECT_EQ(gap.placed.processors, gap.placed.output_processors);
  EXPECT_FALSE(HasCode(b.net, "AI8X_PASSTHROUGH_MAP"));
  // Operands interleaved: base, base+4, consumer in_offset = base.
  const Layer& conv4 = b.net.layers[4];
  const Layer* a = b.net.Find(conv4.inputs[0]);
  const Layer* c = b.net.Find(conv4.inputs[1]);
  EXPECT_EQ(a->placed.out_offset, conv4.placed.in_offset);
  EXPECT_EQ(c->placed.out_offset, conv4.placed.in_offset + 4);
  EXPECT_EQ(a->placed.output_processors, conv4.placed.processors);
  EXPECT_EQ(c->placed.output_processors, conv4.placed.processors);
  EXPECT_FALSE(HasError(b.net)) << b.net.diagnostics.front().message;
}

TEST(Ai8xPasses, PassthroughWithForeignOutputMapIsReported) {
  NetBuilder b({16, 8, 8});
  int c1 = b.Conv("conv1", kNetworkInput, 16);
  b.Pool("pool", c1, 2);
  ChooseInputFormatAndStreaming(b.net, {});
  AllocateProcessors(b.net, {});
  PlanDataMemory(b.net);
  b.net.layers[1].placed.output_processors = 0x000000000ffff0000ULL;  // the seed's mistake
  CheckRules(b.net);
  EXPECT_TRUE(HasCode(b.net, "AI8X_PASSTHROUGH_MAP"));
}

TEST(Ai8xPasses, ProcessorCountsFollowMultipassRule) {
  NetBuilder b({3, 8, 8});
  int c1 = b.Conv("conv1", kNetworkInput, 100);
  int c2 = b.Conv("conv2", c1, 512, 1, 0);
  b.Conv("conv3", c2, 10, 1, 0);
  Ai8xOptions o;
  o.input_format = InputFormat::kHWC;
  ChooseInputFormatAndStreaming(b.net, o);
  AllocateProcessors(b.net, o);
  EXPECT_EQ(b.net.layers[0].placed.processors, 0x7u);
  EXPECT_EQ(std::popcount(b.net.layers[1].placed.processors), 52);
  EXPECT_EQ(std::popcount(b.net.layers[2].placed.processors), 64);
  EXPECT_EQ(b.net.layers[0].placed.output_processors, b.net.layers[1].placed.processors);
  EXPECT_EQ(std::popcount(b.net.layers[2].placed.output_processors), 10);
  for (const Layer& l : b.net.layers) EXPECT_EQ(std::countr_zero(l.placed.processors) % 4, 0);
}

TEST(Ai8xPasses, ChwInputUsesOneProcessorPerGroup) {
  NetBuilder b({3, 28, 28});
  b.Conv("conv1", kNetworkInput, 8);
  ChooseInputFormatAndStreaming(b.net, {});  // auto: seed rule, <= 16 channels -> CHW
  AllocateProcessors(b.net, {});
  EXPECT_TRUE(b.net.layers[0].placed.chw_input);
  EXPECT_EQ(b.net.layers[0].placed.processors, 0x0000000100010001ULL);
}

TEST(Ai8xPasses, StreamingForLargeInput) {
  // cats-dogs pattern: 3x128x128 -> 16ch (65536 B) -> pool -> fits.
  NetBuilder b({3, 128, 128});
  int c1 = b.Conv("conv1", kNetworkInput, 16);
  int a1 = b.Act("a1", c1);
  int p = b.Pool("conv2.pool", a1, 2);
  int c2 = b.Conv("conv2", p, 32);
  int p2 = b.Pool("conv3.pool", c2, 2);
  b.Conv("conv3", p2, 64);
  FuseActivation(b.net);
  FusePooling(b.net);
  ChooseInputFormatAndStreaming(b.net, {});
  AllocateProcessors(b.net, {});
  PlanDataMemory(b.net);
  CheckRules(b.net);
  EXPECT_TRUE(b.net.layers[0].placed.streaming);
  EXPECT_TRUE(b.net.layers[1].placed.streaming);
  EXPECT_FALSE(b.net.layers[2].placed.streaming);
  EXPECT_TRUE(b.net.use_fifo);
  EXPECT_FALSE(b.net.layers[0].placed.chw_input);  // FIFO streaming is HWC
  EXPECT_FALSE(HasError(b.net)) << b.net.diagnostics.back().message;
}

TEST(Ai8xPasses, DataMemoryErrorWhenNothingHelps) {
  // 64 ch x 100x100 input: 40000 B per instance > 32 KiB; 64 channels cannot use the FIFO and the
  // only layer is the last one, whose output must fit.
  NetBuilder b({64, 100, 100});
  b.Conv("conv1", kNetworkInput, 64);
  ChooseInputFormatAndStreaming(b.net, {});
  EXPECT_TRUE(HasCode(b.net, "AI8X_DATA_MEMORY"));
}

TEST(Ai8xPasses, KernelMemoryOverflowIsReported) {
  // 64 -> 1024 channels 3x3 twice: 1024*9*... words exceed 768 per processor on MAX78000
  NetBuilder b({64, 4, 4});
  int c1 = b.Conv("conv1", kNetworkInput, 1024);
  b.Conv("conv2", c1, 1024);
  ChooseInputFormatAndStreaming(b.net, {});
  AllocateProcessors(b.net, {});
  PlanDataMemory(b.net);
  CheckRules(b.net);
  EXPECT_TRUE(HasCode(b.net, "AI8X_KERNEL_MEMORY"));
}

TEST(Ai8xPasses, RuleChecksReportBadAttributes) {
  NetBuilder b({8, 8, 8});
  int c1 = b.Conv("conv5x5", kNetworkInput, 8, 5, 2);
  int c2 = b.Conv("pad3", c1, 8, 3, 3);
  b.L(c2).groups = 8;
  ChooseInputFormatAndStreaming(b.net, {});
  AllocateProcessors(b.net, {});
  PlanDataMemory(b.net);
  CheckRules(b.net);
  EXPECT_TRUE(HasCode(b.net, "AI8X_KERNEL"));
  EXPECT_TRUE(HasCode(b.net, "AI8X_PAD"));
  EXPECT_TRUE(HasCode(b.net, "AI8X_GROUPS"));  // depthwise on MAX78000
  for (const Diagnostic& d : b.net.diagnostics) {
    if (d.code == "AI8X_KERNEL") {
      EXPECT_EQ(d.layer_name, "conv5x5");
      EXPECT_EQ(d.onnx_node, "/conv5x5/Conv");
    }
  }
}

TEST(Ai8xPasses, LayerCountLimit) {
  NetBuilder b({8, 4, 4});
  int prev = kNetworkInput;
  for (int i = 0; i < 33; ++i) prev = b.Conv("c" + std::to_string(i), prev, 8, 1, 0);
  ChooseInputFormatAndStreaming(b.net, {});
  AllocateProcessors(b.net, {});
  PlanDataMemory(b.net);
  CheckRules(b.net);
  EXPECT_TRUE(HasCode(b.net, "AI8X_LAYER_COUNT"));
  b.net.chip = Chip::kMAX78002;
  b.net.diagnostics.clear();
  CheckRules(b.net);
  EXPECT_FALSE(HasCode(b.net, "AI8X_LAYER_COUNT"));
}

TEST(Ai8xPasses, FlattenLimit) {
  NetBuilder b({8, 32, 32});
  int c1 = b.Conv("conv1", kNetworkInput, 8);
  b.Linear("fc", c1, 10);  // flatten of 32x32 = 1024 pixels > 256
  ChooseInputFormatAndStreaming(b.net, {});
  AllocateProcessors(b.net, {});
  PlanDataMemory(b.net);
  CheckRules(b.net);
  EXPECT_TRUE(HasCode(b.net, "AI8X_FLATTEN"));
}

TEST(Ai8xPasses, YamlIsParseableWithSeedFormats) {
  NetBuilder b({3, 16, 16});
  int c1 = b.Conv("conv1", kNetworkInput, 16);
  int c2 = b.Conv("conv2", c1, 20);
  int c3 = b.Conv("conv3", c2, 20);
  int add = b.Eltwise("resid1", c2, c3);
  int c4 = b.Conv("conv4", add, 20);
  b.Linear("fc", c4, 10);
  Ai8xOptions o;
  o.arch = "testnet";
  o.input_format = InputFormat::kHWC;
  o.dataset = "test_ds";
  auto r = CompileAi8xNetwork(b.net, o);
  ASSERT_TRUE(r.ok());
  YAML::Node doc = YAML::Load(r->yaml);
  EXPECT_EQ(doc["arch"].as<std::string>(), "testnet");
  EXPECT_EQ(doc["dataset"].as<std::string>(), "test_ds");
  ASSERT_EQ(doc["layers"].size(), 6u);
  EXPECT_EQ(doc["layers"][2]["name"].as<std::string>(), "gap_conv2");
  EXPECT_EQ(doc["layers"][2]["op"].as<std::string>(), "passthrough");
  EXPECT_EQ(doc["layers"][4]["eltwise"].as<std::string>(), "add");
  EXPECT_EQ(doc["layers"][4]["in_sequences"].size(), 2u);
  EXPECT_EQ(doc["layers"][5]["flatten"].as<bool>(), true);
  // hex maps as 0x%016x, offsets as 0x%04x; comments as the seed writes them
  EXPECT_NE(r->yaml.find("processors: 0x0000000000000007"), std::string::npos) << r->yaml;
  EXPECT_NE(r->yaml.find("out_offset: 0x"), std::string::npos);
  EXPECT_NE(r->yaml.find("  # Layer 0\n  - name: conv1"), std::string::npos);
  EXPECT_NE(r->yaml.find("# input shape: (3, 16, 16)"), std::string::npos);
  EXPECT_NE(r->yaml.find("# output shape: (10, 1)"), std::string::npos);
  // every offset string parses as an integer (the izer needs ints, not strings)
  for (const auto& l : doc["layers"]) {
    EXPECT_NO_THROW(l["out_offset"].as<int>());
    EXPECT_NO_THROW(l["processors"].as<uint64_t>());
  }
  EXPECT_EQ(r->layers.size(), 6u);
  EXPECT_TRUE(r->izer_flags.empty());  // no plan flag beyond --device (api IzerCommand adds it)
}

TEST(Ai8xPasses, VerboseWritesShapesForEveryLayer) {
  NetBuilder b({3, 8, 8});
  int c1 = b.Conv("conv1", kNetworkInput, 8);
  int c2 = b.Conv("conv2", c1, 8);
  b.Conv("conv3", c2, 8);
  Ai8xOptions o;
  auto quiet = CompileAi8xNetwork(b.net, o);
  o.verbose = true;
  auto verbose = CompileAi8xNetwork(b.net, o);
  ASSERT_TRUE(quiet.ok() && verbose.ok());
  auto count = [](const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(quiet->yaml, "# output shape"), 1u);
  EXPECT_EQ(count(verbose->yaml, "# output shape"), 3u);
  EXPECT_EQ(count(verbose->yaml, "# input shape"), 3u);
}

TEST(Ai8xPasses, OverridesValidateAndApply) {
  NetBuilder b({3, 8, 8});
  int c1 = b.Conv("conv1", kNetworkInput, 8);
  b.Conv("conv2", c1, 10, 1, 0);
  Ai8xOptions o;
  o.overrides = {{"last", "output_width", "32"}};
  auto r = CompileAi8xNetwork(b.net, o);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->yaml.find("output_width: 32"), std::string::npos);
  o.overrides = {{"conv2", "bogus", "1"}};
  EXPECT_EQ(CompileAi8xNetwork(b.net, o).status().code(), StatusCode::kInvalidArgument);
  o.overrides = {{"nope", "quantization", "4"}};
  EXPECT_EQ(CompileAi8xNetwork(b.net, o).status().code(), StatusCode::kInvalidArgument);
  o.overrides = {{"conv1", "quantization", "3"}};
  EXPECT_EQ(CompileAi8xNetwork(b.net, o).status().code(), StatusCode::kInvalidArgument);
  o.overrides = {{"conv1", "quantization", "4"}};
  r = CompileAi8xNetwork(b.net, o);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->yaml.find("quantization: 4"), std::string::npos);
}

// Values are range-checked before narrowing; every error names the layer, the key and the value.
TEST(Ai8xPasses, OverrideValuesAreRangeCheckedAndErrorsNameLayerAndKey) {
  NetBuilder b({3, 8, 8});
  int c1 = b.Conv("conv1", kNetworkInput, 8);
  b.Conv("conv2", c1, 10, 1, 0);
  struct Bad {
    LayerOverride o;
    std::string expect;  // "LAYER.KEY=VALUE" in the message
  };
  const std::vector<Bad> bad = {
      {{"last", "out_offset", "4294967300"}, "last.out_offset=4294967300"},
      {{"last", "out_offset", "99999999999"}, "last.out_offset=99999999999"},
      {{"conv1", "out_offset", "0x80000000"}, "conv1.out_offset=0x80000000"},
      {{"conv1", "processors", "0x1_0000_0000_0000_0000"}, "conv1.processors=0x1_0000_0000_0000_0000"},
      {{"conv2", "output_processors", "99999999999999999999"}, "conv2.output_processors=99999999999999999999"},
      {{"conv2", "output_width", "16"}, "conv2.output_width=16"},
      {{"conv2", "output_width", "4294967304"}, "conv2.output_width=4294967304"},
      {{"conv1", "streaming", "maybe"}, "conv1.streaming=maybe"},
      {{"conv1", "quantization", "3"}, "conv1.quantization=3"},
      {{"conv1", "quantization", "4294967300"}, "conv1.quantization=4294967300"},
      {{"conv1", "activate", "tanh"}, "conv1.activate=tanh"},
      {{"conv2", "bogus", "1"}, "conv2.bogus=1: unknown key 'bogus'"},
      {{"nope", "quantization", "4"}, "nope.quantization=4: no such layer (layers: conv1, conv2;"},
      {{"conv1", "out_offset", "-1"}, "conv1.out_offset=-1: '-1' is negative"},
  };
  for (const Bad& x : bad) {
    Ai8xOptions o;
    o.overrides = {x.o};
    auto r = CompileAi8xNetwork(b.net, o);
    ASSERT_FALSE(r.ok()) << x.expect << " accepted";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << x.expect;
    EXPECT_NE(r.status().message().find(x.expect), std::string::npos) << r.status().ToString();
  }
  Ai8xOptions o;
  o.overrides = {{"last", "out_offset", "0x1000"}, {"conv1", "processors", "0xffffffffffffffff"}};
  auto r = CompileAi8xNetwork(b.net, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->layers.back().out_offset, 0x1000);
  EXPECT_EQ(r->layers.front().processors, ~uint64_t{0});
}

// One network per remaining rule diagnostic: run the placement passes of the pipeline
// (ChooseInputFormatAndStreaming through PlanDataMemory), break one thing the way a user override
// or an unusual model would, and expect exactly that code.
Network Planned(NetBuilder& b, Ai8xOptions o = {}) {
  o.input_format = o.input_format == InputFormat::kAuto ? InputFormat::kHWC : o.input_format;
  Status s = RunPasses(b.net, o, "ChooseInputFormatAndStreaming", "PlanDataMemory");
  EXPECT_TRUE(s.ok()) << s.ToString();
  return b.net;
}

TEST(Ai8xRules, ProcessorCountMismatch) {
  NetBuilder b({16, 8, 8});
  int c1 = b.Conv("conv1", kNetworkInput, 16);
  b.Conv("conv2", c1, 16);
  Network net = Planned(b);
  net.layers[1].placed.processors = 0xff;  // 8 bits for 16 channels
  CheckRules(net);
  EXPECT_TRUE(HasCode(net, "AI8X_PROCESSORS"));
}

TEST(Ai8xRules, ChannelsAndLinearFeatures) {
  NetBuilder b({16, 1, 1});
  int l1 = b.Linear("fc1", kNetworkInput, 1100);
  b.Linear("fc2", l1, 10);
  Network net = Planned(b);
  CheckRules(net);
  EXPECT_TRUE(HasCode(net, "AI8X_CHANNELS"));
  EXPECT_TRUE(HasCode(net, "AI8X_LINEAR"));
}

TEST(Ai8xRules, Dimensions) {
  NetBuilder b({1, 2000, 4});
  b.Conv("conv1", kNetworkInput, 4, 1, 0);
  Network net = Planned(b);
  CheckRules(net);
  EXPECT_TRUE(HasCode(net, "AI8X_DIMENSIONS"));
}

TEST(Ai8xRules, DilationOnlyForConv1d) {
  NetBuilder b({8, 8, 8});
  int c = b.Conv("conv1", kNetworkInput, 8);
  b.L(c).dilation = 2;
  Network net = Planned(b);
  CheckRules(net);
  EXPECT_TRUE(HasCode(net, "AI8X_DILATION"));
}

TEST(Ai8xRules, PoolingLimits) {
  NetBuilder b({8, 64, 64});
  int p = b.Pool("pool", kNetworkInput, 2);
  b.L(p).pool_h = b.L(p).pool_w = 20;
  b.L(p).pool_stride_w = 3;
  b.L(p).out_shape = {8, 3, 3};
  Network net = Planned(b);
  CheckRules(net);
  EXPECT_TRUE(HasCode(net, "AI8X_POOL"));
  bool named_values = false;  // the message says what is out of range
  for (const Diagnostic& d : net.diagnostics) {
    named_values |= d.code == "AI8X_POOL" && d.message.find("pooling kernel 20x20 and stride 2 must be 1..16") != std::string::npos;
  }
  EXPECT_TRUE(named_values);
}

TEST(Ai8xRules, OutputWidth32NeedsNoActivation) {
  NetBuilder b({8, 8, 8});
  int c = b.Conv("conv1", kNetworkInput, 8);
  b.L(c).output_width = 32;
  b.L(c).activation = Activation::kRelu;
  Network net = Planned(b);
  CheckRules(net);
  EXPECT_TRUE(HasCode(net, "AI8X_OUTPUT_WIDTH"));
}

TEST(Ai8xRules, EltwiseOperandsNeedWriteGapAndSharedMaps) {
  NetBuilder b({16, 8, 8});
  int c1 = b.Conv("conv1", kNetworkInput, 16);
  int c2 = b.Conv("conv2", c1, 16);
  int add = b.Eltwise("resid", c1, c2);
  b.Conv("conv3", add, 16);
  FuseEltwise(b.net);
  InsertWriteGaps(b.net);
  Network net = Planned(b);
  for (Layer& l : net.layers) {
    if (l.name == "conv2") {
      l.write_gap = 0;
      uint64_t consumer = net.layers.back().placed.processors;
      l.placed.output_processors = consumer == 0xffff ? 0xffff0000 : 0xffff;
    }
  }
  CheckRules(net);
  EXPECT_TRUE(HasCode(net, "AI8X_WRITE_GAP"));
  EXPECT_TRUE(HasCode(net, "AI8X_ELTWISE"));
}

TEST(Ai8xRules, EltwiseShapeMismatchFromBuilderIsReportedByConv1d) {
  // element-wise fused with Conv1d is not allowed (max7800x.py L504-506)
  NetBuilder b({16, 32, 1});
  int c1 = b.Conv("conv1", kNetworkInput, 16, 1, 0);
  b.L(c1).op = OpKind::kConv1d;
  b.L(c1).operands = 2;
  b.L(c1).eltwise = EltwiseOp::kAdd;
  Network net = Planned(b);
  CheckRules(net);
  EXPECT_TRUE(HasCode(net, "AI8X_ELTWISE"));
}

TEST(Ai8xRules, ChwOnlyInFirstLayer) {
  NetBuilder b({3, 8, 8});
  int c1 = b.Conv("conv1", kNetworkInput, 8);
  b.Conv("conv2", c1, 8);
  Network net = Planned(b);
  net.layers[1].placed.chw_input = true;
  CheckRules(net);
  EXPECT_TRUE(HasCode(net, "AI8X_INPUT_FORMAT"));
}

TEST(Ai8xRules, FifoProcessors) {
  NetBuilder b({3, 16, 16});
  b.Conv("conv1", kNetworkInput, 8);
  Ai8xOptions o;
  o.use_fifos = true;
  Network net = Planned(b, o);
  net.layers[0].placed.processors = 0x70;  // not on FIFO processors 0-3
  CheckRules(net);
  EXPECT_TRUE(HasCode(net, "AI8X_FIFO"));
}

TEST(Ai8xRules, BiasMemory) {
  // 8 layers x 1000 biased outputs = 8000 B > 4 x 512 B on MAX78000
  NetBuilder b({8, 1, 1});
  int prev = kNetworkInput;
  for (int i = 0; i < 8; ++i) {
    prev = b.Conv("c" + std::to_string(i), prev, i % 2 ? 8 : 1000, 1, 0, true);
  }
  Network net = Planned(b);
  CheckRules(net);
  EXPECT_TRUE(HasCode(net, "AI8X_BIAS_MEMORY"));
}

// izer/kbias.py L80-81: on MAX78000 a streaming layer 0 with a bias takes one byte more. The
// biases below fill the four 512-byte quadrants exactly (512, 512, 512, 448 + 64), so that byte is
// the one too many (the izer: "bias memory capacity exhausted ... needed: 65 bytes").
TEST(Ai8xRules, BiasMemoryOfAStreamingLayerZeroOnMax78000) {
  for (bool streaming : {false, true}) {
    NetBuilder b({3, 8, 8});
    int prev = b.Conv("c0", kNetworkInput, 64, 3, 1, true);
    int i = 1;
    for (int out : {512, 512, 512, 448}) {
      prev = b.Conv("s" + std::to_string(i), prev, 16, 1, 0, false);
      prev = b.Conv("c" + std::to_string(i++), prev, out, 1, 0, true);
    }
    Network net = Planned(b);
    net.layers[0].placed.streaming = streaming;
    CheckRules(net);
    EXPECT_EQ(HasCode(net, "AI8X_BIAS_MEMORY"), streaming) << "streaming " << streaming;
  }
}

// izer/kbias.py bias_sort: on MAX78000 (REQUIRE_FLATTEN_BIAS_FIRST) a flatten layer's biases are
// placed first, and only then the others longest first, each into the least-used quadrant. With
// 192 flattened and 384, 320, 320, 256, 256 other bytes, longest first fits (384+0, 320+192,
// 320+0, 256+256) but flatten first does not (192+256, 384, 320+256 = 576 > 512). On MAX78002 the
// order is longest first (and its quadrants hold 2048 bytes).
TEST(Ai8xRules, BiasMemoryPlacesFlattenBiasesFirstOnMax78000) {
  for (bool flatten : {false, true}) {
    NetBuilder b({3, 8, 8});
    int prev = kNetworkInput;
    int i = 0;
    for (int out : {320, 256, 320, 256, 384, 192}) {
      if (i > 0) prev = b.Conv("s" + std::to_string(i), prev, 16, 1, 0, false);
      prev = b.Conv("c" + std::to_string(i++), prev, out, 1, 0, true);
    }
    Network net = Planned(b);
    net.layers.back().flatten = flatten;  // the rule reads the flag only
    CheckRules(net);
    EXPECT_EQ(HasCode(net, "AI8X_BIAS_MEMORY"), flatten) << "flatten " << flatten;
  }
}

// izer/kbias.py L222-224: a streaming layer with a bias is a warning on MAX78000 (no
// SUPPORT_STREAM_BIAS), named by its layer and ONNX node, and nothing on MAX78002.
TEST(Ai8xRules, StreamingWithABiasIsAWarningOnMax78000) {
  for (Chip chip : {Chip::kMAX78000, Chip::kMAX78002}) {
    NetBuilder b({3, 8, 8}, chip);
    int c1 = b.Conv("conv1", kNetworkInput, 8, 3, 1, true);
    b.Conv("conv2", c1, 8);
    Network net = Planned(b);
    net.layers[0].placed.streaming = true;
    CheckRules(net);
    int warnings = 0;
    for (const Diagnostic& d : net.diagnostics) {
      if (d.code != "AI8X_STREAMING" || d.severity != Severity::kWarning) continue;
      ++warnings;
      EXPECT_EQ(d.layer_name, "conv1");
      EXPECT_EQ(d.onnx_node, "/conv1/Conv");
      EXPECT_NE(d.message.find("Combining streaming and a bias"), std::string::npos) << d.message;
    }
    EXPECT_EQ(warnings, chip == Chip::kMAX78000 ? 1 : 0) << ChipName(chip);
  }
}

TEST(Ai8xRules, StreamingMustBeAPrefix) {
  NetBuilder b({8, 8, 8});
  int c1 = b.Conv("conv1", kNetworkInput, 8);
  b.Conv("conv2", c1, 8);
  Network net = Planned(b);
  net.layers[1].placed.streaming = true;
  CheckRules(net);
  EXPECT_TRUE(HasCode(net, "AI8X_STREAMING"));
}

}  // namespace
}  // namespace kiln::ai8x

namespace kiln::ai8x {
namespace {

// One module applied to several inputs (the FPN heads of ai87fpndetector): a 64->1024 3x3 conv
// takes 1024 kernel words on every processor, so five applications (5120 words) overflow the
// 4096-word processors unless the izer stores the kernels once (izer/kdedup.py), which it does
// for equal kernels on one processor map.
NetBuilder SharedHeads(bool qat) {
  NetBuilder b({64, 4, 4}, Chip::kMAX78002);
  b.net.qat_weight_chains = qat;
  int trunk = b.Conv("trunk", kNetworkInput, 64);
  b.L(trunk).weight_initializer = "trunk.op.weight";
  b.L(trunk).weight_position = 0;
  int in = trunk;
  for (int k = 0; k < 5; ++k) {
    int f = b.Conv("feat" + std::to_string(k), in, 64);
    b.L(f).weight_initializer = "feat" + std::to_string(k) + ".op.weight";
    b.L(f).weight_position = k == 0 ? 1 : 2 + k;  // the head module is defined right after feat0
    int h = b.Conv(k == 0 ? "head" : "head_" + std::to_string(k), f, 1024);
    b.L(h).weight_initializer = "head.op.weight";
    b.L(h).weight_position = 2;
    b.L(h).output = true;
    in = f;
  }
  for (Layer& l : b.net.layers) l.quantization_known = true;
  return b;
}

TEST(Ai8xDedup, SharedModuleKernelsAreStoredOnceAndTakenByWeightSource) {
  for (bool qat : {true, false}) {
    NetBuilder b = SharedHeads(qat);
    Ai8xOptions o;
    o.chip = Chip::kMAX78002;
    auto r = CompileAi8xNetwork(b.net, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (const Diagnostic& d : r->diagnostics) {
      EXPECT_NE(d.severity, Severity::kError) << d.code << " " << d.layer_name << ": " << d.message;
    }
    EXPECT_TRUE(r->ok);
    int heads = 0, shared = 0;
    for (const Ai8xLayerSummary& l : r->layers) {
      if (l.name.rfind("head", 0) != 0) continue;
      ++heads;
      if (l.kernel_words == 0) ++shared;
      EXPECT_EQ(l.processors, r->layers[2].processors) << l.name << ": twins share one map";
    }
    EXPECT_EQ(heads, 5);
    EXPECT_EQ(shared, 4) << "the first application holds the kernels";
    // trunk + 5 feature convs of 64 words each (4-word aligned), one head of 1024 words
    EXPECT_LT(r->resources.max_kernel_words_used, 2 * 1024);
    YAML::Node doc = YAML::Load(r->yaml);
    int sources = 0;
    for (const auto& l : doc["layers"]) {
      if (!l["weight_source"]) continue;
      ++sources;
      EXPECT_EQ(l["weight_source"].as<int>(), 2) << "the first head is layer 2";
    }
    // A quantized checkpoint holds the head's weights once: the izer needs weight_source; its ONNX
    // reader (non-qat exports) yields them per Conv node, and weight_source would add a copy.
    EXPECT_EQ(sources, qat ? 4 : 0);
  }
}

TEST(Ai8xDedup, DifferentWeightsAreNotShared) {
  NetBuilder b = SharedHeads(true);
  for (Layer& l : b.net.layers) {
    if (l.name == "head_3") l.weight_initializer = "other.op.weight";
  }
  Ai8xOptions o;
  o.chip = Chip::kMAX78002;
  auto r = CompileAi8xNetwork(b.net, o);
  ASSERT_TRUE(r.ok());
  int shared = 0;
  for (const Ai8xLayerSummary& l : r->layers) shared += l.name.rfind("head", 0) == 0 && l.kernel_words == 0;
  EXPECT_EQ(shared, 3);
}

// Two independent branches, exported in the other order than the checkpoint lists their weights.
NetBuilder SwappedBranches(bool qat) {
  NetBuilder b({16, 8, 8}, Chip::kMAX78002);
  b.net.qat_weight_chains = qat;
  int t = b.Conv("trunk", kNetworkInput, 16);
  int y = b.Conv("regression", t, 8);  // runs first, its weights listed last
  int x = b.Conv("classification", t, 8);
  b.L(t).weight_position = 0;
  b.L(x).weight_position = 1;
  b.L(y).weight_position = 2;
  for (int id : {t, x, y}) {
    b.L(id).weight_initializer = b.L(id).name + ".op.weight";
    b.L(id).quantization_known = true;
  }
  b.L(x).output = b.L(y).output = true;
  return b;
}

TEST(Ai8xWeightOrder, IndependentBranchesRunInCheckpointOrderWithAQuantizedCheckpoint) {
  NetBuilder b = SwappedBranches(true);
  CheckWeightOrder(b.net);
  EXPECT_FALSE(HasError(b.net));
  EXPECT_TRUE(HasCode(b.net, "AI8X_WEIGHT_ORDER"));  // the info saying so
  ASSERT_EQ(b.net.layers.size(), 3u);
  EXPECT_EQ(b.net.layers[1].name, "classification");
  EXPECT_EQ(b.net.layers[2].name, "regression");
  // The izer's ONNX reader takes weights in node order: a non-qat export keeps its order and the
  // mismatch stays an error.
  NetBuilder f = SwappedBranches(false);
  CheckWeightOrder(f.net);
  EXPECT_TRUE(HasError(f.net));
  EXPECT_EQ(f.net.layers[1].name, "regression");
}

TEST(Ai8xWeightOrder, AChainOutOfOrderCannotBeReordered) {
  NetBuilder b({16, 8, 8}, Chip::kMAX78002);
  b.net.qat_weight_chains = true;
  int a = b.Conv("a", kNetworkInput, 16);
  int c = b.Conv("c", a, 16);
  b.L(a).weight_position = 1;
  b.L(c).weight_position = 0;
  for (int id : {a, c}) b.L(id).weight_initializer = b.L(id).name + ".op.weight";
  CheckWeightOrder(b.net);
  EXPECT_TRUE(HasError(b.net));
  EXPECT_EQ(b.net.layers[0].name, "a");
}

// Residual blocks on MAX78002 (pre read by c1 and by the add): below the layer limit each block's
// pre goes through a `gap_*` copy as the hand-written MobileNetV2 YAML does; when the copies would
// pass 128 layers, c1 reads pre's interleaved output with read_gap instead.
NetBuilder ResidualBlocks(int blocks) {
  NetBuilder b({16, 8, 8}, Chip::kMAX78002);
  int in = kNetworkInput;
  for (int k = 0; k < blocks; ++k) {
    std::string s = std::to_string(k);
    int pre = b.Conv("pre" + s, in, 16, 3, 1, true);
    int c1 = b.Conv("c1_" + s, pre, 16, 3, 1, true);
    int c2 = b.Conv("c2_" + s, c1, 16, 3, 1, true);
    in = b.Eltwise("add" + s, pre, c2);
  }
  b.Conv("last", in, 16, 3, 1, true);
  return b;
}

TEST(Ai8xReadGap, CopiesBelowTheLayerLimitReadGapAboveIt) {
  NetBuilder small = ResidualBlocks(2);
  FuseEltwise(small.net);
  InsertWriteGaps(small.net);
  int copies = 0, read_gaps = 0;
  for (const Layer& l : small.net.layers) {
    copies += l.gap_layer;
    read_gaps += l.read_gap != 0;
  }
  EXPECT_EQ(copies, 2);
  EXPECT_EQ(read_gaps, 0);

  NetBuilder big = ResidualBlocks(30);  // 121 layers, 151 with copies
  FuseEltwise(big.net);
  InsertWriteGaps(big.net);
  copies = read_gaps = 0;
  for (const Layer& l : big.net.layers) {
    copies += l.gap_layer;
    if (l.read_gap != 0) {
      ++read_gaps;
      EXPECT_EQ(l.name.rfind("c1_", 0), 0u) << l.name;
      EXPECT_EQ(big.net.Find(l.inputs[0])->write_gap, l.read_gap);
    }
  }
  EXPECT_EQ(copies, 0);
  EXPECT_EQ(read_gaps, 30);
  EXPECT_LE(big.net.layers.size(), 128u);
  ChooseInputFormatAndStreaming(big.net, {});
  AllocateProcessors(big.net, {});
  PlanDataMemory(big.net);
  CheckRules(big.net);
  EXPECT_FALSE(HasError(big.net)) << big.net.diagnostics.front().message;
  EXPECT_FALSE(HasCode(big.net, "AI8X_WRITE_GAP"));
  // MAX78000 has no read_gap: the rule says so.
  big.net.chip = Chip::kMAX78000;
  CheckRules(big.net);
  EXPECT_TRUE(HasCode(big.net, "AI8X_WRITE_GAP"));
}

// ai87fpndetector's stem: 64 channels at 128x160 fill a MAX78002 data-memory instance (80 KiB), so
// a layer reading such a map and writing another cannot hold both: the streaming prefix goes on
// until an input and its output fit together (layers 0-3 here, as the hand-written YAML streams
// its stem).
TEST(Ai8xStreaming, PrefixGoesOnWhileInputAndOutputCannotShareAnInstance) {
  NetBuilder b({3, 256, 320}, Chip::kMAX78002);
  int c0 = b.Conv("c0", kNetworkInput, 64);
  int p0 = b.Pool("p0", c0, 2);
  int c1 = b.Conv("c1", p0, 64);
  int c2 = b.Conv("c2", c1, 64);
  int p2 = b.Pool("p2", c2, 2);
  int c3 = b.Conv("c3", p2, 64);
  b.Conv("c4", c3, 64);
  FusePooling(b.net);
  ASSERT_EQ(b.net.layers.size(), 5u);
  ChooseInputFormatAndStreaming(b.net, {});
  std::vector<bool> streaming;
  for (const Layer& l : b.net.layers) streaming.push_back(l.placed.streaming);
  EXPECT_EQ(streaming, (std::vector<bool>{true, true, true, true, false}));
  AllocateProcessors(b.net, {});
  PlanDataMemory(b.net);
  CheckRules(b.net);
  EXPECT_FALSE(HasCode(b.net, "AI8X_DATA_MEMORY"));
}

}  // namespace
}  // namespace kiln::ai8x
