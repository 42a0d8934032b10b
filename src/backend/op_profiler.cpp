#include "backend/op_profiler.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "backend/ops.h"
#include "core/error.h"

namespace zaya {
namespace {

// The rows of a profile by name, shared by the ops and their memory.
class Rows {
 public:
  // Runs `call` between two waits for `device` and adds its time to the row `name`.
  template <typename Call>
  void time(Ops& device, const std::string& name, double flops, Call&& call) {
    device.synchronize();
    const auto start = std::chrono::steady_clock::now();
    call();
    device.synchronize();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    OpTime& row = rows_[name];
    row.name = name;
    ++row.calls;
    row.seconds += elapsed.count();
    row.flops += flops;
  }

  void clear() { rows_.clear(); }

  std::vector<OpTime> sorted() const {
    std::vector<OpTime> out;
    for (const auto& [name, row] : rows_) out.push_back(row);
    std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
    return out;
  }

 private:
  std::map<std::string, OpTime> rows_;
};

// The backend's memory, timed: allocation is where a device runtime can stall a step.
class TimingMemory final : public MemoryResource {
 public:
  TimingMemory(MemoryResource& inner, Ops& device, Rows& rows)
      : inner_(inner), device_(device), rows_(rows) {}

  void* allocate(size_t bytes) override {
    void* data = nullptr;
    rows_.time(device_, "memory: allocate", 0, [&] { data = inner_.allocate(bytes); });
    return data;
  }
  // Not timed: a release must not throw, and waiting for the device can.
  void release(void* data) noexcept override { inner_.release(data); }
  void zero(void* data, size_t bytes) override {
    rows_.time(device_, "memory: zero", 0, [&] { inner_.zero(data, bytes); });
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    rows_.time(device_, "memory: copy from host", 0, [&] { inner_.copy_from_host(dst, src, bytes); });
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    rows_.time(device_, "memory: copy to host", 0, [&] { inner_.copy_to_host(dst, src, bytes); });
  }

 private:
  MemoryResource& inner_;
  Ops& device_;
  Rows& rows_;
};

std::string product_name(Precision precision, Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k) {
  return cat("gemm ", precision == Precision::BF16 ? "bf16 " : "f32 ", trans_a == Trans::Yes ? "A^T " : "A ",
             trans_b == Trans::Yes ? "B^T " : "B ", m, "x", n, "x", k);
}

}  // namespace

// Every op of the table, timed under its own name, then forwarded.
class OpProfiler::TimingOps final : public Ops {
 public:
  explicit TimingOps(Ops& inner) : inner_(inner), memory_(inner.memory(), inner, rows_) {}

  std::vector<OpTime> times() const { return rows_.sorted(); }
  void clear() { rows_.clear(); }

  MemoryResource& memory() override { return memory_; }
  void synchronize() override { inner_.synchronize(); }
  int64_t rate_probe_size() const override { return inner_.rate_probe_size(); }
  int64_t loss_chunk_logits() const override { return inner_.loss_chunk_logits(); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    time("copy from host", [&] { inner_.copy_from_host(dst, src, bytes); });
  }
  void zero(void* data, size_t bytes) override {
    time("zero", [&] { inner_.zero(data, bytes); });
  }

  using Ops::gemm;
  void gemm(Precision precision, Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            Operand a, int64_t lda, Operand b, int64_t ldb, float beta, float* c, int64_t ldc) override {
    rows_.time(
        inner_, product_name(precision, trans_a, trans_b, m, n, k), 2.0 * double(m) * double(n) * double(k),
        [&] { inner_.gemm(precision, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); });
  }
  bool fast_bf16() const override { return inner_.fast_bf16(); }
  void convert_to_bf16(const float* src, int64_t count, BFloat16* dst) override {
    time("convert_to_bf16", [&] { inner_.convert_to_bf16(src, count, dst); });
  }
  void add_bias(float* y, int64_t rows, int64_t n, int64_t ldy, const float* bias) override {
    time("add_bias", [&] { inner_.add_bias(y, rows, n, ldy, bias); });
  }
  void bias_backward(const float* dy, int64_t rows, int64_t n, int64_t ldy, float* dbias) override {
    time("bias_backward", [&] { inner_.bias_backward(dy, rows, n, ldy, dbias); });
  }

