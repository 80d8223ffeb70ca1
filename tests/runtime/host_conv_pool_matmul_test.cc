// The oneDNN-backed host kernels Conv / ConvTranspose (runtime/host_kernels/conv.cc), pooling
// (pooling.cc) and MatMul / Gemm (matmul.cc), run through the registry as the executor runs them,
// against direct double-precision loops written from the ONNX operator definitions
// (onnx/docs/Operators.md), including the chunked executions of big convs and products.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "runtime/host_kernels/registry.h"
#include "tests/runtime/node_builder.h"
#include "tests/convplan/test_util.h"

namespace kiln::runtime {
namespace {

using device::DataType;
using device::Tensor;
using onnx_fe::Attribute;
using onnx_fe::AttributeType;
using onnx_fe::Node;
using testutil::SetI;
using testutil::SetIs;
using testutil::SetF;
using testutil::SetS;
using Shape = std::vector<int64_t>;

Node MakeNode(const std::string& op, size_t n_in, size_t n_out = 1) {
  Node n;
  n.name = op + "_0";
  n.op_type = op;
  n.opset_version = 13;
  for (size_t i = 0; i < n_in; ++i) n.inputs.push_back("in" + std::to_string(i));
  for (size_t i = 0; i < n_out; ++i) n.outputs.push_back("out" + std::to_string(i));
  return n;
}
Tensor Rand(Shape s, uint32_t seed) {
  auto t = Tensor::Zeros(std::move(s));
  EXPECT_TRUE(t.ok());
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (float& v : t->span<float>()) v = d(g);
  return std::move(*t);
}

Result<std::vector<Tensor>> RunK(const Node& n, const HostKernelInputs& in, const device::CancelToken* cancel = nullptr) {
  return HostKernels().Run(n, in, HostKernelContext{convplan::testutil::Reference(), cancel});
}

Tensor Run1(const Node& n, const HostKernelInputs& in) {
  auto r = RunK(n, in);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move((*r)[0]) : Tensor();
}

int64_t Prod(const Shape& s) {
  int64_t p = 1;
  for (int64_t d : s) p *= d;
  return p;
}

// Geometry of a direct reference conv / conv-transpose (explicit begin pads, output size given).
struct Geo {
  Shape strides, dil, pb, out;
  int64_t group = 1;
};

// Multi-index helpers over up to 3 spatial axes.
Shape Unflat(int64_t i, const Shape& s) {
  Shape idx(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    idx[d] = i % s[d];
    i /= s[d];
  }
  return idx;
}
int64_t Flat(const Shape& idx, const Shape& s) {
  int64_t f = 0;
  for (size_t d = 0; d < s.size(); ++d) f = f * s[d] + idx[d];
  return f;
}

// ONNX Conv, one output element y[n, m, o...].
double ConvAt(const Tensor& x, const Tensor& w, const Tensor* b, const Geo& g, int64_t n, int64_t m, const Shape& o) {
  const Shape in(x.shape().begin() + 2, x.shape().end()), k(w.shape().begin() + 2, w.shape().end());
  const int64_t C = x.dim(1), Cg = w.dim(1), Mg = w.dim(0) / g.group, gi = m / Mg;
  double acc = b != nullptr ? b->data<float>()[m] : 0.0;
  for (int64_t c = 0; c < Cg; ++c) {
    for (int64_t t = 0; t < Prod(k); ++t) {
      const Shape kt = Unflat(t, k);
      Shape pos(in.size());
      bool inside = true;
      for (size_t d = 0; d < in.size(); ++d) {
        pos[d] = o[d] * g.strides[d] - g.pb[d] + kt[d] * g.dil[d];
        inside = inside && pos[d] >= 0 && pos[d] < in[d];
      }
      if (!inside) continue;
      acc += static_cast<double>(x.data<float>()[(n * C + gi * Cg + c) * Prod(in) + Flat(pos, in)]) *
             w.data<float>()[(m * Cg + c) * Prod(k) + t];
    }
  }
  return acc;
}

// ONNX ConvTranspose, one output element y[n, m, o...]: sum over x[n, c, i] w[c, m', t] with
// o = i·s + t·d - pb.
double ConvTransposeAt(const Tensor& x, const Tensor& w, const Tensor* b, const Geo& g, int64_t n, int64_t m,
                       const Shape& o) {
  const Shape in(x.shape().begin() + 2, x.shape().end()), k(w.shape().begin() + 2, w.shape().end());
  const int64_t C = x.dim(1), Cg = C / g.group, Mg = w.dim(1), gi = m / Mg, mm = m % Mg;
  double acc = b != nullptr ? b->data<float>()[m] : 0.0;
  for (int64_t c = 0; c < Cg; ++c) {
    for (int64_t t = 0; t < Prod(k); ++t) {
      const Shape kt = Unflat(t, k);
      Shape pos(in.size());
      bool inside = true;
      for (size_t d = 0; d < in.size(); ++d) {
        const int64_t num = o[d] + g.pb[d] - kt[d] * g.dil[d];
        inside = inside && num >= 0 && num % g.strides[d] == 0 && num / g.strides[d] < in[d];
        pos[d] = inside ? num / g.strides[d] : 0;
      }
      if (!inside) continue;
      const int64_t ci = gi * Cg + c;
      acc += static_cast<double>(x.data<float>()[(n * C + ci) * Prod(in) + Flat(pos, in)]) *
             w.data<float>()[(ci * Mg + mm) * Prod(k) + t];
    }
  }
  return acc;
}

// Checks every element (or every `step`-th) of y against the direct loop.
void ExpectConv(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b, const Geo& g, bool transpose,
                int64_t step = 1) {
  const int64_t M = transpose ? w.dim(1) * g.group : w.dim(0);
  Shape want = {x.dim(0), M};
  want.insert(want.end(), g.out.begin(), g.out.end());
  ASSERT_EQ(y.shape(), want);
  const int64_t OS = Prod(g.out);
  for (int64_t e = 0; e < y.num_elements(); e += step) {
    const int64_t n = e / (M * OS), m = (e / OS) % M;
    const Shape o = Unflat(e % OS, g.out);
    const double ref = transpose ? ConvTransposeAt(x, w, b, g, n, m, o) : ConvAt(x, w, b, g, n, m, o);
    ASSERT_NEAR(y.data<float>()[e], ref, 1e-4 * (1 + std::fabs(ref))) << "element " << e;
  }
}

TEST(HostConv, Grouped2dDilatedSameLowerWithBias) {
  Tensor x = Rand({2, 4, 7, 6}, 1), w = Rand({6, 2, 3, 2}, 2), b = Rand({6}, 3);
  Node n = MakeNode("Conv", 3);
  SetI(n, "group", 2);
  SetIs(n, "strides", {2, 1});
  SetIs(n, "dilations", {2, 1});
  SetS(n, "auto_pad", "SAME_LOWER");
  // out = ceil(in / s) = (4, 6); total = (out-1)·s + dk - in = (3·2 + 5 - 7, 5 + 2 - 6) = (4, 1);
  // SAME_LOWER puts the odd one first: begin pads (2, 1).
  ExpectConv(Run1(n, {&x, &w, &b}), x, w, &b, Geo{{2, 1}, {2, 1}, {2, 1}, {4, 6}, 2}, false);
}

TEST(HostConv, ThreeDimensionalAsymmetricPadsNoBias) {
  Tensor x = Rand({1, 3, 5, 6, 4}, 4), w = Rand({4, 3, 3, 2, 3}, 5);
  Node n = MakeNode("Conv", 2);
  SetIs(n, "strides", {2, 1, 1});
  SetIs(n, "pads", {1, 0, 2, 0, 1, 0});
  // out = floor((in + pads - k) / s) + 1 = ((5+1-3)/2+1, 6+1-2+1, 4+2-3+1) = (2, 6, 4).
  ExpectConv(Run1(n, {&x, &w}), x, w, nullptr, Geo{{2, 1, 1}, {1, 1, 1}, {1, 0, 2}, {2, 6, 4}}, false);
}

TEST(HostConv, Float64And16RunConvertedAndKeepTheirType) {
  Tensor x = Rand({1, 3, 9}, 6), w = Rand({3, 1, 3}, 7);
  Node n = MakeNode("Conv", 2);
  SetI(n, "group", 3);  // depthwise 1-D
  SetIs(n, "pads", {1, 1});
  for (DataType t : {DataType::kFloat64, DataType::kFloat16}) {
    auto xd = x.CastTo(t), wd = w.CastTo(t);
    ASSERT_TRUE(xd.ok() && wd.ok());
    Tensor y = Run1(n, {&*xd, &*wd});
    EXPECT_EQ(y.dtype(), t);
    auto yf = y.ToFloat32();
    ASSERT_TRUE(yf.ok());
    auto xr = xd->ToFloat32(), wr = wd->ToFloat32();  // the values the kernel saw
    ASSERT_TRUE(xr.ok() && wr.ok());
    const Geo g{{1}, {1}, {1}, {9}, 3};
    for (int64_t e = 0; e < 27; ++e) {
      const double ref = ConvAt(*xr, *wr, nullptr, g, 0, e / 9, {e % 9});
      EXPECT_NEAR(yf->data<float>()[e], ref, t == DataType::kFloat16 ? 4e-3 : 1e-5) << e;
    }
  }
}

TEST(HostConvTranspose, Grouped3dWithOutputPaddingPadsAndBias) {
  Tensor x = Rand({1, 4, 3, 2, 3}, 8), w = Rand({4, 3, 2, 2, 3}, 9), b = Rand({6}, 10);
  Node n = MakeNode("ConvTranspose", 3);
  SetI(n, "group", 2);
  SetIs(n, "strides", {2, 1, 2});
  SetIs(n, "output_padding", {1, 0, 1});
  SetIs(n, "pads", {1, 0, 0, 0, 1, 1});
  // out = s·(in-1) + output_padding + k - pb - pe = (4+1+2-1, 1+0+2-1, 4+1+3-0-1) = (6, 2, 7).
  ExpectConv(Run1(n, {&x, &w, &b}), x, w, &b, Geo{{2, 1, 2}, {1, 1, 1}, {1, 0, 0}, {6, 2, 7}, 2}, true);
}

TEST(HostConvTranspose, OutputShapeBeyondTheFullOutputHoldsTheBias) {
  Tensor x = Rand({1, 2, 3}, 11), w = Rand({2, 1, 3}, 12), b = Rand({1}, 13);
  Node n = MakeNode("ConvTranspose", 3);
  SetIs(n, "strides", {2});
  SetIs(n, "output_shape", {9});  // full output 2·2 + 3 = 7: total padding < 0 → pads 0, 2 extra
  Tensor y = Run1(n, {&x, &w, &b});
  ExpectConv(y, x, w, &b, Geo{{2}, {1}, {0}, {9}}, true);
  EXPECT_FLOAT_EQ(y.data<float>()[7], b.data<float>()[0]);
  EXPECT_FLOAT_EQ(y.data<float>()[8], b.data<float>()[0]);
}

TEST(HostConv, BigConvsRunInChunksWithTheSameResult) {
  // Above the 2^27 multiply-adds of one execution (conv.cc kChunkMacs): split by output channels
  // (group 1: 302M in 2 chunks), by groups (group 8: 151M, 7 groups then 1), by output channels
  // inside a group (group 2: 604M, 2 chunks per group), and a ConvTranspose by output channels
  // (268M, 2 chunks). Every 97th output element is checked against the direct loop.
  struct Case {
    Shape x, w;
    int64_t group;
    bool transpose;
  };
  for (const Case& c : {Case{{1, 64, 64, 64}, {128, 64, 3, 3}, 1, false}, Case{{1, 128, 64, 64}, {256, 16, 3, 3}, 8, false},
                        Case{{1, 128, 64, 64}, {256, 64, 3, 3}, 2, false},
                        Case{{1, 64, 32, 32}, {64, 256, 4, 4}, 1, true}}) {
    Tensor x = Rand(c.x, 14), w = Rand(c.w, 15), b = Rand({c.transpose ? c.w[1] : c.w[0]}, 16);
    Node n = MakeNode(c.transpose ? "ConvTranspose" : "Conv", 3);
    SetI(n, "group", c.group);
    if (c.transpose) {
      SetIs(n, "strides", {2, 2});
      SetIs(n, "pads", {1, 1, 1, 1});
    } else {
      SetIs(n, "pads", {1, 1, 1, 1});
    }
    const Geo g = c.transpose ? Geo{{2, 2}, {1, 1}, {1, 1}, {64, 64}, 1} : Geo{{1, 1}, {1, 1}, {1, 1}, {64, 64}, c.group};
    ExpectConv(Run1(n, {&x, &w, &b}), x, w, &b, g, c.transpose, 97);
  }
}

TEST(HostConv, BigConvHonoursTheCancelTokenSmallOneFinishes) {
  Tensor x = Rand({1, 64, 64, 64}, 17), w = Rand({128, 64, 3, 3}, 18);
  Node n = MakeNode("Conv", 2);
  device::CancelToken cancelled;
  cancelled.Cancel();
  auto r = RunK(n, {&x, &w}, &cancelled);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled);
  Tensor xs = Rand({1, 2, 5, 5}, 19), ws = Rand({2, 2, 3, 3}, 20);
  EXPECT_TRUE(RunK(n, {&xs, &ws}, &cancelled).ok());
}

TEST(HostConv, BadShapesAreInvalidArgumentNamingTheNode) {
  Tensor x = Rand({1, 4, 5, 5}, 21), w = Rand({2, 3, 3, 3}, 22);
  auto r = RunK(MakeNode("Conv", 2), {&x, &w});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("Conv_0"), std::string::npos) << r.status().ToString();
  Tensor x6 = Rand({1, 1, 2, 2, 2, 2}, 23), w6 = Rand({1, 1, 1, 1, 1, 1}, 24);
  auto r6 = RunK(MakeNode("Conv", 2), {&x6, &w6});
  EXPECT_EQ(r6.status().code(), StatusCode::kInvalidArgument);
}

