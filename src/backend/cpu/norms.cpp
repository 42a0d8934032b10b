// RMSNorm and the residual scaling around each half of a layer. Parallel over rows; parameter gradients
// through reduce_columns (fixed order).

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/destination_rows.h"

namespace zaya {

void CpuOps::rmsnorm_forward(const float* x, const float* weight, int64_t rows, int64_t n, float eps,
                             Destination y, float* rstd) {
  write_rows(y, rows, n, [&](int64_t r, float* yr) {
    const float* xr = x + r * n;
    float sum_sq = 0;
#pragma omp simd reduction(+ : sum_sq)
    for (int64_t j = 0; j < n; ++j) sum_sq += xr[j] * xr[j];
    const float inv = 1.0f / std::sqrt(sum_sq / float(n) + eps);
    rstd[r] = inv;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) yr[j] = weight[j] * (xr[j] * inv);
  });
}

// y = w * x * rstd, rstd = (mean(x^2) + eps)^-1/2:
// dx = rstd * (w * dy) - x * rstd^3 / n * sum(w * dy * x).
void CpuOps::rmsnorm_backward(const float* x, const float* weight, const float* rstd, const float* dy,
                              int64_t rows, int64_t n, float* dx, bool accumulate, float* dweight) {
  reduce_columns(rows, n, dweight,
                 [&](int64_t r, int64_t j) { return dy[r * n + j] * x[r * n + j] * rstd[r]; });
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float* dyr = dy + r * n;
    float dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < n; ++j) dot += weight[j] * dyr[j] * xr[j];
    const float inv = rstd[r], coef = inv * inv * inv * dot / float(n);
    float* dxr = dx + r * n;
    if (accumulate) {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) dxr[j] += inv * weight[j] * dyr[j] - coef * xr[j];
    } else {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) dxr[j] = inv * weight[j] * dyr[j] - coef * xr[j];
    }
  }
}

void CpuOps::residual_scale_forward(const float* h, const float* r, const float* h_bias, const float* h_scale,
                                    const float* r_bias, const float* r_scale, int64_t rows, int64_t n,
                                    float* out) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = i * n + j;
      out[at] = (h[at] + h_bias[j]) * h_scale[j] + (r[at] + r_bias[j]) * r_scale[j];
    }
  }
}

void CpuOps::residual_scale_backward(const float* h, const float* r, const float* h_bias,
                                     const float* h_scale, const float* r_bias, const float* r_scale,
                                     const float* dout, int64_t rows, int64_t n, float* dh, float* dr,
                                     float* dh_bias, float* dh_scale, float* dr_bias, float* dr_scale) {
  reduce_columns(rows, n, dh_bias, [&](int64_t i, int64_t j) { return dout[i * n + j] * h_scale[j]; });
  reduce_columns(rows, n, dh_scale,
                 [&](int64_t i, int64_t j) { return dout[i * n + j] * (h[i * n + j] + h_bias[j]); });
  reduce_columns(rows, n, dr_bias, [&](int64_t i, int64_t j) { return dout[i * n + j] * r_scale[j]; });
  reduce_columns(rows, n, dr_scale,
                 [&](int64_t i, int64_t j) { return dout[i * n + j] * (r[i * n + j] + r_bias[j]); });
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const float d = dout[i * n + j];
      dh[i * n + j] = d * h_scale[j];
      dr[i * n + j] = d * r_scale[j];
    }
  }
}

}  // namespace zaya