  void embedding_forward(const int32_t* ids, int64_t tokens, const float* table, int64_t hidden,
                         const float* bias, const float* scale, float* out) override {
    time("embedding_forward",
         [&] { inner_.embedding_forward(ids, tokens, table, hidden, bias, scale, out); });
  }
  void embedding_backward(const int32_t* ids, int64_t tokens, const float* table, int64_t hidden,
                          const float* bias, const float* scale, const float* dout, int32_t skip_id,
                          float* dtable, float* dbias, float* dscale) override {
    time("embedding_backward", [&] {
      inner_.embedding_backward(ids, tokens, table, hidden, bias, scale, dout, skip_id, dtable, dbias,
                                dscale);
    });
  }

  void rmsnorm_forward(const float* x, const float* weight, int64_t rows, int64_t n, float eps, float* y,
                       float* rstd) override {
    time("rmsnorm_forward", [&] { inner_.rmsnorm_forward(x, weight, rows, n, eps, y, rstd); });
  }
  void rmsnorm_backward(const float* x, const float* weight, const float* rstd, const float* dy, int64_t rows,
                        int64_t n, float* dx, bool accumulate, float* dweight) override {
    time("rmsnorm_backward",
         [&] { inner_.rmsnorm_backward(x, weight, rstd, dy, rows, n, dx, accumulate, dweight); });
  }
  void residual_scale_forward(const float* h, const float* r, const float* h_bias, const float* h_scale,
                              const float* r_bias, const float* r_scale, int64_t rows, int64_t n,
                              float* out) override {
    time("residual_scale_forward",
         [&] { inner_.residual_scale_forward(h, r, h_bias, h_scale, r_bias, r_scale, rows, n, out); });
  }
  void residual_scale_backward(const float* h, const float* r, const float* h_bias, const float* h_scale,
                               const float* r_bias, const float* r_scale, const float* dout, int64_t rows,
                               int64_t n, float* dh, float* dr, float* dh_bias, float* dh_scale,
                               float* dr_bias, float* dr_scale) override {
    time("residual_scale_backward", [&] {
      inner_.residual_scale_backward(h, r, h_bias, h_scale, r_bias, r_scale, dout, rows, n, dh, dr, dh_bias,
                                     dh_scale, dr_bias, dr_scale);
    });
  }

  void gelu_forward(const float* x, int64_t count, float* y) override {
    time("gelu_forward", [&] { inner_.gelu_forward(x, count, y); });
  }
  void gelu_backward(const float* x, const float* dy, int64_t count, float* dx) override {
    time("gelu_backward", [&] { inner_.gelu_backward(x, dy, count, dx); });
  }
  void fill(float* x, int64_t count, float value) override {
    time("fill", [&] { inner_.fill(x, count, value); });
  }
  void mask_rows(float* x, int64_t rows, int64_t n, const float* mask) override {
    time("mask_rows", [&] { inner_.mask_rows(x, rows, n, mask); });
  }
  void copy_rows(const float* src, int64_t ld_src, int64_t rows, int64_t n, float* dst, int64_t ld_dst,
                 bool accumulate) override {
    time("copy_rows", [&] { inner_.copy_rows(src, ld_src, rows, n, dst, ld_dst, accumulate); });
  }
  void delay_forward(const float* src, const float* first, int64_t batch, int64_t seq, int64_t n, float* dst,
                     int64_t ld_dst) override {
    time("delay_forward", [&] { inner_.delay_forward(src, first, batch, seq, n, dst, ld_dst); });
  }
  void delay_backward(const float* ddst, int64_t ld_ddst, int64_t batch, int64_t seq, int64_t n, float* dsrc,
                      float* dfirst) override {
    time("delay_backward", [&] { inner_.delay_backward(ddst, ld_ddst, batch, seq, n, dsrc, dfirst); });
  }
  void add_scaled(const float* x, const float* scale, int64_t rows, int64_t n, float* y) override {
    time("add_scaled", [&] { inner_.add_scaled(x, scale, rows, n, y); });
  }
  void add_scaled_backward(const float* x, const float* scale, const float* dy, int64_t rows, int64_t n,
                           float* dx, float* dscale) override {
    time("add_scaled_backward", [&] { inner_.add_scaled_backward(x, scale, dy, rows, n, dx, dscale); });
  }

