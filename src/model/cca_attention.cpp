// The CCA attention block of one decoder layer (transformers' ZayaCCAProjection, ZayaQKNorm and
// ZayaAttention): q and k projections, the q-k mean skip, the causal depthwise + grouped convolutions,
// values half from the current and half from the previous token, L2-normalised q and k with the learned
// key temperature, partial RoPE, causal GQA attention, o_proj.

#include <cmath>

#include "backend/ops.h"
#include "dist/device_communicator.h"
#include "model/layer_activations.h"
#include "model/zaya_model.h"

namespace zaya {
namespace {

AttentionShape attention_shape(const ModelDims& dims, const Batch& batch, int layer) {
  return {batch.batch, batch.seq, dims.heads, dims.kv_heads, dims.head_dim, dims.layer[size_t(layer)].window};
}

// Context parallel: the convolutions run over each sequence's halo rows and slice together.
AttentionShape halo_shape(AttentionShape shape, int64_t halo) {
  shape.seq += halo;
  return shape;
}

// Context parallel: rows [B, S, n] to or from the slice rows of [B, halo + S, n] (row strides n).
void slice_rows(Ops& ops, const float* from, float* to, int64_t B, int64_t S, int64_t halo, int64_t n,
                bool into_halo_layout) {
  for (int64_t b = 0; b < B; ++b) {
    const int64_t plain = b * S * n, with_halo = (b * (halo + S) + halo) * n;
    if (into_halo_layout) {
      ops.copy_rows(from + plain, n, S, n, to + with_halo, n, false);
    } else {
      ops.copy_rows(from + with_halo, n, S, n, to + plain, n, false);
    }
  }
}

}  // namespace

void ZayaModel::attention_forward(int layer, const Batch& batch, LayerActivations& a) {
  const LayerWeights& w = w_.layers[size_t(layer)];
  const LayerMatrices& m = m_.layers[size_t(layer)];
  const AttentionShape shape = attention_shape(dims_, batch, layer);
  const int64_t T = batch.tokens(), H = dims_.hidden, C = dims_.conv_channels();
  const int64_t QD = dims_.q_dim(), KD = dims_.kv_dim(), half = KD / 2, D = dims_.head_dim;
  const int64_t rotary = dims_.layer[size_t(layer)].rotary_dim;
  const Arena::Mark mark = scratch_.mark();

  // q0 | k0 side by side: the convolution mixes them as one [T, C] signal. xn1 feeds four products here and
  // four in backward.
  const Operand xn1 = a.xn1.operand();
  ops_.gemm(precision_, Trans::No, Trans::Yes, T, QD, H, 1.0f, xn1, H, m.q_proj, H, 0.0f, a.qk0, C);
  ops_.gemm(precision_, Trans::No, Trans::Yes, T, KD, H, 1.0f, xn1, H, m.k_proj, H, 0.0f, a.qk0 + QD, C);
  if (w.q_bias) ops_.add_bias(a.qk0, T, QD, C, w.q_bias);
  if (w.k_bias) ops_.add_bias(a.qk0 + QD, T, KD, C, w.k_bias);
  ops_.qk_mean_forward(a.qk0, T, C, shape, a.q_res, a.k_res);

  // Context parallel: the convolution runs over each sequence's halo (the previous rank's last rows) and
  // its slice, and keeps the slice's outputs.
  const bool split = sliced(batch);
  const int64_t halo = split ? context_halo() : 0;
  const AttentionShape conv_shape = halo_shape(shape, halo);
  const float* conv_x = a.qk0;
  if (split) {
    float* halo_rows = scratch_.alloc<float>(size_t(batch.batch * halo * C));  // [B, halo, C]
    if (halo > 0) halo_forward(a.qk0, C, C, halo, batch, halo_rows);
    for (int64_t b = 0; b < batch.batch; ++b)
      ops_.copy_rows(halo_rows + b * halo * C, C, halo, C, a.conv_in + b * (halo + batch.seq) * C, C, false);
    slice_rows(ops_, a.qk0, a.conv_in, batch.batch, batch.seq, halo, C, true);
    conv_x = a.conv_in;
  }
  float* conv_out = scratch_.alloc<float>(size_t(conv_shape.batch * conv_shape.seq * C));
  float* conv_scratch =
      scratch_.alloc<float>(size_t(ops_.cca_conv_scratch(conv_shape, dims_.conv_time0, dims_.conv_time1)));
  ops_.cca_conv_forward(precision_, conv_x, conv_shape, dims_.conv_time0, dims_.conv_time1, w.conv_dw_weight,
                        w.conv_dw_bias, w.conv_g_weight, w.conv_g_bias, a.dw, conv_out, conv_scratch);
  float* conv = conv_out;  // [T, C]
  if (split) {
    conv = scratch_.alloc<float>(size_t(T * C));
    slice_rows(ops_, conv_out, conv, batch.batch, batch.seq, halo, C, false);
  }
  ops_.copy_rows(a.q_res, QD, T, QD, a.q_pre, QD, false);
  ops_.copy_rows(conv, C, T, QD, a.q_pre, QD, true);
  ops_.copy_rows(a.k_res, KD, T, KD, a.k_pre, KD, false);
  ops_.copy_rows(conv + QD, C, T, KD, a.k_pre, KD, true);

  // Context parallel, q, k and v live only until they are sent to their heads' ranks.
  if (split) {
    a.q = scratch_.alloc<float>(size_t(T * QD));
    a.k = scratch_.alloc<float>(size_t(T * KD));
    a.v = scratch_.alloc<float>(size_t(T * KD));
  }
  ops_.l2norm_forward(a.q_pre, T, dims_.heads, D, nullptr, a.q, a.q_norms);
  ops_.l2norm_forward(a.k_pre, T, dims_.kv_heads, D, w.key_temp, a.k, a.k_norms);
  const float* cos = rope_cos_[size_t(layer)];
  const float* sin = rope_sin_[size_t(layer)];
  ops_.rope(a.q, batch.batch, batch.seq, dims_.heads, D, rotary, cos, sin, false);
  ops_.rope(a.k, batch.batch, batch.seq, dims_.kv_heads, D, rotary, cos, sin, false);

  // v = [v_proj_current(x_t) | v_proj_delayed(x_{t-1})]; before the first token the delayed projection
  // sees a zero vector, which leaves its bias (or zero).
  ops_.gemm(precision_, Trans::No, Trans::Yes, T, half, H, 1.0f, xn1, H, m.v_current, H, 0.0f, a.v, KD);
  if (w.v_current_bias) ops_.add_bias(a.v, T, half, KD, w.v_current_bias);
  float* delayed = scratch_.alloc<float>(size_t(T * half));
  ops_.gemm(precision_, Trans::No, Trans::Yes, T, half, H, 1.0f, xn1, H, m.v_delayed, H, 0.0f, delayed, half);
  float* first = w.v_delayed_bias;
  if (first) {
    ops_.add_bias(delayed, T, half, half, first);
  } else {
    first = scratch_.alloc<float>(size_t(half));
    ops_.fill(first, half, 0.0f);
  }
  ops_.delay_forward(delayed, first, batch.batch, batch.seq, half, a.v + half, KD);
  if (split) {  // a slice's first position takes the previous rank's last (the first rank's keeps `first`)
    float* previous = scratch_.alloc<float>(size_t(batch.batch * half));  // [B, half]
    halo_forward(delayed, half, half, 1, batch, previous);
    if (context_group_->rank() > 0)
      ops_.copy_rows(previous, half, batch.batch, half, a.v + half, batch.seq * KD, false);
  }

  const float scale = 1.0f / std::sqrt(float(D));
  if (split) {
    to_heads(a.q, query_heads_, batch, a.q_heads);
    to_heads(a.k, kv_heads_, batch, a.k_heads);
    to_heads(a.v, kv_heads_, batch, a.v_heads);
    ops_.attention_forward(precision_, a.q_heads, a.k_heads, a.v_heads, nullptr, heads_shape(shape), scale,
                           a.o_heads, a.lse);
    from_heads(a.o_heads, query_heads_, batch, a.o);
    a.q = a.k = a.v = nullptr;  // scratch, gone with this layer's
  } else {
    ops_.attention_forward(precision_, a.q, a.k, a.v, batch.attention_mask, shape, scale, a.o, a.lse);
  }
  a.o_in = product_input(a.o, T * QD, *attention_arena_);
  ops_.gemm(precision_, Trans::No, Trans::Yes, T, H, QD, 1.0f, a.o_in, QD, m.o_proj, QD, 0.0f, a.attn, H);
  if (w.o_bias) ops_.add_bias(a.attn, T, H, H, w.o_bias);
  scratch_.rewind(mark);
}

void ZayaModel::attention_backward(int layer, const Batch& batch, LayerActivations& a, float* d_attn,
                                   float* d_x) {
  const LayerWeights& w = w_.layers[size_t(layer)];
  const LayerMatrices& m = m_.layers[size_t(layer)];
  LayerWeights& g = g_.layers[size_t(layer)];
  const AttentionShape shape = attention_shape(dims_, batch, layer);
  const int64_t T = batch.tokens(), H = dims_.hidden, C = dims_.conv_channels();
  const int64_t QD = dims_.q_dim(), KD = dims_.kv_dim(), half = KD / 2, D = dims_.head_dim;
  const int64_t rotary = dims_.layer[size_t(layer)].rotary_dim;
  const Arena::Mark mark = scratch_.mark();
  auto f = [&](int64_t count) { return scratch_.alloc<float>(size_t(count)); };

  // o_proj
  const Operand d_attn_in = product_input(d_attn, T * H, scratch_);
  ops_.gemm(precision_, Trans::Yes, Trans::No, H, QD, T, 1.0f, d_attn_in, H, a.o_in, QD, 1.0f, g.o_proj, QD);
  if (g.o_bias) ops_.bias_backward(d_attn, T, H, H, g.o_bias);
  float* d_o = f(T * QD);
  ops_.gemm(precision_, Trans::No, Trans::No, T, QD, H, 1.0f, d_attn_in, H, m.o_proj, QD, 0.0f, d_o, QD);

  float* d_q = f(T * QD);
  float* d_k = f(T * KD);
  float* d_v = f(T * KD);
  const float scale = 1.0f / std::sqrt(float(D));
  const bool split = sliced(batch);
  if (split) {
    const AttentionShape heads = heads_shape(shape);
    const int64_t rows = heads.batch * heads.seq;  // whole sequences
    float* d_o_heads = f(rows * heads.heads * D);
    float* d_q_heads = f(rows * heads.heads * D);
    float* d_k_heads = f(rows * heads.kv_heads * D);
    float* d_v_heads = f(rows * heads.kv_heads * D);
    to_heads(d_o, query_heads_, batch, d_o_heads);
    ops_.attention_backward(precision_, a.q_heads, a.k_heads, a.v_heads, nullptr, a.o_heads, a.lse, d_o_heads,
                            heads, scale, d_q_heads, d_k_heads, d_v_heads);
    from_heads(d_q_heads, query_heads_, batch, d_q);
    from_heads(d_k_heads, kv_heads_, batch, d_k);
    from_heads(d_v_heads, kv_heads_, batch, d_v);
  } else {
    ops_.attention_backward(precision_, a.q, a.k, a.v, batch.attention_mask, a.o, a.lse, d_o, shape, scale,
                            d_q, d_k, d_v);
  }
  const float* cos = rope_cos_[size_t(layer)];
  const float* sin = rope_sin_[size_t(layer)];
  ops_.rope(d_q, batch.batch, batch.seq, dims_.heads, D, rotary, cos, sin, true);
  ops_.rope(d_k, batch.batch, batch.seq, dims_.kv_heads, D, rotary, cos, sin, true);
  float* d_q_pre = f(T * QD);
  float* d_k_pre = f(T * KD);
  ops_.l2norm_backward(a.q_pre, a.q_norms, d_q, T, dims_.heads, D, nullptr, d_q_pre, nullptr);
  ops_.l2norm_backward(a.k_pre, a.k_norms, d_k, T, dims_.kv_heads, D, w.key_temp, d_k_pre, g.key_temp);

  // q_pre = conv_q + q_res, k_pre = conv_k + k_res: both paths get the same gradient.
  float* d_conv = f(T * C);
  ops_.copy_rows(d_q_pre, QD, T, QD, d_conv, C, false);
  ops_.copy_rows(d_k_pre, KD, T, KD, d_conv + QD, C, false);
  float* d_qk0 = f(T * C);
  // Context parallel: over the halo and the slice, as forward; the halo rows' gradient goes to the
  // previous rank, and the next rank's is added to this slice's last rows.
  const int64_t halo = split ? context_halo() : 0;
  const AttentionShape conv_shape = halo_shape(shape, halo);
  float* conv_scratch = f(ops_.cca_conv_scratch(conv_shape, dims_.conv_time0, dims_.conv_time1));
  if (split) {
    const int64_t rows = conv_shape.batch * conv_shape.seq;
    float* d_conv_halo = f(rows * C);  // [B, halo + S, C]: no gradient at the halo's own outputs
    float* d_x_halo = f(rows * C);
    ops_.fill(d_conv_halo, rows * C, 0.0f);
    slice_rows(ops_, d_conv, d_conv_halo, batch.batch, batch.seq, halo, C, true);
    ops_.cca_conv_backward(precision_, a.conv_in, a.dw, d_conv_halo, conv_shape, dims_.conv_time0,
                           dims_.conv_time1, w.conv_dw_weight, w.conv_g_weight, d_x_halo, g.conv_dw_weight,
                           g.conv_dw_bias, g.conv_g_weight, g.conv_g_bias, conv_scratch);
    slice_rows(ops_, d_x_halo, d_qk0, batch.batch, batch.seq, halo, C, false);
    if (halo > 0) {
      float* d_halo = f(batch.batch * halo * C);  // [B, halo, C]
      for (int64_t b = 0; b < batch.batch; ++b)
        ops_.copy_rows(d_x_halo + b * (halo + batch.seq) * C, C, halo, C, d_halo + b * halo * C, C, false);
      halo_backward(d_halo, C, halo, batch, d_qk0, C);
    }
  } else {
    ops_.cca_conv_backward(precision_, a.qk0, a.dw, d_conv, shape, dims_.conv_time0, dims_.conv_time1,
                           w.conv_dw_weight, w.conv_g_weight, d_qk0, g.conv_dw_weight, g.conv_dw_bias,
                           g.conv_g_weight, g.conv_g_bias, conv_scratch);
  }
  ops_.qk_mean_backward(d_q_pre, d_k_pre, T, C, shape, d_qk0);

  // Values: the delayed half at position s came from x_{s-1}.
  float* d_delayed = f(T * half);
  // Context parallel, a slice's first delayed value came from the previous rank's last position: its
  // gradient goes there (on the first rank, to `first`, the bias, as without a split).
  const bool first_position = !split || context_group_->rank() == 0;
  ops_.delay_backward(d_v + half, KD, batch.batch, batch.seq, half, d_delayed,
                      first_position ? g.v_delayed_bias : nullptr);
  if (split) {
    float* d_previous = f(batch.batch * half);  // [B, half]
    ops_.copy_rows(d_v + half, batch.seq * KD, batch.batch, half, d_previous, half, false);
    halo_backward(d_previous, half, 1, batch, d_delayed, half);
  }
  if (g.v_delayed_bias) ops_.bias_backward(d_delayed, T, half, half, g.v_delayed_bias);
  if (g.v_current_bias) ops_.bias_backward(d_v, T, half, KD, g.v_current_bias);
  // Each gradient below feeds two products: its weight's gradient and the input gradient.
  const Operand xn1 = a.xn1.operand();
  const Operand d_v_in = product_input(d_v, T * KD, scratch_);
  const Operand d_delayed_in = product_input(d_delayed, T * half, scratch_);
  const Operand d_qk0_in = product_input(d_qk0, T * C, scratch_);
  ops_.gemm(precision_, Trans::Yes, Trans::No, half, H, T, 1.0f, d_v_in, KD, xn1, H, 1.0f, g.v_current, H);
  ops_.gemm(precision_, Trans::Yes, Trans::No, half, H, T, 1.0f, d_delayed_in, half, xn1, H, 1.0f,
            g.v_delayed, H);

  // q and k projections.
  ops_.gemm(precision_, Trans::Yes, Trans::No, QD, H, T, 1.0f, d_qk0_in, C, xn1, H, 1.0f, g.q_proj, H);
  ops_.gemm(precision_, Trans::Yes, Trans::No, KD, H, T, 1.0f, d_qk0_in.offset(QD), C, xn1, H, 1.0f, g.k_proj,
            H);
  if (g.q_bias) ops_.bias_backward(d_qk0, T, QD, C, g.q_bias);
  if (g.k_bias) ops_.bias_backward(d_qk0 + QD, T, KD, C, g.k_bias);

  // The input gradient sums the four projections' contributions.
  ops_.gemm(precision_, Trans::No, Trans::No, T, H, QD, 1.0f, d_qk0_in, C, m.q_proj, H, 0.0f, d_x, H);
  ops_.gemm(precision_, Trans::No, Trans::No, T, H, KD, 1.0f, d_qk0_in.offset(QD), C, m.k_proj, H, 1.0f, d_x,
            H);
  ops_.gemm(precision_, Trans::No, Trans::No, T, H, half, 1.0f, d_v_in, KD, m.v_current, H, 1.0f, d_x, H);
  ops_.gemm(precision_, Trans::No, Trans::No, T, H, half, 1.0f, d_delayed_in, half, m.v_delayed, H, 1.0f, d_x,
            H);
  scratch_.rewind(mark);
}

}  // namespace zaya
