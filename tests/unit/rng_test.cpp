#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "core/rng.h"

namespace zaya {
namespace {

// Known-answer vectors of Random123's kat_vectors for philox4x32_10.
TEST(Philox, MatchesTheKnownAnswers) {
  using Words = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}), (Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

std::vector<float> fill_normals(int threads, size_t count) {
  const RandomStream stream(1234, RngPurpose::Test, 9);
  std::vector<float> out(count);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 17)
  for (size_t i = 0; i < count; ++i) out[i] = stream.normal(i);
  return out;
}

TEST(RandomStream, DoesNotDependOnTheThreadCount) {
  EXPECT_EQ(fill_normals(1, 10001), fill_normals(2, 10001));
  EXPECT_EQ(fill_normals(1, 10001), fill_normals(3, 10001));
}

TEST(RandomStream, StreamsAndSeedsDiffer) {
  const RandomStream a(1, RngPurpose::Test, 0), b(1, RngPurpose::Test, 1), c(2, RngPurpose::Test, 0),
      d(1, RngPurpose::ParameterInit, 0);
  int same_b = 0, same_c = 0, same_d = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    same_b += a.bits(i) == b.bits(i);
    same_c += a.bits(i) == c.bits(i);
    same_d += a.bits(i) == d.bits(i);
  }
  EXPECT_LT(same_b + same_c + same_d, 3);
}

// Initialisation draws its values in runs (normals); each must be the value normal() gives at its index,
// bit for bit, whatever the run's first index and length (runs that start and end inside a Philox block).
TEST(RandomStream, NormalsAreNormalAtEveryIndex) {
  const RandomStream stream(7, RngPurpose::ParameterInit, 3);
  for (uint64_t first : {uint64_t(0), uint64_t(1), uint64_t(2), uint64_t(3), uint64_t(1) << 40}) {
    for (int64_t count : {0, 1, 3, 4, 5, 1001}) {
      std::vector<float> run(size_t(count) + 1, -1.0f);
      stream.normals(first, count, run.data());
      for (int64_t i = 0; i < count; ++i)
        ASSERT_EQ(run[size_t(i)], stream.normal(first + uint64_t(i))) << first << " + " << i;
      EXPECT_EQ(run[size_t(count)], -1.0f) << "wrote past the run";
    }
  }
}

TEST(RandomStream, NormalHasUnitMomentsAndUniformStaysInRange) {
  const RandomStream stream(42, RngPurpose::Test, 0);
  const int n = 200000;
  double sum = 0, sum_sq = 0, sum_quad = 0;
  for (int i = 0; i < n; ++i) {
    const double x = stream.normal(i);
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sum_sq += x * x;
    sum_quad += x * x * x * x;
  }
  // Standard errors: mean 1/sqrt(n) ~ 0.0022, variance sqrt(2/n) ~ 0.0032; bounds are about 5 sigma.
  EXPECT_NEAR(sum / n, 0.0, 0.012);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.016);
  EXPECT_NEAR(sum_quad / n, 3.0, 0.1);  // the fourth moment of a normal

  double uniform_sum = 0;
  for (int i = 0; i < n; ++i) {
    const float u = stream.uniform(i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    uniform_sum += u;
    const double v = stream.uniform_double(i);
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
  }
  EXPECT_NEAR(uniform_sum / n, 0.5, 0.004);
}

}  // namespace
}  // namespace zaya
