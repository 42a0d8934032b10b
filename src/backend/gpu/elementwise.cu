// Elementwise ops, row copies, the CCA value delay and the router's depth averaging: one thread per
// element; parameter gradients through the deterministic column sums of kernel_util.h.

#include "backend/gpu/gpu_ops.h"
#include "backend/gpu/kernel_util.h"

namespace zaya {
namespace {

using gpu::block_dim_x;
using gpu::block_x;
using gpu::thread_x;

ZAYA_DEVICE int64_t global_index() {
  return int64_t(block_x()) * block_dim_x() + thread_x();
}

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

ZAYA_KERNEL(gpu::kThreads) void gelu_forward_kernel(const float* x, int64_t count, float* y) {
  const int64_t i = global_index();
  if (i < count) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * kInvSqrt2));
}

ZAYA_KERNEL(gpu::kThreads)
void gelu_backward_kernel(const float* x, const float* dy, int64_t count, float* dx) {
  const int64_t i = global_index();
  if (i >= count) return;
  const float cdf = 0.5f * (1.0f + erff(x[i] * kInvSqrt2));
  const float pdf = kInvSqrt2Pi * expf(-0.5f * x[i] * x[i]);
  dx[i] = dy[i] * (cdf + x[i] * pdf);
}

ZAYA_KERNEL(gpu::kThreads) void fill_kernel(float* x, int64_t count, float value) {
  const int64_t i = global_index();
  if (i < count) x[i] = value;
}

ZAYA_KERNEL(gpu::kThreads) void mask_rows_kernel(gpu::Output x, int64_t rows, int64_t n, const float* mask) {
  const int64_t i = global_index();
  if (i < rows * n && mask[i / n] != 1.0f) x.store(i, x.load(i) * mask[i / n]);
}

ZAYA_KERNEL(gpu::kThreads)
void copy_rows_kernel(const float* src, int64_t ld_src, int64_t rows, int64_t n, float* dst, int64_t ld_dst,
                      bool accumulate) {
  const int64_t i = global_index();
  if (i >= rows * n) return;
  const int64_t r = i / n, j = i % n;
  const float value = src[r * ld_src + j];
  dst[r * ld_dst + j] = accumulate ? dst[r * ld_dst + j] + value : value;
}

// dst[b, s] = s > 0 ? src[b, s - 1] : first.
ZAYA_KERNEL(gpu::kThreads)
void delay_forward_kernel(const float* src, const float* first, int64_t batch, int64_t seq, int64_t n,
                          float* dst, int64_t ld_dst) {
  const int64_t i = global_index();
  if (i >= batch * seq * n) return;
  const int64_t row = i / n, j = i % n, s = row % seq;
  dst[row * ld_dst + j] = s == 0 ? first[j] : src[(row - 1) * n + j];
}

// dsrc[b, s] = s + 1 < seq ? ddst[b, s + 1] : 0.
ZAYA_KERNEL(gpu::kThreads)
void delay_backward_kernel(const float* ddst, int64_t ld_ddst, int64_t batch, int64_t seq, int64_t n,
                           float* dsrc) {
  const int64_t i = global_index();
  if (i >= batch * seq * n) return;
  const int64_t row = i / n, j = i % n, s = row % seq;
  dsrc[i] = s + 1 < seq ? ddst[(row + 1) * ld_ddst + j] : 0.0f;
}

ZAYA_KERNEL(gpu::kThreads)
void add_scaled_kernel(const float* x, const float* scale, int64_t rows, int64_t n, float* y) {
  const int64_t i = global_index();
  if (i < rows * n) y[i] += x[i] * scale[i % n];
}

ZAYA_KERNEL(gpu::kThreads)
void scale_columns_kernel(const float* dy, const float* scale, int64_t rows, int64_t n, float* dx) {
  const int64_t i = global_index();
  if (i < rows * n) dx[i] = dy[i] * scale[i % n];
}

// The term of the depth averaging's scale gradient.
struct Product {  // a[r, j] * b[r, j]
  const float* a;
  const float* b;
  int64_t n;
  ZAYA_DEVICE float operator()(int64_t r, int64_t j) const { return a[r * n + j] * b[r * n + j]; }
};

}  // namespace

void GpuOps::gelu_forward(const float* x, int64_t count, float* y) {
  gpu::launch("gelu_forward", gelu_forward_kernel, gpu::cover(count, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), x, count, y);
}

void GpuOps::gelu_backward(const float* x, const float* dy, int64_t count, float* dx) {
  gpu::launch("gelu_backward", gelu_backward_kernel, gpu::cover(count, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), x, dy, count, dx);
}

void GpuOps::fill(float* x, int64_t count, float value) {
  gpu::launch("fill", fill_kernel, gpu::cover(count, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), x, count, value);
}

void GpuOps::mask_rows(Destination x, int64_t rows, int64_t n, const float* mask) {
  gpu::launch("mask_rows", mask_rows_kernel, gpu::cover(rows * n, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), gpu::output(x), rows, n, mask);
}

void GpuOps::copy_rows(const float* src, int64_t ld_src, int64_t rows, int64_t n, float* dst, int64_t ld_dst,
                       bool accumulate) {
  gpu::launch("copy_rows", copy_rows_kernel, gpu::cover(rows * n, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), src, ld_src, rows, n, dst, ld_dst, accumulate);
}

void GpuOps::delay_forward(const float* src, const float* first, int64_t batch, int64_t seq, int64_t n,
                           float* dst, int64_t ld_dst) {
  gpu::launch("delay_forward", delay_forward_kernel, gpu::cover(batch * seq * n, gpu::kThreads),
              {gpu::kThreads}, 0, gpu::as_stream(stream_), src, first, batch, seq, n, dst, ld_dst);
}

void GpuOps::delay_backward(const float* ddst, int64_t ld_ddst, int64_t batch, int64_t seq, int64_t n,
                            float* dsrc, float* dfirst) {
  gpu::launch("delay_backward", delay_backward_kernel, gpu::cover(batch * seq * n, gpu::kThreads),
              {gpu::kThreads}, 0, gpu::as_stream(stream_), ddst, ld_ddst, batch, seq, n, dsrc);
  // dfirst sums ddst[b, 0] over the batch: rows of stride seq * ld_ddst.
  if (dfirst) {
    gpu::sum_columns(gpu::StridedValue{ddst, seq * ld_ddst}, batch, n, dfirst,
                     scratch(gpu::column_chunks(batch) * n * sizeof(float)), gpu::as_stream(stream_));
  }
}

void GpuOps::add_scaled(const float* x, const float* scale, int64_t rows, int64_t n, float* y) {
  gpu::launch("add_scaled", add_scaled_kernel, gpu::cover(rows * n, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), x, scale, rows, n, y);
}

void GpuOps::add_scaled_backward(const float* x, const float* scale, const float* dy, int64_t rows, int64_t n,
                                 float* dx, float* dscale) {
  gpu::sum_columns(Product{dy, x, n}, rows, n, dscale, scratch(gpu::column_chunks(rows) * n * sizeof(float)),
                   gpu::as_stream(stream_));
  gpu::launch("scale_columns", scale_columns_kernel, gpu::cover(rows * n, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), dy, scale, rows, n, dx);
}

}  // namespace zaya
