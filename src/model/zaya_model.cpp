#include "model/zaya_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/ops.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "model/expert_exchange.h"
#include "model/layer_activations.h"

namespace zaya {

std::vector<int32_t> shifted_labels(const int32_t* input_ids, int64_t batch, int64_t seq) {
  std::vector<int32_t> labels(size_t(batch * seq), kIgnoreLabel);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s + 1 < seq; ++s) labels[size_t(b * seq + s)] = input_ids[b * seq + s + 1];
  }
  return labels;
}

ZayaModel::ZayaModel(ParameterStore& params, Ops& ops, Precision precision)
    : params_(params),
      ops_(ops),
      dims_(params.dims()),
      precision_(precision),
      w_(bind_weights(params.table(), dims_, params.values(), params.expert_values() == ExpertValues::F32)),
      arena_(0, ops.memory()),
      recomputed_(0, ops.memory()),
      scratch_(0, ops.memory()),
      layers_(size_t(dims_.layers)),
      routing_(size_t(dims_.layers)),
      step_sums_(size_t(layer_sums_offset(dims_.layers)) * sizeof(double), ops.memory()),
      host_sums_(size_t(layer_sums_offset(dims_.layers))) {
  const bool bf16_experts = params.expert_values() == ExpertValues::Bf16;
  if (bf16_experts && precision_ != Precision::BF16)
    throw Error("a store that holds its expert weights in bf16 only runs in bf16 (precision bf16)");
  if (precision_ == Precision::BF16) {
    // Copies at the store's offsets, up to the experts where the store holds those in bf16 itself.
    const int64_t copied = bf16_experts ? params.table().dense_floats() : params.table().total_floats();
    copies_ = AlignedBuffer(size_t(copied) * sizeof(BFloat16), ops.memory());
  }
  // In fp32 the copies are null, and the products read the values themselves.
  const BFloat16* copies = copies_.as<BFloat16>();
  m_ = bind_matrices(params.table(), w_, params.values(), copies, params.expert_values_bf16());
  weights_changed();
}

void ZayaModel::weights_changed() {
  if (precision_ != Precision::BF16) return;
  for (const ParamInfo& param : params_.table().params()) {
    if (is_product_matrix(param) && !params_.holds_in_bf16(param)) {
      ops_.convert_to_bf16(params_.value(param), param.numel(), copies_.as<BFloat16>() + param.offset);
    }
  }
}

ZayaModel::~ZayaModel() = default;

void ZayaModel::require_experts_reachable() const {
  if (!expert_group_ && !params_.table().holds_all_experts()) {
    const ExpertSlice& held = params_.table().experts();
    throw Error(cat("this rank holds experts [", held.first, ", ", held.first + held.count, ") of ",
                    dims_.experts,
                    " only; the others are reached through its expert-parallel group, which is not set"));
  }
}

ForwardResult ZayaModel::forward(const Batch& batch, bool keep_logits) {
  return run(batch, keep_logits, false, 0);
}

ForwardResult ZayaModel::forward_backward(const Batch& batch, float loss_scale, bool keep_logits) {
  return run(batch, keep_logits, true, loss_scale);
}

namespace {

void check_batch(const Batch& batch, const ModelDims& dims) {
  if (batch.batch <= 0 || batch.seq <= 0)
    throw Error(cat("empty batch [", batch.batch, ", ", batch.seq, "]"));
  // Every input id before any label: a label is usually the next input, and the input is what to name.
  auto at = [&](int64_t t) { return cat(" at [", t / batch.seq, ", ", t % batch.seq, "]"); };
  for (int64_t t = 0; t < batch.tokens(); ++t) {
    if (batch.input_ids[t] < 0 || batch.input_ids[t] >= dims.vocab) {
      throw Error(cat("token id ", batch.input_ids[t], at(t), " is outside the vocabulary of ", dims.vocab))
          .field("input_ids");
    }
  }
  for (int64_t t = 0; batch.labels && t < batch.tokens(); ++t) {
    if (batch.labels[t] != kIgnoreLabel && (batch.labels[t] < 0 || batch.labels[t] >= dims.vocab)) {
      throw Error(cat("label ", batch.labels[t], at(t), " is outside the vocabulary of ", dims.vocab))
          .field("labels");
    }
  }
}

}  // namespace