TEST(HostConv, MemoryEstimateCoversTheOutput) {
  Node n = MakeNode("Conv", 2);
  SetIs(n, "strides", {2, 2, 2});
  auto b = HostKernels().EstimateBytes(n, {{2, 3, 8, 8, 8}, {5, 3, 3, 3, 3}});
  ASSERT_TRUE(b.ok());
  const int64_t out = 2 * 5 * 3 * 3 * 3 * 4;  // floor((8-3)/2)+1 = 3 per axis
  EXPECT_GE(*b, out);
  EXPECT_LE(*b, 2 * out + (2 * 3 * 512 + 5 * 81) * 4);
}

// ---------------------------------------------------------------------------------------------
// Pooling

TEST(HostPool, MaxPool3dCeilDilatedPadded) {
  Tensor x = Rand({2, 3, 6, 5, 7}, 30);
  Node n = MakeNode("MaxPool", 1);
  SetIs(n, "kernel_shape", {2, 3, 2});
  SetIs(n, "strides", {2, 2, 3});
  SetIs(n, "dilations", {1, 2, 1});
  SetIs(n, "pads", {1, 0, 1, 0, 1, 1});
  SetI(n, "ceil_mode", 1);
  Tensor y = Run1(n, {&x});
  // D: span 6+1-2 = 5 → ceil(5/2)+1 = 4, last start 6 < 7 → 4. H: dk 5, span 5+1-5 = 1 → 2 (start
  // 2 < 5). W: span 7+2-2 = 7 → ceil(7/3)+1 = 4, start 9 >= 7+1 → 3 (the corrected rule).
  const Shape out = {4, 2, 3}, in = {6, 5, 7}, k = {2, 3, 2}, s = {2, 2, 3}, d = {1, 2, 1}, pb = {1, 0, 1};
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4, 2, 3}));
  for (int64_t p = 0; p < 6; ++p) {
    for (int64_t o = 0; o < Prod(out); ++o) {
      const Shape oi = Unflat(o, out);
      float best = -std::numeric_limits<float>::infinity();
      for (int64_t t = 0; t < Prod(k); ++t) {
        const Shape kt = Unflat(t, k);
        Shape pos(3);
        bool inside = true;
        for (int a = 0; a < 3; ++a) {
          pos[a] = oi[a] * s[a] - pb[a] + kt[a] * d[a];
          inside = inside && pos[a] >= 0 && pos[a] < in[a];
        }
        if (inside) best = std::max(best, x.data<float>()[p * Prod(in) + Flat(pos, in)]);
      }
      ASSERT_EQ(y.data<float>()[p * Prod(out) + o], best) << p << " " << o;
    }
  }
}

