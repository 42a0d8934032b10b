// The CCA-specific ops on the GPU: the q-k mean skip and the rotary embeddings (one thread per element),
// L2 normalisation (one warp per head vector), and the two causal convolutions over time: the depthwise one
// a thread per element, the grouped one as matrix products (gpu::Blas, f32), one per tap batched over the
// head groups, over every sequence at once (below). Parameter gradients are sums over tokens in a fixed
// order (kernel_util.h's column sums, the products' own sums), never atomics, so a run repeats bit for bit.

#include <cfloat>

#include "backend/gpu/gpu_ops.h"
#include "backend/gpu/kernel_util.h"

namespace zaya {
namespace {

using gpu::block_dim_x;
using gpu::block_x;
using gpu::thread_x;

// torch.finfo(torch.float32).eps: the floor ZayaQKNorm puts under each norm (as the CPU backend).
constexpr float kNormFloor = FLT_EPSILON;

ZAYA_DEVICE int64_t global_index() {
  return int64_t(block_x()) * block_dim_x() + thread_x();
}

// ---- q-k mean skip ----------------------------------------------------------------------------------------

// One thread per (token, kv head g, channel i): q_res of g's heads, then their mean, in the CPU's order.
// qk [tokens, ld] (q [heads, d] then k [kv_heads, d]); q_res [tokens, heads, d]; k_res [tokens, kv_heads, d].
ZAYA_KERNEL(gpu::kThreads)
void qk_mean_forward_kernel(const float* qk, int64_t tokens, int64_t ld, int64_t heads, int64_t kv_heads,
                            int64_t d, float* q_res, float* k_res) {
  const int64_t index = global_index();
  if (index >= tokens * kv_heads * d) return;
  const int64_t t = index / (kv_heads * d), g = (index / d) % kv_heads, i = index % d;
  const int64_t groups = heads / kv_heads;
  const float* q = qk + t * ld;
  const float key = q[(heads + g) * d + i];
  float* qr = q_res + t * heads * d;
  float sum = 0;
  for (int64_t j = 0; j < groups; ++j) {
    const int64_t h = g * groups + j;
    const float value = (q[h * d + i] + key) * 0.5f;
    qr[h * d + i] = value;
    sum += value;
  }
  k_res[index] = sum * (1.0f / float(groups));
}

// One thread per (token, kv head g, channel i): every head of g adds its total gradient to its q channel and
// to g's k channel, which this thread alone writes (so no two threads touch one value).
ZAYA_KERNEL(gpu::kThreads)
void qk_mean_backward_kernel(const float* dq_res, const float* dk_res, int64_t tokens, int64_t ld,
                             int64_t heads, int64_t kv_heads, int64_t d, float* dqk) {
  const int64_t index = global_index();
  if (index >= tokens * kv_heads * d) return;
  const int64_t t = index / (kv_heads * d), g = (index / d) % kv_heads, i = index % d;
  const int64_t groups = heads / kv_heads;
  const float inv_groups = 1.0f / float(groups);
  float* dq = dqk + t * ld;
  const float* dqr = dq_res + t * heads * d;
  const float dkr = dk_res[index];
  float dk = dq[(heads + g) * d + i];
  for (int64_t j = 0; j < groups; ++j) {
    const int64_t h = g * groups + j;
    // The total gradient reaching q_res[h]: its own plus its share of the mean in k_res[g].
    const float through = 0.5f * (dqr[h * d + i] + dkr * inv_groups);
    dq[h * d + i] += through;
    dk += through;
  }
  dq[(heads + g) * d + i] = dk;
}

// ---- L2 normalisation -------------------------------------------------------------------------------------

constexpr unsigned kNormThreads = 256;  // 8 warps (4 wavefronts of 64): one head vector each

// The head vector of this warp (rows * heads of them, a warp each), or -1 past the last: the same for every
// lane, so a warp leaves or stays whole and its exchanges see all lanes.
ZAYA_DEVICE int64_t warp_vector(int64_t vectors) {
  const int64_t vector = int64_t(block_x()) * (block_dim_x() / gpu::kWarpSize) + gpu::warp();
  return vector < vectors ? vector : -1;
}

// x, out [rows, heads, d]; norms [rows, heads].
ZAYA_KERNEL(kNormThreads)
void l2norm_forward_kernel(const float* x, int64_t vectors, int64_t heads, int64_t d, const float* temp,
                           float* out, float* norms) {
  const int64_t r = warp_vector(vectors);
  if (r < 0) return;
  const float* v = x + r * d;
  float sum_sq = 0;
  for (int64_t i = gpu::lane(); i < d; i += gpu::kWarpSize) sum_sq += v[i] * v[i];
  sum_sq = gpu::warp_sum(sum_sq);
  const float norm = fmaxf(sqrtf(sum_sq), kNormFloor);
  if (gpu::lane() == 0) norms[r] = norm;
  const float factor = sqrtf(float(d)) / norm * (temp ? temp[r % heads] : 1.0f);
  for (int64_t i = gpu::lane(); i < d; i += gpu::kWarpSize) out[r * d + i] = v[i] * factor;
}

// y = c x / n with n = max(|x|, floor), c = sqrt(d) temp: dx = (c / n) (dy - x (x.dy) / |x|^2) while |x| is
// above the floor, (c / floor) dy below it. With temp, each vector's dtemp term (sqrt(d) / n) x.dy goes to
// dtemp_terms [rows, heads], summed over rows afterwards in a fixed order.
ZAYA_KERNEL(kNormThreads)
void l2norm_backward_kernel(const float* x, const float* norms, const float* dout, int64_t vectors,
                            int64_t heads, int64_t d, const float* temp, float* dx, float* dtemp_terms) {
  const int64_t r = warp_vector(vectors);
  if (r < 0) return;
  const float* v = x + r * d;
  const float* dy = dout + r * d;
  float sum_sq = 0, dot = 0;
  for (int64_t i = gpu::lane(); i < d; i += gpu::kWarpSize) {
    sum_sq += v[i] * v[i];
    dot += v[i] * dy[i];
  }
  sum_sq = gpu::warp_sum(sum_sq);
  dot = gpu::warp_sum(dot);
  const float target = sqrtf(float(d)), norm = norms[r];
  const float factor = target / norm * (temp ? temp[r % heads] : 1.0f);
  const float projection = sqrtf(sum_sq) > kNormFloor ? dot / sum_sq : 0.0f;
  for (int64_t i = gpu::lane(); i < d; i += gpu::kWarpSize)
    dx[r * d + i] = factor * (dy[i] - v[i] * projection);
  if (temp && gpu::lane() == 0) dtemp_terms[r] = target / norm * dot;
}

struct Dense {  // values[r, j] of a [rows, n] matrix
  const float* values;
  int64_t n;
  ZAYA_DEVICE float operator()(int64_t r, int64_t j) const { return values[r * n + j]; }
};

// ---- rotary embeddings ------------------------------------------------------------------------------------

// One thread per rotated pair (channels i and i + half of a head): x [batch, seq, heads, head_dim] in place;
// cos, sin [seq, half]; sign -1 rotates back (the transpose).
ZAYA_KERNEL(gpu::kThreads)
void rope_kernel(float* x, int64_t seq, int64_t heads, int64_t head_dim, int64_t half, int64_t pairs,
                 const float* cos, const float* sin, float sign) {
  const int64_t index = global_index();
  if (index >= pairs) return;
  const int64_t vector = index / half, i = index % half, s = (vector / heads) % seq;
  float* v = x + vector * head_dim;
  const float c = cos[s * half + i], si = sign * sin[s * half + i];
  const float x1 = v[i], x2 = v[i + half];
  v[i] = x1 * c - x2 * si;
  v[i + half] = x2 * c + x1 * si;
}

// ---- the causal convolutions ------------------------------------------------------------------------------
// x [batch, seq, channels] (channels = groups * d, a group per head); dw [batch, dw_len, channels] with
// dw_len = seq + k1 - 1; pad = (k0 - 1) + (k1 - 1) zeros left of each sequence.

struct ConvShape {
  int64_t batch, seq, channels, d, groups, k0, k1, pad, dw_len;
};

ConvShape conv_shape(const AttentionShape& shape, int64_t k0, int64_t k1) {
  ConvShape s;
  s.batch = shape.batch;
  s.seq = shape.seq;
  s.d = shape.head_dim;
  s.groups = shape.heads + shape.kv_heads;
  s.channels = s.groups * s.d;
  s.k0 = k0;
  s.k1 = k1;
  s.pad = (k0 - 1) + (k1 - 1);
  s.dw_len = shape.seq + k1 - 1;
  return s;
}

// One thread per (b, j, c) of dw: bias + sum_a w[c, a] x[b, j + a - pad, c], taps in increasing a.
ZAYA_KERNEL(gpu::kThreads)
void depthwise_forward_kernel(const float* x, ConvShape s, const float* weight, const float* bias,
                              float* dw) {
  const int64_t index = global_index();
  if (index >= s.batch * s.dw_len * s.channels) return;
  const int64_t c = index % s.channels, row = index / s.channels, b = row / s.dw_len, j = row % s.dw_len;
  float sum = bias[c];
  for (int64_t a = 0; a < s.k0; ++a) {
    const int64_t t = j + a - s.pad;
    if (t >= 0 && t < s.seq) sum += weight[c * s.k0 + a] * x[(b * s.seq + t) * s.channels + c];
  }
  dw[index] = sum;
}

// Decoding, one thread per (b, c) of the output: the last position of b's window of pad + 1 inputs. The k1
// depthwise outputs it reads are recomputed here (k0 products each): a few hundred products per thread.
ZAYA_KERNEL(gpu::kThreads)
void conv_decode_kernel(const float* window, ConvShape s, const float* dw_weight, const float* dw_bias,
                        const float* g_weight, const float* g_bias, float* out) {
  const int64_t index = global_index();
  if (index >= s.batch * s.channels) return;
  const int64_t c = index % s.channels, b = index / s.channels, group = c / s.d * s.d;
  const float* x = window + b * (s.pad + 1) * s.channels;
  float sum = 0;
  for (int64_t i = 0; i < s.d; ++i) {
    const int64_t in = group + i;
    for (int64_t a = 0; a < s.k1; ++a) {
      float tap = dw_bias[in];
      for (int64_t j = 0; j < s.k0; ++j) tap += dw_weight[in * s.k0 + j] * x[(a + j) * s.channels + in];
      sum += g_weight[(c * s.d + i) * s.k1 + a] * tap;
    }
  }
  out[index] = g_bias[c] + sum;
}

// One thread per (b, t, c) of dx: sum_a w[c, a] d_dw[b, t + pad - a, c], taps in increasing a.
ZAYA_KERNEL(gpu::kThreads)
void depthwise_backward_kernel(const float* d_dw, ConvShape s, const float* weight, float* dx) {
  const int64_t index = global_index();
  if (index >= s.batch * s.seq * s.channels) return;
  const int64_t c = index % s.channels, row = index / s.channels, b = row / s.seq, t = row % s.seq;
  float sum = 0;
  for (int64_t a = 0; a < s.k0; ++a) {
    const int64_t j = t + s.pad - a;
    if (j >= 0 && j < s.dw_len) sum += weight[c * s.k0 + a] * d_dw[(b * s.dw_len + j) * s.channels + c];
  }
  dx[index] = sum;
}

// The depthwise weight's gradient as column sums over the rows (b, j) of d_dw: column c * k0 + a (the
// weight's own layout [channels, k0]) sums d_dw[b, j, c] x[b, j + a - pad, c] where that position exists.
struct DepthwiseWeightTerm {
  const float* d_dw;
  const float* x;
  ConvShape s;
  ZAYA_DEVICE float operator()(int64_t row, int64_t column) const {
    const int64_t c = column / s.k0, a = column % s.k0, b = row / s.dw_len, t = row % s.dw_len + a - s.pad;
    if (t < 0 || t >= s.seq) return 0.0f;
    return d_dw[row * s.channels + c] * x[(b * s.seq + t) * s.channels + c];
  }
};

// ---- the grouped convolution as products ----------------------------------------------------------------
// Each sequence of dw holds dw_len = seq + k1 - 1 rows. Over the rows of all sequences end to end, tap a of
// the grouped convolution is one product per head group: extended[r] = sum over a of dw[r + a] W_a^T, with
// W_a [channels, d] the weight's tap a. Row r = b * dw_len + t (t < seq) is out[b, t]; the rows between
// sequences are computed and dropped. Backward runs over dout spread out the same way, with zero rows in
// the gaps and k1 - 1 zero rows in front: the gradient of dw at row r reads rows r - a, which fall in the
// gaps (zero) exactly where the position is outside its sequence.

// taps[a, c, i] = weight[c, i, a]: each tap a [channels, d] matrix, rows c = g * d + o.
ZAYA_KERNEL(gpu::kThreads) void weight_taps_kernel(const float* weight, ConvShape s, float* taps) {
  const int64_t index = global_index();
  if (index >= s.k1 * s.channels * s.d) return;
  const int64_t a = index / (s.channels * s.d), c = index / s.d % s.channels, i = index % s.d;
  taps[index] = weight[(c * s.d + i) * s.k1 + a];
}

// d_weight[c, i, a] += tap_grads[a, c, i].
ZAYA_KERNEL(gpu::kThreads)
void add_tap_gradients_kernel(const float* tap_grads, ConvShape s, float* d_weight) {
  const int64_t index = global_index();
  if (index >= s.k1 * s.channels * s.d) return;
  const int64_t a = index / (s.channels * s.d), c = index / s.d % s.channels, i = index % s.d;
  d_weight[(c * s.d + i) * s.k1 + a] += tap_grads[index];
}

// out[b, t, c] = extended[b * dw_len + t, c] + bias[c].
ZAYA_KERNEL(gpu::kThreads)
void gather_sequences_kernel(const float* extended, ConvShape s, const float* bias, float* out) {
  const int64_t index = global_index();
  if (index >= s.batch * s.seq * s.channels) return;
  const int64_t c = index % s.channels, row = index / s.channels, b = row / s.seq, t = row % s.seq;
  out[index] = extended[(b * s.dw_len + t) * s.channels + c] + bias[c];
}

// spread [k1 - 1 + batch * dw_len, channels]: k1 - 1 zero rows, then each sequence's dout rows followed by
// k1 - 1 zero rows.
ZAYA_KERNEL(gpu::kThreads) void spread_sequences_kernel(const float* dout, ConvShape s, float* spread) {
  const int64_t index = global_index();
  const int64_t lead = s.k1 - 1;
  if (index >= (lead + s.batch * s.dw_len) * s.channels) return;
  const int64_t c = index % s.channels, row = index / s.channels - lead;
  const int64_t b = row / s.dw_len, t = row % s.dw_len;
  spread[index] = row >= 0 && t < s.seq ? dout[(b * s.seq + t) * s.channels + c] : 0.0f;
}

// Where the convolutions' working values live in the caller's scratch (floats from its start). The forward
// uses taps and, for its extended rows, spread.
struct ConvScratch {
  int64_t d_dw, taps, spread, tap_grads, column_partials;
  int64_t taps16, dw16, spread16;  // bf16 products' operands (bf16 values, 2 to a float)
  int64_t total;
};

ConvScratch conv_scratch(const ConvShape& s) {
  const int64_t tokens = s.batch * s.seq, dw_rows = s.batch * s.dw_len;
  const int64_t weights = s.k1 * s.channels * s.d;  // taps, tap gradients: [k1, channels, d]
  ConvScratch layout;
  layout.d_dw = 0;                                   // [batch, dw_len, channels]
  layout.taps = layout.d_dw + dw_rows * s.channels;  // [k1, channels, d]
  layout.spread = layout.taps + weights;             // [k1 - 1 + batch * dw_len, channels]
  layout.tap_grads = layout.spread + (s.k1 - 1 + dw_rows) * s.channels;  // [k1, channels, d]
  layout.column_partials = layout.tap_grads + weights;
  // Reused by the three column sums in turn: the grouped bias, the depthwise bias and the depthwise weight.
  const int64_t bias_columns = gpu::column_chunks(tokens) * s.channels,
                weight_columns = gpu::column_chunks(dw_rows) * s.channels * s.k0;
  layout.taps16 = layout.column_partials + (bias_columns > weight_columns ? bias_columns : weight_columns);
  layout.dw16 = layout.taps16 + (weights + 1) / 2;
  layout.spread16 = layout.dw16 + (dw_rows * s.channels + 1) / 2;
  layout.total = layout.spread16 + ((s.k1 - 1 + dw_rows) * s.channels + 1) / 2;
  return layout;
}

// What a grouped convolution's product reads: f32 values as they are, or (bf16) their rounding into `room`.
Operand conv_input(Ops& ops, Precision precision, const float* x, int64_t count, float* room) {
  if (precision == Precision::F32) return x;
  auto* rounded = reinterpret_cast<BFloat16*>(room);
  ops.convert_to_bf16(x, count, rounded);
  return rounded;
}

}  // namespace

void GpuOps::qk_mean_forward(const float* qk, int64_t tokens, int64_t ld, const AttentionShape& shape,
                             float* q_res, float* k_res) {
  const int64_t d = shape.head_dim;
  gpu::launch("qk_mean_forward", qk_mean_forward_kernel,
              gpu::cover(tokens * shape.kv_heads * d, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), qk, tokens, ld, shape.heads, shape.kv_heads, d, q_res, k_res);
}

void GpuOps::qk_mean_backward(const float* dq_res, const float* dk_res, int64_t tokens, int64_t ld,
                              const AttentionShape& shape, float* dqk) {
  const int64_t d = shape.head_dim;
  gpu::launch("qk_mean_backward", qk_mean_backward_kernel,
              gpu::cover(tokens * shape.kv_heads * d, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), dq_res, dk_res, tokens, ld, shape.heads, shape.kv_heads, d, dqk);
}

int64_t GpuOps::cca_conv_scratch(const AttentionShape& shape, int64_t k0, int64_t k1) {
  return conv_scratch(conv_shape(shape, k0, k1)).total;
}

void GpuOps::cca_conv_forward(Precision precision, const float* x, const AttentionShape& shape, int64_t k0,
                              int64_t k1, const float* dw_weight, const float* dw_bias, const float* g_weight,
                              const float* g_bias, float* dw, float* out, float* scratch) {
  const ConvShape s = conv_shape(shape, k0, k1);
  const gpu::Stream stream = gpu::as_stream(stream_);
  const ConvScratch layout = conv_scratch(s);
  float* taps = scratch + layout.taps;
  float* extended = scratch + layout.spread;  // [batch * dw_len, channels]
  gpu::launch("depthwise_forward", depthwise_forward_kernel,
              gpu::cover(s.batch * s.dw_len * s.channels, gpu::kThreads), {gpu::kThreads}, 0, stream, x, s,
              dw_weight, dw_bias, dw);
  gpu::launch("weight_taps", weight_taps_kernel, gpu::cover(s.k1 * s.channels * s.d, gpu::kThreads),
              {gpu::kThreads}, 0, stream, g_weight, s, taps);
  const Operand dw_in =
      conv_input(*this, precision, dw, s.batch * s.dw_len * s.channels, scratch + layout.dw16);
  const Operand taps_in =
      conv_input(*this, precision, taps, s.k1 * s.channels * s.d, scratch + layout.taps16);
  // extended[r, g block] (+)= dw[r + a, g block] taps[a, g block]^T for rows r up to the last output's.
  const int64_t rows = s.batch * s.dw_len - (s.k1 - 1);
  for (int64_t a = 0; a < s.k1; ++a) {
    blas_->gemm(dw_in.type, Trans::No, Trans::Yes, rows, s.d, s.d, 1.0f, dw_in.offset(a * s.channels).data,
                s.channels, s.d, taps_in.offset(a * s.channels * s.d).data, s.d, s.d * s.d,
                a == 0 ? 0.0f : 1.0f, extended, s.channels, s.d, s.groups, stream_);
  }
  gpu::launch("gather_sequences", gather_sequences_kernel,
              gpu::cover(s.batch * s.seq * s.channels, gpu::kThreads), {gpu::kThreads}, 0, stream, extended,
              s, g_bias, out);
}

void GpuOps::cca_conv_decode(const float* window, const AttentionShape& shape, int64_t k0, int64_t k1,
                             const float* dw_weight, const float* dw_bias, const float* g_weight,
                             const float* g_bias, float* out) {
  const ConvShape s = conv_shape(shape, k0, k1);
  gpu::launch("conv_decode", conv_decode_kernel, gpu::cover(s.batch * s.channels, gpu::kThreads),
              {gpu::kThreads}, 0, gpu::as_stream(stream_), window, s, dw_weight, dw_bias, g_weight, g_bias,
              out);
}

void GpuOps::cca_conv_backward(Precision precision, const float* x, const float* dw, const float* dout,
                               const AttentionShape& shape, int64_t k0, int64_t k1, const float* dw_weight,
                               const float* g_weight, float* dx, float* d_dw_weight, float* d_dw_bias,
                               float* d_g_weight, float* d_g_bias, float* scratch) {
  const ConvShape s = conv_shape(shape, k0, k1);
  const gpu::Stream stream = gpu::as_stream(stream_);
  const ConvScratch layout = conv_scratch(s);
  float* d_dw = scratch + layout.d_dw;
  float* taps = scratch + layout.taps;
  float* spread = scratch + layout.spread;
  float* tap_grads = scratch + layout.tap_grads;
  float* column_partials = scratch + layout.column_partials;
  const int64_t tokens = s.batch * s.seq, dw_rows = s.batch * s.dw_len, lead = s.k1 - 1;
  const int64_t weights = s.k1 * s.channels * s.d;

  // The grouped convolution: its bias, then its weight and its input over dout spread out.
  gpu::sum_columns(Dense{dout, s.channels}, tokens, s.channels, d_g_bias, column_partials, stream);
  gpu::launch("weight_taps", weight_taps_kernel, gpu::cover(weights, gpu::kThreads), {gpu::kThreads}, 0,
              stream, g_weight, s, taps);
  gpu::launch("spread_sequences", spread_sequences_kernel,
              gpu::cover((lead + dw_rows) * s.channels, gpu::kThreads), {gpu::kThreads}, 0, stream, dout, s,
              spread);
  const Operand spread_in =
      conv_input(*this, precision, spread, (lead + dw_rows) * s.channels, scratch + layout.spread16);
  const Operand dw_in = conv_input(*this, precision, dw, dw_rows * s.channels, scratch + layout.dw16);
  const Operand taps_in = conv_input(*this, precision, taps, weights, scratch + layout.taps16);
  const int64_t rows = dw_rows - lead;  // the rows that reach an output
  for (int64_t a = 0; a < s.k1; ++a) {
    // tap_grads[a, g block] = spread_rows[:rows, g block]^T dw[a : a + rows, g block], where spread row
    // lead + r is row r of the sequences end to end.
    blas_->gemm(dw_in.type, Trans::Yes, Trans::No, s.d, s.d, rows, 1.0f,
                spread_in.offset(lead * s.channels).data, s.channels, s.d, dw_in.offset(a * s.channels).data,
                s.channels, s.d, 0.0f, tap_grads + a * s.channels * s.d, s.d, s.d * s.d, s.groups, stream_);
  }
  gpu::launch("add_tap_gradients", add_tap_gradients_kernel, gpu::cover(weights, gpu::kThreads),
              {gpu::kThreads}, 0, stream, tap_grads, s, d_g_weight);
  for (int64_t a = 0; a < s.k1; ++a) {
    // d_dw[r, g block] (+)= spread_rows[r - a, g block] taps[a, g block].
    blas_->gemm(dw_in.type, Trans::No, Trans::No, dw_rows, s.d, s.d, 1.0f,
                spread_in.offset((lead - a) * s.channels).data, s.channels, s.d,
                taps_in.offset(a * s.channels * s.d).data, s.d, s.d * s.d, a == 0 ? 0.0f : 1.0f, d_dw,
                s.channels, s.d, s.groups, stream_);
  }

  // The depthwise convolution: bias and weight as column sums over the rows of d_dw, then dx.
  gpu::sum_columns(Dense{d_dw, s.channels}, dw_rows, s.channels, d_dw_bias, column_partials, stream);
  gpu::sum_columns(DepthwiseWeightTerm{d_dw, x, s}, dw_rows, s.channels * s.k0, d_dw_weight, column_partials,
                   stream);
  gpu::launch("depthwise_backward", depthwise_backward_kernel, gpu::cover(tokens * s.channels, gpu::kThreads),
              {gpu::kThreads}, 0, stream, d_dw, s, dw_weight, dx);
}

void GpuOps::l2norm_forward(const float* x, int64_t rows, int64_t heads, int64_t head_dim, const float* temp,
                            float* out, float* norms) {
  const int64_t vectors = rows * heads;
  gpu::launch("l2norm_forward", l2norm_forward_kernel, gpu::cover(vectors, kNormThreads / gpu::kWarpSize),
              {kNormThreads}, 0, gpu::as_stream(stream_), x, vectors, heads, head_dim, temp, out, norms);
}

void GpuOps::l2norm_backward(const float* x, const float* norms, const float* dout, int64_t rows,
                             int64_t heads, int64_t head_dim, const float* temp, float* dx, float* dtemp) {
  const int64_t vectors = rows * heads;
  const gpu::Stream stream = gpu::as_stream(stream_);
  // With temp: the per-vector dtemp terms [rows, heads], then the column sums' partials.
  float* terms = temp ? scratch(size_t(vectors + gpu::column_chunks(rows) * heads) * sizeof(float)) : nullptr;
  gpu::launch("l2norm_backward", l2norm_backward_kernel, gpu::cover(vectors, kNormThreads / gpu::kWarpSize),
              {kNormThreads}, 0, stream, x, norms, dout, vectors, heads, head_dim, temp, dx, terms);
  if (temp) gpu::sum_columns(Dense{terms, heads}, rows, heads, dtemp, terms + vectors, stream);
}

void GpuOps::rope(float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, int64_t rotary_dim,
                  const float* cos, const float* sin, bool inverse) {
  const int64_t half = rotary_dim / 2, pairs = batch * seq * heads * half;
  gpu::launch("rope", rope_kernel, gpu::cover(pairs, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), x, seq, heads, head_dim, half, pairs, cos, sin,
              inverse ? -1.0f : 1.0f);
}

}  // namespace zaya