template <class T>
T* ZayaModel::to_device(const T* host, int64_t count) {
  if (host == nullptr) return nullptr;
  T* device = arena_.alloc<T>(size_t(count));
  ops_.copy_from_host(device, host, size_t(count) * sizeof(T));
  return device;
}

ForwardResult ZayaModel::run(const Batch& host_batch, bool keep_logits, bool train, float loss_scale,
                             const LayerCallback& after_layer) {
  check_batch(host_batch, dims_);
  require_experts_reachable();
  if (sliced(host_batch)) check_slice(host_batch);
  const int64_t T = host_batch.tokens(), H = dims_.hidden, R = dims_.router;
  arena_.reset();
  recomputed_.reset();
  scratch_.reset();
  loss_scale_ = loss_scale;
  training_ = train;
  const Recompute recompute = train ? recompute_ : Recompute::None;
  attention_arena_ = recompute == Recompute::None ? &arena_ : &recomputed_;
  moe_arena_ = recompute == Recompute::Layer ? &recomputed_ : &arena_;
  // The gradients are bound at the first training pass, which makes the store allocate them: a model that
  // only runs forward never holds them.
  if (train && !g_.embed) g_ = bind_weights(params_.table(), dims_, params_.grads());
  reset_step_sums();
  // The ops read the batch from the backend's memory; the host keeps its own arrays.
  Batch batch = host_batch;
  batch.input_ids = to_device(host_batch.input_ids, T);
  batch.labels = to_device(host_batch.labels, T);
  batch.attention_mask = to_device(host_batch.attention_mask, T);

  // Activations, in the same order every step so that the arena reuses one block after warm-up. Training
  // keeps every layer's for backward (but what recompute leaves to it, which one layer at a time holds in
  // recomputed_). A forward-only pass keeps one layer's at a time (rewound after it): only the residual
  // stream and the router state go on to the next layer, in two buffers each that the layers take in turn.
  x_embed_ = arena_.alloc<float>(size_t(T * H));
  expert_choice_ = arena_.alloc<int32_t>(size_t(dims_.layers * T));
  float* streams[2] = {x_embed_, nullptr};       // forward only: [T, H] each
  float* router_states[2] = {nullptr, nullptr};  // forward only: [T, R] each
  if (train) {
    for (int64_t l = 0; l < dims_.layers; ++l) {
      LayerActivations& a = layers_[size_t(l)];
      a.x_in = l == 0 ? x_embed_ : arena_.alloc<float>(size_t(T * H));
      a.rh = arena_.alloc<float>(size_t(T * R));
      a.choice = expert_choice_ + l * T;
      if (recompute == Recompute::None) allocate_attention(a, batch, arena_);
      if (recompute != Recompute::Layer) allocate_rest(a, batch, a.choice, a.rh, arena_);
    }
  } else {
    streams[1] = arena_.alloc<float>(size_t(T * H));
    for (float*& state : router_states) state = arena_.alloc<float>(size_t(T * R));
  }
  x_final_ = arena_.alloc<float>(size_t(T * H));
  rstd_final_ = arena_.alloc<float>(size_t(T));
  xn_final_ = arena_.alloc<float>(size_t(T * H));
  float* logits = keep_logits ? arena_.alloc<float>(size_t(T * dims_.vocab)) : nullptr;
  float* d_final = train ? arena_.alloc<float>(size_t(T * H)) : nullptr;
  rope_tables(batch);

  embed(batch, x_embed_);
  for (int64_t l = 0; l < dims_.layers; ++l) {
    LayerActivations& a = layers_[size_t(l)];
    const Arena::Mark layer_mark = arena_.mark();
    if (!train) {
      allocate_attention(a, batch, arena_);
      allocate_rest(a, batch, expert_choice_ + l * T, router_states[l % 2], arena_);
      a.x_in = streams[l % 2];
    }
    if (recompute != Recompute::None) allocate_recomputed(l, batch);
    const bool last = l + 1 == dims_.layers;
    layer_forward(l, batch, a, last ? x_final_ : train ? layers_[size_t(l + 1)].x_in : streams[(l + 1) % 2]);
    if (after_layer) after_layer(l, a);
    if (!train) arena_.rewind(layer_mark);
  }
  ops_.rmsnorm_forward(x_final_, w_.final_norm, T, H, dims_.rms_eps, xn_final_, rstd_final_);

  ForwardResult result;
  if (host_batch.labels) {
    for (int64_t t = 0; t < T; ++t) result.labelled += host_batch.labels[t] != kIgnoreLabel;
  }
  head(batch, xn_final_, keep_logits, train, loss_scale, logits, d_final);
  read_step_sums(result);
  result.logits = logits;
  result.expert_choice = expert_choice_;
  result.routing = &routing_;
  if (aux_.enabled()) sum_batch_route_counts(host_batch);
  for (int64_t l = 0; aux_.enabled() && l < dims_.layers; ++l) {
    const RouterLayerStats& stats = routing_[size_t(l)];
    for (int64_t e = 0; e < dims_.experts; ++e) {
      result.aux_loss_sum += aux_.switch_weight * double(dims_.experts) * double(batch_route_count(l, e)) /
                             double(batch_tokens_) * stats.prob_sums[size_t(e)];
    }
    result.aux_loss_sum += aux_.z_weight * stats.lse_square_sum;
  }
  if (train) backward(batch, d_final);
  return result;
}