TEST(HostPool, CeilModeLastWindowMustStartInsideTheInput) {
  Tensor x = Rand({1, 1, 4}, 31);
  Node n = MakeNode("AveragePool", 1);
  SetIs(n, "kernel_shape", {2});
  SetIs(n, "strides", {2});
  SetIs(n, "pads", {0, 1});
  SetI(n, "ceil_mode", 1);
  // ceil((4+1-2)/2)+1 = 3 windows, but the third would start at 4, inside the end pad only.
  EXPECT_EQ(Run1(n, {&x}).shape(), (Shape{1, 1, 2}));
}

TEST(HostPool, AveragePoolCountIncludePadIgnoresTheCeilOverhang) {
  Tensor x = Rand({1, 2, 5, 5, 5}, 32);
  for (int64_t cip : {0, 1}) {
    Node n = MakeNode("AveragePool", 1);
    SetIs(n, "kernel_shape", {3, 3, 3});
    SetIs(n, "strides", {2, 2, 2});
    SetIs(n, "pads", {1, 0, 0, 0, 0, 0});
    SetI(n, "ceil_mode", 1);
    SetI(n, "count_include_pad", cip);
    Tensor y = Run1(n, {&x});
    // D: span 5+1-3 = 3 → 3 windows (the last starts at 3 < 6 and overhangs the input by one:
    // never counted); H, W: 2 windows inside the input. D's first window counts its begin pad
    // only with count_include_pad.
    ASSERT_EQ(y.shape(), (Shape{1, 2, 3, 2, 2}));
    const Shape out = {3, 2, 2}, in = {5, 5, 5};
    for (int64_t p = 0; p < 2; ++p) {
      for (int64_t o = 0; o < 12; ++o) {
        const Shape oi = Unflat(o, out);
        double sum = 0;
        int64_t real = 0, counted = 1;
        for (int a = 0; a < 3; ++a) {
          const int64_t begin = oi[a] * 2 - (a == 0 ? 1 : 0);
          int64_t c = 0;
          for (int64_t t = 0; t < 3; ++t) c += begin + t >= (a == 0 ? -1 : 0) && begin + t < 5 ? 1 : 0;
          counted *= c;
        }
        for (int64_t t = 0; t < 27; ++t) {
          const Shape kt = Unflat(t, {3, 3, 3});
          Shape pos = {oi[0] * 2 - 1 + kt[0], oi[1] * 2 + kt[1], oi[2] * 2 + kt[2]};
          if (pos[0] < 0 || pos[0] >= 5 || pos[1] >= 5 || pos[2] >= 5) continue;
          sum += x.data<float>()[p * 125 + Flat(pos, in)];
          ++real;
        }
        const double want = sum / static_cast<double>(cip ? counted : real);
        EXPECT_NEAR(y.data<float>()[p * 12 + o], want, 1e-5) << cip << " " << p << " " << o;
      }
    }
  }
}

