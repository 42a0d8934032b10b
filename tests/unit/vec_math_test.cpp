#include <gtest/gtest.h>

#include <cmath>

#include "core/vec_math.h"

namespace zaya {
namespace {

TEST(VecMath, ExpIsWithinTwoUlpOverItsRange) {
  double worst = 0;
  for (float x = -87.0f; x < 88.3f; x += 0.00731f) {
    const double want = std::exp(double(x));
    worst = std::max(worst, std::abs(vexp(x) - want) / want);
  }
  EXPECT_LT(worst, 2.5e-7);  // 2 ulp of float is 2.4e-7 relative
  EXPECT_EQ(vexp(-INFINITY), 0.0f);
  EXPECT_EQ(vexp(-100.0f), 0.0f);
  EXPECT_EQ(vexp(0.0f), 1.0f);
}

TEST(VecMath, RowKernelsHandleTails) {
  float row[13];
  for (int i = 0; i < 13; ++i) row[i] = 0.25f * float(i) - 1.0f;
  EXPECT_EQ(row_max(row, 13), 2.0f);
  EXPECT_EQ(row_max(row, 0), -INFINITY);
  float out[13];
  const float sum = exp_shifted(row, 13, 2.0f, 0.5f, out);
  double want = 0;
  for (int i = 0; i < 13; ++i) {
    want += std::exp(double(row[i]) - 2.0);
    EXPECT_NEAR(out[i], 0.5 * std::exp(double(row[i]) - 2.0), 1e-7);
  }
  EXPECT_NEAR(sum, want, 1e-6);
}

}  // namespace
}  // namespace zaya