void ZayaModel::layer_forward(int64_t layer, const Batch& batch, LayerActivations& a, float* x_out) {
  const int64_t T = batch.tokens(), H = dims_.hidden;
  const LayerWeights& w = w_.layers[size_t(layer)];
  ops_.rmsnorm_forward(a.x_in, w.input_norm, T, H, dims_.rms_eps, a.xn1, a.rstd1);
  if (batch.attention_mask) ops_.mask_rows(a.xn1, T, H, batch.attention_mask);
  attention_forward(int(layer), batch, a);
  const ResidualScaleWeights& ra = w.attention_residual;
  ops_.residual_scale_forward(a.attn, a.x_in, ra.h_bias, ra.h_scale, ra.r_bias, ra.r_scale, T, H, a.r1);
  ops_.rmsnorm_forward(a.r1, w.post_attention_norm, T, H, dims_.rms_eps, a.xn2, a.rstd2);
  moe_forward(int(layer), batch, a, layer > 0 ? layers_[size_t(layer - 1)].rh : nullptr);
  const ResidualScaleWeights& rm = w.mlp_residual;
  ops_.residual_scale_forward(a.moe, a.r1, rm.h_bias, rm.h_scale, rm.r_bias, rm.r_scale, T, H, x_out);
}

void ZayaModel::allocate_recomputed(int64_t layer, const Batch& batch) {
  LayerActivations& a = layers_[size_t(layer)];
  recomputed_.rewind(Arena::Mark{});  // recomputed_ holds one layer at a time, from its start
  allocate_attention(a, batch, recomputed_);
  if (recompute_ == Recompute::Layer) allocate_rest(a, batch, a.choice, a.rh, recomputed_);
}

Operand ZayaModel::product_input(const float* x, int64_t count, Arena& arena) {
  if (precision_ != Precision::BF16) return x;
  BFloat16* rounded = arena.alloc<BFloat16>(size_t(count));
  ops_.convert_to_bf16(x, count, rounded);
  return rounded;
}

Destination ZayaModel::product_activation(int64_t count, Arena& arena) {
  if (precision_ == Precision::BF16) return arena.alloc<BFloat16>(size_t(count));
  return arena.alloc<float>(size_t(count));
}

const float* ZayaModel::host_logits(const float* logits, int64_t rows) {
  if (&ops_.memory() == &host_memory()) return logits;
  host_logits_.resize(size_t(rows * dims_.vocab));
  ops_.read_to_host(host_logits_.data(), logits, host_logits_.size() * sizeof(float));
  return host_logits_.data();
}