TEST(HostPool, MaxPoolIndicesBothStorageOrdersWithBatchAndChannelOffsets) {
  // x[n, c, h, w] = distinct values; 2x2 windows, stride 2 on a 2x4 plane → 1x2 outputs.
  Tensor x = Rand({2, 2, 2, 4}, 33);
  for (int64_t order : {0, 1}) {
    Node n = MakeNode("MaxPool", 1, 2);
    SetIs(n, "kernel_shape", {2, 2});
    SetIs(n, "strides", {2, 2});
    SetI(n, "storage_order", order);
    auto r = RunK(n, {&x});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->size(), 2u);
    const Tensor& y = (*r)[0];
    const Tensor& ind = (*r)[1];
    ASSERT_EQ(ind.dtype(), DataType::kInt64);
    ASSERT_EQ(ind.shape(), (Shape{2, 2, 1, 2}));
    for (int64_t p = 0; p < 4; ++p) {
      for (int64_t ow = 0; ow < 2; ++ow) {
        int64_t bh = 0, bw = 0;
        float best = -2;
        for (int64_t h = 0; h < 2; ++h) {
          for (int64_t w = 2 * ow; w < 2 * ow + 2; ++w) {
            const float v = x.data<float>()[p * 8 + h * 4 + w];
            if (v > best) {
              best = v;
              bh = h;
              bw = w;
            }
          }
        }
        EXPECT_EQ(y.data<float>()[p * 2 + ow], best);
        const int64_t within = order == 0 ? bh * 4 + bw : bh + bw * 2;
        EXPECT_EQ(ind.data<int64_t>()[p * 2 + ow], p * 8 + within) << order << " " << p << " " << ow;
      }
    }
  }
}

