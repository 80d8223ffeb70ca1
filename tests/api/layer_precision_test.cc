// RunConvLayersRequest.layer_precision: per-layer precision merged over `precision`
// (api/convert.h MergePrecision), honoured by tt-emu in both modes and echoed per layer; its
// errors. Real models from tests/data/conv-cases.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "api/convert.h"
#include "api/run_conv.h"
#include "tests/api/conv_cases.h"

namespace kiln::api {
namespace {

using testing::ReadCase;

const kiln::v1::LayerReport& Layer(const kiln::v1::RunConvLayersResponse& r, const std::string& name) {
  for (const auto& l : r.layers()) {
    if (l.name() == name) return l;
  }
  ADD_FAILURE() << "no layer " << name;
  return r.layers(0);
}

class LayerPrecision : public ::testing::Test {
 protected:
  void SetUp() override {
    bytes_ = ReadCase("residual_add_relu.onnx");
    auto plan = PlanModel(bytes_, "residual_add_relu");
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    for (const auto& op : (*plan)->ops) {
      if (op.on_device() && op.op == "conv2d") convs_.push_back(op.name);
    }
    ASSERT_GE(convs_.size(), 2u);
  }
  kiln::v1::RunConvLayersRequest Request(kiln::v1::RunMode mode) const {
    kiln::v1::RunConvLayersRequest r;
    r.set_model_id("residual_add_relu");
    r.set_backend("tt-emu");
    r.set_mode(mode);
    r.set_seed(11);
    r.mutable_precision()->set_math_fidelity(kiln::v1::HIFI4);
    return r;
  }
  kiln::v1::RunConvLayersResponse Run(const kiln::v1::RunConvLayersRequest& r) const {
    auto resp = RunConvLocal(bytes_, "residual_add_relu", r, {});
    EXPECT_TRUE(resp.ok()) << resp.status().ToString();
    return resp.ok() ? *resp : kiln::v1::RunConvLayersResponse();
  }
  static void SetLoFiBfp4(kiln::v1::Precision* p) {
    p->set_math_fidelity(kiln::v1::LOFI);
    p->set_weights_dtype(kiln::v1::BFLOAT4_B);
  }
  std::string bytes_;
  std::vector<std::string> convs_;  // device convs in plan order
};

TEST_F(LayerPrecision, OneLayerAtLoFiBfp4TheRestAtHiFi4) {
  for (const auto mode : {kiln::v1::PER_LAYER, kiln::v1::CHAINED}) {
    SCOPED_TRACE(kiln::v1::RunMode_Name(mode));
    const std::string& low = convs_.front();
    const auto hifi4 = Run(Request(mode));
    auto mixed_req = Request(mode);
    SetLoFiBfp4(&(*mixed_req.mutable_layer_precision())[low]);
    const auto mixed = Run(mixed_req);
    auto lofi_req = Request(mode);
    SetLoFiBfp4(lofi_req.mutable_precision());
    const auto lofi = Run(lofi_req);
    ASSERT_EQ(mixed.layers_size(), hifi4.layers_size());

    // The echo: the merged precision on the named layer (weights from the entry, the rest of the
    // request's precision kept), the request's on the others.
    const auto& l = Layer(mixed, low);
    EXPECT_TRUE(l.layer_precision_set());
    EXPECT_EQ(l.precision().math_fidelity(), kiln::v1::LOFI);
    EXPECT_EQ(l.precision().weights_dtype(), kiln::v1::BFLOAT4_B);
    EXPECT_EQ(l.precision().input_dtype(), kiln::v1::BFLOAT16);
    EXPECT_NE(l.resolved_precision().find("LoFi"), std::string::npos) << l.resolved_precision();
    EXPECT_EQ(l.resolved_precision(), Layer(lofi, low).resolved_precision());
    EXPECT_EQ(mixed.precision().math_fidelity(), kiln::v1::HIFI4);  // the request's, unchanged
    for (const std::string& c : convs_) {
      if (c == low) continue;
      EXPECT_FALSE(Layer(mixed, c).layer_precision_set()) << c;
      EXPECT_EQ(Layer(mixed, c).precision().math_fidelity(), kiln::v1::HIFI4) << c;
      EXPECT_EQ(Layer(mixed, c).resolved_precision(), Layer(hifi4, c).resolved_precision()) << c;
    }

    // The numbers: the named layer computes as in the all-LoFi/bfp4 run (it is the first conv, so
    // its input is the same in both modes) and unlike the all-HiFi4 one.
    EXPECT_EQ(l.pcc(), Layer(lofi, low).pcc());
    EXPECT_EQ(l.max_abs_error(), Layer(lofi, low).max_abs_error());
    EXPECT_NE(l.pcc(), Layer(hifi4, low).pcc());
    EXPECT_EQ(l.pcc_threshold(), Layer(lofi, low).pcc_threshold());  // tt-metal's rule for its precision
    if (mode == kiln::v1::PER_LAYER) {
      // Isolated: every other layer is bit-identical to the all-HiFi4 run.
      for (int i = 0; i < mixed.layers_size(); ++i) {
        if (mixed.layers(i).name() == low) continue;
        EXPECT_EQ(mixed.layers(i).pcc(), hifi4.layers(i).pcc()) << mixed.layers(i).name();
        EXPECT_EQ(mixed.layers(i).max_abs_error(), hifi4.layers(i).max_abs_error()) << mixed.layers(i).name();
      }
    } else {
      // Chained: the error reaches the network's output.
      ASSERT_EQ(mixed.outputs_size(), hifi4.outputs_size());
      ASSERT_GE(mixed.outputs_size(), 1);
      EXPECT_NE(mixed.outputs(0).raw_data(), hifi4.outputs(0).raw_data());
      EXPECT_NE(mixed.outputs(0).raw_data(), lofi.outputs(0).raw_data());
    }
  }
}

TEST_F(LayerPrecision, MergedFieldByFieldOverTheRequest) {
  kiln::v1::Precision base;
  base.set_math_fidelity(kiln::v1::HIFI2);
  base.set_weights_dtype(kiln::v1::BFLOAT8_B);
  base.set_packer_l1_acc(true);
  kiln::v1::Precision layer;
  layer.set_math_fidelity(kiln::v1::LOFI);
  layer.set_packer_l1_acc(false);  // optional: present, so it overrides
  const auto m = MergePrecision(base, layer);
  EXPECT_EQ(m.math_fidelity(), kiln::v1::LOFI);
  EXPECT_EQ(m.weights_dtype(), kiln::v1::BFLOAT8_B);
  EXPECT_TRUE(m.has_packer_l1_acc());
  EXPECT_FALSE(m.packer_l1_acc());
  EXPECT_FALSE(m.has_fp32_dest_acc_en());
}

TEST(LayerPrecisionFlags, ParsedPerLayerAsThePrecisionFlags) {
  auto m = ParseLayerPrecisionFlags({"conv1:math_fidelity=LoFi", "/blk/conv:2:weights_dtype=bfloat4_b",
                                     "conv1:packer_l1_acc=true", "conv1:act_block_w=2"});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ(m->at("conv1").math_fidelity(), kiln::v1::LOFI);
  EXPECT_TRUE(m->at("conv1").has_packer_l1_acc());
  EXPECT_EQ(m->at("conv1").act_block_w(), 2);
  EXPECT_FALSE(m->at("conv1").has_fp32_dest_acc_en());
  EXPECT_EQ(m->at("/blk/conv:2").weights_dtype(), kiln::v1::BFLOAT4_B);
  EXPECT_EQ(m->at("/blk/conv:2").math_fidelity(), kiln::v1::MATH_FIDELITY_UNSPECIFIED);
  for (const char* bad : {"conv1=LoFi", "conv1:math_fidelity", ":math_fidelity=LoFi", "conv1:=LoFi",
                          "conv1:arch=blackhole", "conv1:math_fidelity=HiFi9", "conv1:act_block_w=x"}) {
    auto r = ParseLayerPrecisionFlags({bad});
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(std::string("--layer-precision ") + bad), std::string::npos)
        << r.status().message();
  }
}

TEST_F(LayerPrecision, Errors) {
  auto r = Request(kiln::v1::CHAINED);
  (*r.mutable_layer_precision())["no_such_conv"].set_math_fidelity(kiln::v1::LOFI);
  auto bad = RunConvLocal(bytes_, "residual_add_relu", r, {});
  ASSERT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'no_such_conv'"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find(convs_.front()), std::string::npos) << bad.status().message();

  r = Request(kiln::v1::CHAINED);
  (*r.mutable_layer_precision())[convs_.front()].set_math_fidelity(static_cast<kiln::v1::MathFidelity>(42));
  bad = RunConvLocal(bytes_, "residual_add_relu", r, {});
  ASSERT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "layer_precision[" + convs_.front() +
                                        "].math_fidelity: 42 is not a kiln.v1.MathFidelity value");

