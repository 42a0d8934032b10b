#pragma once
// Matrix products on the device, row-major as Ops::gemm describes them: cuBLASLt on NVIDIA, hipBLASLt on
// AMD, plain loops in the emulator. Host code includes this header; the vendor's live in blas.cu.

#include <cstdint>
#include <memory>

#include "backend/ops.h"

namespace zaya::gpu {

class Blas {
 public:
  virtual ~Blas() = default;
  // For each i < batch: C_i[m,n] = alpha op(A_i) op(B_i) + beta C_i, with A_i = a + i stride_a (elements)
  // and likewise for B and C. A and B are both `inputs` (F32: an f32 product throughout; BF16: bf16
  // values, f32 sums); C is f32. An empty product (k = 0: an expert that received no tokens, in its weight
  // gradient) is C = beta C, computed here, never handed to the library: vendors' libraries have mishandled
  // an empty inner dimension, and the emulator's loops would hide it.
  void gemm(DType inputs, Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b,
            float beta, float* c, int64_t ldc, int64_t stride_c, int64_t batch, void* stream);

 protected:
  // gemm with m, n, k and batch all positive.
  virtual void product(DType inputs, Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k,
                       float alpha, const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb,
                       int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c, int64_t batch,
                       void* stream) = 0;
};

std::unique_ptr<Blas> make_blas();

}  // namespace zaya::gpu