TEST(HostPool, MaxPoolIntegerAndFloat64Types) {
  Node n = MakeNode("MaxPool", 1);
  SetIs(n, "kernel_shape", {3});
  SetIs(n, "pads", {1, 1});
  for (DataType t : {DataType::kInt8, DataType::kUInt8, DataType::kFloat64, DataType::kFloat16}) {
    auto xf = Tensor::FromFloats({1, 1, 6}, std::vector<float>{3, 100, 7, 2, 9, 1});
    ASSERT_TRUE(xf.ok());
    auto x = xf->CastTo(t);
    ASSERT_TRUE(x.ok());
    Tensor y = Run1(n, {&*x});
    ASSERT_EQ(y.dtype(), t) << device::DataTypeName(t);
    auto yf = y.ToFloat32();
    ASSERT_TRUE(yf.ok());
    EXPECT_EQ(std::vector<float>(yf->span<float>().begin(), yf->span<float>().end()),
              (std::vector<float>{100, 100, 100, 9, 9, 9}))
        << device::DataTypeName(t);
  }
  EXPECT_EQ(HostKernels().FindPath("MaxPool", DataType::kUInt8)->path, KernelPath::kOneDnn);
  EXPECT_EQ(HostKernels().FindPath("MaxPool", DataType::kFloat64)->path, KernelPath::kTyped);
  EXPECT_EQ(HostKernels().FindPath("AveragePool", DataType::kInt8), nullptr);
}

