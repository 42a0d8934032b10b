// The MoE half of a decoder layer (transformers' ZayaRouter, ZayaRouterMLP, ZayaExperts): the router with
// depth averaging and top-1 choice over experts + skip, then the dropless experts: the tokens grouped by
// expert, each expert's matrix products over its own rows (grouped products, sized on the device).

#include "backend/ops.h"
#include "model/layer_activations.h"
#include "model/zaya_model.h"

namespace zaya {

void ZayaModel::moe_forward(int layer, const Batch& batch, LayerActivations& a,
                            const float* prev_router_state) {
  const LayerWeights& w = w_.layers[size_t(layer)];
  const LayerMatrices& m = m_.layers[size_t(layer)];
  const int64_t T = batch.tokens(), H = dims_.hidden, R = dims_.router, E = dims_.experts,
                I = dims_.intermediate;
  const Arena::Mark mark = scratch_.mark();

  // Router (its products stay f32: the choice of expert is decided by small differences of its logits):
  // down_proj, plus the previous layer's state (exponential depth averaging), then its MLP.
  ops_.gemm(Trans::No, Trans::Yes, T, R, H, 1.0f, a.xn2, H, w.router_down, H, 0.0f, a.rh, R);
  ops_.add_bias(a.rh, T, R, R, w.router_down_bias);
  if (w.router_states_scale && prev_router_state)
    ops_.add_scaled(prev_router_state, w.router_states_scale, T, R, a.rh);
  ops_.rmsnorm_forward(a.rh, w.router_norm, T, R, dims_.rms_eps, a.rn, a.rn_rstd);
  ops_.gemm(Trans::No, Trans::Yes, T, R, R, 1.0f, a.rn, R, w.fc1, R, 0.0f, a.f1_pre, R);
  ops_.add_bias(a.f1_pre, T, R, R, w.fc1_bias);
  ops_.gelu_forward(a.f1_pre, T * R, a.f1);
  ops_.gemm(Trans::No, Trans::Yes, T, R, R, 1.0f, a.f1, R, w.fc2, R, 0.0f, a.f2_pre, R);
  ops_.add_bias(a.f2_pre, T, R, R, w.fc2_bias);
  ops_.gelu_forward(a.f2_pre, T * R, a.f2);
  float* logits = scratch_.alloc<float>(size_t(T * dims_.routes()));
  ops_.gemm(Trans::No, Trans::Yes, T, dims_.routes(), R, 1.0f, a.f2, R, w.router_out, R, 0.0f, logits,
            dims_.routes());
  ops_.route_top1(logits, w.balancing_biases, T, dims_.routes(), a.probs, a.choice, a.gate, a.router_lse);
  const int64_t routes = dims_.routes();
  double* sums = layer_step_sums(layer);
  ops_.router_statistics(a.probs, a.router_lse, a.choice, T, routes, reinterpret_cast<int64_t*>(sums),
                         sums + routes, sums + 2 * routes, sums + 2 * routes + 1);

  // Experts: group the tokens by expert, one SwiGLU per expert, scatter back times the gate.
  ops_.group_by_expert(a.choice, T, E, a.order, a.offsets);
  const int64_t rows = expert_rows(a, T);
  if (expert_parallel()) {  // the exchange moves f32 rows
    float* x = scratch_.alloc<float>(size_t(rows * H));
    ops_.gather_rows(a.xn2, a.order, nullptr, rows, H, x);
    experts_forward_parallel(layer, a, x);
  } else {
    const Destination x = product_activation(T * H, scratch_);
    ops_.gather_rows(a.xn2, a.order, nullptr, T, H, x);
    ops_.grouped_gemm(precision_, Trans::Yes, a.offsets, E, T, 2 * I, H, x.operand(), H, m.gate_up, 2 * I * H,
                      H, a.gate_up, 2 * I);
    ops_.swiglu_forward(a.gate_up, T, I, a.act);
    ops_.grouped_gemm(precision_, Trans::Yes, a.offsets, E, T, H, I, a.act.operand(), I, m.down, H * I, I,
                      a.y, H);
  }
  if (rows < T) ops_.fill(a.moe, T * H, 0.0f);  // the skip-routed tokens' rows, not scattered
  ops_.scatter_rows(a.y, a.order, a.gate, rows, H, false, a.moe);
  scratch_.rewind(mark);
}

// The rows the experts' data movement covers: every token on one rank, the skip-routed last in the order
// with rows of zeros, so that the products size themselves from the offsets on the device and the host
// reads none. Under expert parallelism the exchange's sizes are the host's to give, so it reads the offsets
// (once per layer; backward and a recomputed layer, which routes alike, reuse them) and covers the routed.
int64_t ZayaModel::expert_rows(LayerActivations& a, int64_t tokens) {
  if (!expert_parallel()) return tokens;
  const int64_t E = dims_.experts;
  a.host_offsets.resize(size_t(E + 1));
  if (!recomputing_) ops_.read_to_host(a.host_offsets.data(), a.offsets, size_t(E + 1) * sizeof(int64_t));
  return a.host_offsets[size_t(E)];
}

void ZayaModel::moe_backward(int layer, const Batch& batch, LayerActivations& a, const float* d_moe,
                             const float* d_state_next, float* d_xn2, float* d_state_prev) {
  const LayerWeights& w = w_.layers[size_t(layer)];
  const LayerMatrices& m = m_.layers[size_t(layer)];
  LayerWeights& g = g_.layers[size_t(layer)];
  const int64_t T = batch.tokens(), H = dims_.hidden, R = dims_.router, E = dims_.experts,
                I = dims_.intermediate;
  const int64_t routes = dims_.routes(), rows = expert_parallel() ? a.host_offsets[size_t(E)] : T;
  const Arena::Mark mark = scratch_.mark();
  auto f = [&](int64_t count) { return scratch_.alloc<float>(size_t(count)); };

  // moe[t] = gate[t] * y[t]: the expert output gets gate * d_moe, the gate gets d_moe . y (0 for the
  // skip-routed tokens, whose gate and y are 0).
  const Destination d_y = expert_parallel() ? Destination(f(rows * H)) : product_activation(T * H, scratch_);
  ops_.gather_rows(d_moe, a.order, a.gate, rows, H, d_y);
  float* d_gate_grouped = f(rows);
  ops_.gather_dot(d_moe, a.order, a.y, rows, H, d_gate_grouped);
  float* d_gate = f(T);
  if (rows < T) ops_.fill(d_gate, T, 0.0f);
  ops_.scatter_rows(d_gate_grouped, a.order, nullptr, rows, 1, false, d_gate);

  float* d_x = f(rows * H);
  if (expert_parallel()) {
    experts_backward_parallel(layer, d_y.f32(), d_x);
  } else {
    // d_y and d_gate_up each feed two products.
    float* d_act = f(T * I);
    ops_.grouped_gemm(precision_, Trans::No, a.offsets, E, T, I, H, d_y.operand(), H, m.down, H * I, I, d_act,
                      I);
    ops_.grouped_weight_gradient(precision_, a.offsets, E, H, I, d_y.operand(), H, a.act.operand(), I,
                                 g.down);
    const Destination d_gate_up = product_activation(T * 2 * I, scratch_);
    ops_.swiglu_backward(a.gate_up, d_act, T, I, d_gate_up);
    const Destination x = product_activation(T * H, scratch_);
    ops_.gather_rows(a.xn2, a.order, nullptr, T, H, x);
    ops_.grouped_weight_gradient(precision_, a.offsets, E, 2 * I, H, d_gate_up.operand(), 2 * I, x.operand(),
                                 H, g.gate_up);
    ops_.grouped_gemm(precision_, Trans::No, a.offsets, E, T, H, 2 * I, d_gate_up.operand(), 2 * I, m.gate_up,
                      2 * I * H, H, d_x, H);
  }
  if (rows < T) ops_.fill(d_xn2, T * H, 0.0f);
  ops_.scatter_rows(d_x, a.order, nullptr, rows, H, false, d_xn2);

  // Router, from the gate back to the state.
  float* d_logits = f(T * routes);
  ops_.route_top1_backward(a.probs, a.choice, d_gate, T, routes, d_logits);
  if (aux_.enabled()) {
    // Per token: switch_weight * E * sum_e f_e p_e + z_weight * lse^2, with f_e the batch's share of expert e
    // (a constant; under context parallelism the whole sequences') and the same loss_scale as the
    // cross-entropy terms.
    staging_.assign(size_t(routes), 0.0f);  // [routes]: the skip route's coefficient stays 0
    for (int64_t e = 0; e < E; ++e) {
      staging_[size_t(e)] = loss_scale_ * aux_.switch_weight * float(E) * float(batch_route_count(layer, e)) /
                            float(batch_tokens_);
    }
    float* device_coef = f(routes);
    ops_.copy_from_host(device_coef, staging_.data(), size_t(routes) * sizeof(float));
    ops_.router_aux_backward(a.probs, a.router_lse, T, routes, device_coef,
                             2.0f * loss_scale_ * aux_.z_weight, d_logits);
  }
  ops_.gemm(Trans::Yes, Trans::No, routes, R, T, 1.0f, d_logits, routes, a.f2, R, 1.0f, g.router_out, R);
  float* d_hidden = f(T * R);
  ops_.gemm(Trans::No, Trans::No, T, R, routes, 1.0f, d_logits, routes, w.router_out, R, 0.0f, d_hidden, R);
  ops_.gelu_backward(a.f2_pre, d_hidden, T * R, d_hidden);
  ops_.gemm(Trans::Yes, Trans::No, R, R, T, 1.0f, d_hidden, R, a.f1, R, 1.0f, g.fc2, R);
  ops_.bias_backward(d_hidden, T, R, R, g.fc2_bias);
  float* d_f1 = f(T * R);
  ops_.gemm(Trans::No, Trans::No, T, R, R, 1.0f, d_hidden, R, w.fc2, R, 0.0f, d_f1, R);
  ops_.gelu_backward(a.f1_pre, d_f1, T * R, d_f1);
  ops_.gemm(Trans::Yes, Trans::No, R, R, T, 1.0f, d_f1, R, a.rn, R, 1.0f, g.fc1, R);
  ops_.bias_backward(d_f1, T, R, R, g.fc1_bias);
  float* d_rn = d_hidden;  // reused: the fc2 gradient is consumed
  ops_.gemm(Trans::No, Trans::No, T, R, R, 1.0f, d_f1, R, w.fc1, R, 0.0f, d_rn, R);
  float* d_state = f(T * R);
  ops_.rmsnorm_backward(a.rh, w.router_norm, a.rn_rstd, d_rn, T, R, d_state, false, g.router_norm);
  if (d_state_next) ops_.copy_rows(d_state_next, R, T, R, d_state, R, true);
  if (d_state_prev) {
    ops_.add_scaled_backward(layers_[size_t(layer - 1)].rh, w.router_states_scale, d_state, T, R,
                             d_state_prev, g.router_states_scale);
  }
  ops_.gemm(Trans::Yes, Trans::No, R, H, T, 1.0f, d_state, R, a.xn2, H, 1.0f, g.router_down, H);
  ops_.bias_backward(d_state, T, R, R, g.router_down_bias);
  ops_.gemm(Trans::No, Trans::No, T, H, R, 1.0f, d_state, R, w.router_down, H, 1.0f, d_xn2, H);
  scratch_.rewind(mark);
}

}  // namespace zaya
