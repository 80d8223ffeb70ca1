// api/: request validation and memory bounds — out-of-range enum values (CheckEnumValues), the
// per-run memory estimate and check (runtime/memory_estimate.h, CheckRunMemory), the plan cache
// bounded in bytes, and the ai8x compiler's refusal of a kernel larger than its input.
#include <gtest/gtest.h>

#include "api/compile_ai8x.h"
#include "api/convert.h"
#include "api/run_conv.h"
#include "kiln/v1/compile.pb.h"
#include "tests/support/onnx_model_builder.h"

namespace kiln::api {
namespace {

using testing::OnnxModelBuilder;

std::string ConvModel(int64_t h, int64_t w, int64_t k, int64_t pads, int64_t in_c = 1, int64_t out_c = 1) {
  OnnxModelBuilder b;
  b.Input("x", onnx::TensorProto::FLOAT, {1, in_c, h, w});
  b.FloatInitializer("w", {out_c, in_c, k, k}, std::vector<float>(static_cast<size_t>(out_c * in_c * k * k), 0.25f));
  auto& n = b.Node("Conv", {"x", "w"}, {"y"}, "conv");
  testing::SetInts(n, "kernel_shape", {k, k});
  testing::SetInts(n, "pads", {pads, pads, pads, pads});
  b.Output("y");
  return b.Serialize();
}

TEST(RequestLimits, OutOfRangeEnumsNameTheField) {
  kiln::v1::RunConvLayersRequest r;
  EXPECT_TRUE(CheckEnumValues(r).ok());
  r.set_mode(static_cast<kiln::v1::RunMode>(7));
  Status st = CheckEnumValues(r);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "mode: 7 is not a kiln.v1.RunMode value");
  r.set_mode(kiln::v1::PER_LAYER);
  r.mutable_precision()->set_arch(static_cast<kiln::v1::Arch>(99));
  EXPECT_EQ(CheckEnumValues(r).message(), "precision.arch: 99 is not a kiln.v1.Arch value");
  r.mutable_precision()->set_arch(kiln::v1::BLACKHOLE);
  r.mutable_precision()->set_board(static_cast<kiln::v1::Board>(-3));
  EXPECT_EQ(CheckEnumValues(r).message(), "precision.board: -3 is not a kiln.v1.Board value");
  kiln::v1::CompileAi8xOptions o;
  o.set_device(static_cast<kiln::v1::Ai8xDevice>(99));
  EXPECT_EQ(CheckEnumValues(o, "options").message(), "options.device: 99 is not a kiln.v1.Ai8xDevice value");
  // Refused before the model is even loaded.
  auto c = CompileAi8x("not onnx", "m", o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "options.device: 99 is not a kiln.v1.Ai8xDevice value");
  // And by PrepareConvRun, whatever calls it (`kiln run --local`).
  kiln::v1::RunConvLayersRequest bad;
  bad.set_mode(static_cast<kiln::v1::RunMode>(7));
  auto p = PrepareConvRun(ConvModel(4, 4, 1, 0), "m", bad);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
}

TEST(RequestLimits, MemoryEstimateAndCheckNameTheLayer) {
  kiln::v1::RunConvLayersRequest req;
  req.set_backend("tt-emu");
  // 1x1 conv over 4096²: tt-emu's device copy of the input alone is 4096² × 32 × 4 = 2 GiB.
  auto wide = PrepareConvRun(ConvModel(4096, 4096, 1, 0), "wide", req);
  ASSERT_TRUE(wide.ok()) << wide.status().ToString();
  EXPECT_TRUE(wide->memory.complete);
  EXPECT_EQ(wide->memory.peak_op, "conv (conv2d)");
  EXPECT_GE(wide->memory.peak_op_bytes, int64_t{2} << 30);
  // Two chains (the fp32 reference) hold the input and the op's allocations each.
  EXPECT_GE(wide->memory.peak_bytes, 2 * (wide->memory.peak_op_bytes + (int64_t{64} << 20)));
  Status st = CheckRunMemory(*wide, "wide", uint64_t{2} << 30);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("run of model 'wide' needs ~"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("at layer 'conv (conv2d)'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("over the memory budget of 2.0 GiB (--memory-budget)"), std::string::npos);
  EXPECT_TRUE(CheckRunMemory(*wide, "wide", uint64_t{64} << 30).ok());
  EXPECT_TRUE(CheckRunMemory(*wide, "wide", 0).ok());  // no budget
  // Without the reference chain the same run needs about half.
  kiln::v1::RunConvLayersRequest solo = req;
  solo.set_skip_reference(true);
  auto wide_solo = PrepareConvRun(ConvModel(4096, 4096, 1, 0), "wide", solo);
  ASSERT_TRUE(wide_solo.ok());
  EXPECT_LT(wide_solo->memory.peak_bytes, wide->memory.peak_bytes * 6 / 10);
  // pads=20000 on a 1x1 input: a 40001² output, > 6 GiB fp32 per chain.
  auto pads = PrepareConvRun(ConvModel(1, 1, 1, 20000), "pads", req);
  ASSERT_TRUE(pads.ok()) << pads.status().ToString();
  EXPECT_GE(pads->memory.peak_op_bytes, int64_t{40001} * 40001 * 4 * 2);
  // A small conv stays small.
  auto small = PrepareConvRun(ConvModel(16, 16, 3, 1, 8, 8), "small", req);
  ASSERT_TRUE(small.ok());
  EXPECT_LT(small->memory.peak_bytes, int64_t{1} << 20);
  EXPECT_GT(small->memory.peak_bytes, 16 * 16 * 8 * 4);
}

// A given input of the wrong shape is INVALID_ARGUMENT naming the input, before the memory
// estimate could call its size RESOURCE_EXHAUSTED (kilnd said "needs ~10.4 GiB" for a
// [1,1,4096,4096] input to a model declaring [1,1,16,16], where `kiln run --local` named the shape).
TEST(RequestLimits, AWronglyShapedInputIsRefusedBeforeTheEstimate) {
  kiln::v1::RunConvLayersRequest req;
  req.set_backend("tt-emu");
  auto big = device::Tensor::Zeros({1, 1, 4096, 4096});
  ASSERT_TRUE(big.ok());
  ToProto("x", *big, req.add_inputs());
  auto p = PrepareConvRun(ConvModel(16, 16, 3, 1), "m", req);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << p.status().ToString();
  EXPECT_NE(p.status().message().find("input 'x' has shape [1, 1, 4096, 4096], the model declares [1,1,16,16]"),
            std::string::npos)
      << p.status().message();
}

TEST(RequestLimits, PlanCacheIsBoundedInBytes) {
  auto plan = PlanModel(ConvModel(8, 8, 3, 1, 4, 4), "m");
  ASSERT_TRUE(plan.ok());
  // The plan holds the model's bytes, its constants and the device weights (4·4·3·3 floats).
  const int64_t bytes = PlanBytes(**plan, 1000);
  EXPECT_GE(bytes, 1000 + 2 * 4 * 4 * 3 * 3 * 4);
  PlanCache cache(250);
  cache.Put("a", *plan, 100);
  cache.Put("b", *plan, 100);
  EXPECT_EQ(cache.bytes(), 200);
  EXPECT_TRUE(cache.Get("a"));  // a is now the most recently used
  cache.Put("c", *plan, 100);   // 300 > 250: b (least recently used) goes
  EXPECT_EQ(cache.bytes(), 200);
  EXPECT_TRUE(cache.Get("a"));
  EXPECT_FALSE(cache.Get("b"));
  EXPECT_TRUE(cache.Get("c"));
  cache.Put("huge", *plan, 251);  // larger than the whole cache: not kept, nothing evicted
  EXPECT_FALSE(cache.Get("huge"));
  EXPECT_EQ(cache.size(), 2u);
  cache.Put("a", *plan, 150);  // replacing an entry recounts it
  EXPECT_EQ(cache.bytes(), 250);
}

TEST(RequestLimits, Ai8xRefusesAKernelLargerThanItsInput) {
  kiln::v1::CompileAi8xOptions o;
  auto r = CompileAi8x(ConvModel(1, 1, 3, 0, 4, 4), "tiny", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->ok());
  bool found = false;
  for (const auto& d : r->diagnostics()) {
    if (d.code() == "AI8X_EMPTY_OUTPUT") {
      found = true;
      EXPECT_EQ(d.severity(), kiln::v1::ERROR);
      EXPECT_NE(d.message().find("kernel 3x3 with pad 0 does not fit the 1x1 input"), std::string::npos) << d.message();
    }
  }
  EXPECT_TRUE(found) << r->DebugString();
  // With pad 1 the same kernel fits.
  auto fits = CompileAi8x(ConvModel(1, 1, 3, 1, 4, 4), "tiny", o);
  ASSERT_TRUE(fits.ok());
  for (const auto& d : fits->diagnostics()) EXPECT_NE(d.code(), "AI8X_EMPTY_OUTPUT");
}

}  // namespace
}  // namespace kiln::api
