#pragma once
// The CPU backend: Ops implemented with oneDNN's sgemm and OpenMP loops. Each group of ops lives in its
// own source file, named after its family in op_table.h; this header is their common class.

#include <array>
#include <vector>

#include "backend/cpu/product_pieces.h"
#include "backend/ops.h"
#include "core/buffer.h"

namespace zaya {

class CpuOps final : public Ops {
 public:
  MemoryResource& memory() override { return host_memory(); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void zero(void* data, size_t bytes) override;

  bool fast_bf16() const override;
  int64_t cca_conv_scratch(const AttentionShape& shape, int64_t k0, int64_t k1) override;

  using Ops::gemm;  // the f32 shorthand, which the override below would otherwise hide
#define ZAYA_OP(name, params, args) void name params override;
#include "backend/op_table.h"

 protected:
  void copy_to_host(void* dst, const void* src, size_t bytes) override;

 private:
  // Ops::gemm, whole on the calling thread: for the products of a kernel's own parallel loop (its bits, as
  // gemm's, follow the shape alone).
  void gemm_on_this_thread(Precision precision, Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k,
                           float alpha, Operand a, int64_t lda, Operand b, int64_t ldb, float beta, float* c,
                           int64_t ldc);
  void multiply(const Product& product, Precision precision, ProductSplit split);
  // C [r, r] = alpha A [r, k] op(B) + beta C where the product is symmetric (A X^T with B = X, or A A with A
  // symmetric): only the blocks on and above the diagonal are multiplied, and those below are their mirror
  // images. beta's C must be symmetric too.
  void symmetric_product(Precision precision, ProductSplit split, Trans trans_b, int64_t r, int64_t k,
                         float alpha, Operand a, int64_t lda, Operand b, int64_t ldb, float beta, float* c,
                         int64_t ldc);
  // One matrix of newton_schulz, in the working memory newton_schulz sizes for it, its products run as
  // `split` says.
  void orthogonalise(Precision precision, ProductSplit split, float* x, int64_t rows, int64_t cols, int steps,
                     const float coefficients[3], void* scratch);
  // Newton-Schulz's working memory, one buffer per thread (a batch runs one matrix per thread).
  std::vector<AlignedBuffer> newton_schulz_scratch_;
  // The bf16 copies of q, k, v and the output gradient that attention's products read.
  std::array<AlignedBuffer, 4> attention_operands_;
};

// Throws Error when the address space this process may map (ulimit -v) is too small for the backend's
// libraries to run without crashing.
void require_address_space();

// Sums over rows into acc[n] in a fixed order per column, in parallel over blocks of columns, so the result
// is the same for every thread count. term(row, column) gives the value to add.
template <class Term>
void reduce_columns(int64_t rows, int64_t n, float* acc, const Term& term) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t begin = block * kBlock, end = begin + kBlock < n ? begin + kBlock : n;
    float sum[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
      for (int64_t j = begin; j < end; ++j) sum[j - begin] += term(r, j);
    }
    for (int64_t j = begin; j < end; ++j) acc[j] += sum[j - begin];
  }
}

}  // namespace zaya
