#include "common/sha256.h"
#include "common/status.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(Status, CodesMatchGrpcNumbering) {
  EXPECT_EQ(static_cast<int>(StatusCode::kResourceExhausted), 8);
  EXPECT_EQ(static_cast<int>(StatusCode::kUnauthenticated), 16);
  EXPECT_STREQ(StatusCodeName(StatusCode::kInvalidArgument), "INVALID_ARGUMENT");
}

TEST(Status, ResultHoldsValueOrError) {
  Result<int> good = 7;
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 7);
  Result<int> bad = InvalidArgument("node 'conv1': bad kernel_shape");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().WithContext("model m").ToString(),
            "INVALID_ARGUMENT: model m: node 'conv1': bad kernel_shape");
}

TEST(Sha256, KnownDigests) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  Sha256 h;
  h.Update("a");
  h.Update("bc");
  EXPECT_EQ(h.HexDigest(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace kiln
