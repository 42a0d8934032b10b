#pragma once
// The CPU backend: Ops implemented with oneDNN's sgemm and OpenMP loops. Each group of ops lives in its
// own source file (gemm, elementwise, cca, attention, routing, loss); this header is their common class.

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

  using Ops::gemm;
  void gemm(Precision precision, Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            Operand a, int64_t lda, Operand b, int64_t ldb, float beta, float* c, int64_t ldc) override;
  bool fast_bf16() const override;
  void convert_to_bf16(const float* src, int64_t count, BFloat16* dst) override;
  void add_bias(float* y, int64_t rows, int64_t n, int64_t ldy, const float* bias) override;
  void bias_backward(const float* dy, int64_t rows, int64_t n, int64_t ldy, float* dbias) override;

  void embedding_forward(const int32_t* ids, int64_t tokens, const float* table, int64_t hidden,
                         const float* bias, const float* scale, float* out) override;
  void embedding_backward(const int32_t* ids, int64_t tokens, const float* table, int64_t hidden,
                          const float* bias, const float* scale, const float* dout, int32_t skip_id,
                          float* dtable, float* dbias, float* dscale) override;

  void rmsnorm_forward(const float* x, const float* weight, int64_t rows, int64_t n, float eps, float* y,
                       float* rstd) override;
  void rmsnorm_backward(const float* x, const float* weight, const float* rstd, const float* dy, int64_t rows,
                        int64_t n, float* dx, bool accumulate, float* dweight) override;
  void residual_scale_forward(const float* h, const float* r, const float* h_bias, const float* h_scale,
                              const float* r_bias, const float* r_scale, int64_t rows, int64_t n,
                              float* out) override;
  void residual_scale_backward(const float* h, const float* r, const float* h_bias, const float* h_scale,
                               const float* r_bias, const float* r_scale, const float* dout, int64_t rows,
                               int64_t n, float* dh, float* dr, float* dh_bias, float* dh_scale,
                               float* dr_bias, float* dr_scale) override;

  void gelu_forward(const float* x, int64_t count, float* y) override;
  void gelu_backward(const float* x, const float* dy, int64_t count, float* dx) override;
  void fill(float* x, int64_t count, float value) override;
  void mask_rows(float* x, int64_t rows, int64_t n, const float* mask) override;
  void copy_rows(const float* src, int64_t ld_src, int64_t rows, int64_t n, float* dst, int64_t ld_dst,
                 bool accumulate) override;
  void delay_forward(const float* src, const float* first, int64_t batch, int64_t seq, int64_t n, float* dst,
                     int64_t ld_dst) override;
  void delay_backward(const float* ddst, int64_t ld_ddst, int64_t batch, int64_t seq, int64_t n, float* dsrc,
                      float* dfirst) override;
  void add_scaled(const float* x, const float* scale, int64_t rows, int64_t n, float* y) override;
  void add_scaled_backward(const float* x, const float* scale, const float* dy, int64_t rows, int64_t n,
                           float* dx, float* dscale) override;

  void qk_mean_forward(const float* qk, int64_t tokens, int64_t ld, const AttentionShape& shape, float* q_res,
                       float* k_res) override;
  void qk_mean_backward(const float* dq_res, const float* dk_res, int64_t tokens, int64_t ld,
                        const AttentionShape& shape, float* dqk) override;
  void cca_conv_forward(Precision precision, const float* x, const AttentionShape& shape, int64_t k0,
                        int64_t k1, const float* dw_weight, const float* dw_bias, const float* g_weight,
                        const float* g_bias, float* dw, float* out, float* scratch) override;
  void cca_conv_backward(Precision precision, const float* x, const float* dw, const float* dout,
                         const AttentionShape& shape, int64_t k0, int64_t k1, const float* dw_weight,
                         const float* g_weight, float* dx, float* d_dw_weight, float* d_dw_bias,
                         float* d_g_weight, float* d_g_bias, float* scratch) override;
  int64_t cca_conv_scratch(const AttentionShape& shape, int64_t k0, int64_t k1) override;
  void cca_conv_decode(const float* window, const AttentionShape& shape, int64_t k0, int64_t k1,
                       const float* dw_weight, const float* dw_bias, const float* g_weight,
                       const float* g_bias, float* out) override;
  void l2norm_forward(const float* x, int64_t rows, int64_t heads, int64_t head_dim, const float* temp,
                      float* out, float* norms) override;
  void l2norm_backward(const float* x, const float* norms, const float* dout, int64_t rows, int64_t heads,
                       int64_t head_dim, const float* temp, float* dx, float* dtemp) override;
  void rope(float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, int64_t rotary_dim,
            const float* cos, const float* sin, bool inverse) override;
  void attention_forward(Precision precision, const float* q, const float* k, const float* v,
                         const float* key_mask, const AttentionShape& shape, float scale, float* o,
                         float* lse) override;
  void attention_backward(Precision precision, const float* q, const float* k, const float* v,
                          const float* key_mask, const float* o, const float* lse, const float* dout,
                          const AttentionShape& shape, float scale, float* dq, float* dk, float* dv) override;

  void attention_decode(const float* q, const float* const* keys, const float* const* values,
                        const int64_t* lengths, const AttentionShape& shape, float scale,
                        float* out) override;
  void route_top1(const float* logits, const float* biases, int64_t tokens, int64_t routes, float* probs,
                  int32_t* choice, float* gate, float* lse) override;
  void router_statistics(const float* probs, const float* lse, const int32_t* choice, int64_t tokens,
                         int64_t routes, int64_t* counts, double* prob_sums, double* entropy_sum,
                         double* lse_square_sum) override;
  void router_aux_backward(const float* probs, const float* lse, int64_t tokens, int64_t routes,
                           const float* route_coef, float z_coef, float* dlogits) override;
  void route_top1_backward(const float* probs, const int32_t* choice, const float* dgate, int64_t tokens,
                           int64_t routes, float* dlogits) override;
  void group_by_expert(const int32_t* choice, int64_t tokens, int64_t experts, int32_t* order,
                       int64_t* offsets) override;
  void gather_rows(const float* src, const int32_t* order, const float* scale, int64_t count, int64_t n,
                   float* dst) override;
  void scatter_rows(const float* src, const int32_t* order, const float* scale, int64_t count, int64_t n,
                    bool accumulate, float* dst) override;
  void gather_dot(const float* a, const int32_t* order, const float* b, int64_t count, int64_t n,
                  float* out) override;
  void swiglu_forward(const float* gate_up, int64_t rows, int64_t n, float* out) override;
  void swiglu_backward(const float* gate_up, const float* dout, int64_t rows, int64_t n,
                       float* dgate_up) override;

  void sum_squares(const float* x, int64_t count, double* sum) override;
  void adamw_step(float* param, const float* grad, float* m, float* v, int64_t count,
                  const AdamWStep& step) override;
  void momentum_step(float* buf, const float* grad, int64_t count, float momentum, bool nesterov,
                     float grad_scale, float* out) override;
  void newton_schulz(Precision precision, float* x, int64_t count, int64_t rows, int64_t cols, int steps,
                     const float coefficients[3]) override;
  void decay_and_subtract(float* param, const float* update, int64_t count, float decay,
                          float alpha) override;

  void cross_entropy(const float* logits, const int32_t* labels, int64_t rows, int64_t vocab,
                     float grad_scale, float* dlogits, BFloat16* dlogits_bf16, double* loss_sum) override;

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
