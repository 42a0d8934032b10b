// Incremental decoding, one token at a time, with the CCA decode state (the convolution's recent inputs
// and the delayed value) and the key/value cache. The MoE half of each layer is the training code run on
// one token; the attention half reads its history from the cache.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/ops.h"
#include "core/error.h"
#include "model/layer_activations.h"
#include "model/zaya_model.h"

namespace zaya {

DecodeCache make_decode_cache(const ModelDims& dims, int64_t capacity) {
  DecodeCache cache;
  cache.capacity = capacity;
  const size_t tail = size_t((dims.conv_time0 - 1) + (dims.conv_time1 - 1));
  for (int64_t l = 0; l < dims.layers; ++l) {
    DecodeCache::Layer layer;
    layer.conv_tail.reserve(tail * size_t(dims.conv_channels()));
    layer.delayed.assign(size_t(dims.kv_dim() / 2), 0.0f);
    layer.keys.assign(size_t(capacity * dims.kv_dim()), 0.0f);
    layer.values.assign(size_t(capacity * dims.kv_dim()), 0.0f);
    cache.layers.push_back(std::move(layer));
  }
  return cache;
}

const float* ZayaModel::decode_step(int32_t token, DecodeCache& cache) {
  if (token < 0 || token >= dims_.vocab) {
    throw Error(cat("token id ", token, " is outside the vocabulary of ", dims_.vocab)).field("prompt");
  }
  if (cache.length >= cache.capacity)
    throw Error(cat("the decode cache holds ", cache.capacity, " tokens; it is full"));
  if (!params_.table().holds_all_experts())
    throw Error(
        "incremental decoding runs every expert here; this rank holds only some (expert parallelism)");
  const int64_t t = cache.length, H = dims_.hidden, C = dims_.conv_channels();
  const int64_t QD = dims_.q_dim(), KD = dims_.kv_dim(), half = KD / 2, D = dims_.head_dim;
  const int64_t tail_rows = (dims_.conv_time0 - 1) + (dims_.conv_time1 - 1);
  arena_.reset();
  scratch_.reset();
  reset_step_sums();
  const Batch one{&token, nullptr, nullptr, 1, 1};
  auto f = [&](int64_t count) { return arena_.alloc<float>(size_t(count)); };

  float* h = f(H);
  embed(one, h);
  int32_t* choices = arena_.alloc<int32_t>(size_t(dims_.layers));
  for (int64_t l = 0; l < dims_.layers; ++l) {
    LayerActivations& a = layers_[size_t(l)];
    allocate_layer(a, one, choices + l);
    const LayerWeights& w = w_.layers[size_t(l)];
    DecodeCache::Layer& state = cache.layers[size_t(l)];
    if (t == 0 && w.v_delayed_bias)
      std::copy(w.v_delayed_bias, w.v_delayed_bias + half, state.delayed.begin());

    ops_.rmsnorm_forward(h, w.input_norm, 1, H, dims_.rms_eps, a.xn1, a.rstd1);
    ops_.gemm(Trans::No, Trans::Yes, 1, QD, H, 1.0f, a.xn1, H, w.q_proj, H, 0.0f, a.qk0, C);
    ops_.gemm(Trans::No, Trans::Yes, 1, KD, H, 1.0f, a.xn1, H, w.k_proj, H, 0.0f, a.qk0 + QD, C);
    if (w.q_bias) ops_.add_bias(a.qk0, 1, QD, C, w.q_bias);
    if (w.k_bias) ops_.add_bias(a.qk0 + QD, 1, KD, C, w.k_bias);
    const AttentionShape one_token{1, 1, dims_.heads, dims_.kv_heads, D, dims_.layer[size_t(l)].window};
    ops_.qk_mean_forward(a.qk0, 1, C, one_token, a.q_res, a.k_res);

    // The convolution over the kept rows and this one: its last output is this position's, exactly as in
    // the full pass (zero padding applies only while fewer than tail_rows tokens came before).
    const int64_t rows = int64_t(state.conv_tail.size()) / C + 1;
    float* window = f(rows * C);
    std::copy(state.conv_tail.begin(), state.conv_tail.end(), window);
    std::copy(a.qk0, a.qk0 + C, window + (rows - 1) * C);
    const AttentionShape conv_shape{1, rows, dims_.heads, dims_.kv_heads, D, 0};
    float* dw = f((rows + dims_.conv_time1 - 1) * C);
    float* conv = f(rows * C);
    float* conv_scratch = f(ops_.cca_conv_scratch(conv_shape, dims_.conv_time0, dims_.conv_time1));
    ops_.cca_conv_forward(window, conv_shape, dims_.conv_time0, dims_.conv_time1, w.conv_dw_weight,
                          w.conv_dw_bias, w.conv_g_weight, w.conv_g_bias, dw, conv, conv_scratch);
    const float* last = conv + (rows - 1) * C;
    for (int64_t i = 0; i < QD; ++i) a.q_pre[i] = last[i] + a.q_res[i];
    for (int64_t i = 0; i < KD; ++i) a.k_pre[i] = last[QD + i] + a.k_res[i];
    state.conv_tail.insert(state.conv_tail.end(), a.qk0, a.qk0 + C);
    if (int64_t(state.conv_tail.size()) > tail_rows * C) {
      state.conv_tail.erase(state.conv_tail.begin(), state.conv_tail.end() - tail_rows * C);
    }

    ops_.l2norm_forward(a.q_pre, 1, dims_.heads, D, nullptr, a.q, a.q_norms);
    ops_.l2norm_forward(a.k_pre, 1, dims_.kv_heads, D, w.key_temp, a.k, a.k_norms);
    float *cos, *sin;
    rope_rows(l, t, 1, cos, sin);
    ops_.rope(a.q, 1, 1, dims_.heads, D, dims_.layer[size_t(l)].rotary_dim, cos, sin, false);
    ops_.rope(a.k, 1, 1, dims_.kv_heads, D, dims_.layer[size_t(l)].rotary_dim, cos, sin, false);

    // Values: this token's current half, the previous token's delayed half; then this token's delayed
    // projection becomes the state for the next one.
    ops_.gemm(Trans::No, Trans::Yes, 1, half, H, 1.0f, a.xn1, H, w.v_current, H, 0.0f, a.v, KD);
    if (w.v_current_bias) ops_.add_bias(a.v, 1, half, KD, w.v_current_bias);
    std::copy(state.delayed.begin(), state.delayed.end(), a.v + half);
    ops_.gemm(Trans::No, Trans::Yes, 1, half, H, 1.0f, a.xn1, H, w.v_delayed, H, 0.0f, state.delayed.data(),
              half);
    if (w.v_delayed_bias) ops_.add_bias(state.delayed.data(), 1, half, half, w.v_delayed_bias);

    std::copy(a.k, a.k + KD, state.keys.begin() + t * KD);
    std::copy(a.v, a.v + KD, state.values.begin() + t * KD);
    ops_.attention_decode(a.q, state.keys.data(), state.values.data(), t + 1, one_token,
                          1.0f / std::sqrt(float(D)), a.o);
    ops_.gemm(Trans::No, Trans::Yes, 1, H, QD, 1.0f, a.o, QD, w.o_proj, QD, 0.0f, a.attn, H);
    if (w.o_bias) ops_.add_bias(a.attn, 1, H, H, w.o_bias);

    const ResidualScaleWeights& ra = w.attention_residual;
    ops_.residual_scale_forward(a.attn, h, ra.h_bias, ra.h_scale, ra.r_bias, ra.r_scale, 1, H, a.r1);
    ops_.rmsnorm_forward(a.r1, w.post_attention_norm, 1, H, dims_.rms_eps, a.xn2, a.rstd2);
    moe_forward(int(l), one, a, l > 0 ? layers_[size_t(l - 1)].rh : nullptr);
    const ResidualScaleWeights& rm = w.mlp_residual;
    float* next = f(H);
    ops_.residual_scale_forward(a.moe, a.r1, rm.h_bias, rm.h_scale, rm.r_bias, rm.r_scale, 1, H, next);
    h = next;
  }
  float* normed = f(H);
  float* rstd = f(1);
  ops_.rmsnorm_forward(h, w_.final_norm, 1, H, dims_.rms_eps, normed, rstd);
  float* logits = f(dims_.vocab);
  ops_.gemm(Trans::No, Trans::Yes, 1, dims_.vocab, H, 1.0f, normed, H, w_.lm_head, H, 0.0f, logits,
            dims_.vocab);
  if (w_.lm_head_bias) ops_.add_bias(logits, 1, dims_.vocab, dims_.vocab, w_.lm_head_bias);
  ++cache.length;
  return logits;
}

}  // namespace zaya