TEST(HostPool, GlobalPoolsAnyRank) {
  // {2, 4, 1, 1}: a 1x1 map (inception_v3 at 75x75 ends on one), which oneDNN cannot reduce.
  for (const Shape& s : {Shape{2, 3, 5}, Shape{1, 2, 3, 4}, Shape{2, 2, 3, 2, 4}, Shape{2, 4, 1, 1}}) {
    Tensor x = Rand(s, 34);
    const int64_t planes = s[0] * s[1], S = x.num_elements() / planes;
    Shape ys = {s[0], s[1]};
    ys.resize(s.size(), 1);
    for (const char* op : {"GlobalMaxPool", "GlobalAveragePool"}) {
      Tensor y = Run1(MakeNode(op, 1), {&x});
      ASSERT_EQ(y.shape(), ys) << op;
      for (int64_t p = 0; p < planes; ++p) {
        const float* a = x.data<float>() + p * S;
        const double want = std::string(op) == "GlobalMaxPool" ? *std::max_element(a, a + S)
                                                                : std::accumulate(a, a + S, 0.0) / static_cast<double>(S);
        EXPECT_NEAR(y.data<float>()[p], want, 1e-6) << op;
      }
    }
  }
  auto x64 = Rand({1, 2, 3, 3}, 35).CastTo(DataType::kFloat64);
  ASSERT_TRUE(x64.ok());
  Tensor y = Run1(MakeNode("GlobalAveragePool", 1), {&*x64});
  ASSERT_EQ(y.dtype(), DataType::kFloat64);
  double sum = 0;
  for (int i = 0; i < 9; ++i) sum += x64->data<double>()[i];
  EXPECT_DOUBLE_EQ(y.data<double>()[0], sum / 9);
}

// ---------------------------------------------------------------------------------------------
// MatMul / Gemm

double MatAt(const Tensor& t, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off = off * t.dim(static_cast<int>(d)) + idx[d];
  return t.data<float>()[off];
}

