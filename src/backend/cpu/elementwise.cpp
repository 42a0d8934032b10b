// Elementwise and row-wise ops: GELU, fills, masks, copies, the CCA value delay and the router's depth
// averaging. Parallel over rows; parameter gradients through reduce_columns (fixed order).

#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_ops.h"

namespace zaya {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

}  // namespace

void CpuOps::gelu_forward(const float* x, int64_t count, float* y) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < count; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
}

void CpuOps::gelu_backward(const float* x, const float* dy, int64_t count, float* dx) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    const float cdf = 0.5f * (1.0f + std::erf(x[i] * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * std::exp(-0.5f * x[i] * x[i]);
    dx[i] = dy[i] * (cdf + x[i] * pdf);
  }
}

void CpuOps::fill(float* x, int64_t count, float value) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < count; ++i) x[i] = value;
}

void CpuOps::mask_rows(Destination x, int64_t rows, int64_t n, const float* mask) {
  float* f32 = x.f32();
  BFloat16* bf16 = x.bf16();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    if (mask[r] == 1.0f) continue;
    if (f32) {
      for (int64_t j = r * n; j < (r + 1) * n; ++j) f32[j] *= mask[r];
    } else {
      for (int64_t j = r * n; j < (r + 1) * n; ++j)
        bf16[j].bits = f32_to_bf16(bf16_to_f32(bf16[j].bits) * mask[r]);
    }
  }
}

void CpuOps::copy_rows(const float* src, int64_t ld_src, int64_t rows, int64_t n, float* dst, int64_t ld_dst,
                       bool accumulate) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    if (accumulate) {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) dst[r * ld_dst + j] += src[r * ld_src + j];
    } else {
      std::memcpy(dst + r * ld_dst, src + r * ld_src, size_t(n) * sizeof(float));
    }
  }
}

void CpuOps::delay_forward(const float* src, const float* first, int64_t batch, int64_t seq, int64_t n,
                           float* dst, int64_t ld_dst) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      const float* from = s == 0 ? first : src + (b * seq + s - 1) * n;
      std::memcpy(dst + (b * seq + s) * ld_dst, from, size_t(n) * sizeof(float));
    }
  }
}

void CpuOps::delay_backward(const float* ddst, int64_t ld_ddst, int64_t batch, int64_t seq, int64_t n,
                            float* dsrc, float* dfirst) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      float* to = dsrc + (b * seq + s) * n;
      if (s + 1 < seq) {
        std::memcpy(to, ddst + (b * seq + s + 1) * ld_ddst, size_t(n) * sizeof(float));
      } else {
        std::memset(to, 0, size_t(n) * sizeof(float));
      }
    }
  }
  if (dfirst)
    reduce_columns(batch, n, dfirst, [&](int64_t b, int64_t j) { return ddst[b * seq * ld_ddst + j]; });
}

void CpuOps::add_scaled(const float* x, const float* scale, int64_t rows, int64_t n, float* y) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) y[r * n + j] += x[r * n + j] * scale[j];
  }
}

void CpuOps::add_scaled_backward(const float* x, const float* scale, const float* dy, int64_t rows, int64_t n,
                                 float* dx, float* dscale) {
  reduce_columns(rows, n, dscale, [&](int64_t r, int64_t j) { return dy[r * n + j] * x[r * n + j]; });
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) dx[r * n + j] = dy[r * n + j] * scale[j];
  }
}

}  // namespace zaya