  void qk_mean_forward(const float* qk, int64_t tokens, int64_t ld, const AttentionShape& shape, float* q_res,
                       float* k_res) override {
    time("qk_mean_forward", [&] { inner_.qk_mean_forward(qk, tokens, ld, shape, q_res, k_res); });
  }
  void qk_mean_backward(const float* dq_res, const float* dk_res, int64_t tokens, int64_t ld,
                        const AttentionShape& shape, float* dqk) override {
    time("qk_mean_backward", [&] { inner_.qk_mean_backward(dq_res, dk_res, tokens, ld, shape, dqk); });
  }
  void cca_conv_forward(Precision precision, const float* x, const AttentionShape& shape, int64_t k0,
                        int64_t k1, const float* dw_weight, const float* dw_bias, const float* g_weight,
                        const float* g_bias, float* dw, float* out, float* scratch) override {
    time("cca_conv_forward", [&] {
      inner_.cca_conv_forward(precision, x, shape, k0, k1, dw_weight, dw_bias, g_weight, g_bias, dw, out,
                              scratch);
    });
  }
  void cca_conv_backward(Precision precision, const float* x, const float* dw, const float* dout,
                         const AttentionShape& shape, int64_t k0, int64_t k1, const float* dw_weight,
                         const float* g_weight, float* dx, float* d_dw_weight, float* d_dw_bias,
                         float* d_g_weight, float* d_g_bias, float* scratch) override {
    time("cca_conv_backward", [&] {
      inner_.cca_conv_backward(precision, x, dw, dout, shape, k0, k1, dw_weight, g_weight, dx, d_dw_weight,
                               d_dw_bias, d_g_weight, d_g_bias, scratch);
    });
  }
  int64_t cca_conv_scratch(const AttentionShape& shape, int64_t k0, int64_t k1) override {
    return inner_.cca_conv_scratch(shape, k0, k1);
  }
  void cca_conv_decode(const float* window, const AttentionShape& shape, int64_t k0, int64_t k1,
                       const float* dw_weight, const float* dw_bias, const float* g_weight,
                       const float* g_bias, float* out) override {
    time("cca_conv_decode",
         [&] { inner_.cca_conv_decode(window, shape, k0, k1, dw_weight, dw_bias, g_weight, g_bias, out); });
  }
  void l2norm_forward(const float* x, int64_t rows, int64_t heads, int64_t head_dim, const float* temp,
                      float* out, float* norms) override {
    time("l2norm_forward", [&] { inner_.l2norm_forward(x, rows, heads, head_dim, temp, out, norms); });
  }
  void l2norm_backward(const float* x, const float* norms, const float* dout, int64_t rows, int64_t heads,
                       int64_t head_dim, const float* temp, float* dx, float* dtemp) override {
    time("l2norm_backward",
         [&] { inner_.l2norm_backward(x, norms, dout, rows, heads, head_dim, temp, dx, dtemp); });
  }
  void rope(float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, int64_t rotary_dim,
            const float* cos, const float* sin, bool inverse) override {
    time(inverse ? "rope inverse" : "rope",
         [&] { inner_.rope(x, batch, seq, heads, head_dim, rotary_dim, cos, sin, inverse); });
  }
  void attention_forward(Precision precision, const float* q, const float* k, const float* v,
                         const float* key_mask, const AttentionShape& shape, float scale, float* o,
                         float* lse) override {
    time("attention_forward",
         [&] { inner_.attention_forward(precision, q, k, v, key_mask, shape, scale, o, lse); });
  }
  void attention_backward(Precision precision, const float* q, const float* k, const float* v,
                          const float* key_mask, const float* o, const float* lse, const float* dout,
                          const AttentionShape& shape, float scale, float* dq, float* dk,
                          float* dv) override {
    time("attention_backward", [&] {
      inner_.attention_backward(precision, q, k, v, key_mask, o, lse, dout, shape, scale, dq, dk, dv);
    });
  }
  void attention_decode(const float* q, const float* const* keys, const float* const* values,
                        const int64_t* lengths, const AttentionShape& shape, float scale,
                        float* out) override {
    time("attention_decode", [&] { inner_.attention_decode(q, keys, values, lengths, shape, scale, out); });
  }