TEST(HostMatMul, BatchBroadcastOnBothSides) {
  Tensor a = Rand({2, 1, 3, 4}, 40), b = Rand({5, 4, 2}, 41);
  Tensor y = Run1(MakeNode("MatMul", 2), {&a, &b});
  ASSERT_EQ(y.shape(), (Shape{2, 5, 3, 2}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 5; ++j)
      for (int64_t m = 0; m < 3; ++m)
        for (int64_t n = 0; n < 2; ++n) {
          double acc = 0;
          for (int64_t k = 0; k < 4; ++k) acc += MatAt(a, {i, 0, m, k}) * MatAt(b, {j, k, n});
          EXPECT_NEAR(y.data<float>()[((i * 5 + j) * 3 + m) * 2 + n], acc, 1e-5);
        }
  Tensor v = Rand({4}, 42);
  Tensor dot = Run1(MakeNode("MatMul", 2), {&v, &v});  // 1-D · 1-D → a scalar
  EXPECT_EQ(dot.shape(), Shape{});
  double d = 0;
  for (float e : v.span<float>()) d += static_cast<double>(e) * e;
  EXPECT_NEAR(dot.data<float>()[0], d, 1e-5);
  Tensor vb = Run1(MakeNode("MatMul", 2), {&v, &b});  // [4] · [5, 4, 2] → [5, 2]
  EXPECT_EQ(vb.shape(), (Shape{5, 2}));
}

TEST(HostMatMul, BigProductRunsInRowChunks) {
  Tensor a = Rand({2, 2048, 256}, 43), b = Rand({256, 160}, 44);  // 168M multiply-adds
  Tensor y = Run1(MakeNode("MatMul", 2), {&a, &b});
  ASSERT_EQ(y.shape(), (Shape{2, 2048, 160}));
  for (int64_t e = 0; e < y.num_elements(); e += 101) {
    const int64_t bi = e / (2048 * 160), m = (e / 160) % 2048, n = e % 160;
    double acc = 0;
    for (int64_t k = 0; k < 256; ++k) acc += MatAt(a, {bi, m, k}) * MatAt(b, {k, n});
    ASSERT_NEAR(y.data<float>()[e], acc, 1e-4) << e;
  }
  device::CancelToken cancelled;
  cancelled.Cancel();
  EXPECT_EQ(RunK(MakeNode("MatMul", 2), {&a, &b}, &cancelled).status().code(), StatusCode::kCancelled);
}

TEST(HostMatMul, Int64IsExactAbove2To24) {
  auto a = Tensor::Zeros({1, 2}, DataType::kInt64), b = Tensor::Zeros({2, 1}, DataType::kInt64);
  ASSERT_TRUE(a.ok() && b.ok());
  a->data<int64_t>()[0] = (int64_t{1} << 30) + 1;
  a->data<int64_t>()[1] = 3;
  b->data<int64_t>()[0] = (int64_t{1} << 20) + 7;
  b->data<int64_t>()[1] = -5;
  Tensor y = Run1(MakeNode("MatMul", 2), {&*a, &*b});
  ASSERT_EQ(y.dtype(), DataType::kInt64);
  EXPECT_EQ(y.data<int64_t>()[0], ((int64_t{1} << 30) + 1) * ((int64_t{1} << 20) + 7) - 15);
  EXPECT_EQ(HostKernels().FindPath("MatMul", DataType::kInt64)->path, KernelPath::kTyped);
  EXPECT_EQ(HostKernels().FindPath("MatMul", DataType::kFloat32)->path, KernelPath::kOneDnn);
}

TEST(HostGemm, TransposesAlphaBetaAndBroadcastC) {
  Tensor a = Rand({5, 3}, 45), b = Rand({4, 5}, 46);  // A is [K, M], B is [N, K]
  for (const Shape& cs : {Shape{4}, Shape{3, 1}, Shape{1, 1}, Shape{3, 4}}) {
    Tensor c = Rand(cs, 47);
    Node n = MakeNode("Gemm", 3);
    SetI(n, "transA", 1);
    SetI(n, "transB", 1);
    SetF(n, "alpha", 0.5f);
    SetF(n, "beta", -2.f);
    Tensor y = Run1(n, {&a, &b, &c});
    ASSERT_EQ(y.shape(), (Shape{3, 4}));
    for (int64_t m = 0; m < 3; ++m)
      for (int64_t j = 0; j < 4; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < 5; ++k) acc += MatAt(a, {k, m}) * MatAt(b, {j, k});
        const int64_t ci = (cs.size() == 1 ? 0 : (cs[0] == 1 ? 0 : m) * cs[1]) + (cs.back() == 1 ? 0 : j);
        EXPECT_NEAR(y.data<float>()[m * 4 + j], 0.5 * acc - 2.0 * c.data<float>()[ci], 1e-5);
      }
  }
  auto a64 = a.CastTo(DataType::kFloat64), b64 = b.CastTo(DataType::kFloat64);
  ASSERT_TRUE(a64.ok() && b64.ok());
  Node n = MakeNode("Gemm", 2);
  SetI(n, "transA", 1);
  SetI(n, "transB", 1);
  Tensor y = Run1(n, {&*a64, &*b64});
  ASSERT_EQ(y.dtype(), DataType::kFloat64);
  double acc = 0;
  for (int64_t k = 0; k < 5; ++k) acc += a64->data<double>()[k * 3] * b64->data<double>()[k];
  EXPECT_DOUBLE_EQ(y.data<double>()[0], acc);
}

}  // namespace
}  // namespace kiln::runtime
