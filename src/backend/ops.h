#pragma once
// The backend op table: every computation of the model's forward and backward passes, as coarse ops on
// device pointers and shapes. Model code calls only these, never a device API, so a GPU backend (CUDA or
// HIP from one source) is a new implementation of this interface and leaves the model untouched.
//
// Conventions: row-major, contiguous unless a leading dimension (ld*) says otherwise. T = tokens of the
// micro-batch (B sequences of S positions, token t = b * S + s). "accumulate" outputs are added to (+=),
// others are overwritten. Parameter-gradient reductions run in a fixed order, so results do not depend
// on the thread count.

#include <cstddef>
#include <cstdint>

#include "core/buffer.h"
#include "core/dtype.h"
#include "core/precision.h"

namespace zaya {

enum class Trans : uint8_t { No, Yes };

// One matrix of a product as it is stored: f32, or bf16 (a weight's low-precision copy).
struct Operand {
  const void* data = nullptr;
  DType type = DType::F32;
  Operand() = default;
  Operand(const float* values) : data(values), type(DType::F32) {}
  Operand(const BFloat16* values) : data(values), type(DType::BF16) {}
  // The operand `elements` further on (an expert's matrix inside a layer's [E, ...] tensor).
  Operand offset(int64_t elements) const {
    return type == DType::BF16 ? Operand(static_cast<const BFloat16*>(data) + elements)
                               : Operand(static_cast<const float*>(data) + elements);
  }
};

// The shape of the CCA attention of one layer.
struct AttentionShape {
  int64_t batch = 0, seq = 0;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t window = 0;  // sliding window in keys (query included); 0 = full causal
};

class Ops {
 public:
  virtual ~Ops() = default;

  // ---- memory --------------------------------------------------------------------------------------
  // Where this backend's values live: parameters, gradients, optimizer state and activation arenas are
  // allocated here, and every pointer the ops take points into it.
  virtual MemoryResource& memory() = 0;
  // The one way the host reads a device value (expert offsets, the loss and router statistics, the
  // gradient norm): each call is a synchronisation on a GPU, so they are counted, to be kept few.
  void read_to_host(void* dst, const void* src, size_t bytes) {
    ++host_reads_;
    copy_to_host(dst, src, bytes);
  }
  int64_t host_reads() const { return host_reads_; }
  // Waits until the work queued so far has finished (a GPU runs asynchronously; timing needs this).
  virtual void synchronize() {}
  // The side of the square product at which this backend's matrix products reach their rate (the MFU
  // denominator's measure): a CPU's at 1024, a GPU's only at several thousand.
  virtual int64_t rate_probe_size() const { return 1024; }
  // How many logits the LM head and the loss score at once (ZayaModel::head's chunks of tokens). Each chunk
  // of an f32 step adds its share into the head's whole f32 gradient (a bf16 step, a group of chunks' at
  // once), so small chunks cost a pass over that gradient each (2 GB at a 262k vocabulary): the CPU bounds
  // its scratch at 64 MiB, a GPU takes a few GB to keep the product's depth in the thousands.
  virtual int64_t loss_chunk_logits() const { return int64_t(1) << 24; }
  // Copies bytes from the host into this backend's memory (weights read from a file, a batch's tokens).
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;
  // bytes of device memory set to zero.
  virtual void zero(void* data, size_t bytes) = 0;