void ZayaModel::sum_batch_route_counts(const Batch& batch) {
  const int64_t routes = dims_.routes();
  batch_route_counts_.resize(size_t(dims_.layers * routes));
  for (int64_t l = 0; l < dims_.layers; ++l) {
    const std::vector<int64_t>& counts = routing_[size_t(l)].counts;
    std::copy(counts.begin(), counts.end(), batch_route_counts_.begin() + l * routes);
  }
  batch_tokens_ = batch.tokens();
  if (sliced(batch)) {
    context_group_->host().all_reduce_sum(batch_route_counts_.data(), int64_t(batch_route_counts_.size()));
    batch_tokens_ *= context_group_->size();
  }
}

void ZayaModel::reset_step_sums() {
  ops_.zero(step_sums_.data(), step_sums_.size());
}

void ZayaModel::read_step_sums(ForwardResult& result) {
  ops_.read_to_host(host_sums_.data(), step_sums_.data(), step_sums_.size());
  result.loss_sum = host_sums_[0];
  const int64_t routes = dims_.routes();
  for (int64_t l = 0; l < dims_.layers; ++l) {
    const double* sums = host_sums_.data() + layer_sums_offset(l);
    RouterLayerStats& stats = routing_[size_t(l)];
    stats.counts.resize(size_t(routes));
    std::memcpy(stats.counts.data(), sums, size_t(routes) * sizeof(int64_t));
    stats.prob_sums.assign(sums + routes, sums + 2 * routes);
    stats.entropy_sum = sums[2 * routes];
    stats.lse_square_sum = sums[2 * routes + 1];
  }
}

void ZayaModel::allocate_attention(LayerActivations& a, const Batch& batch, Arena& arena) {
  const int64_t T = batch.tokens(), H = dims_.hidden, C = dims_.conv_channels();
  auto f = [&](int64_t count) { return arena.alloc<float>(size_t(count)); };
  const bool split = sliced(batch);
  const int64_t halo = split ? context_halo() : 0;
  // Whole or split, a pass holds one of two sets of attention buffers; the other's stay null.
  a.q = a.k = a.v = a.conv_in = a.q_heads = a.k_heads = a.v_heads = a.o_heads = nullptr;
  a.qk0 = f(T * C);
  a.q_res = f(T * dims_.q_dim());
  a.k_res = f(T * dims_.kv_dim());
  a.dw = f(batch.batch * (halo + batch.seq + dims_.conv_time1 - 1) * C);
  a.q_pre = f(T * dims_.q_dim());
  a.k_pre = f(T * dims_.kv_dim());
  a.q_norms = f(T * dims_.heads);
  a.k_norms = f(T * dims_.kv_heads);
  if (split) {  // q, k and v in scratch (model/cca_attention.cpp); whole sequences of this rank's heads here
    const AttentionShape heads = heads_shape(AttentionShape{batch.batch, batch.seq, 0, 0, dims_.head_dim, 0});
    const int64_t rows = heads.batch * heads.seq;
    a.conv_in = f(batch.batch * (halo + batch.seq) * C);
    a.q_heads = f(rows * heads.heads * dims_.head_dim);
    a.k_heads = f(rows * heads.kv_heads * dims_.head_dim);
    a.v_heads = f(rows * heads.kv_heads * dims_.head_dim);
    a.o_heads = f(rows * heads.heads * dims_.head_dim);
  } else {
    a.q = f(T * dims_.q_dim());
    a.k = f(T * dims_.kv_dim());
    a.v = f(T * dims_.kv_dim());
  }
  a.o = f(T * dims_.q_dim());
  a.lse = f(batch.batch * dims_.heads * batch.seq);
  a.attn = f(T * H);
}

