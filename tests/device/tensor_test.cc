#include "device/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cmath>
#include <cstring>

namespace kiln::device {
namespace {

TEST(TensorTest, ZerosIsAlignedZeroFilledAndSized) {
  auto t = Tensor::Zeros({2, 3, 5, 7});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->num_elements(), 210);
  EXPECT_EQ(t->size_bytes(), 840u);
  EXPECT_EQ(t->rank(), 4);
  EXPECT_EQ(t->dim(-1), 7);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t->data<float>()) % kTensorAlignment, 0u);
  for (float v : t->span<float>()) EXPECT_EQ(v, 0.f);
  EXPECT_EQ(t->DebugString(), "float32[2, 3, 5, 7] NCHW");
  EXPECT_FALSE(t->empty());
  EXPECT_TRUE(Tensor().empty());
}

TEST(TensorTest, UninitializedHasTheShapeAndErrorsOfZeros) {
  auto t = Tensor::Uninitialized({3, 5}, DataType::kFloat32, Layout::kNCHW);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->num_elements(), 15);
  EXPECT_EQ(t->size_bytes(), 60u);
  EXPECT_EQ(t->dtype(), DataType::kFloat32);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t->data<float>()) % kTensorAlignment, 0u);
  // Writable everywhere, and a copy holds what was written.
  for (int i = 0; i < 15; ++i) t->data<float>()[i] = static_cast<float>(i);
  Tensor copy = *t;
  EXPECT_EQ(copy.data<float>()[14], 14.f);
  EXPECT_EQ(Tensor::Uninitialized({2, -1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Tensor::Uninitialized({1, 2}, DataType::kFloat32, Layout::kNHWC).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Tensor::Uninitialized({int64_t{1} << 33}).status().code(), StatusCode::kResourceExhausted);
}

TEST(TensorTest, ZeroSizedTensorsAreValid) {
  auto t = Tensor::Zeros({0, 4});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->num_elements(), 0);
  Tensor copy = *t;
  EXPECT_EQ(copy.shape(), t->shape());
}