  r = Request(kiln::v1::CHAINED);  // a combination the config rejects, found after the merge
  (*r.mutable_layer_precision())[convs_.front()].set_input_dtype(kiln::v1::BFLOAT4_B);
  bad = RunConvLocal(bytes_, "residual_add_relu", r, {});
  ASSERT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("layer_precision[" + convs_.front() + "]"), std::string::npos)
      << bad.status().message();

  r = Request(kiln::v1::CHAINED);  // whole-run settings
  (*r.mutable_layer_precision())[convs_.front()].set_arch(kiln::v1::BLACKHOLE);
  EXPECT_EQ(RunConvLocal(bytes_, "residual_add_relu", r, {}).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(LayerPrecision, IgnoredByTheFp32Reference) {
  auto r = Request(kiln::v1::CHAINED);
  r.set_backend("reference");
  SetLoFiBfp4(&(*r.mutable_layer_precision())[convs_.front()]);
  const auto resp = Run(r);
  ASSERT_GT(resp.layers_size(), 0);
  for (const auto& l : resp.layers()) {
    EXPECT_FALSE(l.has_precision()) << l.name();
    EXPECT_EQ(l.resolved_precision(), "") << l.name();
  }
  r.clear_layer_precision();
  EXPECT_EQ(Run(r).outputs(0).raw_data(), resp.outputs(0).raw_data());
  // Keys are still checked.
  (*r.mutable_layer_precision())["nope"].set_math_fidelity(kiln::v1::LOFI);
  EXPECT_EQ(RunConvLocal(bytes_, "residual_add_relu", r, {}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::api