void ZayaModel::allocate_rest(LayerActivations& a, const Batch& batch, int32_t* choice, float* router_state,
                              Arena& arena) {
  const int64_t T = batch.tokens(), H = dims_.hidden, R = dims_.router;
  auto f = [&](int64_t count) { return arena.alloc<float>(size_t(count)); };
  a.rstd1 = f(T);
  a.xn1 = product_activation(T * H, arena);
  a.r1 = f(T * H);
  a.rstd2 = f(T);
  a.xn2 = f(T * H);
  a.rh = router_state;
  a.rn_rstd = f(T);
  a.rn = f(T * R);
  a.f1_pre = f(T * R);
  a.f1 = f(T * R);
  a.f2_pre = f(T * R);
  a.f2 = f(T * R);
  a.probs = f(T * dims_.routes());
  a.choice = choice;
  a.gate = f(T);
  a.router_lse = f(T);
  a.order = arena.alloc<int32_t>(size_t(T));
  a.offsets = arena.alloc<int64_t>(size_t(dims_.experts + 1));
  a.gate_up = f(T * 2 * dims_.intermediate);
  a.act = product_activation(T * dims_.intermediate, arena);
  a.y = f(T * H);
  a.moe = f(T * H);
}

void ZayaModel::embed(const Batch& batch, float* out) {
  ops_.embedding_forward(batch.input_ids, batch.tokens(), w_.embed, dims_.hidden, w_.input_bias,
                         w_.input_scale, out);
}

void ZayaModel::rope_rows(int64_t layer, const int64_t* positions, int64_t count, float*& cos, float*& sin) {
  const LayerDims& dims = dims_.layer[size_t(layer)];
  const int64_t half = dims.rotary_dim / 2;
  int64_t needed = positions ? 0 : count;
  for (int64_t s = 0; positions && s < count; ++s) needed = std::max(needed, positions[s] + 1);
  auto same = [&](const RopeAngles& a) {
    return a.rotary_dim == dims.rotary_dim && a.theta == dims.rope_theta;
  };
  auto found = std::find_if(rope_angles_.begin(), rope_angles_.end(), same);
  RopeAngles& angles = found != rope_angles_.end()
                           ? *found
                           : rope_angles_.emplace_back(RopeAngles{dims.rotary_dim, dims.rope_theta, {}, {}});
  if (const int64_t known = half > 0 ? int64_t(angles.cos.size()) / half : needed; known < needed) {
    angles.cos.resize(size_t(needed * half));
    angles.sin.resize(size_t(needed * half));
    // As transformers computes it, in float32: inv_freq = 1 / theta^(2i / dim), angle = position * inv_freq.
    for (int64_t i = 0; i < half; ++i) {
      const float inv_freq = 1.0f / std::pow(float(dims.rope_theta), float(2 * i) / float(dims.rotary_dim));
      for (int64_t p = known; p < needed; ++p) {
        const float angle = float(p) * inv_freq;
        angles.cos[size_t(p * half + i)] = std::cos(angle);
        angles.sin[size_t(p * half + i)] = std::sin(angle);
      }
    }
  }
  staging_.resize(size_t(2 * count * half));  // [count, half] cos, then sin; its capacity is kept
  float* host_cos = staging_.data();
  float* host_sin = host_cos + count * half;
  for (int64_t s = 0; s < count; ++s) {
    const int64_t p = positions ? positions[s] : s;
    std::copy_n(angles.cos.begin() + p * half, half, host_cos + s * half);
    std::copy_n(angles.sin.begin() + p * half, half, host_sin + s * half);
  }
  cos = to_device(host_cos, count * half);
  sin = to_device(host_sin, count * half);
}

void ZayaModel::rope_tables(const Batch& batch) {
  rope_cos_.assign(size_t(dims_.layers), nullptr);
  rope_sin_.assign(size_t(dims_.layers), nullptr);
  // A context-parallel slice is at its place in the whole sequence.
  std::vector<int64_t> positions;
  if (sliced(batch)) {
    for (int64_t s = 0; s < batch.seq; ++s) positions.push_back(context_group_->rank() * batch.seq + s);
  }
  // Layers of the same rotary size and base read one table.
  for (int64_t l = 0; l < dims_.layers; ++l) {
    const LayerDims& dims = dims_.layer[size_t(l)];
    int64_t same = 0;
    while (same < l && (dims_.layer[size_t(same)].rotary_dim != dims.rotary_dim ||
                        dims_.layer[size_t(same)].rope_theta != dims.rope_theta))
      ++same;
    if (same < l) {
      rope_cos_[size_t(l)] = rope_cos_[size_t(same)];
      rope_sin_[size_t(l)] = rope_sin_[size_t(same)];
    } else {
      rope_rows(l, positions.empty() ? nullptr : positions.data(), batch.seq, rope_cos_[size_t(l)],
                rope_sin_[size_t(l)]);
    }
  }
}