  void route_top1(const float* logits, const float* biases, int64_t tokens, int64_t routes, float* probs,
                  int32_t* choice, float* gate, float* lse) override {
    time("route_top1", [&] { inner_.route_top1(logits, biases, tokens, routes, probs, choice, gate, lse); });
  }
  void route_top1_backward(const float* probs, const int32_t* choice, const float* dgate, int64_t tokens,
                           int64_t routes, float* dlogits) override {
    time("route_top1_backward",
         [&] { inner_.route_top1_backward(probs, choice, dgate, tokens, routes, dlogits); });
  }
  void router_statistics(const float* probs, const float* lse, const int32_t* choice, int64_t tokens,
                         int64_t routes, int64_t* counts, double* prob_sums, double* entropy_sum,
                         double* lse_square_sum) override {
    time("router_statistics", [&] {
      inner_.router_statistics(probs, lse, choice, tokens, routes, counts, prob_sums, entropy_sum,
                               lse_square_sum);
    });
  }
  void router_aux_backward(const float* probs, const float* lse, int64_t tokens, int64_t routes,
                           const float* route_coef, float z_coef, float* dlogits) override {
    time("router_aux_backward",
         [&] { inner_.router_aux_backward(probs, lse, tokens, routes, route_coef, z_coef, dlogits); });
  }
  void group_by_expert(const int32_t* choice, int64_t tokens, int64_t experts, int32_t* order,
                       int64_t* offsets) override {
    time("group_by_expert", [&] { inner_.group_by_expert(choice, tokens, experts, order, offsets); });
  }
  void gather_rows(const float* src, const int32_t* order, const float* scale, int64_t count, int64_t n,
                   float* dst) override {
    time("gather_rows", [&] { inner_.gather_rows(src, order, scale, count, n, dst); });
  }
  void scatter_rows(const float* src, const int32_t* order, const float* scale, int64_t count, int64_t n,
                    bool accumulate, float* dst) override {
    time("scatter_rows", [&] { inner_.scatter_rows(src, order, scale, count, n, accumulate, dst); });
  }
  void gather_dot(const float* a, const int32_t* order, const float* b, int64_t count, int64_t n,
                  float* out) override {
    time("gather_dot", [&] { inner_.gather_dot(a, order, b, count, n, out); });
  }
  void swiglu_forward(const float* gate_up, int64_t rows, int64_t n, float* out) override {
    time("swiglu_forward", [&] { inner_.swiglu_forward(gate_up, rows, n, out); });
  }
  void swiglu_backward(const float* gate_up, const float* dout, int64_t rows, int64_t n,
                       float* dgate_up) override {
    time("swiglu_backward", [&] { inner_.swiglu_backward(gate_up, dout, rows, n, dgate_up); });
  }

  void sum_squares(const float* x, int64_t count, double* sum) override {
    time("sum_squares", [&] { inner_.sum_squares(x, count, sum); });
  }
  void adamw_step(float* param, const float* grad, float* m, float* v, int64_t count,
                  const AdamWStep& step) override {
    time("adamw_step", [&] { inner_.adamw_step(param, grad, m, v, count, step); });
  }
  void momentum_step(float* buf, const float* grad, int64_t count, float momentum, bool nesterov,
                     float grad_scale, float* out) override {
    time("momentum_step",
         [&] { inner_.momentum_step(buf, grad, count, momentum, nesterov, grad_scale, out); });
  }
  void newton_schulz(Precision precision, float* x, int64_t count, int64_t rows, int64_t cols, int steps,
                     const float coefficients[3]) override {
    time("newton_schulz",
         [&] { inner_.newton_schulz(precision, x, count, rows, cols, steps, coefficients); });
  }
  void decay_and_subtract(float* param, const float* update, int64_t count, float decay,
                          float alpha) override {
    time("decay_and_subtract", [&] { inner_.decay_and_subtract(param, update, count, decay, alpha); });
  }

  void cross_entropy(const float* logits, const int32_t* labels, int64_t rows, int64_t vocab,
                     float grad_scale, float* dlogits, BFloat16* dlogits_bf16, double* loss_sum) override {
    time("cross_entropy", [&] {
      inner_.cross_entropy(logits, labels, rows, vocab, grad_scale, dlogits, dlogits_bf16, loss_sum);
    });
  }

 protected:
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    time("read to host", [&] { inner_.read_to_host(dst, src, bytes); });
  }

 private:
  template <typename Call>
  void time(const char* name, Call&& call) {
    rows_.time(inner_, name, 0, call);
  }

  Ops& inner_;
  Rows rows_;
  TimingMemory memory_;
};

OpProfiler::OpProfiler(Ops& inner) : timing_(std::make_unique<TimingOps>(inner)) {}
OpProfiler::~OpProfiler() = default;

Ops& OpProfiler::ops() {
  return *timing_;
}

std::vector<OpTime> OpProfiler::times() const {
  return timing_->times();
}

void OpProfiler::clear() {
  timing_->clear();
}

}  // namespace zaya
