// The CCA-specific ops on the GPU: the q-k mean skip and the rotary embeddings (one thread per element),
// L2 normalisation (one warp per head vector), and the two causal convolutions over time: the depthwise one
// a thread per element, the grouped one a tiled product per (sequence, head group), its weight gradient a
// tiled product per (head group, tap, chunk of tokens). Parameter gradients are sums over tokens in a fixed
// order (kernel_util.h's column sums; the weight gradient's chunks added in order), never atomics, so a
// run repeats bit for bit.

#include <cfloat>

#include "backend/gpu/gpu_ops.h"
#include "backend/gpu/kernel_util.h"
#include "core/error.h"

namespace zaya {
namespace {

using gpu::block_dim_x;
using gpu::block_x;
using gpu::block_y;
using gpu::block_z;
using gpu::thread_x;
using gpu::thread_y;

// torch.finfo(torch.float32).eps: the floor ZayaQKNorm puts under each norm (as the CPU backend).
constexpr float kNormFloor = FLT_EPSILON;

ZAYA_DEVICE int64_t global_index() {
  return int64_t(block_x()) * block_dim_x() + thread_x();
}

// ---- q-k mean skip ----------------------------------------------------------------------------------------

// One thread per (token, kv head g, channel i): q_res of g's heads, then their mean, in the CPU's order.
// qk [tokens, ld] (q [heads, d] then k [kv_heads, d]); q_res [tokens, heads, d]; k_res [tokens, kv_heads, d].
ZAYA_KERNEL void qk_mean_forward_kernel(const float* qk, int64_t tokens, int64_t ld, int64_t heads,
                                        int64_t kv_heads, int64_t d, float* q_res, float* k_res) {
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
ZAYA_KERNEL void qk_mean_backward_kernel(const float* dq_res, const float* dk_res, int64_t tokens, int64_t ld,
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
ZAYA_KERNEL void l2norm_forward_kernel(const float* x, int64_t vectors, int64_t heads, int64_t d,
                                       const float* temp, float* out, float* norms) {
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
ZAYA_KERNEL void l2norm_backward_kernel(const float* x, const float* norms, const float* dout,
                                        int64_t vectors, int64_t heads, int64_t d, const float* temp,
                                        float* dx, float* dtemp_terms) {
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
ZAYA_KERNEL void rope_kernel(float* x, int64_t seq, int64_t heads, int64_t head_dim, int64_t half,
                             int64_t pairs, const float* cos, const float* sin, float sign) {
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
ZAYA_KERNEL void depthwise_forward_kernel(const float* x, ConvShape s, const float* weight, const float* bias,
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

// One thread per (b, t, c) of dx: sum_a w[c, a] d_dw[b, t + pad - a, c], taps in increasing a.
ZAYA_KERNEL void depthwise_backward_kernel(const float* d_dw, ConvShape s, const float* weight, float* dx) {
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

// ---- tiled products ---------------------------------------------------------------------------------------

constexpr int kTile = 16;  // kTile x kTile outputs per block of 256 threads, depth in steps of kTile

// For each problem z of the launch (grid z): C[m, n] = sum over k < depth(z) of A[m, k] B[k, n], blocks of
// kTile x kTile outputs (grid x over n, y over m) staging kTile-deep slices of A and B in shared memory.
// Each output is one thread's sum in increasing k, so the bits repeat. A Problem gives rows and cols (of C),
// depth(z), a(z, m, k), b(z, k, n) (in range only), store(z, m, n, sum), and which index of A and of B runs
// along memory (kAAlongM, kBAlongK), so that neighbouring threads load neighbouring values.
template <class Problem>
ZAYA_KERNEL void tiled_product(Problem p) {
  // [k][m] and [k][n]; the extra column keeps the transposed stores off a single bank.
  ZAYA_SHARED float tile_a[kTile][kTile + 1];
  ZAYA_SHARED float tile_b[kTile][kTile + 1];
  const int tx = thread_x(), ty = thread_y();
  const int64_t z = block_z(), m0 = int64_t(block_y()) * kTile, n0 = int64_t(block_x()) * kTile;
  const int64_t depth = p.depth(z);  // the same for the whole block: every thread meets every barrier
  float sum = 0;
  for (int64_t k0 = 0; k0 < depth; k0 += kTile) {
    {
      const int along_m = Problem::kAAlongM ? tx : ty, along_k = Problem::kAAlongM ? ty : tx;
      const int64_t m = m0 + along_m, k = k0 + along_k;
      tile_a[along_k][along_m] = m < p.rows && k < depth ? p.a(z, m, k) : 0.0f;
    }
    {
      const int along_k = Problem::kBAlongK ? tx : ty, along_n = Problem::kBAlongK ? ty : tx;
      const int64_t k = k0 + along_k, n = n0 + along_n;
      tile_b[along_k][along_n] = k < depth && n < p.cols ? p.b(z, k, n) : 0.0f;
    }
    gpu::sync_threads();
    for (int kk = 0; kk < kTile; ++kk) sum += tile_a[kk][ty] * tile_b[kk][tx];
    gpu::sync_threads();
  }
  const int64_t m = m0 + ty, n = n0 + tx;
  if (m < p.rows && n < p.cols) p.store(z, m, n, sum);
}

// A launch's grid y and z hold at most 65535 blocks (CUDA, HIP): sequences up to a million positions,
// sequences x head groups and token chunks x head groups x taps up to 65535.
constexpr int64_t kMaxGridYZ = 65535;

template <class Problem>
void run_tiled(const char* name, const Problem& p, int64_t problems, gpu::Stream stream) {
  const int64_t row_tiles = (p.rows + kTile - 1) / kTile;
  if (row_tiles > kMaxGridYZ || problems > kMaxGridYZ) {
    throw Error(cat(name, ": ", row_tiles, " x ", problems, " tiles exceed the grid's 65535 x 65535"));
  }
  gpu::launch(name, tiled_product<Problem>,
              {unsigned((p.cols + kTile - 1) / kTile), unsigned(row_tiles), unsigned(problems)},
              {kTile, kTile}, 0, stream, p);
}

// The grouped convolution, problem z = (b, g): out[b, t, g*d + o] = bias + sum over k = (i, a) of
// dw[b, t + a, g*d + i] weight[g*d + o, i, a]. k = i * k1 + a makes B a run of the weight's memory.
struct GroupedForward {
  static constexpr bool kAAlongM = false, kBAlongK = true;
  const float* dw;
  const float* weight;  // [channels, d, k1]
  const float* bias;    // [channels]
  float* out;           // [batch, seq, channels]
  ConvShape s;
  int64_t rows, cols;  // seq, d
  ZAYA_DEVICE int64_t depth(int64_t) const { return s.d * s.k1; }
  ZAYA_DEVICE float a(int64_t z, int64_t t, int64_t k) const {
    const int64_t b = z / s.groups, g = z % s.groups;
    return dw[(b * s.dw_len + t + k % s.k1) * s.channels + g * s.d + k / s.k1];
  }
  ZAYA_DEVICE float b(int64_t z, int64_t k, int64_t o) const {
    return weight[((z % s.groups) * s.d + o) * s.d * s.k1 + k];
  }
  ZAYA_DEVICE void store(int64_t z, int64_t t, int64_t o, float sum) const {
    const int64_t b = z / s.groups, c = (z % s.groups) * s.d + o;
    out[(b * s.seq + t) * s.channels + c] = bias[c] + sum;
  }
};

// The depthwise output's gradient, problem z = (b, g): d_dw[b, j, g*d + i] = sum over k = (a, o) of
// dout[b, j - a, g*d + o] weight[g*d + o, i, a], zero where j - a is outside the sequence.
struct GroupedInputGradient {
  static constexpr bool kAAlongM = false, kBAlongK = false;
  const float* dout;    // [batch, seq, channels]
  const float* weight;  // [channels, d, k1]
  float* d_dw;          // [batch, dw_len, channels]
  ConvShape s;
  int64_t rows, cols;  // dw_len, d
  ZAYA_DEVICE int64_t depth(int64_t) const { return s.k1 * s.d; }
  ZAYA_DEVICE float a(int64_t z, int64_t j, int64_t k) const {
    const int64_t b = z / s.groups, g = z % s.groups, t = j - k / s.d;
    if (t < 0 || t >= s.seq) return 0.0f;
    return dout[(b * s.seq + t) * s.channels + g * s.d + k % s.d];
  }
  ZAYA_DEVICE float b(int64_t z, int64_t k, int64_t i) const {
    return weight[(((z % s.groups) * s.d + k % s.d) * s.d + i) * s.k1 + k / s.d];
  }
  ZAYA_DEVICE void store(int64_t z, int64_t j, int64_t i, float sum) const {
    d_dw[((z / s.groups) * s.dw_len + j) * s.channels + (z % s.groups) * s.d + i] = sum;
  }
};

// Tokens per chunk of the grouped weight's gradient: each chunk's sums land in their own copy of the
// weight, added in chunk order afterwards, so long batches spread over more blocks without atomics.
constexpr int64_t kTokenChunk = 256;

int64_t token_chunks(int64_t tokens) {
  return (tokens + kTokenChunk - 1) / kTokenChunk;
}

// The grouped weight's gradient, problem z = (chunk, g, a): partial[chunk][g*d + o, i, a] = sum over the
// chunk's tokens r = (b, t) of dout[b, t, g*d + o] dw[b, t + a, g*d + i].
struct GroupedWeightGradient {
  static constexpr bool kAAlongM = true, kBAlongK = false;
  const float* dout;  // [batch, seq, channels]
  const float* dw;    // [batch, dw_len, channels]
  float* partial;     // [chunks, channels, d, k1]
  ConvShape s;
  int64_t rows, cols;  // d, d
  ZAYA_DEVICE int64_t first(int64_t z) const { return z / (s.groups * s.k1) * kTokenChunk; }
  ZAYA_DEVICE int64_t depth(int64_t z) const {
    const int64_t tokens = s.batch * s.seq, begin = first(z);
    return tokens - begin < kTokenChunk ? tokens - begin : kTokenChunk;
  }
  ZAYA_DEVICE float a(int64_t z, int64_t o, int64_t k) const {
    const int64_t g = z / s.k1 % s.groups;
    return dout[(first(z) + k) * s.channels + g * s.d + o];
  }
  ZAYA_DEVICE float b(int64_t z, int64_t k, int64_t i) const {
    const int64_t g = z / s.k1 % s.groups, tap = z % s.k1, r = first(z) + k;
    return dw[((r / s.seq) * s.dw_len + r % s.seq + tap) * s.channels + g * s.d + i];
  }
  ZAYA_DEVICE void store(int64_t z, int64_t o, int64_t i, float sum) const {
    const int64_t chunk = z / (s.groups * s.k1), g = z / s.k1 % s.groups, tap = z % s.k1;
    partial[((chunk * s.channels + g * s.d + o) * s.d + i) * s.k1 + tap] = sum;
  }
};

// acc[e] += sum over chunks, in order, of partial[chunk, e]; one thread per element of acc [count].
ZAYA_KERNEL void add_chunks_kernel(const float* partial, int64_t chunks, int64_t count, float* acc) {
  const int64_t e = global_index();
  if (e >= count) return;
  float total = 0;
  for (int64_t chunk = 0; chunk < chunks; ++chunk) total += partial[chunk * count + e];
  acc[e] += total;
}

// Where the backward's working values live in the caller's scratch (floats from its start).
struct BackwardScratch {
  int64_t d_dw, weight_partials, column_partials, total;
};

BackwardScratch backward_scratch(const ConvShape& s) {
  const int64_t tokens = s.batch * s.seq, dw_rows = s.batch * s.dw_len;
  const int64_t d_dw = dw_rows * s.channels;  // [batch, dw_len, channels]
  const int64_t weight_partials = token_chunks(tokens) * s.channels * s.d * s.k1;
  // Reused by the three column sums in turn: the grouped bias, the depthwise bias and the depthwise weight.
  const int64_t bias_columns = gpu::column_chunks(tokens) * s.channels,
                weight_columns = gpu::column_chunks(dw_rows) * s.channels * s.k0;
  const int64_t column_partials = bias_columns > weight_columns ? bias_columns : weight_columns;
  return {0, d_dw, d_dw + weight_partials, d_dw + weight_partials + column_partials};
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
  // The forward needs none; the backward's d_dw, weight partials and column partials.
  return backward_scratch(conv_shape(shape, k0, k1)).total;
}

void GpuOps::cca_conv_forward(const float* x, const AttentionShape& shape, int64_t k0, int64_t k1,
                              const float* dw_weight, const float* dw_bias, const float* g_weight,
                              const float* g_bias, float* dw, float* out, float* /*scratch: unused*/) {
  const ConvShape s = conv_shape(shape, k0, k1);
  const gpu::Stream stream = gpu::as_stream(stream_);
  gpu::launch("depthwise_forward", depthwise_forward_kernel,
              gpu::cover(s.batch * s.dw_len * s.channels, gpu::kThreads), {gpu::kThreads}, 0, stream, x, s,
              dw_weight, dw_bias, dw);
  run_tiled("grouped_forward", GroupedForward{dw, g_weight, g_bias, out, s, s.seq, s.d}, s.batch * s.groups,
            stream);
}

void GpuOps::cca_conv_backward(const float* x, const float* dw, const float* dout,
                               const AttentionShape& shape, int64_t k0, int64_t k1, const float* dw_weight,
                               const float* g_weight, float* dx, float* d_dw_weight, float* d_dw_bias,
                               float* d_g_weight, float* d_g_bias, float* scratch) {
  const ConvShape s = conv_shape(shape, k0, k1);
  const gpu::Stream stream = gpu::as_stream(stream_);
  const BackwardScratch layout = backward_scratch(s);
  float* d_dw = scratch + layout.d_dw;
  float* weight_partials = scratch + layout.weight_partials;
  float* column_partials = scratch + layout.column_partials;
  const int64_t tokens = s.batch * s.seq, dw_rows = s.batch * s.dw_len;

  // The grouped convolution: its bias, its weight (chunks of tokens, then the chunks in order), its input.
  gpu::sum_columns(Dense{dout, s.channels}, tokens, s.channels, d_g_bias, column_partials, stream);
  const int64_t chunks = token_chunks(tokens), weights = s.channels * s.d * s.k1;
  run_tiled("grouped_weight_gradient", GroupedWeightGradient{dout, dw, weight_partials, s, s.d, s.d},
            chunks * s.groups * s.k1, stream);
  gpu::launch("add_chunks", add_chunks_kernel, gpu::cover(weights, gpu::kThreads), {gpu::kThreads}, 0, stream,
              weight_partials, chunks, weights, d_g_weight);
  run_tiled("grouped_input_gradient", GroupedInputGradient{dout, g_weight, d_dw, s, s.dw_len, s.d},
            s.batch * s.groups, stream);

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