TEST(TensorTest, RejectsBadShapesAndSizes) {
  EXPECT_EQ(Tensor::Zeros({2, -1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Tensor::Zeros({1, 2}, DataType::kFloat32, Layout::kNHWC).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Tensor::Zeros({int64_t{1} << 40, int64_t{1} << 40}).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(Tensor::Zeros({int64_t{1} << 33}).status().code(), StatusCode::kResourceExhausted);  // 32 GiB
  std::vector<float> three(3);
  EXPECT_EQ(Tensor::FromFloats({2, 2}, three).status().code(), StatusCode::kInvalidArgument);
  std::vector<std::byte> bytes(5);
  EXPECT_EQ(Tensor::FromBytes({2}, DataType::kFloat16, bytes).status().code(), StatusCode::kInvalidArgument);
}

TEST(TensorTest, CopyIsDeepMoveIsCheap) {
  std::vector<float> v{1, 2, 3, 4};
  auto t = Tensor::FromFloats({2, 2}, v);
  ASSERT_TRUE(t.ok());
  Tensor copy = *t;
  copy.data<float>()[0] = 42;
  EXPECT_EQ(t->data<float>()[0], 1.f);
  const float* p = t->data<float>();
  Tensor moved = std::move(*t);
  EXPECT_EQ(moved.data<float>(), p);
  Tensor assigned;
  assigned = copy;
  EXPECT_EQ(assigned.data<float>()[0], 42.f);
}

TEST(TensorTest, LayoutConversionRoundTripsAndStridesAgree) {
  std::vector<float> v(2 * 3 * 4 * 5);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  auto t = Tensor::FromFloats({2, 3, 4, 5}, v);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->strides(), (std::vector<int64_t>{60, 20, 5, 1}));
  auto nhwc = t->ToLayout(Layout::kNHWC);
  ASSERT_TRUE(nhwc.ok());
  EXPECT_EQ(nhwc->layout(), Layout::kNHWC);
  EXPECT_EQ(nhwc->shape(), t->shape());  // shape stays logical NCHW
  EXPECT_EQ(nhwc->strides(), (std::vector<int64_t>{60, 1, 15, 3}));
  // Element (n=1, c=2, h=3, w=4) sits at the same logical index in both.
  EXPECT_EQ(nhwc->data<float>()[1 * 60 + 2 * 1 + 3 * 15 + 4 * 3], v[1 * 60 + 2 * 20 + 3 * 5 + 4]);
  // Memory order of NHWC: channels innermost.
  EXPECT_EQ(nhwc->data<float>()[0], 0.f);
  EXPECT_EQ(nhwc->data<float>()[1], 20.f);
  EXPECT_EQ(nhwc->data<float>()[3], 1.f);
  auto back = nhwc->ToLayout(Layout::kNCHW);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(std::memcmp(back->data<float>(), v.data(), v.size() * 4), 0);

  auto r3 = Tensor::FromFloats({1, 2, 3}, std::vector<float>{0, 1, 2, 3, 4, 5});
  auto nwc = r3->ToLayout(Layout::kNHWC);
  ASSERT_TRUE(nwc.ok());
  EXPECT_EQ(std::vector<float>(nwc->span<float>().begin(), nwc->span<float>().end()),
            (std::vector<float>{0, 3, 1, 4, 2, 5}));
  auto r2 = Tensor::Zeros({2, 2});
  EXPECT_EQ(r2->ToLayout(Layout::kNHWC).status().code(), StatusCode::kInvalidArgument);
}

TEST(TensorTest, ToFloat32ConvertsHalfBfloatAndIntegers) {
  const uint16_t half[] = {0x3c00, 0xc000, 0x0001, 0x7c00};      // 1, -2, smallest subnormal, inf
  const uint16_t bf[] = {0x3f80, 0xc040, 0x0000, 0x4049};        // 1, -3, 0, 3.140625
  auto h = Tensor::FromBytes({4}, DataType::kFloat16, std::as_bytes(std::span<const uint16_t>(half)));
  auto b = Tensor::FromBytes({4}, DataType::kBFloat16, std::as_bytes(std::span<const uint16_t>(bf)));
  ASSERT_TRUE(h.ok() && b.ok());
  auto hf = h->ToFloat32();
  auto bff = b->ToFloat32();
  ASSERT_TRUE(hf.ok() && bff.ok());
  EXPECT_EQ(hf->data<float>()[0], 1.f);
  EXPECT_EQ(hf->data<float>()[1], -2.f);
  EXPECT_EQ(hf->data<float>()[2], 5.9604644775390625e-08f);
  EXPECT_TRUE(std::isinf(hf->data<float>()[3]));
  EXPECT_EQ(bff->data<float>()[1], -3.f);
  EXPECT_EQ(bff->data<float>()[3], 3.140625f);
  const int64_t ints[] = {-5, 7};
  auto i = Tensor::FromBytes({2}, DataType::kInt64, std::as_bytes(std::span<const int64_t>(ints)));
  EXPECT_EQ(i->ToFloat32()->data<float>()[0], -5.f);
}

TEST(TensorTest, ReshapeKeepsData) {
  auto t = Tensor::FromFloats({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  auto r = t->Reshaped({3, 1, 2});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->data<float>()[5], 6.f);
  EXPECT_EQ(t->Reshaped({4}).status().code(), StatusCode::kInvalidArgument);
}

TEST(TensorTest, DataTypeNamesParse) {
  for (DataType d : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16, DataType::kInt32,
                     DataType::kInt64, DataType::kUInt8}) {
    auto p = ParseDataType(DataTypeName(d));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, d);
  }
  EXPECT_EQ(*ParseDataType("FP32"), DataType::kFloat32);
  EXPECT_EQ(ParseDataType("complex64").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::device
