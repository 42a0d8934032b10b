// RMSNorm (one block per row) and the residual scaling, forward and backward.

#include "backend/gpu/gpu_ops.h"
#include "backend/gpu/kernel_util.h"

namespace zaya {
namespace {

using gpu::block_dim_x;
using gpu::block_x;
using gpu::block_y;
using gpu::sync_threads;
using gpu::thread_x;
using gpu::thread_y;

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

// One row of RMSNorm's backward, by every thread of the block: dx = rstd (w dy) - x rstd^3 / n sum(w dy x)
// (the dot a block sum in `scratch`); when `sums` is given, each thread adds its columns' terms of the
// weight's gradient, dy x rstd, to sums[j] (j = thread, thread + block, ...).
ZAYA_DEVICE void rmsnorm_backward_row(const float* x, const float* weight, const float* rstd, const float* dy,
                                      int64_t row, int64_t n, float* dx, bool accumulate, float* scratch,
                                      float* sums) {
  const float* xr = x + row * n;
  const float* dyr = dy + row * n;
  float dot = 0;
  for (int64_t j = thread_x(); j < n; j += block_dim_x()) dot += weight[j] * dyr[j] * xr[j];
  dot = gpu::block_sum(dot, scratch);
  const float inv = rstd[row], coef = inv * inv * inv * dot / float(n);
  for (int64_t j = thread_x(); j < n; j += block_dim_x()) {
    const float value = inv * weight[j] * dyr[j] - coef * xr[j];
    dx[row * n + j] = accumulate ? dx[row * n + j] + value : value;
    if (sums) sums[j] += dyr[j] * xr[j] * inv;
  }
}

// dx and the weight's gradient in one read of x and dy: a block walks kNormChunkRows rows, one at a time,
// summing its columns' gradient terms in dynamic shared memory [n]; the chunks' partial sums [chunks, n] are
// added in chunk order afterwards. A row wider than kMaxFusedColumns (sums past 32 KiB) takes two passes
// instead: gpu::sum_columns, then rmsnorm_backward_kernel.
constexpr int64_t kNormChunkRows = 64, kMaxFusedColumns = 8192;

ZAYA_KERNEL(kRowThreads)
void rmsnorm_backward_fused_kernel(const float* x, const float* weight, const float* rstd, const float* dy,
                                   int64_t rows, int64_t n, float* dx, bool accumulate, float* partial) {
  ZAYA_SHARED_ARRAY(scratch, float[gpu::kMaxWarps + 1]);
  float* sums = gpu::dynamic_shared<float>();  // [n]
  const int64_t chunk = block_x(), first = chunk * kNormChunkRows;
  const int64_t last = first + kNormChunkRows < rows ? first + kNormChunkRows : rows;
  for (int64_t j = thread_x(); j < n; j += block_dim_x()) sums[j] = 0;
  for (int64_t row = first; row < last; ++row)
    rmsnorm_backward_row(x, weight, rstd, dy, row, n, dx, accumulate, scratch, sums);
  for (int64_t j = thread_x(); j < n; j += block_dim_x()) partial[chunk * n + j] = sums[j];
}

// dx alone, a block per row (rows wider than kMaxFusedColumns).
ZAYA_KERNEL(kRowThreads)
void rmsnorm_backward_kernel(const float* x, const float* weight, const float* rstd, const float* dy,
                             int64_t n, float* dx, bool accumulate) {
  ZAYA_SHARED_ARRAY(scratch, float[gpu::kMaxWarps + 1]);
  rmsnorm_backward_row(x, weight, rstd, dy, block_x(), n, dx, accumulate, scratch, nullptr);
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

// The residual scaling's backward in one pass over dout: blocks of 32 columns x 8 row lanes, each over a
// chunk of kChunkRows rows (gpu::sum_columns' layout), write dh and dr and sum the four parameter
// gradients' terms into partial sums [4, chunks, n], added in chunk order afterwards as sum_columns adds
// its own. dout is read once, where four column sums and the element pass read it five times. Each element
// is read and written by one thread, so dr may alias dout.
constexpr int kResidualSums = 4;  // d h_bias, d h_scale, d r_bias, d r_scale

ZAYA_KERNEL(gpu::kColumnTile* gpu::kRowLanes)
void residual_scale_backward_kernel(const float* h, const float* r, const float* h_bias, const float* h_scale,
                                    const float* r_bias, const float* r_scale, const float* dout,
                                    int64_t rows, int64_t n, int64_t chunks, float* dh, float* dr,
                                    float* partial) {
  ZAYA_SHARED_ARRAY(lanes, float[kResidualSums][gpu::kRowLanes][gpu::kColumnTile]);
  const int64_t column = int64_t(block_x()) * gpu::kColumnTile + thread_x();
  const int64_t chunk = block_y();
  const int64_t first = chunk * gpu::kChunkRows;
  const int64_t last = first + gpu::kChunkRows < rows ? first + gpu::kChunkRows : rows;
  float sums[kResidualSums] = {0, 0, 0, 0};
  if (column < n) {
    const float hb = h_bias[column], hs = h_scale[column], rb = r_bias[column], rs = r_scale[column];
    for (int64_t row = first + thread_y(); row < last; row += gpu::kRowLanes) {
      const int64_t i = row * n + column;
      const float d = dout[i];
      sums[0] += d * hs;
      sums[1] += d * (h[i] + hb);
      sums[2] += d * rs;
      sums[3] += d * (r[i] + rb);
      dh[i] = d * hs;
      dr[i] = d * rs;
    }
  }
  for (int k = 0; k < kResidualSums; ++k) lanes[k][thread_y()][thread_x()] = sums[k];
  sync_threads();
  if (thread_y() == 0 && column < n) {
    for (int k = 0; k < kResidualSums; ++k) {
      float total = 0;
      for (unsigned lane_row = 0; lane_row < gpu::kRowLanes; ++lane_row)
        total += lanes[k][lane_row][thread_x()];
      partial[(k * chunks + chunk) * n + column] = total;
    }
  }
}

struct NormalisedProduct {  // dy[r, j] x[r, j] rstd[r]: the norm weight's gradient
  const float* dy;
  const float* x;
  const float* rstd;
  int64_t n;
  ZAYA_DEVICE float operator()(int64_t r, int64_t j) const { return dy[r * n + j] * x[r * n + j] * rstd[r]; }
};

}  // namespace

void GpuOps::rmsnorm_forward(const float* x, const float* weight, int64_t rows, int64_t n, float eps,
                             Destination y, float* rstd) {
  gpu::launch("rmsnorm_forward", rmsnorm_forward_kernel, {unsigned(rows)}, {kRowThreads}, 0,
              gpu::as_stream(stream_), x, weight, n, eps, gpu::output(y), rstd);
}

void GpuOps::rmsnorm_backward(const float* x, const float* weight, const float* rstd, const float* dy,
                              int64_t rows, int64_t n, float* dx, bool accumulate, float* dweight) {
  if (rows == 0 || n == 0) return;
  const gpu::Stream stream = gpu::as_stream(stream_);
  if (n > kMaxFusedColumns) {
    gpu::sum_columns(NormalisedProduct{dy, x, rstd, n}, rows, n, dweight,
                     scratch(gpu::column_chunks(rows) * n * sizeof(float)), stream);
    gpu::launch("rmsnorm_backward", rmsnorm_backward_kernel, {unsigned(rows)}, {kRowThreads}, 0, stream, x,
                weight, rstd, dy, n, dx, accumulate);
    return;
  }
  const int64_t chunks = (rows + kNormChunkRows - 1) / kNormChunkRows;
  float* partial = scratch(chunks * n * sizeof(float));  // [chunks, n]
  gpu::launch("rmsnorm_backward", rmsnorm_backward_fused_kernel, {unsigned(chunks)}, {kRowThreads},
              n * sizeof(float), stream, x, weight, rstd, dy, rows, n, dx, accumulate, partial);
  gpu::launch("add_column_partials", gpu::add_column_partials<>, gpu::cover(n, gpu::kThreads),
              {gpu::kThreads, 1}, 0, stream, partial, chunks, n, dweight);
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
  if (rows == 0 || n == 0) return;
  const int64_t chunks = gpu::column_chunks(rows);
  float* partial = scratch(kResidualSums * chunks * n * sizeof(float));  // [4, chunks, n]
  const gpu::Stream stream = gpu::as_stream(stream_);
  gpu::launch("residual_scale_backward", residual_scale_backward_kernel,
              {unsigned((n + gpu::kColumnTile - 1) / gpu::kColumnTile), unsigned(chunks), 1},
              {gpu::kColumnTile, gpu::kRowLanes}, 0, stream, h, r, h_bias, h_scale, r_bias, r_scale, dout,
              rows, n, chunks, dh, dr, partial);
  float* const sums[kResidualSums] = {dh_bias, dh_scale, dr_bias, dr_scale};
  for (int k = 0; k < kResidualSums; ++k) {
    gpu::launch("add_column_partials", gpu::add_column_partials<>, gpu::cover(n, gpu::kThreads),
                {gpu::kThreads, 1}, 0, stream, partial + k * chunks * n, chunks, n, sums[k]);
  }
}

}  // namespace zaya
