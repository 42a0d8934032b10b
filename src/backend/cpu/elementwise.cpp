// Row-wise and elementwise ops: embedding, RMSNorm, residual scaling, GELU, SwiGLU, masks, copies, the
// CCA value delay. Parallel over rows; parameter gradients through reduce_columns (fixed order).

#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/vec_math.h"

namespace zaya {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

}  // namespace

void CpuOps::embedding_forward(const int32_t* ids, int64_t tokens, const float* table, int64_t hidden,
                               const float* bias, const float* scale, float* out) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = table + int64_t(ids[t]) * hidden;
    float* y = out + t * hidden;
#pragma omp simd
    for (int64_t j = 0; j < hidden; ++j) y[j] = (row[j] + bias[j]) * scale[j];
  }
}

void CpuOps::embedding_backward(const int32_t* ids, int64_t tokens, const float* table, int64_t hidden,
                                const float* bias, const float* scale, const float* dout, int32_t skip_id,
                                float* dtable, float* dbias, float* dscale) {
  reduce_columns(tokens, hidden, dbias,
                 [&](int64_t t, int64_t j) { return dout[t * hidden + j] * scale[j]; });
  reduce_columns(tokens, hidden, dscale, [&](int64_t t, int64_t j) {
    return dout[t * hidden + j] * (table[int64_t(ids[t]) * hidden + j] + bias[j]);
  });
  // Rows of the table are summed token by token in order; columns split across threads keep that order.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (hidden + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t begin = block * kBlock, end = std::min(begin + kBlock, hidden);
    for (int64_t t = 0; t < tokens; ++t) {
      if (ids[t] == skip_id) continue;
      float* row = dtable + int64_t(ids[t]) * hidden;
      for (int64_t j = begin; j < end; ++j) row[j] += dout[t * hidden + j] * scale[j];
    }
  }
}

void CpuOps::rmsnorm_forward(const float* x, const float* weight, int64_t rows, int64_t n, float eps,
                             float* y, float* rstd) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float sum_sq = 0;
#pragma omp simd reduction(+ : sum_sq)
    for (int64_t j = 0; j < n; ++j) sum_sq += xr[j] * xr[j];
    const float inv = 1.0f / std::sqrt(sum_sq / float(n) + eps);
    rstd[r] = inv;
    float* yr = y + r * n;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) yr[j] = weight[j] * (xr[j] * inv);
  }
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

void CpuOps::mask_rows(float* x, int64_t rows, int64_t n, const float* mask) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    if (mask[r] != 1.0f) {
      for (int64_t j = 0; j < n; ++j) x[r * n + j] *= mask[r];
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

// Eight columns at a time; a row's tail is padded with zeros, which stay finite through the math.
template <class Body>
void for_each_lane_block(int64_t n, const Body& body) {
  for (int64_t j = 0; j < n; j += 8) body(j, std::min<int64_t>(8, n - j));
}

void CpuOps::swiglu_forward(const float* gate_up, int64_t rows, int64_t n, float* out) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gate_up + r * 2 * n;
    const float* up = gate + n;
    for_each_lane_block(n, [&](int64_t j, int64_t width) {
      const Float8 g = load_partial(gate + j, width, 0.0f), u = load_partial(up + j, width, 0.0f);
      store_partial(out + r * n + j, g * vsigmoid(g) * u, width);
    });
  }
}

// out = silu(g) u: d up = d silu(g), d gate = d u sigmoid(g) (1 + g (1 - sigmoid(g))).
void CpuOps::swiglu_backward(const float* gate_up, const float* dout, int64_t rows, int64_t n,
                             float* dgate_up) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gate_up + r * 2 * n;
    const float* up = gate + n;
    float* dgate = dgate_up + r * 2 * n;
    float* dup = dgate + n;
    for_each_lane_block(n, [&](int64_t j, int64_t width) {
      const Float8 g = load_partial(gate + j, width, 0.0f), u = load_partial(up + j, width, 0.0f);
      const Float8 d = load_partial(dout + r * n + j, width, 0.0f);
      const Float8 sig = vsigmoid(g);
      store_partial(dup + j, d * g * sig, width);
      store_partial(dgate + j, d * u * sig * (1.0f + g * (1.0f - sig)), width);
    });
  }
}

}  // namespace zaya
