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
  // One pass over dout: each thread takes blocks of 64 columns down every row, summing the four parameter
  // gradients' terms (in reduce_columns' order, so the same bits) as it writes dh and dr (dr may alias dout:
  // each element is read before it is written, by the same thread).
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t begin = block * kBlock, width = std::min(kBlock, n - begin);
    float d_h_bias[kBlock] = {}, d_h_scale[kBlock] = {}, d_r_bias[kBlock] = {}, d_r_scale[kBlock] = {};
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t at = i * n + begin;
#pragma omp simd
      for (int64_t j = 0; j < width; ++j) {
        const float d = dout[at + j], hs = h_scale[begin + j], rs = r_scale[begin + j];
        d_h_bias[j] += d * hs;
        d_h_scale[j] += d * (h[at + j] + h_bias[begin + j]);
        d_r_bias[j] += d * rs;
        d_r_scale[j] += d * (r[at + j] + r_bias[begin + j]);
        dh[at + j] = d * hs;
        dr[at + j] = d * rs;
      }
    }
    for (int64_t j = 0; j < width; ++j) {
      dh_bias[begin + j] += d_h_bias[j];
      dh_scale[begin + j] += d_h_scale[j];
      dr_bias[begin + j] += d_r_bias[j];
      dr_scale[begin + j] += d_r_scale[j];
    }
  }
}

}  // namespace zaya
