// Matrix products through oneDNN's sgemm, and the bias add and reduction that go with linear layers.

#include <oneapi/dnnl/dnnl.h>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace zaya {

void CpuOps::gemm(Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: only the beta scaling remains (oneDNN wants k >= 1)
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.0f : beta * c[i * ldc + j];
    }
    return;
  }
  const dnnl_status_t status =
      dnnl_sgemm(trans_a == Trans::Yes ? 'T' : 'N', trans_b == Trans::Yes ? 'T' : 'N', m, n, k, alpha, a, lda,
                 b, ldb, beta, c, ldc);
  if (status != dnnl_success) throw Error(cat("oneDNN sgemm failed with status ", int(status)));
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
