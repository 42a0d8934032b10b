// The products family: matrix products through the vendor's library (blas.h; loops in the emulator), the
// rounding of their bf16 operands, and the bias add and reduction that go with linear layers.

#include "backend/gpu/gpu_ops.h"
#include "backend/gpu/kernel_util.h"
#include "core/error.h"

namespace zaya {
namespace {

// dst [rows, cols] packed = bf16(src [rows, cols] with row stride ld).
ZAYA_KERNEL(gpu::kThreads)
void round_rows_to_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld, uint16_t* dst) {
  const int64_t i = int64_t(gpu::block_x()) * gpu::block_dim_x() + gpu::thread_x();
  if (i >= rows * cols) return;
  dst[i] = gpu::bf16_bits(src[(i / cols) * ld + i % cols]);
}

ZAYA_KERNEL(gpu::kThreads)
void add_bias_kernel(float* y, int64_t rows, int64_t n, int64_t ldy, const float* bias) {
  const int64_t i = int64_t(gpu::block_x()) * gpu::block_dim_x() + gpu::thread_x();
  if (i < rows * n) y[(i / n) * ldy + i % n] += bias[i % n];
}

}  // namespace

bool GpuOps::fast_bf16() const {
  return true;
}  // every GPU this backend targets has bf16 matrix units

void GpuOps::convert_to_bf16(const float* src, int64_t count, BFloat16* dst) {
  gpu::launch("round_rows_to_bf16", round_rows_to_bf16, gpu::cover(count, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), src, int64_t(1), count, count, reinterpret_cast<uint16_t*>(dst));
}

const void* GpuOps::as_bf16(Operand operand, int64_t rows, int64_t cols, int64_t& ld, int slot) {
  if (operand.type == DType::BF16) return operand.data;
  AlignedBuffer& buffer = bf16_operands_[slot];
  const size_t bytes = size_t(rows * cols) * sizeof(uint16_t);
  if (buffer.size() < bytes) {
    buffer = AlignedBuffer();
    buffer = AlignedBuffer(bytes, memory());
  }
  gpu::launch("round_rows_to_bf16", round_rows_to_bf16, gpu::cover(rows * cols, gpu::kThreads),
              {gpu::kThreads}, 0, gpu::as_stream(stream_), static_cast<const float*>(operand.data), rows,
              cols, ld, buffer.as<uint16_t>());
  ld = cols;
  return buffer.data();
}

void GpuOps::gemm(Precision precision, Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k,
                  float alpha, Operand a, int64_t lda, Operand b, int64_t ldb, float beta, float* c,
                  int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (precision == Precision::F32) {
    if (a.type != DType::F32 || b.type != DType::F32) throw Error("an f32 product was given a bf16 operand");
    blas_->gemm(DType::F32, trans_a, trans_b, m, n, k, alpha, a.data, lda, 0, b.data, ldb, 0, beta, c, ldc, 0,
                1, stream_);
    return;
  }
  // op(A) is [m, k]: A is stored [m, k], or [k, m] when transposed; likewise B.
  const bool ta = trans_a == Trans::Yes, tb = trans_b == Trans::Yes;
  const void* a16 = as_bf16(a, ta ? k : m, ta ? m : k, lda, 0);
  const void* b16 = as_bf16(b, tb ? n : k, tb ? k : n, ldb, 1);
  blas_->gemm(DType::BF16, trans_a, trans_b, m, n, k, alpha, a16, lda, 0, b16, ldb, 0, beta, c, ldc, 0, 1,
              stream_);
}

void GpuOps::add_bias(float* y, int64_t rows, int64_t n, int64_t ldy, const float* bias) {
  gpu::launch("add_bias", add_bias_kernel, gpu::cover(rows * n, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), y, rows, n, ldy, bias);
}

void GpuOps::bias_backward(const float* dy, int64_t rows, int64_t n, int64_t ldy, float* dbias) {
  gpu::sum_columns(gpu::StridedValue{dy, ldy}, rows, n, dbias,
                   scratch(gpu::column_chunks(rows) * n * sizeof(float)), gpu::as_stream(stream_));
}

}  // namespace zaya
