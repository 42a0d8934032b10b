// RMSNorm (one block per row) and the residual scaling, forward and backward.

#include "backend/gpu/gpu_ops.h"
#include "backend/gpu/kernel_util.h"

namespace zaya {
namespace {

using gpu::block_dim_x;
using gpu::block_x;
using gpu::thread_x;

constexpr unsigned kRowThreads = 256;

ZAYA_KERNEL(kRowThreads)
void rmsnorm_forward_kernel(const float* x, const float* weight, int64_t n, float eps, gpu::Output y,
                            float* rstd) {
  ZAYA_SHARED_ARRAY(scratch, float[gpu::kMaxWarps + 1]);
  const int64_t row = block_x();
  const float* xr = x + row * n;
  float sum_squares = 0;
  for (int64_t j = thread_x(); j < n; j += block_dim_x()) sum_squares += xr[j] * xr[j];
  sum_squares = gpu::block_sum(sum_squares, scratch);
  const float inv = 1.0f / sqrtf(sum_squares / float(n) + eps);
  if (thread_x() == 0) rstd[row] = inv;
  for (int64_t j = thread_x(); j < n; j += block_dim_x()) y.store(row * n + j, weight[j] * (xr[j] * inv));
}

// dx = rstd (w dy) - x rstd^3 / n sum(w dy x).
ZAYA_KERNEL(kRowThreads)
void rmsnorm_backward_kernel(const float* x, const float* weight, const float* rstd, const float* dy,
                             int64_t n, float* dx, bool accumulate) {
  ZAYA_SHARED_ARRAY(scratch, float[gpu::kMaxWarps + 1]);
  const int64_t row = block_x();
  const float* xr = x + row * n;
  const float* dyr = dy + row * n;
  float dot = 0;
  for (int64_t j = thread_x(); j < n; j += block_dim_x()) dot += weight[j] * dyr[j] * xr[j];
  dot = gpu::block_sum(dot, scratch);
  const float inv = rstd[row], coef = inv * inv * inv * dot / float(n);
  for (int64_t j = thread_x(); j < n; j += block_dim_x()) {
    const float value = inv * weight[j] * dyr[j] - coef * xr[j];
    dx[row * n + j] = accumulate ? dx[row * n + j] + value : value;
  }
}

ZAYA_KERNEL(gpu::kThreads)
void residual_scale_forward_kernel(const float* h, const float* r, const float* h_bias, const float* h_scale,
                                   const float* r_bias, const float* r_scale, int64_t count, int64_t n,
                                   float* out) {
  const int64_t i = int64_t(block_x()) * block_dim_x() + thread_x();
  if (i >= count) return;
  const int64_t j = i % n;
  out[i] = (h[i] + h_bias[j]) * h_scale[j] + (r[i] + r_bias[j]) * r_scale[j];
}

ZAYA_KERNEL(gpu::kThreads)
void residual_scale_backward_kernel(const float* h_scale, const float* r_scale, const float* dout,
                                    int64_t count, int64_t n, float* dh, float* dr) {
  const int64_t i = int64_t(block_x()) * block_dim_x() + thread_x();
  if (i >= count) return;
  const float d = dout[i];
  dh[i] = d * h_scale[i % n];
  dr[i] = d * r_scale[i % n];
}

struct NormalisedProduct {  // dy[r, j] x[r, j] rstd[r]: the norm weight's gradient
  const float* dy;
  const float* x;
  const float* rstd;
  int64_t n;
  ZAYA_DEVICE float operator()(int64_t r, int64_t j) const { return dy[r * n + j] * x[r * n + j] * rstd[r]; }
};
struct ScaledColumn {  // dout[r, j] scale[j]
  const float* dout;
  const float* scale;
  int64_t n;
  ZAYA_DEVICE float operator()(int64_t r, int64_t j) const { return dout[r * n + j] * scale[j]; }
};
struct BiasedProduct {  // dout[r, j] (v[r, j] + bias[j])
  const float* dout;
  const float* v;
  const float* bias;
  int64_t n;
  ZAYA_DEVICE float operator()(int64_t r, int64_t j) const {
    return dout[r * n + j] * (v[r * n + j] + bias[j]);
  }
};

}  // namespace

void GpuOps::rmsnorm_forward(const float* x, const float* weight, int64_t rows, int64_t n, float eps,
                             Destination y, float* rstd) {
  gpu::launch("rmsnorm_forward", rmsnorm_forward_kernel, {unsigned(rows)}, {kRowThreads}, 0,
              gpu::as_stream(stream_), x, weight, n, eps, gpu::output(y), rstd);
}

void GpuOps::rmsnorm_backward(const float* x, const float* weight, const float* rstd, const float* dy,
                              int64_t rows, int64_t n, float* dx, bool accumulate, float* dweight) {
  gpu::sum_columns(NormalisedProduct{dy, x, rstd, n}, rows, n, dweight,
                   scratch(gpu::column_chunks(rows) * n * sizeof(float)), gpu::as_stream(stream_));
  gpu::launch("rmsnorm_backward", rmsnorm_backward_kernel, {unsigned(rows)}, {kRowThreads}, 0,
              gpu::as_stream(stream_), x, weight, rstd, dy, n, dx, accumulate);
}

void GpuOps::residual_scale_forward(const float* h, const float* r, const float* h_bias, const float* h_scale,
                                    const float* r_bias, const float* r_scale, int64_t rows, int64_t n,
                                    float* out) {
  gpu::launch("residual_scale_forward", residual_scale_forward_kernel, gpu::cover(rows * n, gpu::kThreads),
              {gpu::kThreads}, 0, gpu::as_stream(stream_), h, r, h_bias, h_scale, r_bias, r_scale, rows * n,
              n, out);
}

void GpuOps::residual_scale_backward(const float* h, const float* r, const float* h_bias,
                                     const float* h_scale, const float* r_bias, const float* r_scale,
                                     const float* dout, int64_t rows, int64_t n, float* dh, float* dr,
                                     float* dh_bias, float* dh_scale, float* dr_bias, float* dr_scale) {
  float* partial = scratch(gpu::column_chunks(rows) * n * sizeof(float));
  const gpu::Stream stream = gpu::as_stream(stream_);
  // The parameter gradients read dout before dr (which may alias it) is written.
  gpu::sum_columns(ScaledColumn{dout, h_scale, n}, rows, n, dh_bias, partial, stream);
  gpu::sum_columns(BiasedProduct{dout, h, h_bias, n}, rows, n, dh_scale, partial, stream);
  gpu::sum_columns(ScaledColumn{dout, r_scale, n}, rows, n, dr_bias, partial, stream);
  gpu::sum_columns(BiasedProduct{dout, r, r_bias, n}, rows, n, dr_scale, partial, stream);
  gpu::launch("residual_scale_backward", residual_scale_backward_kernel, gpu::cover(rows * n, gpu::kThreads),
              {gpu::kThreads}, 0, stream, h_scale, r_scale, dout, rows * n, n, dh, dr);
}

}  // namespace zaya
