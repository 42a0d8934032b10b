// Incremental decoding, one token per sequence at a time, with the CCA decode state (the convolution's recent
// inputs and the delayed value) and the key/value cache; and the prefill that fills that state from one full
// forward pass over a prompt. The MoE half of each layer is the training code run on the batch's rows; the
// attention half reads each sequence's history from its cache.

#include <algorithm>
#include <cmath>

#include "backend/ops.h"
#include "core/error.h"
#include "model/layer_activations.h"
#include "model/zaya_model.h"

namespace zaya {

DecodeCache make_decode_cache(const ModelDims& dims, int64_t capacity, MemoryResource& memory) {
  DecodeCache cache;
  cache.capacity = capacity;
  const size_t tail = size_t((dims.conv_time0 - 1) + (dims.conv_time1 - 1));
  const auto floats = [&](size_t count) { return AlignedBuffer(count * sizeof(float), memory); };  // zeroed
  for (int64_t l = 0; l < dims.layers; ++l) {
    cache.layers.push_back({floats(tail * size_t(dims.conv_channels())), floats(size_t(dims.kv_dim() / 2)),
                            floats(size_t(capacity * dims.kv_dim())),
                            floats(size_t(capacity * dims.kv_dim()))});
  }
  return cache;
}

int64_t decode_cache_bytes_per_token(const ModelDims& dims) {
  return dims.layers * 2 * dims.kv_dim() * int64_t(sizeof(float));
}

const float* ZayaModel::decode_step(int32_t token, DecodeCache& cache) {
  DecodeCache* one = &cache;
  return decode_batch(&token, &one, 1);
}

void ZayaModel::require_decodable(const int32_t* tokens, int64_t count, const DecodeCache& cache) const {
  if (cache.length + count > cache.capacity) {
    throw Error(cat("the decode cache holds ", cache.capacity, " tokens; ", cache.length, " are in it and ",
                    count, " more do not fit"));
  }
  if (int64_t(cache.layers.size()) != dims_.layers) throw Error("a decode cache made for a different model");
  for (int64_t i = 0; i < count; ++i) {
    if (tokens[i] < 0 || tokens[i] >= dims_.vocab) {
      throw Error(cat("token id ", tokens[i], " is outside the vocabulary of ", dims_.vocab)).field("prompt");
    }
  }
  if (!params_.table().holds_all_experts())
    throw Error(
        "incremental decoding runs every expert here; this rank holds only some (expert parallelism)");
}

void ZayaModel::decode_qkv(int64_t l, DecodeCache* const* caches, int64_t B, LayerActivations& a) {
  const int64_t H = dims_.hidden, C = dims_.conv_channels();
  const int64_t QD = dims_.q_dim(), KD = dims_.kv_dim(), half = KD / 2, D = dims_.head_dim;
  const int64_t tail_rows = (dims_.conv_time0 - 1) + (dims_.conv_time1 - 1);
  const LayerWeights& w = w_.layers[size_t(l)];
  const LayerMatrices& m = m_.layers[size_t(l)];
  const AttentionShape shape{B, 1, dims_.heads, dims_.kv_heads, D, dims_.layer[size_t(l)].window};
  auto f = [&](int64_t size) { return arena_.alloc<float>(size_t(size)); };
  const Operand xn1 = a.xn1.operand();
  ops_.gemm(precision_, Trans::No, Trans::Yes, B, QD, H, 1.0f, xn1, H, m.q_proj, H, 0.0f, a.qk0, C);
  ops_.gemm(precision_, Trans::No, Trans::Yes, B, KD, H, 1.0f, xn1, H, m.k_proj, H, 0.0f, a.qk0 + QD, C);
  if (w.q_bias) ops_.add_bias(a.qk0, B, QD, C, w.q_bias);
  if (w.k_bias) ops_.add_bias(a.qk0 + QD, B, KD, C, w.k_bias);
  ops_.qk_mean_forward(a.qk0, B, C, shape, a.q_res, a.k_res);

  // Values: this token's current half; the delayed half is the previous token's, kept in the cache.
  float* delayed = f(B * half);
  ops_.gemm(precision_, Trans::No, Trans::Yes, B, half, H, 1.0f, xn1, H, m.v_current, H, 0.0f, a.v, KD);
  if (w.v_current_bias) ops_.add_bias(a.v, B, half, KD, w.v_current_bias);
  ops_.gemm(precision_, Trans::No, Trans::Yes, B, half, H, 1.0f, xn1, H, m.v_delayed, H, 0.0f, delayed, half);
  if (w.v_delayed_bias) ops_.add_bias(delayed, B, half, half, w.v_delayed_bias);

  // The convolution's last output for each sequence, from its kept rows and this one (the kept rows are
  // zeros while fewer than tail_rows tokens came before, as the full pass pads).
  float* windows = f(B * (tail_rows + 1) * C);  // [B, tail_rows + 1, C]
  float* conv = f(B * C);                       // [B, C]
  for (int64_t i = 0; i < B; ++i) {
    float* window = windows + i * (tail_rows + 1) * C;
    ops_.copy_rows(caches[i]->layers[size_t(l)].conv_tail.as<float>(), C, tail_rows, C, window, C, false);
    ops_.copy_rows(a.qk0 + i * C, C, 1, C, window + tail_rows * C, C, false);
  }
  const AttentionShape conv_shape{B, tail_rows + 1, dims_.heads, dims_.kv_heads, D, 0};
  ops_.cca_conv_decode(windows, conv_shape, dims_.conv_time0, dims_.conv_time1, w.conv_dw_weight,
                       w.conv_dw_bias, w.conv_g_weight, w.conv_g_bias, conv);
  // q and k before their norms: the convolution's output plus the q-k mean's residuals.
  ops_.copy_rows(a.q_res, QD, B, QD, a.q_pre, QD, false);
  ops_.copy_rows(conv, C, B, QD, a.q_pre, QD, true);
  ops_.copy_rows(a.k_res, KD, B, KD, a.k_pre, KD, false);
  ops_.copy_rows(conv + QD, C, B, KD, a.k_pre, KD, true);

  for (int64_t i = 0; i < B; ++i) {
    DecodeCache::Layer& state = caches[i]->layers[size_t(l)];
    float* kept = state.delayed.as<float>();  // [half]
    if (caches[i]->length == 0 && w.v_delayed_bias)
      ops_.copy_rows(w.v_delayed_bias, half, 1, half, kept, half, false);
    // The window's newest tail_rows rows are kept for the next token.
    ops_.copy_rows(windows + (i * (tail_rows + 1) + 1) * C, C, tail_rows, C, state.conv_tail.as<float>(), C,
                   false);
    ops_.copy_rows(kept, half, 1, half, a.v + i * KD + half, KD, false);
    ops_.copy_rows(delayed + i * half, half, 1, half, kept, half, false);
  }
}

const float* ZayaModel::decode_batch(const int32_t* tokens, DecodeCache* const* caches, int64_t count) {
  for (int64_t i = 0; i < count; ++i) require_decodable(tokens + i, 1, *caches[i]);
  const int64_t B = count, H = dims_.hidden;
  const int64_t QD = dims_.q_dim(), KD = dims_.kv_dim(), D = dims_.head_dim;
  arena_.reset();
  scratch_.reset();
  attention_arena_ = moe_arena_ = &arena_;  // a training pass may have left them at recomputed_
  reset_step_sums();
  // One token of each sequence: the matrix products and the MoE run over the B rows at once; the attention
  // half reads each sequence's own history.
  const Batch rows{tokens, nullptr, nullptr, B, 1};
  auto f = [&](int64_t size) { return arena_.alloc<float>(size_t(size)); };

  float* h = f(B * H);
  embed(rows, h);
  int32_t* choices = arena_.alloc<int32_t>(size_t(dims_.layers * B));
  // [B]: this token's position in each sequence, and the keys it attends to (its own included).
  std::vector<int64_t> positions(static_cast<size_t>(B)), lengths(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) {
    positions[size_t(i)] = caches[i]->length;
    lengths[size_t(i)] = caches[i]->length + 1;
  }
  // [B]: each sequence's cached keys and values of the layer at hand.
  std::vector<const float*> keys(static_cast<size_t>(B)), values(static_cast<size_t>(B));
  for (int64_t l = 0; l < dims_.layers; ++l) {
    LayerActivations& a = layers_[size_t(l)];
    allocate_attention(a, rows, arena_);
    allocate_rest(a, rows, choices + l * B, f(B * dims_.router), arena_);
    const LayerWeights& w = w_.layers[size_t(l)];
    const LayerMatrices& m = m_.layers[size_t(l)];
    const AttentionShape shape{B, 1, dims_.heads, dims_.kv_heads, D, dims_.layer[size_t(l)].window};

    ops_.rmsnorm_forward(h, w.input_norm, B, H, dims_.rms_eps, a.xn1, a.rstd1);
    decode_qkv(l, caches, B, a);

    ops_.l2norm_forward(a.q_pre, B, dims_.heads, D, nullptr, a.q, a.q_norms);
    ops_.l2norm_forward(a.k_pre, B, dims_.kv_heads, D, w.key_temp, a.k, a.k_norms);
    // The B rows as one sequence of B positions, each at its own sequence's position.
    float *cos, *sin;
    rope_rows(l, positions.data(), B, cos, sin);
    ops_.rope(a.q, 1, B, dims_.heads, D, dims_.layer[size_t(l)].rotary_dim, cos, sin, false);
    ops_.rope(a.k, 1, B, dims_.kv_heads, D, dims_.layer[size_t(l)].rotary_dim, cos, sin, false);
    for (int64_t i = 0; i < B; ++i) {
      DecodeCache::Layer& state = caches[i]->layers[size_t(l)];
      const int64_t t = caches[i]->length;
      ops_.copy_rows(a.k + i * KD, KD, 1, KD, state.keys.as<float>() + t * KD, KD, false);
      ops_.copy_rows(a.v + i * KD, KD, 1, KD, state.values.as<float>() + t * KD, KD, false);
      keys[size_t(i)] = state.keys.as<float>();
      values[size_t(i)] = state.values.as<float>();
    }
    ops_.attention_decode(a.q, keys.data(), values.data(), lengths.data(), shape, 1.0f / std::sqrt(float(D)),
                          a.o);
    ops_.gemm(precision_, Trans::No, Trans::Yes, B, H, QD, 1.0f, a.o, QD, m.o_proj, QD, 0.0f, a.attn, H);
    if (w.o_bias) ops_.add_bias(a.attn, B, H, H, w.o_bias);

    const ResidualScaleWeights& ra = w.attention_residual;
    ops_.residual_scale_forward(a.attn, h, ra.h_bias, ra.h_scale, ra.r_bias, ra.r_scale, B, H, a.r1);
    ops_.rmsnorm_forward(a.r1, w.post_attention_norm, B, H, dims_.rms_eps, a.xn2, a.rstd2);
    moe_forward(int(l), rows, a, l > 0 ? layers_[size_t(l - 1)].rh : nullptr);
    const ResidualScaleWeights& rm = w.mlp_residual;
    float* next = f(B * H);
    ops_.residual_scale_forward(a.moe, a.r1, rm.h_bias, rm.h_scale, rm.r_bias, rm.r_scale, B, H, next);
    h = next;
  }
  float* normed = f(B * H);
  float* rstd = f(B);
  ops_.rmsnorm_forward(h, w_.final_norm, B, H, dims_.rms_eps, normed, rstd);
  float* logits = f(B * dims_.vocab);
  ops_.gemm(precision_, Trans::No, Trans::Yes, B, dims_.vocab, H, 1.0f, normed, H, m_.lm_head, H, 0.0f,
            logits, dims_.vocab);
  if (w_.lm_head_bias) ops_.add_bias(logits, B, dims_.vocab, dims_.vocab, w_.lm_head_bias);
  for (int64_t i = 0; i < B; ++i) ++caches[i]->length;
  return host_logits(logits, B);
}

const float* ZayaModel::prefill(const int32_t* tokens, int64_t count, DecodeCache& cache,
                                PrefillLogits which) {
  DecodeCache* one = &cache;
  return prefill(&tokens, &count, &one, 1, which);
}

const float* ZayaModel::prefill(const int32_t* const* prompts, const int64_t* lengths,
                                DecodeCache* const* caches, int64_t count, PrefillLogits which) {
  int64_t longest = 0;
  for (int64_t b = 0; b < count; ++b) {
    if (lengths[b] < 1) throw Error("prefill needs at least one token per prompt");
    require_decodable(prompts[b], lengths[b], *caches[b]);
    if (caches[b]->length != 0) throw Error("prefill needs an empty decode cache");
    longest = std::max(longest, lengths[b]);
  }
  const int64_t H = dims_.hidden, C = dims_.conv_channels(), KD = dims_.kv_dim(), half = KD / 2;
  const int64_t tail_rows = (dims_.conv_time0 - 1) + (dims_.conv_time1 - 1);
  // Right-padded to the longest: causal attention and convolution and per-token routing make what follows a
  // prompt invisible to it.
  std::vector<int32_t> ids(size_t(count * longest), 0);
  for (int64_t b = 0; b < count; ++b)
    std::copy(prompts[b], prompts[b] + lengths[b], ids.begin() + b * longest);
  // The cache takes what the full pass computes, layer by layer (a forward-only pass keeps one layer's
  // activations at a time): the keys (normalised, rotated) and values of every position, the convolution's
  // last input rows, and the last token's delayed value projection (which the full pass shifted out of its
  // output).
  auto fill_caches = [&](int64_t l, const LayerActivations& a) {
    const LayerWeights& w = w_.layers[size_t(l)];
    for (int64_t b = 0; b < count; ++b) {
      const int64_t first = b * longest, end = first + lengths[b],
                    kept_rows = std::min(lengths[b], tail_rows);
      DecodeCache::Layer& state = caches[b]->layers[size_t(l)];
      ops_.copy_rows(a.k + first * KD, KD, lengths[b], KD, state.keys.as<float>(), KD, false);
      ops_.copy_rows(a.v + first * KD, KD, lengths[b], KD, state.values.as<float>(), KD, false);
      // The newest rows last, after the fresh cache's zeros when the prompt is shorter than the tail.
      ops_.copy_rows(a.qk0 + (end - kept_rows) * C, C, kept_rows, C,
                     state.conv_tail.as<float>() + (tail_rows - kept_rows) * C, C, false);
      float* delayed = state.delayed.as<float>();
      ops_.gemm(precision_, Trans::No, Trans::Yes, 1, half, H, 1.0f, a.xn1.operand().offset((end - 1) * H), H,
                m_.layers[size_t(l)].v_delayed, H, 0.0f, delayed, half);
      if (w.v_delayed_bias) ops_.add_bias(delayed, 1, half, half, w.v_delayed_bias);
    }
  };
  const ForwardResult result = run({ids.data(), nullptr, nullptr, count, longest},
                                   which == PrefillLogits::Every, false, 0, fill_caches);
  for (int64_t b = 0; b < count; ++b) caches[b]->length = lengths[b];
  return which == PrefillLogits::Every ? host_logits(result.logits, count * longest)
                                       : host_logits(last_logits(lengths, count, longest), count);
}

const float* ZayaModel::last_logits(const int64_t* lengths, int64_t count, int64_t longest) {
  const int64_t H = dims_.hidden, V = dims_.vocab;
  std::vector<int32_t> last(static_cast<size_t>(count));  // [count]: each prompt's last row of the pass
  for (int64_t b = 0; b < count; ++b) last[size_t(b)] = int32_t(b * longest + lengths[b] - 1);
  int32_t* rows = arena_.alloc<int32_t>(size_t(count));
  ops_.copy_from_host(rows, last.data(), size_t(count) * sizeof(int32_t));
  float* hidden = arena_.alloc<float>(size_t(count * H));  // [count, H]
  ops_.gather_rows(xn_final_, rows, nullptr, count, H, hidden);
  float* logits = arena_.alloc<float>(size_t(count * V));  // [count, V]
  ops_.gemm(precision_, Trans::No, Trans::Yes, count, V, H, 1.0f, hidden, H, m_.lm_head, H, 0.0f, logits, V);
  if (w_.lm_head_bias) ops_.add_bias(logits, count, V, V, w_.lm_head_bias);
  return logits;
}

}  // namespace zaya
