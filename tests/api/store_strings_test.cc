// api/ rules on data that comes from clients and models: input tensor sizes never wrap
// (api/convert.cc) and model strings always reach proto3 `string` fields as valid UTF-8
// (api/models.h).
#include <gtest/gtest.h>

#include "api/convert.h"
#include "api/models.h"
#include "kiln/v1/device.pb.h"

namespace kiln::api {
namespace {

// [2^62] FP32 is 2^64 bytes: the multiply wrapped to 0 and an empty raw_data matched.
TEST(ApiConvert, HugeShapeDoesNotWrapTheByteCount) {
  kiln::v1::Tensor t;
  t.set_name("x");
  t.set_datatype("FP32");
  t.add_shape(int64_t{1} << 62);
  auto r = FromProto(t);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().message();
  EXPECT_NE(r.status().message().find("limit"), std::string::npos) << r.status().message();
}

TEST(ApiModels, InvalidUtf8FromAModelStillParsesOnTheClient) {
  store::ModelInfo info;
  info.model_id = std::string(64, 'a');
  info.producer_name = "\xff\xfe";
  info.inputs = {"ok", "bad\xc0\xaf"};  // overlong '/'
  kiln::v1::Model m;
  ToProto(info, &m);
  std::string wire = m.SerializeAsString();
  kiln::v1::Model back;
  ASSERT_TRUE(back.ParseFromString(wire));  // proto3 parsers refuse invalid UTF-8 in strings
  EXPECT_EQ(back.producer_name(), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(back.inputs(0), "ok");
  EXPECT_EQ(ValidUtf8("h\xC3\xA9llo \xF0\x9F\x94\xA5"), "h\xC3\xA9llo \xF0\x9F\x94\xA5");  // valid: unchanged
}

TEST(ApiModels, EnsureUtf8FixesNestedAndRepeatedStrings) {
  kiln::v1::RunConvLayersResponse r;
  r.add_layers()->set_name("conv\xff");
  r.add_outputs()->set_name("y\xed\xa0\x80");  // a surrogate
  r.mutable_outputs(0)->set_raw_data("\xff\xff");  // bytes: untouched
  EnsureUtf8(&r);
  kiln::v1::RunConvLayersResponse back;
  ASSERT_TRUE(back.ParseFromString(r.SerializeAsString()));
  EXPECT_EQ(back.layers(0).name(), "conv\xEF\xBF\xBD");
  EXPECT_EQ(back.outputs(0).raw_data(), "\xff\xff");
}

}  // namespace
}  // namespace kiln::api