void ZayaModel::head(const Batch& batch, const float* final_hidden, bool keep_logits, bool train,
                     float loss_scale, float* logits, float* d_final) {
  const int64_t T = batch.tokens(), H = dims_.hidden, V = dims_.vocab;
  if (!keep_logits && !batch.labels && !train) return;  // nothing asked of the head (a prefill)
  // A bf16 step's head products read the loss's gradient in bf16, which the loss writes directly; an f32
  // gradient is written only for an f32 step or the head's bias (over the chunk's logits when those are not
  // kept).
  const bool bf16_grads = train && precision_ == Precision::BF16;
  const bool f32_grads = train && (!bf16_grads || w_.lm_head_bias);
  // Chunks of at most the backend's loss_chunk_logits bound the scratch whatever the vocabulary: as few as
  // that allows, of one size (a remainder of a few rows would make a product too shallow to run at speed),
  // a multiple of 16 rows (up to 511 rows, a size the bf16 products make a primitive of its own for).
  const int64_t most = std::max<int64_t>(16, ops_.loss_chunk_logits(train && !bf16_grads) / V / 16 * 16);
  const int64_t chunks = (T + most - 1) / most;
  const int64_t chunk = std::min(T, ((T + chunks - 1) / chunks + 15) / 16 * 16);
  // The head's weight gradient is added in groups of chunks, one product each: every such product is a pass
  // over that whole f32 gradient (154 MB at hidden 768 and a 50000 vocabulary), and a deeper one runs
  // faster. A bf16 step keeps its chunks' bf16 gradients for up to the backend's loss_gradient_logits; an
  // f32 step adds each chunk's own, as it always has.
  const int64_t group =
      bf16_grads ? std::min(T, chunk * std::max<int64_t>(1, ops_.loss_gradient_logits() / (chunk * V)))
                 : chunk;
  const Arena::Mark mark = scratch_.mark();
  float* chunk_logits = keep_logits ? nullptr : scratch_.alloc<float>(size_t(chunk * V));
  float* chunk_grads = keep_logits && f32_grads ? scratch_.alloc<float>(size_t(chunk * V)) : nullptr;
  BFloat16* group_grads_bf16 = bf16_grads ? scratch_.alloc<BFloat16>(size_t(group * V)) : nullptr;
  const Operand hidden = product_input(final_hidden, T * H, scratch_);
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t n = std::min(chunk, T - t0), group_start = t0 / group * group;
    float* z = keep_logits ? logits + t0 * V : chunk_logits;
    ops_.gemm(precision_, Trans::No, Trans::Yes, n, V, H, 1.0f, hidden.offset(t0 * H), H, m_.lm_head, H, 0.0f,
              z, V);
    if (w_.lm_head_bias) ops_.add_bias(z, n, V, V, w_.lm_head_bias);
    if (!batch.labels) continue;
    float* dz = f32_grads ? (keep_logits ? chunk_grads : z) : nullptr;
    BFloat16* dz_bf16 = bf16_grads ? group_grads_bf16 + (t0 - group_start) * V : nullptr;
    ops_.cross_entropy(z, batch.labels + t0, n, V, loss_scale, dz, dz_bf16, step_sums_.as<double>());
    if (!train) continue;
    const Arena::Mark chunk_mark = scratch_.mark();
    const Operand d_logits = bf16_grads ? Operand(dz_bf16) : product_input(dz, n * V, scratch_);
    ops_.gemm(precision_, Trans::No, Trans::No, n, H, V, 1.0f, d_logits, V, m_.lm_head, H, 0.0f,
              d_final + t0 * H, H);
    if (const int64_t rows = t0 + n - group_start; rows == group || t0 + n == T) {
      const Operand group_d_logits = bf16_grads ? Operand(group_grads_bf16) : d_logits;
      ops_.gemm(precision_, Trans::Yes, Trans::No, V, H, rows, 1.0f, group_d_logits, V,
                hidden.offset(group_start * H), H, 1.0f, g_.lm_head, H);
    }
    if (g_.lm_head_bias) ops_.bias_backward(dz, n, V, V, g_.lm_head_bias);
    scratch_.rewind(chunk_mark);
  }
  if (train && !batch.labels) ops_.fill(d_final, T * H, 0.0f);
  scratch_.rewind(mark);
}

