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
  std::string c8 = b;
  c8.replace(c8.find("<f4"), 3, "<c8");  // complex: no ONNX type Kiln computes with
  EXPECT_EQ(ParseNpy(c8).status().code(), StatusCode::kInvalidArgument);
  std::string f8 = b;  // 16 bytes of data but float64 [4] needs 32
  f8.replace(f8.find("<f4"), 3, "<f8");
  EXPECT_EQ(ParseNpy(f8).status().code(), StatusCode::kDataLoss);
  std::string bad_order = b;
  bad_order.replace(bad_order.find("False"), 5, "Maybe");
  EXPECT_EQ(ParseNpy(bad_order).status().code(), StatusCode::kInvalidArgument);
}

// ReadNpy reads the header, then exactly the data it declares: /dev/zero is refused by its magic
// after 12 bytes (before, `kiln run --input x=/dev/zero` read until memory ran out), and a file
// with more bytes than its shape needs is read only as far as the shape goes.
TEST(NpyTest, ReadNpyReadsOnlyWhatTheHeaderDeclares) {
  auto z = ReadNpy("/dev/zero");
  EXPECT_EQ(z.status().code(), StatusCode::kInvalidArgument) << z.status().ToString();
  EXPECT_NE(z.status().message().find("bad magic"), std::string::npos) << z.status().ToString();

  auto t = Tensor::FromFloats({4}, std::vector<float>{1, 2, 3, 4});
  const std::string path = (std::filesystem::temp_directory_path() / "kiln_npy_trailing.npy").string();
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string b = *SerializeNpy(*t) + std::string(1000, 'x');
    ASSERT_EQ(std::fwrite(b.data(), 1, b.size(), f), b.size());
    std::fclose(f);
  }
  auto r = ReadNpy(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->shape(), (std::vector<int64_t>{4}));
  EXPECT_EQ(r->data<float>()[3], 4.f);
  // A short image declaring 16 GiB ((2^31,) float64) is DATA_LOSS, checked before the tensor is
  // allocated (before, ParseNpy allocated the declared size first).
  {
    std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2147483648,), }";
    dict.append(64 - (10 + dict.size() + 1) % 64, ' ');
    dict += '\n';
    std::string img = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(dict.size() & 0xff) +
                      static_cast<char>(dict.size() >> 8) + dict + std::string(16, '\0');
    auto p = ParseNpy(img);
    EXPECT_EQ(p.status().code(), StatusCode::kDataLoss) << p.status().ToString();
    EXPECT_NE(p.status().message().find("16 bytes of 17179869184"), std::string::npos) << p.status().ToString();
  }
  std::remove(path.c_str());
}

// A 2x3 array written by numpy in Fortran order, big-endian int16: np.asfortranarray(
// np.arange(6, dtype='>i2').reshape(2, 3)) — on disk column-major 0 3 1 4 2 5.
TEST(NpyTest, ReadsFortranOrderAndBigEndian) {
  std::string header = "{'descr': '>i2', 'fortran_order': True, 'shape': (2, 3), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string f = "\x93NUMPY";
  f += '\x01';
  f += '\x00';
  f += static_cast<char>(header.size());
  f += '\x00';
  f += header;
  for (int v : {0, 3, 1, 4, 2, 5}) {
    f += '\x00';
    f += static_cast<char>(v);
  }
  auto t = ParseNpy(f);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->dtype(), DataType::kInt16);
  EXPECT_EQ(t->shape(), (std::vector<int64_t>{2, 3}));
  const int16_t* p = t->data<int16_t>();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(p[i], i) << i;
}

TEST(NpyTest, RoundTripsEveryDtype) {
  for (DataType d : kAllDataTypes) {
    auto t = Tensor::Zeros({2, 2}, d);
    ASSERT_TRUE(t.ok());
    for (size_t i = 0; i < t->size_bytes(); ++i) t->raw()[i] = std::byte{static_cast<unsigned char>(i % 2)};
    auto bytes = SerializeNpy(*t);
    ASSERT_TRUE(bytes.ok());
    auto back = ParseNpy(*bytes);
    ASSERT_TRUE(back.ok()) << DataTypeName(d) << ": " << back.status().ToString();
    // bfloat16 has no numpy dtype: written as float32 with the same values.
    const DataType want = d == DataType::kBFloat16 ? DataType::kFloat32 : d;
    EXPECT_EQ(back->dtype(), want) << DataTypeName(d);
    auto a = t->ToFloat32(), c = back->ToFloat32();
    ASSERT_TRUE(a.ok() && c.ok());
    for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(a->data<float>()[i], c->data<float>()[i]) << DataTypeName(d);
  }
}

}  // namespace
}  // namespace kiln::device
