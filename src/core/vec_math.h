#pragma once
// exp over rows of floats, 8 lanes at a time with GCC/Clang vector extensions (portable across targets;
// libm's expf is a call the compiler will not vectorise without -ffast-math). Cephes' single-precision
// scheme: x = n ln2 + r, a degree-6 polynomial for e^r, 2^n through the exponent bits. Relative error
// below 2 ulp; exp(x) = 0 below -87.3 (so exp(-inf) = 0, as softmax needs); above 88.37 it saturates at
// exp(88.37) ~ 2.4e38. Also the small reductions the kernels share (row max, lane sums: the one AVX
// intrinsic here).

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace zaya {

using Float8 = float __attribute__((vector_size(32)));
using Int8 = int32_t __attribute__((vector_size(32)));

inline Float8 splat(float value) {
  return Float8{} + value;
}

inline Float8 vexp(Float8 x) {
  const Float8 low = splat(-87.33654f), high = splat(88.3762626f);  // 2^n stays finite: n <= 127
  const Float8 clamped = x < low ? low : (x > high ? high : x);
  const Float8 t = clamped * 1.44269504088896341f + 0.5f;
  const Int8 truncated = __builtin_convertvector(t, Int8);
  const Int8 floor_n = truncated - (t < __builtin_convertvector(truncated, Float8) ? 1 : 0);
  const Float8 n = __builtin_convertvector(floor_n, Float8);
  const Float8 r = clamped - n * 0.693359375f + n * 2.12194440e-4f;
  Float8 p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const Float8 er = p * r * r + r + 1.0f;
  const Float8 two_n = (Float8)((floor_n + 127) << 23);
  const Float8 result = er * two_n;
  return x < low ? Float8{} : result;
}

inline float vexp(float x) {
  Float8 lanes = splat(x);
  return vexp(lanes)[0];
}

inline Float8 load8(const float* p) {
  Float8 out;
  std::memcpy(&out, p, sizeof out);
  return out;
}

inline void store8(float* p, Float8 value) {
  std::memcpy(p, &value, sizeof value);
}

// Loads n <= 8 floats, the other lanes set to `fill`.
inline Float8 load_partial(const float* p, int64_t n, float fill) {
  if (n == 8) return load8(p);
  Float8 out = splat(fill);
  for (int64_t i = 0; i < n; ++i) out[i] = p[i];
  return out;
}

inline void store_partial(float* p, Float8 value, int64_t n) {
  if (n == 8) return store8(p, value);
  for (int64_t i = 0; i < n; ++i) p[i] = value[i];
}

inline float horizontal_sum(Float8 v) {
  float sum = 0;
  for (int i = 0; i < 8; ++i) sum += v[i];
  return sum;
}

inline float horizontal_max(Float8 v) {
  float max = v[0];
  for (int i = 1; i < 8; ++i) max = v[i] > max ? v[i] : max;
  return max;
}

// Lane v of the result: the sum of v[v]'s 8 lanes (two rounds of pairwise adds within 128-bit halves, then
// the halves added), where 8 separate horizontal sums would cost as much as the dot products.
inline Float8 lane_sums(const Float8 (&v)[8]) {
  const __m256 ab =
      _mm256_hadd_ps(_mm256_hadd_ps(__m256(v[0]), __m256(v[1])), _mm256_hadd_ps(__m256(v[2]), __m256(v[3])));
  const __m256 cd =
      _mm256_hadd_ps(_mm256_hadd_ps(__m256(v[4]), __m256(v[5])), _mm256_hadd_ps(__m256(v[6]), __m256(v[7])));
  return Float8(_mm256_add_ps(_mm256_permute2f128_ps(ab, cd, 0x20), _mm256_permute2f128_ps(ab, cd, 0x31)));
}

// max of x[0..n): -inf for n = 0.
inline float row_max(const float* x, int64_t n) {
  Float8 max = splat(-__builtin_inff());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const Float8 v = load8(x + i);
    max = v > max ? v : max;
  }
  if (i < n) {
    const Float8 v = load_partial(x + i, n - i, -__builtin_inff());
    max = v > max ? v : max;
  }
  return horizontal_max(max);
}

// out[i] = scale * exp(x[i] - shift) for i < n (out may alias x); returns the sum of exp(x[i] - shift).
inline float exp_shifted(const float* x, int64_t n, float shift, float scale, float* out) {
  Float8 sum{};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const Float8 e = vexp(load8(x + i) - shift);
    sum += e;
    if (out) store8(out + i, e * scale);
  }
  if (i < n) {
    const Float8 e = vexp(load_partial(x + i, n - i, -__builtin_inff()) - shift);
    sum += e;
    if (out) store_partial(out + i, e * scale, n - i);
  }
  return horizontal_sum(sum);
}

inline Float8 vsigmoid(Float8 x) {
  return 1.0f / (1.0f + vexp(-x));
}

}  // namespace zaya