void ZayaModel::backward(const Batch& batch, float* d_final) {
  const int64_t T = batch.tokens(), H = dims_.hidden, R = dims_.router;
  float* d_x = arena_.alloc<float>(size_t(T * H));  // gradient of the residual stream
  float* d_r1 = arena_.alloc<float>(size_t(T * H));
  float* d_moe = arena_.alloc<float>(size_t(T * H));
  float* d_xn = arena_.alloc<float>(size_t(T * H));
  float* d_attn = arena_.alloc<float>(size_t(T * H));
  // The router state flows forward through the layers (depth averaging), so its gradient flows back:
  // d_state_in reaches layer l from layer l + 1, d_state_out leaves layer l for layer l - 1.
  float* d_state_in = arena_.alloc<float>(size_t(T * R));
  float* d_state_out = arena_.alloc<float>(size_t(T * R));

  ops_.rmsnorm_backward(x_final_, w_.final_norm, rstd_final_, d_final, T, H, d_x, false, g_.final_norm);
  bool state_grad = false;  // the last layer's router state feeds no later layer
  for (int64_t l = dims_.layers - 1; l >= 0; --l) {
    LayerActivations& a = layers_[size_t(l)];
    const LayerWeights& w = w_.layers[size_t(l)];
    LayerWeights& g = g_.layers[size_t(l)];
    // What recompute left out, computed again from the same inputs: the same bits as the forward pass's.
    // The layer's router statistics are added to the step's sums once more, after they were read.
    if (recompute_ != Recompute::None) {
      allocate_recomputed(l, batch);
      recomputing_ = true;
      if (recompute_ == Recompute::Attention) {
        attention_forward(int(l), batch, a);
      } else {
        layer_forward(l, batch, a, recomputed_.alloc<float>(size_t(T * H)));
      }
      recomputing_ = false;
    }
    const ResidualScaleWeights& rm = w.mlp_residual;
    ops_.residual_scale_backward(a.moe, a.r1, rm.h_bias, rm.h_scale, rm.r_bias, rm.r_scale, d_x, T, H, d_moe,
                                 d_r1, g.mlp_residual.h_bias, g.mlp_residual.h_scale, g.mlp_residual.r_bias,
                                 g.mlp_residual.r_scale);
    moe_backward(int(l), batch, a, d_moe, state_grad ? d_state_in : nullptr, d_xn,
                 l > 0 ? d_state_out : nullptr);
    std::swap(d_state_in, d_state_out);
    state_grad = true;
    ops_.rmsnorm_backward(a.r1, w.post_attention_norm, a.rstd2, d_xn, T, H, d_r1, true,
                          g.post_attention_norm);
    const ResidualScaleWeights& ra = w.attention_residual;
    ops_.residual_scale_backward(a.attn, a.x_in, ra.h_bias, ra.h_scale, ra.r_bias, ra.r_scale, d_r1, T, H,
                                 d_attn, d_x, g.attention_residual.h_bias, g.attention_residual.h_scale,
                                 g.attention_residual.r_bias, g.attention_residual.r_scale);
    attention_backward(int(l), batch, a, d_attn, d_xn);
    if (batch.attention_mask) ops_.mask_rows(d_xn, T, H, batch.attention_mask);
    ops_.rmsnorm_backward(a.x_in, w.input_norm, a.rstd1, d_xn, T, H, d_x, true, g.input_norm);
    if (layer_backward_hook_) layer_backward_hook_(l);
  }
  ops_.embedding_backward(batch.input_ids, T, w_.embed, H, w_.input_bias, w_.input_scale, d_x,
                          dims_.pad_token_id, g_.embed, g_.input_bias, g_.input_scale);
}

}  // namespace zaya
