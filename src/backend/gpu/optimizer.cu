// The optimizer's kernels: the fused AdamW and momentum updates, the deterministic sum of squares behind the
// global gradient norm, and Newton-Schulz orthogonalisation (Muon) of a layer's matrices at once, its
// products as strided-batched products of the vendor's library.

#include <algorithm>
#include <cmath>
#include <utility>

#include "backend/gpu/gpu_ops.h"
#include "backend/gpu/kernel_util.h"

namespace zaya {
namespace {

using gpu::block_dim_x;
using gpu::block_dim_y;
using gpu::block_x;
using gpu::block_y;
using gpu::block_z;
using gpu::grid_dim_x;
using gpu::thread_x;
using gpu::thread_y;

ZAYA_DEVICE int64_t global_index() {
  return int64_t(block_x()) * block_dim_x() + thread_x();
}

// Scratch is handed out as one allocation; its parts start on 256-byte boundaries, which the vendor's
// products reward (cuBLASLt picks its algorithms by the operands' alignment).
size_t aligned(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

// ---- sum of squares ----------------------------------------------------------------------------------
// At most this many blocks of partial sums: enough to fill a GPU, few enough for one block to add them up.
// The split depends on the count only, so the same x gives the same bits on every run.
constexpr int64_t kSumBlocks = 1024;

// partial[block] = the sum of x[i]^2 in double over the grid-strided elements of this block.
ZAYA_KERNEL(gpu::kThreads) void sum_squares_partials_kernel(const float* x, int64_t count, double* partial) {
  ZAYA_SHARED_ARRAY(scratch, double[gpu::kMaxWarps + 1]);
  const int64_t stride = int64_t(grid_dim_x()) * block_dim_x();
  double sum = 0;
  for (int64_t i = global_index(); i < count; i += stride) sum += double(x[i]) * x[i];
  sum = gpu::block_sum(sum, scratch);
  if (thread_x() == 0) partial[block_x()] = sum;
}

// ---- elementwise updates -----------------------------------------------------------------------------
// The step's constants, computed once on the host exactly as the CPU backend computes them.
struct AdamWConstants {
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float step_size, sqrt_correction2, keep, eps, grad_scale;
};

// The CPU's order of operations: m and v from the scaled gradient, then the decayed parameter less the step.
ZAYA_KERNEL(gpu::kThreads)
void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t count, AdamWConstants k) {
  const int64_t i = global_index();
  if (i >= count) return;
  const float g = grad[i] * k.grad_scale;
  const float mi = k.beta1 * m[i] + k.one_minus_beta1 * g;
  const float vi = k.beta2 * v[i] + k.one_minus_beta2 * g * g;
  m[i] = mi;
  v[i] = vi;
  param[i] = param[i] * k.keep - k.step_size * mi / (sqrtf(vi) / k.sqrt_correction2 + k.eps);
}

ZAYA_KERNEL(gpu::kThreads)
void momentum_kernel(float* buf, const float* grad, int64_t count, float momentum, bool nesterov,
                     float grad_scale, float* out) {
  const int64_t i = global_index();
  if (i >= count) return;
  const float g = grad[i] * grad_scale;
  const float b = momentum * buf[i] + g;
  buf[i] = b;
  out[i] = nesterov ? g + momentum * b : b;
}

ZAYA_KERNEL(gpu::kThreads)
void decay_and_subtract_kernel(float* param, const float* update, int64_t count, float keep, float alpha) {
  const int64_t i = global_index();
  if (i < count) param[i] = param[i] * keep - alpha * update[i];
}

// ---- Newton-Schulz -----------------------------------------------------------------------------------
constexpr unsigned kNormThreads = 1024;  // one block per matrix: as many threads as a block holds
constexpr int kTile = 32;                // the transpose's square tile
constexpr unsigned kTileRows = 8;        // a 32 x 8 block moves a tile, 4 elements a thread

// dst[matrix] [cols, rows] = src[matrix] [rows, cols]^T; grid (column tiles, row tiles, matrices). A tile
// goes through shared memory so that both the reads and the writes are of whole rows (coalesced); the tile's
// extra column keeps the column reads off a single bank.
ZAYA_KERNEL(kTile* kTileRows)
void transpose_kernel(const float* src, int64_t rows, int64_t cols, float* dst) {
  ZAYA_SHARED_ARRAY(tile, float[kTile][kTile + 1]);
  const int64_t offset = int64_t(block_z()) * rows * cols;
  const int64_t row0 = int64_t(block_y()) * kTile, col0 = int64_t(block_x()) * kTile;
  for (int y = thread_y(); y < kTile; y += block_dim_y()) {
    const int64_t r = row0 + y, c = col0 + thread_x();
    if (r < rows && c < cols) tile[y][thread_x()] = src[offset + r * cols + c];
  }
  gpu::sync_threads();
  for (int y = thread_y(); y < kTile; y += block_dim_y()) {
    const int64_t c = col0 + y, r = row0 + thread_x();  // dst row c, column r
    if (r < rows && c < cols) dst[offset + c * rows + r] = tile[thread_x()][y];
  }
}

// x[matrix] /= (|x[matrix]|_F + 1e-7), one block per matrix of `size` elements. As the CPU: the sum of
// squares in double, the norm rounded to f32 before the eps is added.
ZAYA_KERNEL(kNormThreads) void normalise_kernel(float* x, int64_t size) {
  ZAYA_SHARED_ARRAY(scratch, double[gpu::kMaxWarps + 1]);
  float* matrix = x + int64_t(block_x()) * size;
  double sum = 0;
  for (int64_t i = thread_x(); i < size; i += block_dim_x()) sum += double(matrix[i]) * matrix[i];
  sum = gpu::block_sum(sum, scratch);
  const float norm = float(sqrt(sum));
  const float inv = 1.0f / (norm + 1e-7f);
  for (int64_t i = thread_x(); i < size; i += block_dim_x()) matrix[i] *= inv;
}

ZAYA_KERNEL(gpu::kThreads) void copy_kernel(const float* src, int64_t count, float* dst) {
  const int64_t i = global_index();
  if (i < count) dst[i] = src[i];
}

}  // namespace

void GpuOps::sum_squares(const float* x, int64_t count, double* sum) {
  if (count == 0) return;
  const gpu::Stream stream = gpu::as_stream(stream_);
  const int64_t blocks = std::min((count + gpu::kThreads - 1) / gpu::kThreads, kSumBlocks);
  double* partial = reinterpret_cast<double*>(scratch(size_t(blocks) * sizeof(double)));  // [blocks]
  gpu::launch("sum_squares_partials", sum_squares_partials_kernel, {unsigned(blocks)}, {gpu::kThreads}, 0,
              stream, x, count, partial);
  gpu::launch("add_partials", gpu::add_values_kernel<gpu::kThreads>, {1}, {gpu::kThreads}, 0, stream, partial,
              blocks, sum);
}

void GpuOps::adamw_step(float* param, const float* grad, float* m, float* v, int64_t count,
                        const Ops::AdamWStep& step) {
  AdamWConstants k;
  k.beta1 = step.beta1;
  k.beta2 = step.beta2;
  k.one_minus_beta1 = 1.0f - step.beta1;
  k.one_minus_beta2 = 1.0f - step.beta2;
  k.step_size = step.lr / step.bias_correction1;
  k.sqrt_correction2 = std::sqrt(step.bias_correction2);
  k.keep = 1.0f - step.lr * step.weight_decay;
  k.eps = step.eps;
  k.grad_scale = step.grad_scale;
  gpu::launch("adamw", adamw_kernel, gpu::cover(count, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), param, grad, m, v, count, k);
}

void GpuOps::momentum_step(float* buf, const float* grad, int64_t count, float momentum, bool nesterov,
                           float grad_scale, float* out) {
  gpu::launch("momentum", momentum_kernel, gpu::cover(count, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), buf, grad, count, momentum, nesterov, grad_scale, out);
}

void GpuOps::decay_and_subtract(float* param, const float* update, int64_t count, float decay, float alpha) {
  gpu::launch("decay_and_subtract", decay_and_subtract_kernel, gpu::cover(count, gpu::kThreads),
              {gpu::kThreads}, 0, gpu::as_stream(stream_), param, update, count, 1.0f - decay, alpha);
}

void GpuOps::newton_schulz(Precision precision, float* x, int64_t count, int64_t rows, int64_t cols,
                           int steps, const float coefficients[3]) {
  if (count == 0 || rows == 0 || cols == 0) return;
  const gpu::Stream stream = gpu::as_stream(stream_);
  // The iteration runs on the wide orientation, X [r, c] with r <= c, so that A = X X^T is the smaller Gram
  // matrix; a tall matrix is transposed into scratch and back at the end, a wide one is worked on in place.
  const bool tall = rows > cols;
  const int64_t r = std::min(rows, cols), c = std::max(rows, cols);
  const int64_t wide_size = r * c, gram_size = r * r;  // elements of one matrix of X, of A
  const size_t wide_bytes = aligned(size_t(count * wide_size) * sizeof(float));
  const size_t gram_bytes = aligned(size_t(count * gram_size) * sizeof(float));
  const size_t wide16_bytes = aligned(size_t(count * wide_size) * sizeof(uint16_t));
  const size_t gram16_bytes = aligned(size_t(count * gram_size) * sizeof(uint16_t));
  const bool bf16 = precision == Precision::BF16;
  // f32: the transposed X, the next X, A and B; bf16: the transposed X, A, and the bf16 roundings of X and A.
  const size_t bytes = (tall ? wide_bytes : 0) +
                       (bf16 ? gram_bytes + wide16_bytes + gram16_bytes : wide_bytes + 2 * gram_bytes);
  auto* memory = reinterpret_cast<unsigned char*>(scratch(bytes));
  const auto take = [&memory](size_t part) {
    unsigned char* start = memory;
    memory += part;
    return start;
  };

  float* current = tall ? reinterpret_cast<float*>(take(wide_bytes)) : x;  // [count, r, c]
  if (tall) {
    gpu::launch("transpose", transpose_kernel,
                {unsigned((cols + kTile - 1) / kTile), unsigned((rows + kTile - 1) / kTile), unsigned(count)},
                {kTile, kTileRows}, 0, stream, x, rows, cols, current);
  }
  gpu::launch("normalise", normalise_kernel, {unsigned(count)}, {kNormThreads}, 0, stream, current,
              wide_size);

  const float qa = coefficients[0], qb = coefficients[1], qc = coefficients[2];
  if (bf16) {
    // As the CPU: X and A are rounded to bf16 once per step and read as the operands, so the f32 values can
    // take the sums in place: A = X X^T; A <- b A + c A A; X <- a X + A X. Each product covers every matrix.
    float* a = reinterpret_cast<float*>(take(gram_bytes));        // [count, r, r]
    auto* x16 = reinterpret_cast<BFloat16*>(take(wide16_bytes));  // [count, r, c]
    auto* a16 = reinterpret_cast<BFloat16*>(take(gram16_bytes));  // [count, r, r]
    for (int step = 0; step < steps; ++step) {
      convert_to_bf16(current, count * wide_size, x16);
      blas_->gemm(DType::BF16, Trans::No, Trans::Yes, r, r, c, 1.0f, x16, c, wide_size, x16, c, wide_size,
                  0.0f, a, r, gram_size, count, stream_);
      convert_to_bf16(a, count * gram_size, a16);
      blas_->gemm(DType::BF16, Trans::No, Trans::No, r, r, r, qc, a16, r, gram_size, a16, r, gram_size, qb, a,
                  r, gram_size, count, stream_);
      convert_to_bf16(a, count * gram_size, a16);
      blas_->gemm(DType::BF16, Trans::No, Trans::No, r, c, r, 1.0f, a16, r, gram_size, x16, c, wide_size, qa,
                  current, c, wide_size, count, stream_);
    }
  } else {
    // A product may not write the matrix it reads, so X alternates between two buffers, and B and the next X
    // start as copies of A and X for the products' beta terms.
    float* next = reinterpret_cast<float*>(take(wide_bytes));  // [count, r, c]
    float* a = reinterpret_cast<float*>(take(gram_bytes));     // [count, r, r]
    float* b = reinterpret_cast<float*>(take(gram_bytes));     // [count, r, r]
    for (int step = 0; step < steps; ++step) {
      blas_->gemm(DType::F32, Trans::No, Trans::Yes, r, r, c, 1.0f, current, c, wide_size, current, c,
                  wide_size, 0.0f, a, r, gram_size, count, stream_);  // A = X X^T
      gpu::launch("copy", copy_kernel, gpu::cover(count * gram_size, gpu::kThreads), {gpu::kThreads}, 0,
                  stream, a, count * gram_size, b);
      blas_->gemm(DType::F32, Trans::No, Trans::No, r, r, r, qc, a, r, gram_size, a, r, gram_size, qb, b, r,
                  gram_size, count, stream_);  // B = b A + c A A
      gpu::launch("copy", copy_kernel, gpu::cover(count * wide_size, gpu::kThreads), {gpu::kThreads}, 0,
                  stream, current, count * wide_size, next);
      blas_->gemm(DType::F32, Trans::No, Trans::No, r, c, r, 1.0f, b, r, gram_size, current, c, wide_size, qa,
                  next, c, wide_size, count, stream_);  // X' = a X + B X
      std::swap(current, next);
    }
  }

  if (tall) {
    // current [count, cols, rows] back to x [count, rows, cols].
    gpu::launch("transpose", transpose_kernel,
                {unsigned((rows + kTile - 1) / kTile), unsigned((cols + kTile - 1) / kTile), unsigned(count)},
                {kTile, kTileRows}, 0, stream, current, cols, rows, x);
  } else if (current != x) {
    gpu::launch("copy", copy_kernel, gpu::cover(count * wide_size, gpu::kThreads), {gpu::kThreads}, 0, stream,
                current, count * wide_size, x);
  }
}

}  // namespace zaya