  // ---- matrix products -------------------------------------------------------------------------
  // C[m,n] = alpha * op(A) @ op(B) + beta * C; op(A) is [m,k], op(B) is [k,n]; C is f32. With
  // Precision::BF16 the inputs are rounded to bf16 (f32 operands by the op itself, bf16 ones as they are)
  // and the sums are f32; with Precision::F32 both operands must be f32 and the product is f32 throughout.
  virtual void gemm(Precision precision, Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, Operand a, int64_t lda, Operand b, int64_t ldb, float beta, float* c,
                    int64_t ldc) = 0;
  void gemm(Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
            int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    gemm(Precision::F32, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  // Whether this device has bf16 product instructions (a GPU; a CPU with AVX512-BF16 or AMX). Having them is
  // not running them fast: precision "auto" measures (precision_policy.h).
  virtual bool fast_bf16() const = 0;
  // dst[i] = bf16(src[i]), round to nearest even (the weights' low-precision copies).
  virtual void convert_to_bf16(const float* src, int64_t count, BFloat16* dst) = 0;
  // y[rows, n] += bias[n] for every row (ldy = row stride of y).
  virtual void add_bias(float* y, int64_t rows, int64_t n, int64_t ldy, const float* bias) = 0;
  // dbias[n] += sum over rows of dy[rows, n].
  virtual void bias_backward(const float* dy, int64_t rows, int64_t n, int64_t ldy, float* dbias) = 0;

  // ---- embedding ----------------------------------------------------------------------------------
  // out[t] = (table[ids[t]] + bias) * scale; table [vocab, hidden].
  virtual void embedding_forward(const int32_t* ids, int64_t tokens, const float* table, int64_t hidden,
                                 const float* bias, const float* scale, float* out) = 0;
  // Accumulates into dtable (rows of ids other than skip_id, the padding row, as nn.Embedding does),
  // dbias and dscale. skip_id < 0 skips nothing.
  virtual void embedding_backward(const int32_t* ids, int64_t tokens, const float* table, int64_t hidden,
                                  const float* bias, const float* scale, const float* dout, int32_t skip_id,
                                  float* dtable, float* dbias, float* dscale) = 0;

  // ---- normalisation and residual scaling ------------------------------------------------------
  // y = weight * x / sqrt(mean(x^2) + eps) over rows of n; rstd[rows] saved for backward.
  virtual void rmsnorm_forward(const float* x, const float* weight, int64_t rows, int64_t n, float eps,
                               float* y, float* rstd) = 0;
  // dx = (accumulate ? dx : 0) + d/dx; dweight accumulates.
  virtual void rmsnorm_backward(const float* x, const float* weight, const float* rstd, const float* dy,
                                int64_t rows, int64_t n, float* dx, bool accumulate, float* dweight) = 0;
  // out = (h + h_bias) * h_scale + (r + r_bias) * r_scale; out may alias r.
  virtual void residual_scale_forward(const float* h, const float* r, const float* h_bias,
                                      const float* h_scale, const float* r_bias, const float* r_scale,
                                      int64_t rows, int64_t n, float* out) = 0;
  // dh, dr overwritten; the four parameter gradients accumulate. dr may alias dout.
  virtual void residual_scale_backward(const float* h, const float* r, const float* h_bias,
                                       const float* h_scale, const float* r_bias, const float* r_scale,
                                       const float* dout, int64_t rows, int64_t n, float* dh, float* dr,
                                       float* dh_bias, float* dh_scale, float* dr_bias, float* dr_scale) = 0;

  // ---- elementwise --------------------------------------------------------------------------------
  // y = gelu(x) (exact, erf form); x and y [rows, n].
  virtual void gelu_forward(const float* x, int64_t count, float* y) = 0;
  // dx = dy * gelu'(x); dx may alias dy.
  virtual void gelu_backward(const float* x, const float* dy, int64_t count, float* dx) = 0;
  // x[0 .. count) = value.
  virtual void fill(float* x, int64_t count, float value) = 0;
  // x[rows, n] *= mask[rows] (0 or 1).
  virtual void mask_rows(float* x, int64_t rows, int64_t n, const float* mask) = 0;
  // dst[rows, n] (+)= src[rows, n], with row strides.
  virtual void copy_rows(const float* src, int64_t ld_src, int64_t rows, int64_t n, float* dst,
                         int64_t ld_dst, bool accumulate) = 0;
  // The one-position delay of the CCA values: dst[b, s] = src[b, s - 1] for s > 0 and dst[b, 0] = first
  // (the delayed projection of a zero vector: its bias, or zeros). src [batch, seq, n]; dst row stride
  // ld_dst.
  virtual void delay_forward(const float* src, const float* first, int64_t batch, int64_t seq, int64_t n,
                             float* dst, int64_t ld_dst) = 0;
  // dsrc[b, s] = ddst[b, s + 1], 0 at the last position; dfirst (if given) accumulates ddst[b, 0].
  virtual void delay_backward(const float* ddst, int64_t ld_ddst, int64_t batch, int64_t seq, int64_t n,
                              float* dsrc, float* dfirst) = 0;
  // y[rows, n] += x[rows, n] * scale[n]  (the router's depth averaging).
  virtual void add_scaled(const float* x, const float* scale, int64_t rows, int64_t n, float* y) = 0;
  // dscale[n] += sum_rows dy * x; dx = dy * scale (dx overwritten).
  virtual void add_scaled_backward(const float* x, const float* scale, const float* dy, int64_t rows,
                                   int64_t n, float* dx, float* dscale) = 0;

  // ---- CCA attention ------------------------------------------------------------------------------
  // The q-k mean skip. qk [tokens, ld] holds q (heads * head_dim) then k (kv_heads * head_dim) per row.
  // q_res[h] = (q[h] + k[h / groups]) / 2, k_res[g] = mean of q_res over the heads of group g.
  virtual void qk_mean_forward(const float* qk, int64_t tokens, int64_t ld, const AttentionShape& shape,
                               float* q_res, float* k_res) = 0;
  // dqk (same layout as qk) accumulates.
  virtual void qk_mean_backward(const float* dq_res, const float* dk_res, int64_t tokens, int64_t ld,
                                const AttentionShape& shape, float* dqk) = 0;
  // The causal depthwise (kernel k0) then grouped (kernel k1, one group per head) convolutions over time,
  // on x [batch, seq, channels]; channels = (heads + kv_heads) * head_dim. Both start from zeros padded
  // on the left ((k0 - 1) + (k1 - 1) positions), so the depthwise output dw has seq + k1 - 1 positions
  // per sequence [batch, seq + k1 - 1, channels] and is kept for backward. Weights as torch's Conv1d:
  // depthwise [channels, 1, k0], grouped [channels, head_dim, k1]. scratch holds cca_conv_scratch floats.
  // The grouped convolution's products run in `precision` (bf16: its inputs, the depthwise output and the
  // output gradient rounded, with f32 sums); the depthwise convolution is f32 either way.
  virtual void cca_conv_forward(Precision precision, const float* x, const AttentionShape& shape, int64_t k0,
                                int64_t k1, const float* dw_weight, const float* dw_bias,
                                const float* g_weight, const float* g_bias, float* dw, float* out,
                                float* scratch) = 0;
  // dx overwritten; the four parameter gradients accumulate.
  virtual void cca_conv_backward(Precision precision, const float* x, const float* dw, const float* dout,
                                 const AttentionShape& shape, int64_t k0, int64_t k1, const float* dw_weight,
                                 const float* g_weight, float* dx, float* d_dw_weight, float* d_dw_bias,
                                 float* d_g_weight, float* d_g_bias, float* scratch) = 0;
  virtual int64_t cca_conv_scratch(const AttentionShape& shape, int64_t k0, int64_t k1) = 0;
  // Decoding: cca_conv_forward's output at the last position alone, out [batch, channels], for each of
  // shape.batch sequences from its window [batch, (k0 - 1) + (k1 - 1) + 1, channels] of latest inputs
  // (oldest first; zeros where a sequence has fewer, as the padding left of it). shape.seq is ignored.
  virtual void cca_conv_decode(const float* window, const AttentionShape& shape, int64_t k0, int64_t k1,
                               const float* dw_weight, const float* dw_bias, const float* g_weight,
                               const float* g_bias, float* out) = 0;
  // out = x * sqrt(head_dim) / max(|x|, eps) per head, times temp[head] when temp is given; x [rows, heads,
  // head_dim]; norms [rows, heads] saved for backward.
  virtual void l2norm_forward(const float* x, int64_t rows, int64_t heads, int64_t head_dim,
                              const float* temp, float* out, float* norms) = 0;
  // dx overwritten; dtemp accumulates (when temp is given).
  virtual void l2norm_backward(const float* x, const float* norms, const float* dout, int64_t rows,
                               int64_t heads, int64_t head_dim, const float* temp, float* dx,
                               float* dtemp) = 0;
  // In place, NeoX layout on the first rotary_dim channels of each head; cos/sin [seq, rotary_dim / 2].
  // inverse = true applies the transpose rotation (the backward pass).
  virtual void rope(float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, int64_t rotary_dim,
                    const float* cos, const float* sin, bool inverse) = 0;
  // Causal (optionally windowed) GQA softmax attention with key padding (key_mask [batch, seq], 1 = keep;
  // null = all). q [B,S,H,D], k and v [B,S,KV,D], o [B,S,H,D], lse [B,H,S] (log-sum-exp, -inf for a row that
  // sees no key, whose output is 0). With Precision::BF16 the products (scores, probabilities x values, and
  // the backward's five) take bf16 operands and sum in f32, as gemm does; masking, softmax, the log-sum-exp
  // and every row statistic stay f32.
  virtual void attention_forward(Precision precision, const float* q, const float* k, const float* v,
                                 const float* key_mask, const AttentionShape& shape, float scale, float* o,
                                 float* lse) = 0;
  // dq, dk, dv overwritten.
  virtual void attention_backward(Precision precision, const float* q, const float* k, const float* v,
                                  const float* key_mask, const float* o, const float* lse, const float* dout,
                                  const AttentionShape& shape, float scale, float* dq, float* dk,
                                  float* dv) = 0;

  // One new position of each of shape.batch sequences attending to its own cache: q [batch, heads, D];
  // keys[b] and values[b] [lengths[b], kv_heads, D] (the query's own position last), the last `window` keys
  // when window > 0; out [batch, heads, D] (0 for an empty cache). keys, values and lengths are host arrays
  // (of this backend's pointers); the caches are f32 whatever the precision.
  virtual void attention_decode(const float* q, const float* const* keys, const float* const* values,
                                const int64_t* lengths, const AttentionShape& shape, float scale,
                                float* out) = 0;

  // ---- router and experts ----------------------------------------------------------------------
  // probs = softmax(logits) over routes (= experts + 1, the last is the skip route); choice = argmax of
  // probs + biases (first on ties); gate = probs[choice], or 0 when the choice is the skip route;
  // lse = log-sum-exp of each token's logits (for the z-loss).
  virtual void route_top1(const float* logits, const float* biases, int64_t tokens, int64_t routes,
                          float* probs, int32_t* choice, float* gate, float* lse) = 0;
  // dlogits overwritten from dgate through the softmax (zero for skip-routed tokens).
  virtual void route_top1_backward(const float* probs, const int32_t* choice, const float* dgate,
                                   int64_t tokens, int64_t routes, float* dlogits) = 0;
  // Per-route token counts and probability sums, and the sums over tokens of the router entropy
  // -sum p log p and of lse^2; all accumulate (so micro-batches add up).
  virtual void router_statistics(const float* probs, const float* lse, const int32_t* choice, int64_t tokens,
                                 int64_t routes, int64_t* counts, double* prob_sums, double* entropy_sum,
                                 double* lse_square_sum) = 0;
  // The auxiliary losses' gradient, added to dlogits: route_coef[e] is d(loss)/d(probs[t, e]) for every token
  // (the Switch load-balancing loss), z_coef * lse[t] is d(loss)/d(lse[t]) (the router z-loss).
  virtual void router_aux_backward(const float* probs, const float* lse, int64_t tokens, int64_t routes,
                                   const float* route_coef, float z_coef, float* dlogits) = 0;
  // A stable grouping of tokens by expert: order[offsets[e] .. offsets[e + 1]) are expert e's tokens in
  // increasing order; skip-routed tokens (choice == experts) are left out. offsets has experts + 1 entries.
  virtual void group_by_expert(const int32_t* choice, int64_t tokens, int64_t experts, int32_t* order,
                               int64_t* offsets) = 0;
  // dst[i] = src[order[i]] * (scale ? scale[order[i]] : 1) for i < count; rows of n.
  virtual void gather_rows(const float* src, const int32_t* order, const float* scale, int64_t count,
                           int64_t n, float* dst) = 0;
  // dst[order[i]] (+)= src[i] * (scale ? scale[order[i]] : 1) for i < count.
  virtual void scatter_rows(const float* src, const int32_t* order, const float* scale, int64_t count,
                            int64_t n, bool accumulate, float* dst) = 0;
  // out[i] = dot(a[order[i]], b[i]) for i < count (the gate gradient of each routed token).
  virtual void gather_dot(const float* a, const int32_t* order, const float* b, int64_t count, int64_t n,
                          float* out) = 0;
  // SwiGLU: gate_up [rows, 2 * n] holds gate then up; out [rows, n] = silu(gate) * up.
  virtual void swiglu_forward(const float* gate_up, int64_t rows, int64_t n, float* out) = 0;
  virtual void swiglu_backward(const float* gate_up, const float* dout, int64_t rows, int64_t n,
                               float* dgate_up) = 0;

  // ---- optimizer ---------------------------------------------------------------------------------
  // *sum (a device value) += the sum of x^2, in double, in a fixed order.
  virtual void sum_squares(const float* x, int64_t count, double* sum) = 0;
  // AdamW with bias correction: m, v updated from grad * grad_scale; p = p (1 - lr wd) - lr m^ / (sqrt(v^) +
  // eps).
  struct AdamWStep {
    float lr, beta1, beta2, eps, weight_decay, grad_scale;
    float bias_correction1, bias_correction2;  // 1 - beta^t
  };
  virtual void adamw_step(float* param, const float* grad, float* m, float* v, int64_t count,
                          const AdamWStep& step) = 0;
  // Momentum: buf = momentum buf + grad_scale grad; out = nesterov ? grad_scale grad + momentum buf : buf.
  virtual void momentum_step(float* buf, const float* grad, int64_t count, float momentum, bool nesterov,
                             float grad_scale, float* out) = 0;
  // Newton-Schulz orthogonalisation of `count` matrices x [count, rows, cols], each in place: x / |x|_F, then
  // `steps` quintic iterations X = a X + (b A + c A^2) X with A = X X^T, run on the wide orientation
  // (transposed when rows > cols). The matrices are independent (the experts of a layer): a backend runs
  // them at once. In bf16 the products read bf16-rounded operands and sum in f32, as the reference Muon
  // iterates in bf16; the iterate itself stays f32. The backend owns the working memory.
  virtual void newton_schulz(Precision precision, float* x, int64_t count, int64_t rows, int64_t cols,
                             int steps, const float coefficients[3]) = 0;
  // param = param (1 - decay) - alpha * update.
  virtual void decay_and_subtract(float* param, const float* update, int64_t count, float decay,
                                  float alpha) = 0;

  // ---- loss --------------------------------------------------------------------------------------
  // Cross-entropy of logits [rows, vocab] against labels (ignore_index -100 contributes nothing). Adds the
  // summed loss over rows to *loss_sum (a device value). The gradient grad_scale * d(sum)/dlogits goes to
  // dlogits when given (which may alias logits) and, rounded to bf16, to dlogits_bf16 when given: a bf16
  // step's head products read it so, and rounding it here saves a pass over the largest array of the step.
  virtual void cross_entropy(const float* logits, const int32_t* labels, int64_t rows, int64_t vocab,
                             float grad_scale, float* dlogits, BFloat16* dlogits_bf16, double* loss_sum) = 0;

 protected:
  // Copies bytes from this backend's memory to the host, after the work that writes them has finished.
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;

 private:
  int64_t host_reads_ = 0;
};

// The CPU implementation: oneDNN for matrix products, OpenMP for everything else.
Ops& cpu_ops();
// The GPU implementation (backend/gpu/), on this process's device; defined only in a build with a GPU
// backend (or the emulator's tests). Throws Error where there is no GPU.
Ops& gpu_ops();

}  // namespace zaya
