// The optimizer's kernels: the fused AdamW and momentum updates, Newton-Schulz orthogonalisation (Muon),
// and the deterministic sum of squares behind the global gradient norm.

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace zaya {

void CpuOps::sum_squares(const float* x, int64_t count, double* sum) {
  // Fixed blocks summed in double, then the block sums in order: independent of the thread count.
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = (count + kBlock - 1) / kBlock;
  thread_local std::vector<double> partial_storage;
  if (partial_storage.size() < size_t(blocks)) partial_storage.resize(size_t(blocks));
  double* partial = partial_storage.data();
#pragma omp parallel for schedule(static)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t begin = block * kBlock, end = std::min(count, begin + kBlock);
    double sum = 0;
    for (int64_t i = begin; i < end; ++i) sum += double(x[i]) * x[i];
    partial[block] = sum;
  }
  double total = 0;
  for (int64_t block = 0; block < blocks; ++block) total += partial[block];
  *sum += total;
}

void CpuOps::adamw_step(float* param, const float* grad, float* m, float* v, int64_t count,
                        const AdamWStep& s) {
  const float step_size = s.lr / s.bias_correction1, sqrt_correction2 = std::sqrt(s.bias_correction2);
  const float keep = 1.0f - s.lr * s.weight_decay;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    const float g = grad[i] * s.grad_scale;
    m[i] = s.beta1 * m[i] + (1.0f - s.beta1) * g;
    v[i] = s.beta2 * v[i] + (1.0f - s.beta2) * g * g;
    param[i] = param[i] * keep - step_size * m[i] / (std::sqrt(v[i]) / sqrt_correction2 + s.eps);
  }
}

void CpuOps::momentum_step(float* buf, const float* grad, int64_t count, float momentum, bool nesterov,
                           float grad_scale, float* out) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    const float g = grad[i] * grad_scale;
    buf[i] = momentum * buf[i] + g;
    out[i] = nesterov ? g + momentum * buf[i] : buf[i];
  }
}

namespace {

// The row blocks of a symmetric product: each computes its columns from the diagonal on, so a Gram matrix of
// 1024 rows costs 10 of its 16 blocks. Blocks of 128, 192 and 256 rows measured alike (Newton-Schulz on
// `medium`'s expert matrices, 2 threads); 256 keeps the products large.
constexpr int64_t kSymmetricBlock = 256;

constexpr int64_t kTransposeTile = 32;

// dst [cols, rows] (row stride ld_dst) = the transpose of src [rows, cols] (row stride ld_src), a tile at a
// time so that the rows read and the rows written stay in L1 (a strided loop over a 2048 x 1024 expert
// matrix took 8% of its Newton-Schulz time).
void transpose(const float* src, int64_t rows, int64_t cols, int64_t ld_src, float* dst, int64_t ld_dst) {
  for (int64_t i0 = 0; i0 < rows; i0 += kTransposeTile) {
    for (int64_t j0 = 0; j0 < cols; j0 += kTransposeTile) {
      const int64_t i_end = std::min(rows, i0 + kTransposeTile), j_end = std::min(cols, j0 + kTransposeTile);
      for (int64_t j = j0; j < j_end; ++j) {
        for (int64_t i = i0; i < i_end; ++i) dst[j * ld_dst + i] = src[i * ld_src + j];
      }
    }
  }
}

}  // namespace

void CpuOps::symmetric_product(Precision precision, ProductSplit split, Trans trans_b, int64_t r, int64_t k,
                               float alpha, Operand a, int64_t lda, Operand b, int64_t ldb, float beta,
                               float* c, int64_t ldc) {
  for (int64_t i0 = 0; i0 < r; i0 += kSymmetricBlock) {
    const int64_t rows = std::min(kSymmetricBlock, r - i0);
    multiply({Trans::No, trans_b, rows, r - i0, k, alpha, a.offset(i0 * lda), lda,
              b.offset(trans_b == Trans::Yes ? i0 * ldb : i0), ldb, beta, c + i0 * ldc + i0, ldc},
             precision, split);
    // Left of the diagonal block: the columns above it, which the earlier row blocks computed.
    transpose(c + i0, i0, rows, ldc, c + i0 * ldc, ldc);
  }
}

