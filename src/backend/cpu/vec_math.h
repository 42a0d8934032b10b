#pragma once
// exp in a form the compiler vectorises inside `#pragma omp simd` loops (libm's expf is a call it will not
// vectorise without -ffast-math). Cephes' single-precision scheme: x = n ln2 + r, a degree-6 polynomial for
// e^r, 2^n through the exponent bits. Relative error below 2 ulp over the whole range; exp(x) = 0 below
// -87.3 (so exp(-inf) = 0, as softmax needs) and +inf above 88.7.

#include <bit>
#include <cstdint>

namespace zaya {

#pragma omp declare simd
inline float vexp(float x) {
  const float clamped = x < -87.33654f ? -87.33654f : (x > 88.72283f ? 88.72283f : x);
  const float n = __builtin_floorf(clamped * 1.44269504088896341f + 0.5f);
  const float r = clamped - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  const float two_n = std::bit_cast<float>(uint32_t(int32_t(n) + 127) << 23);
  const float result = er * two_n;
  return x < -87.33654f ? 0.0f : (x > 88.72283f ? __builtin_inff() : result);
}

#pragma omp declare simd
inline float vsigmoid(float x) { return 1.0f / (1.0f + vexp(-x)); }

}  // namespace zaya
