#include "device/npy.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

namespace kiln::device {
namespace {

TEST(NpyTest, RoundTripsFloat32AndNhwcIsWrittenInLogicalOrder) {
  std::vector<float> v(2 * 3 * 2 * 2);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  auto t = Tensor::FromFloats({2, 3, 2, 2}, v);
  auto nhwc = t->ToLayout(Layout::kNHWC);
  auto bytes = SerializeNpy(*nhwc);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ((bytes->size() - v.size() * 4) % 64, 0u);  // header padded to 64
  auto back = ParseNpy(*bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->shape(), t->shape());
  EXPECT_EQ(back->layout(), Layout::kNCHW);
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_EQ(back->data<float>()[i], v[i]);

  const std::string path = (std::filesystem::temp_directory_path() / "kiln_npy_test.npy").string();
  ASSERT_TRUE(WriteNpy(path, *t).ok());
  auto read = ReadNpy(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->shape(), t->shape());
  std::remove(path.c_str());
}

TEST(NpyTest, ReadsTheSharedConvCaseFiles) {
  auto t = ReadNpy(std::string(KILN_TEST_DATA) + "/conv-cases/conv_group2.input.npy");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->shape(), (std::vector<int64_t>{1, 4, 8, 8}));
  EXPECT_EQ(t->dtype(), DataType::kFloat32);
}

TEST(NpyTest, OneDimensionalAndScalarShapes) {
  auto t = Tensor::FromFloats({3}, std::vector<float>{1, 2, 3});
  auto b = SerializeNpy(*t);
  EXPECT_NE(b->find("'shape': (3,)"), std::string::npos);
  EXPECT_EQ(ParseNpy(*b)->shape(), (std::vector<int64_t>{3}));
  auto s = Tensor::FromFloats({}, std::vector<float>{7});
  auto sb = SerializeNpy(*s);
  EXPECT_NE(sb->find("'shape': ()"), std::string::npos);
  auto sp = ParseNpy(*sb);
  ASSERT_TRUE(sp.ok());
  EXPECT_EQ(sp->num_elements(), 1);
  EXPECT_EQ(sp->data<float>()[0], 7.f);
}

TEST(NpyTest, RejectsBadInput) {
  EXPECT_EQ(ParseNpy("hello").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadNpy("/nonexistent/x.npy").status().code(), StatusCode::kNotFound);
  auto t = Tensor::FromFloats({4}, std::vector<float>{1, 2, 3, 4});
  std::string b = *SerializeNpy(*t);
  EXPECT_EQ(ParseNpy(b.substr(0, b.size() - 1)).status().code(), StatusCode::kDataLoss);
  std::string f8 = b;
  f8.replace(f8.find("<f4"), 3, "<f8");
  EXPECT_EQ(ParseNpy(f8).status().code(), StatusCode::kInvalidArgument);
  std::string fortran = b;
  fortran.replace(fortran.find("False"), 5, "True ");
  EXPECT_EQ(ParseNpy(fortran).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::device