void CpuOps::orthogonalise(Precision precision, ProductSplit split, float* x, int64_t rows, int64_t cols,
                           int steps, const float coefficients[3], void* scratch) {
  // The iteration runs on the wide side: X [r, c] with r <= c, so A = X X^T is the smaller Gram matrix.
  const int64_t r = std::min(rows, cols), c = std::max(rows, cols);
  float* current = static_cast<float*>(scratch);
  float* a = current + r * c;  // [r, r]
  if (rows > cols) {
    transpose(x, rows, cols, cols, current, rows);
  } else {
    std::copy(x, x + rows * cols, current);
  }
  double sum = 0;
  sum_squares(current, r * c, &sum);
  const float norm = float(std::sqrt(sum));
  const float inv = 1.0f / (norm + 1e-7f);
  for (int64_t i = 0; i < r * c; ++i) current[i] *= inv;
  const float qa = coefficients[0], qb = coefficients[1], qc = coefficients[2];
  if (precision == Precision::BF16) {
    // X and A are rounded once per step and read as operands, so the f32 values can take the sums in place:
    // A = X X^T; A <- b A + c A A; X <- a X + A X.
    BFloat16* x16 = reinterpret_cast<BFloat16*>(a + r * r);  // [r, c]
    BFloat16* a16 = x16 + r * c;                             // [r, r]
    for (int step = 0; step < steps; ++step) {
      convert_to_bf16(current, r * c, x16);
      symmetric_product(precision, split, Trans::Yes, r, c, 1.0f, x16, c, x16, c, 0.0f, a, r);
      convert_to_bf16(a, r * r, a16);
      symmetric_product(precision, split, Trans::No, r, r, qc, a16, r, a16, r, qb, a, r);
      convert_to_bf16(a, r * r, a16);
      multiply({Trans::No, Trans::No, r, c, r, 1.0f, a16, r, x16, c, qa, current, c}, precision, split);
    }
  } else {
    float* next = a + r * r;  // [r, c]
    float* b = next + r * c;  // [r, r]
    for (int step = 0; step < steps; ++step) {
      symmetric_product(precision, split, Trans::Yes, r, c, 1.0f, current, c, current, c, 0.0f, a,
                        r);  // A = X X^T
      std::copy(a, a + r * r, b);
      symmetric_product(precision, split, Trans::No, r, r, qc, a, r, a, r, qb, b, r);  // B = b A + c A A
      std::copy(current, current + r * c, next);
      multiply({Trans::No, Trans::No, r, c, r, 1.0f, b, r, current, c, qa, next, c}, Precision::F32,
               split);  // X' = a X + B X
      std::swap(current, next);
    }
  }
  if (rows > cols) {
    transpose(current, cols, rows, rows, x, cols);
  } else {
    std::copy(current, current + rows * cols, x);
  }
}

void CpuOps::newton_schulz(Precision precision, float* x, int64_t count, int64_t rows, int64_t cols,
                           int steps, const float coefficients[3]) {
  // f32: X, the next X, A and B; bf16: X and A, and their bf16 roundings.
  const size_t narrow = size_t(std::min(rows, cols)), wide = size_t(std::max(rows, cols));
  const size_t bytes = precision == Precision::BF16
                           ? (narrow * wide + narrow * narrow) * (sizeof(float) + sizeof(BFloat16))
                           : (narrow * wide + narrow * narrow) * 2 * sizeof(float);
  const int threads = count > 1 ? omp_get_max_threads() : 1;
  if (newton_schulz_scratch_.size() < size_t(threads)) newton_schulz_scratch_.resize(size_t(threads));
  // A batch runs one matrix per thread, its products whole on that thread. A matrix alone runs its products
  // in pieces over every thread only when they are large: below ~2^27 multiply-adds per product, waking the
  // threads costs more than they save (measured on 2 cores: a 256 x 256 matrix takes 3 ms serial, 36 ms
  // threaded; 1024 x 1024 takes 213 ms serial, 110 ms threaded). Which of the two follows the shapes alone.
  const ProductSplit split =
      count == 1 && narrow * narrow * wide >= (size_t(1) << 27) ? ProductSplit::Pieces : ProductSplit::Whole;
#pragma omp parallel for schedule(dynamic) if (count > 1)
  for (int64_t e = 0; e < count; ++e) {
    if (split == ProductSplit::Whole) omp_set_num_threads(1);  // for the regions nested in this one only
    AlignedBuffer& scratch = newton_schulz_scratch_[size_t(omp_get_thread_num())];
    if (scratch.size() < bytes) scratch = AlignedBuffer(bytes);
    orthogonalise(precision, split, x + e * rows * cols, rows, cols, steps, coefficients, scratch.data());
  }
}

void CpuOps::decay_and_subtract(float* param, const float* update, int64_t count, float decay, float alpha) {
  const float keep = 1.0f - decay;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < count; ++i) param[i] = param[i] * keep - alpha * update[i];
}

}  // namespace zaya
