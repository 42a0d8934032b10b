#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace zaya {
namespace {

TEST(Shape, CountsAndPrints) {
  const Shape shape{2, 3, 4};
  EXPECT_EQ(shape.rank(), 3);
  EXPECT_EQ(shape.numel(), 24);
  EXPECT_EQ(shape.to_string(), "[2, 3, 4]");
  EXPECT_EQ(Shape{}.numel(), 1);  // a scalar holds one element
  EXPECT_TRUE((Shape{2, 3} == Shape{2, 3}));
  EXPECT_FALSE((Shape{2, 3} == Shape{3, 2}));
  EXPECT_FALSE((Shape{6} == Shape{6, 1}));
}

TEST(Shape, RejectsTooManyDimensions) {
  Shape shape{1, 1, 1, 1, 1, 1};
  EXPECT_THROW(shape.push_back(1), Error);
}

TEST(Tensor, IsZeroFilledAndAligned) {
  Tensor tensor(DType::F32, {5, 7});
  EXPECT_EQ(tensor.numel(), 35);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tensor.as<float>()) % kAlignment, 0u);
  for (int64_t i = 0; i < tensor.numel(); ++i) EXPECT_EQ(tensor.as<float>()[i], 0.0f);
  EXPECT_EQ(tensor.view().nbytes(), 35u * 4);
  Tensor ids(DType::I64, {3});
  EXPECT_EQ(ids.view().nbytes(), 24u);
}

TEST(DType, NamesRoundTrip) {
  for (DType dtype :
       {DType::F32, DType::BF16, DType::F16, DType::F64, DType::I8, DType::U8, DType::I16, DType::U16,
        DType::I32, DType::U32, DType::I64, DType::U64, DType::Bool, DType::F8E4M3, DType::F8E5M2}) {
    EXPECT_EQ(dtype_from_name(dtype_name(dtype)), dtype);
  }
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  EXPECT_FALSE(dtype_from_name("F31").has_value());
  EXPECT_FALSE(dtype_from_name("f32").has_value());  // the format spells dtypes in capitals
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even mantissa (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1.0p-8f), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even): rounds up to even.
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * 0x1.0p-8f), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-INFINITY)), -INFINITY);
  // Every bf16 value survives the trip through f32.
  for (uint32_t bits = 0; bits < 0x10000; bits += 7) {
    const float value = bf16_to_f32(uint16_t(bits));
    if (!std::isnan(value)) {
      EXPECT_EQ(f32_to_bf16(value), bits);
    }
  }
}

TEST(DType, F16DecodesNormalsSubnormalsAndSpecials) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), 0x1.0p-24f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x7c00), INFINITY);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
}

TEST(ConvertToF32, ConvertsFloatsAndRejectsIntegers) {
  const uint16_t bf16[] = {f32_to_bf16(1.5f), f32_to_bf16(-3.0f)};
  float out[2];
  convert_to_f32({const_cast<uint16_t*>(bf16), DType::BF16, {2}}, out);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -3.0f);
  const int32_t ints[] = {1, 2};
  EXPECT_THROW(convert_to_f32({const_cast<int32_t*>(ints), DType::I32, {2}}, out), Error);
}

}  // namespace
}  // namespace zaya
