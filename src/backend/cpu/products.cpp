// The products family: matrix products through oneDNN (sgemm in f32, the matmul primitive in bf16), each
// piece of a product on one thread (product_pieces.h), the rounding of their bf16 operands, and the bias
// add and reduction that go with linear layers.

#include <cpuid.h>
#include <oneapi/dnnl/dnnl.h>
#include <algorithm>

#include "backend/cpu/bf16_products.h"
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace zaya {

void CpuOps::gemm(Precision precision, Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k,
                  float alpha, Operand a, int64_t lda, Operand b, int64_t ldb, float beta, float* c,
                  int64_t ldc) {
  multiply({trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc}, precision, ProductSplit::Pieces);
}

void CpuOps::gemm_on_this_thread(Precision precision, Trans trans_a, Trans trans_b, int64_t m, int64_t n,
                                 int64_t k, float alpha, Operand a, int64_t lda, Operand b, int64_t ldb,
                                 float beta, float* c, int64_t ldc) {
  multiply({trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc}, precision, ProductSplit::Whole);
}

void CpuOps::multiply(const Product& product, Precision precision, ProductSplit split) {
  if (product.m == 0 || product.n == 0) return;
  if (product.k == 0) {  // an empty sum: only the beta scaling remains (oneDNN wants k >= 1)
    for (int64_t i = 0; i < product.m; ++i) {
      float* row = product.c + i * product.ldc;
      for (int64_t j = 0; j < product.n; ++j) row[j] = product.beta == 0 ? 0.0f : product.beta * row[j];
    }
    return;
  }
  if (precision == Precision::BF16) {
    cpu_bf16_products().run(product, split);
    return;
  }
  if (product.a.type != DType::F32 || product.b.type != DType::F32)
    throw Error("an f32 product was given a bf16 operand");
  const ProductPieces pieces = product_pieces(split, product.m, product.n, product.k);
  run_product_pieces(product, pieces, [](const Product& piece) {
    const dnnl_status_t status =
        dnnl_sgemm(piece.trans_a == Trans::Yes ? 'T' : 'N', piece.trans_b == Trans::Yes ? 'T' : 'N', piece.m,
                   piece.n, piece.k, piece.alpha, static_cast<const float*>(piece.a.data), piece.lda,
                   static_cast<const float*>(piece.b.data), piece.ldb, piece.beta, piece.c, piece.ldc);
    if (status != dnnl_success) throw Error(cat("oneDNN sgemm failed with status ", int(status)));
  });
}

// The host reads the offsets where they are (host memory): each group is the product gemm computes for it.
void CpuOps::grouped_gemm(Precision precision, Trans trans_b, const int64_t* offsets, int64_t groups,
                          int64_t rows, int64_t n, int64_t k, Operand a, int64_t lda, Operand b,
                          int64_t b_stride, int64_t ldb, float* c, int64_t ldc) {
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t begin = offsets[g];
    gemm(precision, Trans::No, trans_b, offsets[g + 1] - begin, n, k, 1.0f, a.offset(begin * lda), lda,
         b.offset(g * b_stride), ldb, 0.0f, c + begin * ldc, ldc);
  }
  for (int64_t r = offsets[groups]; r < rows; ++r) std::fill(c + r * ldc, c + r * ldc + n, 0.0f);
}

void CpuOps::grouped_weight_gradient(Precision precision, const int64_t* offsets, int64_t groups, int64_t m,
                                     int64_t n, Operand a, int64_t lda, Operand b, int64_t ldb, float* c) {
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t begin = offsets[g];
    gemm(precision, Trans::Yes, Trans::No, m, n, offsets[g + 1] - begin, 1.0f, a.offset(begin * lda), lda,
         b.offset(begin * ldb), ldb, 1.0f, c + g * m * n, n);
  }
}

bool CpuOps::fast_bf16() const {
  // CPUID leaf 7: AMX-BF16 is EDX bit 22 of sub-leaf 0, AVX512-BF16 EAX bit 5 of sub-leaf 1.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  if (edx & (1u << 22)) return true;
  if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;
  return (eax & (1u << 5)) != 0;
}

void CpuOps::convert_to_bf16(const float* src, int64_t count, BFloat16* dst) {
  constexpr int64_t kChunk = 1 << 16;
#pragma omp parallel for schedule(static)
  for (int64_t begin = 0; begin < count; begin += kChunk)
    round_to_bf16(src + begin, std::min(kChunk, count - begin), dst + begin);
}

void CpuOps::add_bias(float* y, int64_t rows, int64_t n, int64_t ldy, const float* bias) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) y[r * ldy + j] += bias[j];
  }
}

void CpuOps::bias_backward(const float* dy, int64_t rows, int64_t n, int64_t ldy, float* dbias) {
  reduce_columns(rows, n, dbias, [&](int64_t r, int64_t j) { return dy[r * ldy + j]; });
}

}  // namespace zaya
