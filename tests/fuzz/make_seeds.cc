// Writes small, valid ONNX models covering many operators into a directory, as fuzz seeds:
//   onnx_fuzz_make_seeds <dir>
// The committed seeds in tests/fuzz/corpus/seed_* were produced by this program; regenerate after
// changing it. Each model is a few nodes with the attributes and constant inputs that the
// operators' onnx 1.12 shape-inference code reads, so mutations reach that code.
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "tests/support/onnx_model_builder.h"

using kiln::testing::OnnxModelBuilder;
using onnx::TensorProto;
namespace kt = kiln::testing;

namespace {

constexpr int32_t F = TensorProto::FLOAT;

OnnxModelBuilder Unary(const std::string& op, std::vector<kt::TestDim> dims, int64_t opset = 13) {
  OnnxModelBuilder b(opset);
  b.Input("x", F, std::move(dims));
  b.Node(op, {"x"}, {"y"}, op);
  b.Output("y");
  return b;
}

std::vector<std::pair<std::string, std::function<OnnxModelBuilder()>>> Seeds() {
  std::vector<std::pair<std::string, std::function<OnnxModelBuilder()>>> s;
  s.emplace_back("transpose", [] {
    auto b = Unary("Transpose", {1, 2, 3, 4});
    kt::SetInts(*b.graph().mutable_node(0), "perm", {0, 2, 3, 1});
    return b;
  });
  s.emplace_back("slice", [] {
    OnnxModelBuilder b(13);
    b.Input("x", F, {4, 6, 8});
    b.Initializer(kt::Int64Tensor("starts", {2}, {1, 0}));
    b.Initializer(kt::Int64Tensor("ends", {2}, {3, -1}));
    b.Initializer(kt::Int64Tensor("axes", {2}, {0, 2}));
    b.Initializer(kt::Int64Tensor("steps", {2}, {1, 2}));
    b.Node("Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"}, "slice");
    b.Output("y");
    return b;
  });
  s.emplace_back("gather_concat", [] {
    OnnxModelBuilder b(13);
    b.Input("x", F, {5, 4});
    b.Initializer(kt::Int64Tensor("idx", {3}, {0, 2, 4}));
    auto& g = b.Node("Gather", {"x", "idx"}, {"g"}, "gather");
    kt::SetInt(g, "axis", 0);
    auto& c = b.Node("Concat", {"g", "x"}, {"y"}, "concat");
    kt::SetInt(c, "axis", 0);
    b.Output("y");
    return b;
  });
  s.emplace_back("split_squeeze", [] {
    OnnxModelBuilder b(13);
    b.Input("x", F, {1, 6, 4});
    b.Initializer(kt::Int64Tensor("split", {2}, {2, 4}));
    auto& sp = b.Node("Split", {"x", "split"}, {"a", "c"}, "split");
    kt::SetInt(sp, "axis", 1);
    b.Initializer(kt::Int64Tensor("axes", {1}, {0}));
    b.Node("Squeeze", {"a", "axes"}, {"sq"}, "squeeze");
    b.Node("Unsqueeze", {"sq", "axes"}, {"y"}, "unsqueeze");
    b.Output("y");
    b.Output("c");
    return b;
  });
  s.emplace_back("resize", [] {
    OnnxModelBuilder b(13);
    b.Input("x", F, {1, 2, 4, 4});
    b.Initializer(kt::FloatTensorRaw("scales", {4}, {1.0f, 1.0f, 2.0f, 2.0f}));
    auto& r = b.Node("Resize", {"x", "", "scales"}, {"y"}, "resize");
    kt::SetString(r, "mode", "nearest");
    b.Output("y");
    return b;
  });
  s.emplace_back("pad_expand_tile", [] {
    OnnxModelBuilder b(13);
    b.Input("x", F, {1, 3});
    b.Initializer(kt::Int64Tensor("pads", {4}, {0, 1, 0, 1}));
    b.Node("Pad", {"x", "pads"}, {"p"}, "pad");
    b.Initializer(kt::Int64Tensor("shape", {2}, {2, 5}));
    b.Node("Expand", {"p", "shape"}, {"e"}, "expand");
    b.Initializer(kt::Int64Tensor("reps", {2}, {2, 1}));
    b.Node("Tile", {"e", "reps"}, {"y"}, "tile");
    b.Output("y");
    return b;
  });
  s.emplace_back("flatten_gemm_softmax", [] {
    OnnxModelBuilder b(13);
    b.Input("x", F, {2, 3, 2, 2});
    auto& f = b.Node("Flatten", {"x"}, {"f"}, "flatten");
    kt::SetInt(f, "axis", 1);
    b.FloatInitializer("w", {5, 12}, kt::RandomFloats(60, 3));
    b.FloatInitializer("c", {5}, kt::RandomFloats(5, 4));
    auto& g = b.Node("Gemm", {"f", "w", "c"}, {"g"}, "gemm");
    kt::SetInt(g, "transB", 1);
    kt::SetFloat(g, "alpha", 0.5f);
    b.Node("Softmax", {"g"}, {"y"}, "softmax");
    b.Output("y");
    return b;
  });
  s.emplace_back("matmul_reduce", [] {
    OnnxModelBuilder b(13);
    b.Input("x", F, {2, 3, 4});
    b.FloatInitializer("w", {4, 5}, kt::RandomFloats(20, 5));
    b.Node("MatMul", {"x", "w"}, {"m"}, "matmul");
    auto& r = b.Node("ReduceMean", {"m"}, {"y"}, "reduce");
    kt::SetInts(r, "axes", {1});
    kt::SetInt(r, "keepdims", 0);
    b.Output("y");
    return b;
  });
  s.emplace_back("globalpool_bn_activations", [] {
    OnnxModelBuilder b(13);
    b.Input("x", F, {1, 4, 5, 5});
    for (const char* p : {"s", "bi", "m", "v"}) b.FloatInitializer(p, {4}, {1.0f, 1.0f, 1.0f, 1.0f});
    b.Node("BatchNormalization", {"x", "s", "bi", "m", "v"}, {"bn"}, "bn");
    auto& l = b.Node("LeakyRelu", {"bn"}, {"l"}, "leaky");
    kt::SetFloat(l, "alpha", 0.2f);
    b.Node("HardSigmoid", {"l"}, {"h"}, "hsig");
    b.Node("GlobalAveragePool", {"h"}, {"y"}, "gap");
    b.Output("y");
    return b;
  });
  s.emplace_back("convtranspose_outpad", [] {
    OnnxModelBuilder b(13);
    b.Input("x", F, {1, 2, 4, 4});
    b.FloatInitializer("w", {2, 3, 3, 3}, kt::RandomFloats(54, 6));
    auto& c = b.Node("ConvTranspose", {"x", "w"}, {"y"}, "convt");
    kt::SetInts(c, "strides", {2, 2});
    kt::SetInts(c, "output_padding", {1, 1});
    kt::SetInts(c, "pads", {1, 1, 1, 1});
    b.Output("y");
    return b;
  });
  s.emplace_back("dynamic_reshape", [] {
    OnnxModelBuilder b(13);
    b.Input("x", F, {"N", 3, 4});
    b.Node("Shape", {"x"}, {"s"}, "shape");
    b.Initializer(kt::Int64Tensor("i0", {}, {0}));
    auto& g = b.Node("Gather", {"s", "i0"}, {"n"}, "gather");
    kt::SetInt(g, "axis", 0);
    b.Initializer(kt::Int64Tensor("ax", {1}, {0}));
    b.Node("Unsqueeze", {"n", "ax"}, {"n1"}, "unsq");
    b.Initializer(kt::Int64Tensor("rest", {1}, {-1}));
    auto& c = b.Node("Concat", {"n1", "rest"}, {"shape2"}, "concat");
    kt::SetInt(c, "axis", 0);
    b.Node("Reshape", {"x", "shape2"}, {"y"}, "reshape");
    b.Output("y");
    return b;
  });
  s.emplace_back("depth_space", [] {
    OnnxModelBuilder b(13);
    b.Input("x", F, {1, 4, 2, 2});
    auto& d = b.Node("DepthToSpace", {"x"}, {"d"}, "d2s");
    kt::SetInt(d, "blocksize", 2);
    auto& s2 = b.Node("SpaceToDepth", {"d"}, {"y"}, "s2d");
    kt::SetInt(s2, "blocksize", 2);
    b.Output("y");
    return b;
  });
  s.emplace_back("cast_where_argmax", [] {
    OnnxModelBuilder b(13);
    b.Input("x", F, {3, 4});
    b.Input("z", F, {3, 4});
    b.Node("Greater", {"x", "z"}, {"c"}, "greater");
    b.Node("Where", {"c", "x", "z"}, {"w"}, "where");
    auto& a = b.Node("ArgMax", {"w"}, {"am"}, "argmax");
    kt::SetInt(a, "axis", 1);
    auto& cast = b.Node("Cast", {"am"}, {"y"}, "cast");
    kt::SetInt(cast, "to", F);
    b.Output("y");
    return b;
  });
  s.emplace_back("topk_cumsum", [] {
    OnnxModelBuilder b(13);
    b.Input("x", F, {2, 8});
    b.Initializer(kt::Int64Tensor("k", {1}, {3}));
    b.Node("TopK", {"x", "k"}, {"v", "i"}, "topk");
    b.Initializer(kt::Int64Tensor("ax", {}, {1}));
    b.Node("CumSum", {"v", "ax"}, {"y"}, "cumsum");
    b.Output("y");
    b.Output("i", TensorProto::INT64);
    return b;
  });
  s.emplace_back("lstm", [] {
    OnnxModelBuilder b(13);
    b.Input("x", F, {5, 1, 3});
    b.FloatInitializer("w", {1, 16, 3}, kt::RandomFloats(48, 7));
    b.FloatInitializer("r", {1, 16, 4}, kt::RandomFloats(64, 8));
    auto& l = b.Node("LSTM", {"x", "w", "r"}, {"y", "yh"}, "lstm");
    kt::SetInt(l, "hidden_size", 4);
    b.Output("y");
    b.Output("yh");
    return b;
  });
  s.emplace_back("constantofshape_range", [] {
    OnnxModelBuilder b(13);
    b.Input("x", F, {2});
    b.Initializer(kt::Int64Tensor("shape", {2}, {2, 3}));
    auto& c = b.Node("ConstantOfShape", {"shape"}, {"c"}, "cos");
    kt::SetTensor(c, "value", kt::FloatTensorRaw("", {1}, {1.5f}));
    b.Initializer(kt::FloatTensorRaw("start", {}, {0.0f}));
    b.Initializer(kt::FloatTensorRaw("limit", {}, {6.0f}));
    b.Initializer(kt::FloatTensorRaw("delta", {}, {2.0f}));
    b.Node("Range", {"start", "limit", "delta"}, {"r"}, "range");
    b.Node("Add", {"c", "r"}, {"y"}, "add");
    b.Output("y");
    return b;
  });
  s.emplace_back("einsum_instnorm", [] {
    OnnxModelBuilder b(13);
    b.Input("x", F, {2, 3, 4});
    b.Input("z", F, {2, 4, 5});
    auto& e = b.Node("Einsum", {"x", "z"}, {"e"}, "einsum");
    kt::SetString(e, "equation", "bij,bjk->bik");
    b.FloatInitializer("s", {2}, {1.0f, 1.0f});
    b.FloatInitializer("bi", {2}, {0.0f, 0.0f});
    b.Node("InstanceNormalization", {"e", "s", "bi"}, {"y"}, "in");
    b.Output("y");
    return b;
  });
  s.emplace_back("clip_dropout_identity_opset11", [] {
    OnnxModelBuilder b(11);
    b.Input("x", F, {1, 4});
    b.Initializer(kt::FloatTensorRaw("lo", {}, {0.0f}));
    b.Initializer(kt::FloatTensorRaw("hi", {}, {6.0f}));
    b.Node("Clip", {"x", "lo", "hi"}, {"c"}, "clip");
    b.Node("Dropout", {"c"}, {"d"}, "drop");
    b.Node("Identity", {"d"}, {"y"}, "id");
    b.Output("y");
    return b;
  });
  s.emplace_back("lppool_maxunpool_opset11", [] {
    OnnxModelBuilder b(11);
    b.Input("x", F, {1, 1, 4, 4});
    auto& p = b.Node("LpPool", {"x"}, {"y"}, "lppool");
    kt::SetInts(p, "kernel_shape", {2, 2});
    kt::SetInts(p, "strides", {2, 2});
    auto& m = b.Node("MaxPool", {"x"}, {"m", "idx"}, "maxpool");
    kt::SetInts(m, "kernel_shape", {2, 2});
    kt::SetInts(m, "strides", {2, 2});
    auto& u = b.Node("MaxUnpool", {"m", "idx"}, {"u"}, "unpool");
    kt::SetInts(u, "kernel_shape", {2, 2});
    kt::SetInts(u, "strides", {2, 2});
    b.Output("y");
    b.Output("u");
    return b;
  });
  s.emplace_back("loop", [] {
    OnnxModelBuilder b(13);
    b.Input("x", F, {2});
    b.Initializer(kt::Int64Tensor("trip", {}, {3}));
    b.Initializer(kt::BoolTensor("cond", {}, {true}));
    onnx::GraphProto body;
    body.set_name("body");
    auto add_in = [&](const char* n, int32_t t) {
      auto* vi = body.add_input();
      vi->set_name(n);
      vi->mutable_type()->mutable_tensor_type()->set_elem_type(t);
      vi->mutable_type()->mutable_tensor_type()->mutable_shape();
    };
    add_in("i", TensorProto::INT64);
    add_in("c_in", TensorProto::BOOL);
    add_in("acc", F);
    auto* n1 = body.add_node();
    n1->set_op_type("Identity");
    n1->add_input("c_in");
    n1->add_output("c_out");
    auto* n2 = body.add_node();
    n2->set_op_type("Add");
    n2->add_input("acc");
    n2->add_input("x");
    n2->add_output("acc_out");
    for (auto [n, t] : {std::pair<const char*, int32_t>{"c_out", TensorProto::BOOL}, {"acc_out", F}}) {
      auto* o = body.add_output();
      o->set_name(n);
      o->mutable_type()->mutable_tensor_type()->set_elem_type(t);
    }
    auto& loop = b.Node("Loop", {"trip", "cond", "x"}, {"y"}, "loop");
    kt::SetGraph(loop, "body", body);
    b.Output("y");
    return b;
  });
  s.emplace_back("fp16_bf16_cast_conv", [] {
    OnnxModelBuilder b(13);
    b.Input("x", F, {1, 2, 5, 5});
    b.Initializer(kt::Float16TensorInt32("w16", {3, 2, 3, 3}, kt::RandomFloats(54, 9)));
    auto& c = b.Node("Cast", {"w16"}, {"w"}, "cast");
    kt::SetInt(c, "to", F);
    b.Initializer(kt::BFloat16TensorRaw("b16", {3}, {0.1f, 0.2f, 0.3f}));
    auto& c2 = b.Node("Cast", {"b16"}, {"bias"}, "cast2");
    kt::SetInt(c2, "to", F);
    auto& conv = b.Node("Conv", {"x", "w", "bias"}, {"y"}, "conv");
    kt::SetString(conv, "auto_pad", "SAME_UPPER");
    kt::SetInts(conv, "strides", {2, 2});
    b.Output("y");
    return b;
  });
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 2;
  }
  int n = 0;
  for (auto& [name, make] : Seeds()) {
    const std::string path = std::string(argv[1]) + "/seed_" + name + ".onnx";
    std::ofstream out(path, std::ios::binary);
    out << make().Serialize();
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
    ++n;
  }
  std::printf("wrote %d seeds\n", n);
  return 0;
}
