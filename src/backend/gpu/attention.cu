// Causal (optionally windowed) GQA softmax attention with key padding, forward, backward and decode, in
// the manner of FlashAttention-2, one source for CUDA, HIP and the emulator: in f32 on plain arithmetic, in
// bf16 with its products on the matrix units (the second set of kernels below, gpu::mma).
//
// Forward: a block per (query tile, head, sequence) streams the key tiles its rows can see through shared
// memory, keeping a running max and a running sum of exp per query row, so the scores of a row never exist
// all at once; the log-sum-exp is saved for backward. Key tiles wholly above the causal diagonal or before
// the window are never visited.
// Backward: the probabilities are recomputed from the log-sum-exp. A small kernel first computes each row's
// D = rowsum(dO * O); then dQ comes from a pass over key tiles per query tile, and dK, dV from a pass over
// query tiles (of every head of the group, in order) per key tile. Each output element is summed by one
// thread in a fixed order, with no atomics, so results repeat bit for bit.
// Decode: a block per head scores the cache, reduces max and sum over the block, and sums the values.
//
// The tile kernels share one thread layout: threads form kRowGroups x kLanes (16) and thread (ty, tx) owns
// the block's rows ty + a * kRowGroups, the streamed tile's rows tx + c * kLanes (a score column each) and
// the head dimensions tx + e * kLanes. The kLanes threads of a row are consecutive in a warp (32 or 64
// lanes), so a row's max is a 4-step exchange among them.
//
// bf16 (Precision::BF16) rounds at the CPU backend's points: q, k, v and dO (once, into bf16 copies that the
// kernels stream: half the bytes of the tiles read again and again, the same bits as rounding each load); the
// forward's probabilities (here exp(s - running max), before normalising: the CPU rounds the normalised
// ones) and the backward's P and dS before the products that read them. Masks, softmax and every row
// statistic stay f32.

#include <algorithm>

#include "backend/gpu/gpu_ops.h"
#include "backend/gpu/kernel_util.h"
#include "core/error.h"

namespace zaya {
namespace {

using gpu::block_x;
using gpu::block_y;
using gpu::block_z;
using gpu::round_bf16;
using gpu::sync_threads;
using gpu::thread_x;

constexpr int kLanes = 16;  // threads sharing a row of a tile (a power of two dividing every warp size)
constexpr size_t kSharedLimit = 48 * 1024;  // static shared memory a block may use without opting in

ZAYA_DEVICE int64_t smaller(int64_t a, int64_t b) {
  return a < b ? a : b;
}
ZAYA_DEVICE int64_t larger(int64_t a, int64_t b) {
  return a > b ? a : b;
}

// The tiles of one kernel: the block's own rows (kRows), the tile it streams (kCols rows: keys for the
// forward and dQ, queries for dK/dV) and the head dimension it has room for (kDim). Shared tiles of head
// vectors have rows of kDim + 1 floats, so the kLanes threads reading one column of different rows hit
// different banks.
template <int kDim_, int kRows_, int kCols_, int kRowGroups_>
struct Tiles {
  static constexpr int kDim = kDim_, kRows = kRows_, kCols = kCols_, kRowGroups = kRowGroups_;
  static constexpr int kThreads = kRowGroups * kLanes;
  static constexpr int kRowsPerThread = kRows / kRowGroups;
  static constexpr int kColsPerThread = kCols / kLanes;
  static constexpr int kDimsPerThread = kDim / kLanes;
  static constexpr int kLd = kDim + 1;        // row stride of a [rows, kDim] tile
  static constexpr int kScoreLd = kCols + 1;  // row stride of a [kRows, kCols] tile of probabilities
  static_assert(kRows % kRowGroups == 0 && kCols % kLanes == 0 && kDim % kLanes == 0);
  // A multiple of 64 threads: whole wavefronts on HIP, whole warps everywhere.
  static_assert(kThreads % 64 == 0 && kThreads <= 1024);
};

// Tile shapes by the largest head_dim they hold, sized so each kernel's shared memory fits in 48 KiB (the
// static_asserts at the kernels): wider heads take fewer rows.
using Forward64 = Tiles<64, 64, 32, 16>;   // 256 threads, 33 KiB
using Forward128 = Tiles<128, 32, 32, 8>;  // 128 threads, 36 KiB
using Dq64 = Tiles<64, 32, 32, 8>;         // 128 threads, 29 KiB
using Dq128 = Tiles<128, 32, 16, 8>;       // 128 threads, 42 KiB
using Dkv64 = Tiles<64, 32, 32, 8>;        // 128 threads, 41 KiB
using Dkv128 = Tiles<128, 16, 16, 4>;      // 64 threads, 35 KiB
constexpr int kMaxHeadDim = 128;

// What every attention kernel reads about the call.
struct Problem {
  int64_t seq, window;  // window: keys a query sees (itself included); 0 = all before it
  int heads, kv_heads, dim;
  float scale;
  bool bf16;              // round the products' operands to bf16
  const float* key_mask;  // [batch, seq], 1 = keep; null = all

  ZAYA_DEVICE int group_of(int head) const { return head / (heads / kv_heads); }
  // The first key query i may see (before the key mask).
  ZAYA_DEVICE int64_t first_key(int64_t i) const { return window > 0 ? larger(0, i - window + 1) : 0; }
  // Whether query i of sequence b sees key j: causal, in the window, not padded, and both in the sequence.
  ZAYA_DEVICE bool visible(int64_t b, int64_t i, int64_t j) const {
    return i < seq && j <= i && j >= first_key(i) && (key_mask == nullptr || key_mask[b * seq + j] != 0.0f);
  }
  // Offset of head h's vector at position s of sequence b in a [batch, seq, count, dim] tensor.
  ZAYA_DEVICE int64_t at(int64_t b, int64_t s, int count, int h) const {
    return ((b * seq + s) * count + h) * int64_t(dim);
  }
};

ZAYA_DEVICE float operand(float value, bool bf16) {
  return bf16 ? round_bf16(value) : value;
}

// tile[r][d] = src[r * stride + d] for r < rows, d < dim, rounded to bf16 when asked; the rest of the
// [tile_rows, kDim] tile is zero, so the products below run over whole tiles with no bounds.
template <class T>
ZAYA_DEVICE void load_tile(float* tile, int tile_rows, const float* src, int64_t stride, int64_t rows,
                           int dim, bool bf16) {
  for (int index = thread_x(); index < tile_rows * T::kDim; index += T::kThreads) {
    const int r = index / T::kDim, d = index % T::kDim;
    tile[r * T::kLd + d] = r < rows && d < dim ? operand(src[r * stride + d], bf16) : 0.0f;
  }
}

// out[a][c] = sum over d of a_tile[row a][d] * b_tile[column c][d]: this thread's scores of a [kRows, kDim]
// tile against a [kCols, kDim] one.
template <class T>
ZAYA_DEVICE void tile_dots(const float* a_tile, const float* b_tile, int dim,
                           float (&out)[T::kRowsPerThread][T::kColsPerThread]) {
  const int ty = thread_x() / kLanes, tx = thread_x() % kLanes;
  for (int a = 0; a < T::kRowsPerThread; ++a)
    for (int c = 0; c < T::kColsPerThread; ++c) out[a][c] = 0.0f;
  for (int d = 0; d < dim; ++d) {
    float row[T::kRowsPerThread], column[T::kColsPerThread];
    for (int a = 0; a < T::kRowsPerThread; ++a) row[a] = a_tile[(ty + a * T::kRowGroups) * T::kLd + d];
    for (int c = 0; c < T::kColsPerThread; ++c) column[c] = b_tile[(tx + c * kLanes) * T::kLd + d];
    for (int a = 0; a < T::kRowsPerThread; ++a)
      for (int c = 0; c < T::kColsPerThread; ++c) out[a][c] += row[a] * column[c];
  }
}

// acc[a][e] += sum over c of p_tile[row a][c] * v_tile[c][dimension e]: a [kRows, kCols] tile of weights
// times a [kCols, kDim] tile of vectors, into this thread's part of the [kRows, kDim] result.
template <class T>
ZAYA_DEVICE void tile_products(const float* p_tile, const float* v_tile,
                               float (&acc)[T::kRowsPerThread][T::kDimsPerThread]) {
  const int ty = thread_x() / kLanes, tx = thread_x() % kLanes;
  for (int c = 0; c < T::kCols; ++c) {
    float weight[T::kRowsPerThread], vector[T::kDimsPerThread];
    for (int a = 0; a < T::kRowsPerThread; ++a)
      weight[a] = p_tile[(ty + a * T::kRowGroups) * T::kScoreLd + c];
    for (int e = 0; e < T::kDimsPerThread; ++e) vector[e] = v_tile[c * T::kLd + tx + e * kLanes];
    for (int a = 0; a < T::kRowsPerThread; ++a)
      for (int e = 0; e < T::kDimsPerThread; ++e) acc[a][e] += weight[a] * vector[e];
  }
}

// The max and the sum over the kLanes threads of a tile row (kLanes consecutive lanes of a warp; every
// thread of the block calls them).
ZAYA_DEVICE float row_max(float value) {
  for (int offset = kLanes / 2; offset > 0; offset /= 2)
    value = fmaxf(value, gpu::shuffle_xor(value, offset));
  return value;
}
ZAYA_DEVICE float row_sum(float value) {
  for (int offset = kLanes / 2; offset > 0; offset /= 2) value += gpu::shuffle_xor(value, offset);
  return value;
}

// ---- forward -----------------------------------------------------------------------------------------
// Grid (query tiles, heads, batch). q, o [B, S, H, D]; k, v [B, S, KV, D]; lse [B, H, S].
template <class T>
ZAYA_KERNEL(T::kThreads)
void attention_forward_kernel(Problem p, const float* q, const float* k, const float* v, float* o,
                              float* lse) {
  constexpr int R = T::kRowsPerThread, C = T::kColsPerThread, E = T::kDimsPerThread;
  static_assert(sizeof(float) * (T::kRows * T::kLd + T::kCols * T::kLd + T::kRows * T::kScoreLd) <=
                kSharedLimit);
  ZAYA_SHARED_ARRAY(q_tile, float[T::kRows * T::kLd]);       // [query, d]
  ZAYA_SHARED_ARRAY(kv_tile, float[T::kCols * T::kLd]);      // [key, d]: the tile's keys, then its values
  ZAYA_SHARED_ARRAY(p_tile, float[T::kRows * T::kScoreLd]);  // [query, key]: exp(score - running max)
  const int ty = thread_x() / kLanes, tx = thread_x() % kLanes;
  const int64_t b = block_z(), i0 = int64_t(block_x()) * T::kRows;
  const int h = block_y(), g = p.group_of(h);
  const int64_t rows = smaller(T::kRows, p.seq - i0);

  load_tile<T>(q_tile, T::kRows, q + p.at(b, i0, p.heads, h), int64_t(p.heads) * p.dim, rows, p.dim, p.bf16);
  // Per row: the max of the scores so far (the same in the row's kLanes threads), this thread's part of
  // the sum of exp(score - max), and its dimensions of the unnormalised output.
  float row_max_so_far[R], partial_sum[R], acc[R][E];
  for (int a = 0; a < R; ++a) {
    row_max_so_far[a] = -INFINITY;
    partial_sum[a] = 0.0f;
    for (int e = 0; e < E; ++e) acc[a][e] = 0.0f;
  }

  // The keys this tile's rows may see: [first_key(i0), i0 + rows), in whole key tiles.
  const int64_t kv_stride = int64_t(p.kv_heads) * p.dim, last = i0 + rows;
  for (int64_t j0 = p.first_key(i0) / T::kCols * T::kCols; j0 < last; j0 += T::kCols) {
    const int64_t keys = smaller(T::kCols, p.seq - j0);
    sync_threads();  // the previous tile's values and probabilities have been read
    load_tile<T>(kv_tile, T::kCols, k + p.at(b, j0, p.kv_heads, g), kv_stride, keys, p.dim, p.bf16);
    sync_threads();
    float s[R][C];
    tile_dots<T>(q_tile, kv_tile, p.dim, s);
    for (int a = 0; a < R; ++a) {
      const int r = ty + a * T::kRowGroups;
      float tile_max = -INFINITY;
      for (int c = 0; c < C; ++c) {
        s[a][c] = p.visible(b, i0 + r, j0 + tx + c * kLanes) ? p.scale * s[a][c] : -INFINITY;
        tile_max = fmaxf(tile_max, s[a][c]);
      }
      const float new_max = fmaxf(row_max_so_far[a], row_max(tile_max));
      // A row that has seen no visible key yet keeps max -inf and sums 0 (and exp(-inf - -inf) is NaN).
      const float rescale = new_max == -INFINITY ? 1.0f : expf(row_max_so_far[a] - new_max);
      float sum = 0.0f;
      for (int c = 0; c < C; ++c) {
        const float e = s[a][c] == -INFINITY ? 0.0f : expf(s[a][c] - new_max);
        sum += e;  // the normaliser sums the unrounded values, as the CPU's does
        p_tile[r * T::kScoreLd + tx + c * kLanes] = operand(e, p.bf16);
      }
      partial_sum[a] = partial_sum[a] * rescale + sum;
      for (int e = 0; e < E; ++e) acc[a][e] *= rescale;
      row_max_so_far[a] = new_max;
    }
    sync_threads();  // every thread is done with the keys: the values take their place
    load_tile<T>(kv_tile, T::kCols, v + p.at(b, j0, p.kv_heads, g), kv_stride, keys, p.dim, p.bf16);
    sync_threads();
    tile_products<T>(p_tile, kv_tile, acc);
  }

  for (int a = 0; a < R; ++a) {
    const float sum = row_sum(partial_sum[a]);
    const int64_t i = i0 + ty + a * T::kRowGroups;
    if (i >= p.seq) continue;
    // A row that sees no key at all: lse -inf and output 0.
    const bool empty = row_max_so_far[a] == -INFINITY;
    if (tx == 0) lse[(b * p.heads + h) * p.seq + i] = empty ? -INFINITY : row_max_so_far[a] + logf(sum);
    const float inv = empty ? 0.0f : 1.0f / sum;
    float* out = o + p.at(b, i, p.heads, h);
    for (int e = 0; e < E; ++e) {
      const int d = tx + e * kLanes;
      if (d < p.dim) out[d] = acc[a][e] * inv;
    }
  }
}

// ---- backward ----------------------------------------------------------------------------------------
constexpr unsigned kRowDotThreads = 256;

// row_dot [B, H, S] = sum over d of dout * o, a row per kLanes threads (o and dout [B, S, H, D]).
ZAYA_KERNEL(kRowDotThreads)
void attention_row_dot_kernel(Problem p, int64_t count, const float* o, const float* dout, float* row_dot) {
  const int64_t row = int64_t(block_x()) * (kRowDotThreads / kLanes) + thread_x() / kLanes;
  const int lane = thread_x() % kLanes;
  float dot = 0.0f;
  if (row < count) {
    for (int d = lane; d < p.dim; d += kLanes) dot += dout[row * p.dim + d] * o[row * p.dim + d];
  }
  dot = row_sum(dot);  // every thread takes part, past the last row too
  if (lane != 0 || row >= count) return;
  const int64_t h = row % p.heads, position = row / p.heads, s = position % p.seq, b = position / p.seq;
  row_dot[(b * p.heads + h) * p.seq + s] = dot;
}

// dQ = scale * sum over keys of dS K, with dS = P * (dO V^T - D). Grid (query tiles, heads, batch).
template <class T>
ZAYA_KERNEL(T::kThreads)
void attention_dq_kernel(Problem p, const float* q, const float* k, const float* v, const float* lse,
                         const float* row_dot, const float* dout, float* dq) {
  constexpr int R = T::kRowsPerThread, C = T::kColsPerThread, E = T::kDimsPerThread;
  static_assert(sizeof(float) * (2 * T::kRows * T::kLd + T::kCols * T::kLd + T::kRows * T::kScoreLd) <=
                kSharedLimit);
  ZAYA_SHARED_ARRAY(q_tile, float[T::kRows * T::kLd]);        // [query, d]
  ZAYA_SHARED_ARRAY(do_tile, float[T::kRows * T::kLd]);       // [query, d]
  ZAYA_SHARED_ARRAY(kv_tile, float[T::kCols * T::kLd]);       // [key, d]: the tile's values, then its keys
  ZAYA_SHARED_ARRAY(ds_tile, float[T::kRows * T::kScoreLd]);  // [query, key]
  const int ty = thread_x() / kLanes, tx = thread_x() % kLanes;
  const int64_t b = block_z(), i0 = int64_t(block_x()) * T::kRows;
  const int h = block_y(), g = p.group_of(h);
  const int64_t rows = smaller(T::kRows, p.seq - i0), q_stride = int64_t(p.heads) * p.dim;

  load_tile<T>(q_tile, T::kRows, q + p.at(b, i0, p.heads, h), q_stride, rows, p.dim, p.bf16);
  load_tile<T>(do_tile, T::kRows, dout + p.at(b, i0, p.heads, h), q_stride, rows, p.dim, p.bf16);
  float row_lse[R], delta[R], acc[R][E];
  for (int a = 0; a < R; ++a) {
    const int64_t i = i0 + ty + a * T::kRowGroups;
    row_lse[a] = i < p.seq ? lse[(b * p.heads + h) * p.seq + i] : -INFINITY;
    delta[a] = i < p.seq ? row_dot[(b * p.heads + h) * p.seq + i] : 0.0f;
    for (int e = 0; e < E; ++e) acc[a][e] = 0.0f;
  }

  const int64_t kv_stride = int64_t(p.kv_heads) * p.dim, last = i0 + rows;
  for (int64_t j0 = p.first_key(i0) / T::kCols * T::kCols; j0 < last; j0 += T::kCols) {
    const int64_t keys = smaller(T::kCols, p.seq - j0);
    sync_threads();  // the previous tile's keys and dS have been read
    load_tile<T>(kv_tile, T::kCols, v + p.at(b, j0, p.kv_heads, g), kv_stride, keys, p.dim, p.bf16);
    sync_threads();
    float dp[R][C], s[R][C];
    tile_dots<T>(do_tile, kv_tile, p.dim, dp);
    sync_threads();
    load_tile<T>(kv_tile, T::kCols, k + p.at(b, j0, p.kv_heads, g), kv_stride, keys, p.dim, p.bf16);
    sync_threads();
    tile_dots<T>(q_tile, kv_tile, p.dim, s);
    for (int a = 0; a < R; ++a) {
      const int r = ty + a * T::kRowGroups;
      for (int c = 0; c < C; ++c) {
        // P = exp(score - lse), 0 where masked and in a row that sees no key (lse -inf).
        const bool seen = row_lse[a] != -INFINITY && p.visible(b, i0 + r, j0 + tx + c * kLanes);
        const float prob = seen ? expf(p.scale * s[a][c] - row_lse[a]) : 0.0f;
        ds_tile[r * T::kScoreLd + tx + c * kLanes] = operand(prob * (dp[a][c] - delta[a]), p.bf16);
      }
    }
    sync_threads();
    tile_products<T>(ds_tile, kv_tile, acc);
  }

  for (int a = 0; a < R; ++a) {
    const int64_t i = i0 + ty + a * T::kRowGroups;
    if (i >= p.seq) continue;
    float* out = dq + p.at(b, i, p.heads, h);
    for (int e = 0; e < E; ++e) {
      const int d = tx + e * kLanes;
      if (d < p.dim) out[d] = p.scale * acc[a][e];
    }
  }
}

// dV = sum over queries of P^T dO and dK = scale * sum of dS^T Q, over the queries of every head of the
// group (heads in order, then query tiles in order: a fixed order, and the CPU's). Grid (key tiles, KV
// heads, batch); the block's rows are keys, its streamed tiles queries.
template <class T>
ZAYA_KERNEL(T::kThreads)
void attention_dkv_kernel(Problem p, const float* q, const float* k, const float* v, const float* lse,
                          const float* row_dot, const float* dout, float* dk, float* dv) {
  constexpr int R = T::kRowsPerThread, C = T::kColsPerThread, E = T::kDimsPerThread;
  static_assert(sizeof(float) * (2 * T::kRows * T::kLd + 2 * T::kCols * T::kLd + 2 * T::kRows * T::kScoreLd +
                                 2 * T::kCols) <=
                kSharedLimit);
  ZAYA_SHARED_ARRAY(k_tile, float[T::kRows * T::kLd]);        // [key, d]
  ZAYA_SHARED_ARRAY(v_tile, float[T::kRows * T::kLd]);        // [key, d]
  ZAYA_SHARED_ARRAY(q_tile, float[T::kCols * T::kLd]);        // [query, d]
  ZAYA_SHARED_ARRAY(do_tile, float[T::kCols * T::kLd]);       // [query, d]
  ZAYA_SHARED_ARRAY(p_tile, float[T::kRows * T::kScoreLd]);   // [key, query]: P^T
  ZAYA_SHARED_ARRAY(ds_tile, float[T::kRows * T::kScoreLd]);  // [key, query]: dS^T
  ZAYA_SHARED_ARRAY(query_lse, float[T::kCols]);
  ZAYA_SHARED_ARRAY(query_delta, float[T::kCols]);
  const int ty = thread_x() / kLanes, tx = thread_x() % kLanes;
  const int64_t b = block_z(), j0 = int64_t(block_x()) * T::kRows;
  const int g = block_y(), groups = p.heads / p.kv_heads;
  const int64_t keys = smaller(T::kRows, p.seq - j0), q_stride = int64_t(p.heads) * p.dim;
  const int64_t kv_stride = int64_t(p.kv_heads) * p.dim;

  load_tile<T>(k_tile, T::kRows, k + p.at(b, j0, p.kv_heads, g), kv_stride, keys, p.dim, p.bf16);
  load_tile<T>(v_tile, T::kRows, v + p.at(b, j0, p.kv_heads, g), kv_stride, keys, p.dim, p.bf16);
  float dk_acc[R][E], dv_acc[R][E];
  for (int a = 0; a < R; ++a)
    for (int e = 0; e < E; ++e) dk_acc[a][e] = dv_acc[a][e] = 0.0f;

  // The queries that see a key of this tile: from its first key to the last one the window reaches.
  const int64_t end = p.window > 0 ? smaller(p.seq, j0 + keys - 1 + p.window) : p.seq;
  for (int h = g * groups; h < (g + 1) * groups; ++h) {
    const float* head_lse = lse + (b * p.heads + h) * p.seq;
    const float* head_dot = row_dot + (b * p.heads + h) * p.seq;
    for (int64_t i0 = j0 / T::kCols * T::kCols; i0 < end; i0 += T::kCols) {
      const int64_t queries = smaller(T::kCols, p.seq - i0);
      sync_threads();  // the previous tile's queries, output gradients and P, dS have been read
      load_tile<T>(q_tile, T::kCols, q + p.at(b, i0, p.heads, h), q_stride, queries, p.dim, p.bf16);
      load_tile<T>(do_tile, T::kCols, dout + p.at(b, i0, p.heads, h), q_stride, queries, p.dim, p.bf16);
      for (int c = thread_x(); c < T::kCols; c += T::kThreads) {
        query_lse[c] = c < queries ? head_lse[i0 + c] : -INFINITY;
        query_delta[c] = c < queries ? head_dot[i0 + c] : 0.0f;
      }
      sync_threads();
      float s[R][C], dp[R][C];
      tile_dots<T>(k_tile, q_tile, p.dim, s);
      tile_dots<T>(v_tile, do_tile, p.dim, dp);
      for (int a = 0; a < R; ++a) {
        const int r = ty + a * T::kRowGroups;
        for (int c = 0; c < C; ++c) {
          const int column = tx + c * kLanes;
          const float row_lse = query_lse[column];
          const bool seen = row_lse != -INFINITY && p.visible(b, i0 + column, j0 + r);
          const float prob = seen ? expf(p.scale * s[a][c] - row_lse) : 0.0f;
          p_tile[r * T::kScoreLd + column] = operand(prob, p.bf16);
          ds_tile[r * T::kScoreLd + column] = operand(prob * (dp[a][c] - query_delta[column]), p.bf16);
        }
      }
      sync_threads();
      tile_products<T>(p_tile, do_tile, dv_acc);
      tile_products<T>(ds_tile, q_tile, dk_acc);
    }
  }

  for (int a = 0; a < R; ++a) {
    const int64_t j = j0 + ty + a * T::kRowGroups;
    if (j >= p.seq) continue;
    float* dk_row = dk + p.at(b, j, p.kv_heads, g);
    float* dv_row = dv + p.at(b, j, p.kv_heads, g);
    for (int e = 0; e < E; ++e) {
      const int d = tx + e * kLanes;
      if (d >= p.dim) continue;
      dk_row[d] = p.scale * dk_acc[a][e];
      dv_row[d] = dv_acc[a][e];
    }
  }
}

// ---- bf16 on the matrix units -------------------------------------------------------------------------
// The same three kernels for Precision::BF16, with every product on the matrix units (gpu::mma): bf16
// operands, f32 sums, the same rounding points, tiles skipped and sums ordered as above. Operands are staged
// in shared memory as bf16 with the summed dimension contiguous (gpu::load_mma_a/b read them so), which
// for P V, dS K, P^T dO and dS^T Q means a transposed copy of V, K, dO and Q. A warp owns kRowTiles 16-row
// tiles of the block's rows; a row's statistics (max, sum) are exchanged over the kMmaRowLanes lanes that
// hold it.
template <int kDim_, int kRows_, int kCols_>
struct MatrixTiles {
  static constexpr int kDim = kDim_, kRows = kRows_, kCols = kCols_;
  static constexpr int kThreads =
      2 * kRows;  // 16 rows per 32 lanes: one row tile per warp, two per wavefront
  static constexpr int kRowTiles = kRows / gpu::kMmaTile / (kThreads / gpu::kWarpSize);
  static constexpr int kColTiles = kCols / gpu::kMmaTile, kDimTiles = kDim / gpu::kMmaTile;
  static constexpr int kDimPitch = kDim + 8, kColPitch = kCols + 8;  // multiples of 4, off the banks' period
  static_assert(kRows % gpu::kMmaTile == 0 && kCols % gpu::kMmaTile == 0 && kDim % gpu::kMmaTile == 0);
  static_assert(kRowTiles >= 1 && kThreads % 64 == 0);
};

// dK dV's tiles, whose shared memory is dynamic (past 48 KiB at head_dim 128: opted in).
template <int kDim_, int kRows_, int kCols_>
struct DkvTiles : MatrixTiles<kDim_, kRows_, kCols_> {
  using T = MatrixTiles<kDim_, kRows_, kCols_>;
  static constexpr size_t kSharedBytes =
      sizeof(uint16_t) * (2 * T::kRows * T::kDimPitch + 2 * T::kCols * T::kDimPitch +
                          2 * T::kDim * T::kColPitch + 2 * T::kRows * T::kColPitch) +
      2 * sizeof(float) * T::kCols;
};

// Shapes by the widest head_dim they hold, each kernel's shared memory within 48 KiB (asserted there), but
// dK dV's at head_dim 128, whose key tile sets how often q and dO are read again (once per 64 keys here,
// not 32): 61 KiB, opted in, within MI300X's 64 KiB.
using MatrixForward64 = MatrixTiles<64, 64, 64>;    // 128 threads, 36 KiB
using MatrixForward128 = MatrixTiles<128, 64, 32>;  // 128 threads, 41 KiB
using MatrixDq64 = MatrixTiles<64, 64, 32>;         // 128 threads, 37 KiB
using MatrixDq128 = MatrixTiles<128, 32, 32>;       // 64 threads, 47 KiB
using MatrixDkv64 = DkvTiles<64, 64, 32>;           // 128 threads, 47 KiB
using MatrixDkv128 = DkvTiles<128, 64, 16>;         // 128 threads, 61 KiB

using Sums = gpu::MmaAccumulator;

// tile[r * pitch + c] = src[r * stride + c] for r < rows, c < cols, and 0 over the rest of the
// [tile_rows, tile_cols] tile; transposed: tile[c * pitch + r]. src: bf16 bits, rounded once before the
// kernel (GpuOps::bf16_copies), so that the tiles streamed again and again read half the bytes of f32.
template <bool kTransposed, int kThreads>
ZAYA_DEVICE void stage_bf16(uint16_t* tile, int pitch, int tile_rows, int tile_cols, const uint16_t* src,
                            int64_t stride, int64_t rows, int cols) {
  for (int index = thread_x(); index < tile_rows * tile_cols; index += kThreads) {
    const int r = index / tile_cols, c = index % tile_cols;
    const uint16_t value = r < rows && c < cols ? src[r * stride + c] : uint16_t(0);
    tile[kTransposed ? c * pitch + r : r * pitch + c] = value;
  }
}

// sums[t][u] += A[row0 + 16 t.., 0..depth) B[16 u.., 0..depth)^T: this warp's row tiles of A against every
// column tile of B, both bf16 tiles with the summed dimension contiguous.
template <int kRowTiles, int kColTiles>
ZAYA_DEVICE void warp_product(Sums (&sums)[kRowTiles][kColTiles], const uint16_t* a, int lda, int row0,
                              const uint16_t* b, int ldb, int depth) {
  for (int k0 = 0; k0 < depth; k0 += gpu::kMmaTile) {
    gpu::MmaFragment fa[kRowTiles];
    for (int t = 0; t < kRowTiles; ++t)
      fa[t] = gpu::load_mma_a(a + (row0 + t * gpu::kMmaTile) * lda + k0, lda);
    for (int u = 0; u < kColTiles; ++u) {
      const gpu::MmaFragment fb = gpu::load_mma_b(b + u * gpu::kMmaTile * ldb + k0, ldb);
      for (int t = 0; t < kRowTiles; ++t) gpu::mma(sums[t][u], fa[t], fb);
    }
  }
}

// The max and the sum of a row over the lanes that hold it.
ZAYA_DEVICE float mma_row_max(float value) {
  for (int mask = 1; mask < gpu::kMmaRowLanes; mask *= 2) value = fmaxf(value, gpu::shuffle_xor(value, mask));
  return value;
}
ZAYA_DEVICE float mma_row_sum(float value) {
  for (int mask = 1; mask < gpu::kMmaRowLanes; mask *= 2) value += gpu::shuffle_xor(value, mask);
  return value;
}

// Where this lane's element i of the tile sums[t][u] lies in the block's rows and the streamed tile.
ZAYA_DEVICE gpu::TilePlace tile_place(int row0, int t, int u, int i) {
  const gpu::TilePlace p = gpu::mma_acc_place(gpu::lane(), i);
  return {row0 + t * gpu::kMmaTile + p.row, u * gpu::kMmaTile + p.col};
}

// Grid (query tiles, heads, batch), as attention_forward_kernel.
template <class T>
ZAYA_KERNEL(T::kThreads)
void attention_forward_matrix_kernel(Problem p, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                     float* o, float* lse) {
  constexpr int RT = T::kRowTiles, CT = T::kColTiles, DT = T::kDimTiles, LR = gpu::kMmaLaneRows;
  static_assert(sizeof(uint16_t) * (T::kRows * T::kDimPitch + T::kCols * T::kDimPitch +
                                    T::kDim * T::kColPitch + T::kRows * T::kColPitch) <=
                kSharedLimit);
  ZAYA_SHARED_ARRAY(q_tile, uint16_t[T::kRows * T::kDimPitch]);  // [query, d]
  ZAYA_SHARED_ARRAY(k_tile, uint16_t[T::kCols * T::kDimPitch]);  // [key, d]
  ZAYA_SHARED_ARRAY(vt_tile, uint16_t[T::kDim * T::kColPitch]);  // [d, key]
  ZAYA_SHARED_ARRAY(p_tile, uint16_t[T::kRows * T::kColPitch]);  // [query, key]: exp(score - running max)
  const int64_t b = block_z(), i0 = int64_t(block_x()) * T::kRows;
  const int h = block_y(), g = p.group_of(h), row0 = gpu::warp() * RT * gpu::kMmaTile;
  const int64_t rows = smaller(T::kRows, p.seq - i0), kv_stride = int64_t(p.kv_heads) * p.dim;
  stage_bf16<false, T::kThreads>(q_tile, T::kDimPitch, T::kRows, T::kDim, q + p.at(b, i0, p.heads, h),
                                 int64_t(p.heads) * p.dim, rows, p.dim);
  // Per row slot: the max so far, this lane's part of the sum of exp(score - max); the unnormalised output.
  float row_max_so_far[RT][LR], partial_sum[RT][LR];
  Sums acc[RT][DT] = {};
  for (int t = 0; t < RT; ++t) {
    for (int r = 0; r < LR; ++r) row_max_so_far[t][r] = -INFINITY, partial_sum[t][r] = 0.0f;
  }

  const int64_t last = i0 + rows;
  for (int64_t j0 = p.first_key(i0) / T::kCols * T::kCols; j0 < last; j0 += T::kCols) {
    const int64_t keys = smaller(T::kCols, p.seq - j0);
    const uint16_t* k_src = k + p.at(b, j0, p.kv_heads, g);
    const uint16_t* v_src = v + p.at(b, j0, p.kv_heads, g);
    sync_threads();  // the previous tile's keys, values and probabilities have been read
    stage_bf16<false, T::kThreads>(k_tile, T::kDimPitch, T::kCols, T::kDim, k_src, kv_stride, keys, p.dim);
    stage_bf16<true, T::kThreads>(vt_tile, T::kColPitch, T::kCols, T::kDim, v_src, kv_stride, keys, p.dim);
    sync_threads();
    Sums s[RT][CT] = {};
    warp_product(s, q_tile, T::kDimPitch, row0, k_tile, T::kDimPitch, T::kDim);
    float tile_max[RT][LR];
    for (int t = 0; t < RT; ++t) {
      for (int r = 0; r < LR; ++r) tile_max[t][r] = -INFINITY;
      for (int u = 0; u < CT; ++u) {
        for (int i = 0; i < gpu::kMmaResults; ++i) {
          const gpu::TilePlace at = tile_place(row0, t, u, i);
          float& score = s[t][u].values[i];
          score = p.visible(b, i0 + at.row, j0 + at.col) ? p.scale * score : -INFINITY;
          tile_max[t][gpu::mma_acc_slot(i)] = fmaxf(tile_max[t][gpu::mma_acc_slot(i)], score);
        }
      }
    }
    float rescale[RT][LR];
    for (int t = 0; t < RT; ++t) {
      for (int r = 0; r < LR; ++r) {
        const float new_max = fmaxf(row_max_so_far[t][r], mma_row_max(tile_max[t][r]));
        // A row that has seen no visible key yet keeps max -inf and sums 0 (exp(-inf - -inf) is NaN).
        rescale[t][r] = new_max == -INFINITY ? 1.0f : expf(row_max_so_far[t][r] - new_max);
        partial_sum[t][r] *= rescale[t][r];
        row_max_so_far[t][r] = new_max;
      }
      for (int u = 0; u < CT; ++u) {
        for (int i = 0; i < gpu::kMmaResults; ++i) {
          const int r = gpu::mma_acc_slot(i);
          const float score = s[t][u].values[i];
          const float e = score == -INFINITY ? 0.0f : expf(score - row_max_so_far[t][r]);
          partial_sum[t][r] += e;  // the normaliser sums the unrounded values, as the CPU's does
          const gpu::TilePlace at = tile_place(row0, t, u, i);
          p_tile[at.row * T::kColPitch + at.col] = gpu::bf16_bits(e);
        }
      }
      for (int d = 0; d < DT; ++d) {
        for (int i = 0; i < gpu::kMmaResults; ++i) acc[t][d].values[i] *= rescale[t][gpu::mma_acc_slot(i)];
      }
    }
    sync_threads();  // the lanes of a warp read each other's probabilities
    warp_product(acc, p_tile, T::kColPitch, row0, vt_tile, T::kColPitch, T::kCols);
  }

  for (int t = 0; t < RT; ++t) {
    float inv[LR];
    for (int r = 0; r < LR; ++r) {
      const float sum = mma_row_sum(partial_sum[t][r]);
      const int64_t i = i0 + row0 + t * gpu::kMmaTile + gpu::mma_slot_row(gpu::lane(), r);
      // A row that sees no key at all: lse -inf and output 0.
      const bool empty = row_max_so_far[t][r] == -INFINITY;
      inv[r] = empty ? 0.0f : 1.0f / sum;
      if (i < p.seq && gpu::lane() % gpu::kMmaRowLanes == 0)
        lse[(b * p.heads + h) * p.seq + i] = empty ? -INFINITY : row_max_so_far[t][r] + logf(sum);
    }
    for (int d = 0; d < DT; ++d) {
      for (int i = 0; i < gpu::kMmaResults; ++i) {
        const gpu::TilePlace at = tile_place(row0, t, d, i);
        if (i0 + at.row < p.seq && at.col < p.dim)
          o[p.at(b, i0 + at.row, p.heads, h) + at.col] = acc[t][d].values[i] * inv[gpu::mma_acc_slot(i)];
      }
    }
  }
}

// dQ as attention_dq_kernel. Grid (query tiles, heads, batch).
template <class T>
ZAYA_KERNEL(T::kThreads)
void attention_dq_matrix_kernel(Problem p, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                const float* lse, const float* row_dot, const uint16_t* dout, float* dq) {
  constexpr int RT = T::kRowTiles, CT = T::kColTiles, DT = T::kDimTiles, LR = gpu::kMmaLaneRows;
  static_assert(sizeof(uint16_t) * (2 * T::kRows * T::kDimPitch + 2 * T::kCols * T::kDimPitch +
                                    T::kDim * T::kColPitch + T::kRows * T::kColPitch) <=
                kSharedLimit);
  ZAYA_SHARED_ARRAY(q_tile, uint16_t[T::kRows * T::kDimPitch]);   // [query, d]
  ZAYA_SHARED_ARRAY(do_tile, uint16_t[T::kRows * T::kDimPitch]);  // [query, d]
  ZAYA_SHARED_ARRAY(k_tile, uint16_t[T::kCols * T::kDimPitch]);   // [key, d]
  ZAYA_SHARED_ARRAY(v_tile, uint16_t[T::kCols * T::kDimPitch]);   // [key, d]
  ZAYA_SHARED_ARRAY(kt_tile, uint16_t[T::kDim * T::kColPitch]);   // [d, key]
  ZAYA_SHARED_ARRAY(ds_tile, uint16_t[T::kRows * T::kColPitch]);  // [query, key]
  const int64_t b = block_z(), i0 = int64_t(block_x()) * T::kRows;
  const int h = block_y(), g = p.group_of(h), row0 = gpu::warp() * RT * gpu::kMmaTile;
  const int64_t rows = smaller(T::kRows, p.seq - i0), q_stride = int64_t(p.heads) * p.dim;
  const int64_t kv_stride = int64_t(p.kv_heads) * p.dim;
  stage_bf16<false, T::kThreads>(q_tile, T::kDimPitch, T::kRows, T::kDim, q + p.at(b, i0, p.heads, h),
                                 q_stride, rows, p.dim);
  stage_bf16<false, T::kThreads>(do_tile, T::kDimPitch, T::kRows, T::kDim, dout + p.at(b, i0, p.heads, h),
                                 q_stride, rows, p.dim);
  float row_lse[RT][LR], delta[RT][LR];
  for (int t = 0; t < RT; ++t) {
    for (int r = 0; r < LR; ++r) {
      const int64_t i = i0 + row0 + t * gpu::kMmaTile + gpu::mma_slot_row(gpu::lane(), r);
      row_lse[t][r] = i < p.seq ? lse[(b * p.heads + h) * p.seq + i] : -INFINITY;
      delta[t][r] = i < p.seq ? row_dot[(b * p.heads + h) * p.seq + i] : 0.0f;
    }
  }
  Sums acc[RT][DT] = {};

  const int64_t last = i0 + rows;
  for (int64_t j0 = p.first_key(i0) / T::kCols * T::kCols; j0 < last; j0 += T::kCols) {
    const int64_t keys = smaller(T::kCols, p.seq - j0);
    const uint16_t* k_src = k + p.at(b, j0, p.kv_heads, g);
    sync_threads();  // the previous tile's keys, values and dS have been read
    stage_bf16<false, T::kThreads>(k_tile, T::kDimPitch, T::kCols, T::kDim, k_src, kv_stride, keys, p.dim);
    stage_bf16<false, T::kThreads>(v_tile, T::kDimPitch, T::kCols, T::kDim, v + p.at(b, j0, p.kv_heads, g),
                                   kv_stride, keys, p.dim);
    stage_bf16<true, T::kThreads>(kt_tile, T::kColPitch, T::kCols, T::kDim, k_src, kv_stride, keys, p.dim);
    sync_threads();
    Sums s[RT][CT] = {}, dp[RT][CT] = {};
    warp_product(s, q_tile, T::kDimPitch, row0, k_tile, T::kDimPitch, T::kDim);
    warp_product(dp, do_tile, T::kDimPitch, row0, v_tile, T::kDimPitch, T::kDim);
    ZAYA_UNROLL for (int t = 0; t < RT; ++t) {
      ZAYA_UNROLL for (int u = 0; u < CT; ++u) {
        ZAYA_UNROLL for (int i = 0; i < gpu::kMmaResults; ++i) {
          const gpu::TilePlace at = tile_place(row0, t, u, i);
          const int r = gpu::mma_acc_slot(i);
          // P = exp(score - lse), 0 where masked and in a row that sees no key (lse -inf).
          const bool seen = row_lse[t][r] != -INFINITY && p.visible(b, i0 + at.row, j0 + at.col);
          const float prob = seen ? expf(p.scale * s[t][u].values[i] - row_lse[t][r]) : 0.0f;
          ds_tile[at.row * T::kColPitch + at.col] = gpu::bf16_bits(prob * (dp[t][u].values[i] - delta[t][r]));
        }
      }
    }
    sync_threads();
    warp_product(acc, ds_tile, T::kColPitch, row0, kt_tile, T::kColPitch, T::kCols);
  }

  for (int t = 0; t < RT; ++t) {
    for (int d = 0; d < DT; ++d) {
      for (int i = 0; i < gpu::kMmaResults; ++i) {
        const gpu::TilePlace at = tile_place(row0, t, d, i);
        if (i0 + at.row < p.seq && at.col < p.dim)
          dq[p.at(b, i0 + at.row, p.heads, h) + at.col] = p.scale * acc[t][d].values[i];
      }
    }
  }
}

// dK and dV as attention_dkv_kernel: the block's rows are keys, its streamed tiles queries of every head of
// the group in order. Grid (key tiles, KV heads, batch).
template <class T>
ZAYA_KERNEL(T::kThreads)
void attention_dkv_matrix_kernel(Problem p, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                 const float* lse, const float* row_dot, const uint16_t* dout, float* dk,
                                 float* dv) {
  constexpr int RT = T::kRowTiles, CT = T::kColTiles, DT = T::kDimTiles;
  static_assert(T::kSharedBytes <= gpu::kOptInSharedBytes);
  // Each part a multiple of 8 bytes (the pitches are multiples of 4 elements): the matrix units' loads
  // read 8-byte aligned rows.
  uint16_t* k_tile = gpu::dynamic_shared<uint16_t>();                               // [key, d]
  uint16_t* v_tile = k_tile + T::kRows * T::kDimPitch;                              // [key, d]
  uint16_t* q_tile = v_tile + T::kRows * T::kDimPitch;                              // [query, d]
  uint16_t* do_tile = q_tile + T::kCols * T::kDimPitch;                             // [query, d]
  uint16_t* qt_tile = do_tile + T::kCols * T::kDimPitch;                            // [d, query]
  uint16_t* dot_tile = qt_tile + T::kDim * T::kColPitch;                            // [d, query]
  uint16_t* pt_tile = dot_tile + T::kDim * T::kColPitch;                            // [key, query]: P^T
  uint16_t* dst_tile = pt_tile + T::kRows * T::kColPitch;                           // [key, query]: dS^T
  float* query_lse = reinterpret_cast<float*>(dst_tile + T::kRows * T::kColPitch);  // [query]
  float* query_delta = query_lse + T::kCols;                                        // [query]
  const int64_t b = block_z(), j0 = int64_t(block_x()) * T::kRows;
  const int g = block_y(), groups = p.heads / p.kv_heads, row0 = gpu::warp() * RT * gpu::kMmaTile;
  const int64_t keys = smaller(T::kRows, p.seq - j0), q_stride = int64_t(p.heads) * p.dim;
  const int64_t kv_stride = int64_t(p.kv_heads) * p.dim;
  stage_bf16<false, T::kThreads>(k_tile, T::kDimPitch, T::kRows, T::kDim, k + p.at(b, j0, p.kv_heads, g),
                                 kv_stride, keys, p.dim);
  stage_bf16<false, T::kThreads>(v_tile, T::kDimPitch, T::kRows, T::kDim, v + p.at(b, j0, p.kv_heads, g),
                                 kv_stride, keys, p.dim);
  Sums dk_acc[RT][DT] = {}, dv_acc[RT][DT] = {};

  // The queries that see a key of this tile: from its first key to the last one the window reaches.
  const int64_t end = p.window > 0 ? smaller(p.seq, j0 + keys - 1 + p.window) : p.seq;
  for (int h = g * groups; h < (g + 1) * groups; ++h) {
    const float* head_lse = lse + (b * p.heads + h) * p.seq;
    const float* head_dot = row_dot + (b * p.heads + h) * p.seq;
    for (int64_t i0 = j0 / T::kCols * T::kCols; i0 < end; i0 += T::kCols) {
      const int64_t queries = smaller(T::kCols, p.seq - i0);
      const uint16_t* q_src = q + p.at(b, i0, p.heads, h);
      const uint16_t* do_src = dout + p.at(b, i0, p.heads, h);
      sync_threads();  // the previous tile's queries, output gradients and P, dS have been read
      stage_bf16<false, T::kThreads>(q_tile, T::kDimPitch, T::kCols, T::kDim, q_src, q_stride, queries,
                                     p.dim);
      stage_bf16<false, T::kThreads>(do_tile, T::kDimPitch, T::kCols, T::kDim, do_src, q_stride, queries,
                                     p.dim);
      stage_bf16<true, T::kThreads>(qt_tile, T::kColPitch, T::kCols, T::kDim, q_src, q_stride, queries,
                                    p.dim);
      stage_bf16<true, T::kThreads>(dot_tile, T::kColPitch, T::kCols, T::kDim, do_src, q_stride, queries,
                                    p.dim);
      for (int c = thread_x(); c < T::kCols; c += T::kThreads) {
        query_lse[c] = c < queries ? head_lse[i0 + c] : -INFINITY;
        query_delta[c] = c < queries ? head_dot[i0 + c] : 0.0f;
      }
      sync_threads();
      Sums st[RT][CT] = {}, dpt[RT][CT] = {};
      warp_product(st, k_tile, T::kDimPitch, row0, q_tile, T::kDimPitch, T::kDim);
      warp_product(dpt, v_tile, T::kDimPitch, row0, do_tile, T::kDimPitch, T::kDim);
      ZAYA_UNROLL for (int t = 0; t < RT; ++t) {
        ZAYA_UNROLL for (int u = 0; u < CT; ++u) {
          ZAYA_UNROLL for (int i = 0; i < gpu::kMmaResults; ++i) {
            const gpu::TilePlace at = tile_place(row0, t, u, i);  // row: a key, col: a query
            const float row_lse = query_lse[at.col];
            const bool seen = row_lse != -INFINITY && p.visible(b, i0 + at.col, j0 + at.row);
            const float prob = seen ? expf(p.scale * st[t][u].values[i] - row_lse) : 0.0f;
            pt_tile[at.row * T::kColPitch + at.col] = gpu::bf16_bits(prob);
            dst_tile[at.row * T::kColPitch + at.col] =
                gpu::bf16_bits(prob * (dpt[t][u].values[i] - query_delta[at.col]));
          }
        }
      }
      sync_threads();
      warp_product(dv_acc, pt_tile, T::kColPitch, row0, dot_tile, T::kColPitch, T::kCols);
      warp_product(dk_acc, dst_tile, T::kColPitch, row0, qt_tile, T::kColPitch, T::kCols);
    }
  }

  for (int t = 0; t < RT; ++t) {
    for (int d = 0; d < DT; ++d) {
      for (int i = 0; i < gpu::kMmaResults; ++i) {
        const gpu::TilePlace at = tile_place(row0, t, d, i);
        if (j0 + at.row >= p.seq || at.col >= p.dim) continue;
        dk[p.at(b, j0 + at.row, p.kv_heads, g) + at.col] = p.scale * dk_acc[t][d].values[i];
        dv[p.at(b, j0 + at.row, p.kv_heads, g) + at.col] = dv_acc[t][d].values[i];
      }
    }
  }
}

// ---- decode ------------------------------------------------------------------------------------------
constexpr unsigned kDecodeThreads = 256;
constexpr int kDecodeColumns = 32;  // output dimensions a pass of the value sum covers
constexpr int kDecodeParts = kDecodeThreads / kDecodeColumns;

// One query per head against the keys [first, first + width) of the cache; keys and values [length, KV, D],
// q and out [H, D]. scores [H, width] is device scratch. Grid (heads).
ZAYA_KERNEL(kDecodeThreads)
void attention_decode_kernel(const float* q, const float* keys, const float* values, int64_t first,
                             int64_t width, int heads, int kv_heads, int dim, float scale, float* scores,
                             float* out) {
  ZAYA_SHARED_ARRAY(reduce, float[gpu::kMaxWarps + 1]);
  ZAYA_SHARED_ARRAY(parts,
                    float[kDecodeParts][kMaxHeadDim]);  // [part, d]: the value sums of each part of the keys
  const int h = block_x(), g = h / (heads / kv_heads), tid = thread_x();
  const int warps = int(kDecodeThreads) / gpu::kWarpSize;
  const float* query = q + int64_t(h) * dim;
  float* row = scores + h * width;

  // Scores: a warp per key (its lanes split the dimensions, so the key's row is read coalesced).
  float max = -INFINITY;
  for (int64_t j = gpu::warp(); j < width; j += warps) {
    const float* key = keys + ((first + j) * kv_heads + g) * dim;
    float dot = 0.0f;
    for (int d = gpu::lane(); d < dim; d += gpu::kWarpSize) dot += query[d] * key[d];
    const float score = scale * gpu::warp_sum(dot);
    if (gpu::lane() == 0) row[j] = score;
    max = fmaxf(max, score);
  }
  max = gpu::block_max(max, reduce);  // its barriers also publish the scores to the whole block
  float sum = 0.0f;
  for (int64_t j = tid; j < width; j += kDecodeThreads) {
    const float e = expf(row[j] - max);
    row[j] = e;
    sum += e;
  }
  sum = gpu::block_sum(sum, reduce);

  // out = sum over keys of e * value / sum: the keys split in kDecodeParts parts, then the parts in order.
  const int column = tid % kDecodeColumns, part = tid / kDecodeColumns;
  float acc[kMaxHeadDim / kDecodeColumns] = {};
  for (int64_t j = part; j < width; j += kDecodeParts) {
    const float e = row[j];
    const float* value = values + ((first + j) * kv_heads + g) * dim;
    for (int c = 0; c < kMaxHeadDim / kDecodeColumns; ++c) {
      const int d = column + c * kDecodeColumns;
      if (d < dim) acc[c] += e * value[d];
    }
  }
  for (int c = 0; c < kMaxHeadDim / kDecodeColumns; ++c) parts[part][column + c * kDecodeColumns] = acc[c];
  sync_threads();
  if (tid >= dim) return;
  float total = 0.0f;
  for (int i = 0; i < kDecodeParts; ++i) total += parts[i][tid];
  out[int64_t(h) * dim + tid] = sum > 0.0f ? total / sum : 0.0f;  // an empty cache gives 0, as the CPU's
}

Problem make_problem(Precision precision, const float* key_mask, const AttentionShape& shape, float scale,
                     const char* op) {
  if (shape.head_dim > kMaxHeadDim || shape.head_dim <= 0) {
    throw Error(cat("GPU ", op, ": head_dim ", shape.head_dim, " is not supported (1 to ", kMaxHeadDim, ")"));
  }
  if (shape.kv_heads <= 0 || shape.heads % shape.kv_heads != 0) {
    throw Error(cat("GPU ", op, ": ", shape.heads, " heads do not split into groups of ", shape.kv_heads,
                    " KV heads"));
  }
  return {shape.seq,
          shape.window,
          int(shape.heads),
          int(shape.kv_heads),
          int(shape.head_dim),
          scale,
          precision == Precision::BF16,
          key_mask};
}

size_t bf16_bytes(int64_t count) {
  return size_t(count) * sizeof(uint16_t);
}

// src [count] f32 rounded into `at` (device scratch of bf16_bytes(count)), in stream order.
const uint16_t* round_into(GpuOps& ops, void* at, const float* src, int64_t count) {
  ops.convert_to_bf16(src, count, static_cast<BFloat16*>(at));
  return static_cast<const uint16_t*>(at);
}

unsigned tiles(int64_t count, int size) {
  return unsigned((count + size - 1) / size);
}

template <class T>
void forward(const Problem& p, int64_t batch, const float* q, const float* k, const float* v, float* o,
             float* lse, gpu::Stream stream) {
  gpu::launch("attention_forward", attention_forward_kernel<T>,
              {tiles(p.seq, T::kRows), unsigned(p.heads), unsigned(batch)}, {T::kThreads}, 0, stream, p, q, k,
              v, o, lse);
}

template <class T>
void forward_matrix(const Problem& p, int64_t batch, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                    float* o, float* lse, gpu::Stream stream) {
  gpu::launch("attention_forward_matrix", attention_forward_matrix_kernel<T>,
              {tiles(p.seq, T::kRows), unsigned(p.heads), unsigned(batch)}, {T::kThreads}, 0, stream, p, q, k,
              v, o, lse);
}

template <class Dq, class Dkv>
void backward(const Problem& p, int64_t batch, const float* q, const float* k, const float* v,
              const float* lse, const float* row_dot, const float* dout, float* dq, float* dk, float* dv,
              gpu::Stream stream) {
  static_assert(Dq::kDim == Dkv::kDim);
  gpu::launch("attention_dq", attention_dq_kernel<Dq>,
              {tiles(p.seq, Dq::kRows), unsigned(p.heads), unsigned(batch)}, {Dq::kThreads}, 0, stream, p, q,
              k, v, lse, row_dot, dout, dq);
  gpu::launch("attention_dkv", attention_dkv_kernel<Dkv>,
              {tiles(p.seq, Dkv::kRows), unsigned(p.kv_heads), unsigned(batch)}, {Dkv::kThreads}, 0, stream,
              p, q, k, v, lse, row_dot, dout, dk, dv);
}

template <class Dq, class Dkv>
void backward_matrix(const Problem& p, int64_t batch, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                     const float* lse, const float* row_dot, const uint16_t* dout, float* dq, float* dk,
                     float* dv, gpu::Stream stream) {
  static_assert(Dq::kDim == Dkv::kDim);
  gpu::launch("attention_dq_matrix", attention_dq_matrix_kernel<Dq>,
              {tiles(p.seq, Dq::kRows), unsigned(p.heads), unsigned(batch)}, {Dq::kThreads}, 0, stream, p, q,
              k, v, lse, row_dot, dout, dq);
  gpu::allow_shared("attention_dkv_matrix", attention_dkv_matrix_kernel<Dkv>, Dkv::kSharedBytes);
  gpu::launch("attention_dkv_matrix", attention_dkv_matrix_kernel<Dkv>,
              {tiles(p.seq, Dkv::kRows), unsigned(p.kv_heads), unsigned(batch)}, {Dkv::kThreads},
              Dkv::kSharedBytes, stream, p, q, k, v, lse, row_dot, dout, dk, dv);
}

}  // namespace

void GpuOps::attention_forward(Precision precision, const float* q, const float* k, const float* v,
                               const float* key_mask, const AttentionShape& shape, float scale, float* o,
                               float* lse) {
  const Problem p = make_problem(precision, key_mask, shape, scale, "attention_forward");
  if (shape.batch == 0 || shape.seq == 0) return;
  const gpu::Stream stream = gpu::as_stream(stream_);
  const bool wide = p.dim > Forward64::kDim;
  if (p.bf16) {
    const int64_t q_count = shape.batch * shape.seq * shape.heads * shape.head_dim;
    const int64_t kv_count = shape.batch * shape.seq * shape.kv_heads * shape.head_dim;
    const std::vector<void*> parts =
        scratch_parts({bf16_bytes(q_count), bf16_bytes(kv_count), bf16_bytes(kv_count)});
    (wide ? forward_matrix<MatrixForward128>
          : forward_matrix<MatrixForward64>)(p, shape.batch, round_into(*this, parts[0], q, q_count),
                                             round_into(*this, parts[1], k, kv_count),
                                             round_into(*this, parts[2], v, kv_count), o, lse, stream);
  } else {
    (wide ? forward<Forward128> : forward<Forward64>)(p, shape.batch, q, k, v, o, lse, stream);
  }
}

void GpuOps::attention_backward(Precision precision, const float* q, const float* k, const float* v,
                                const float* key_mask, const float* o, const float* lse, const float* dout,
                                const AttentionShape& shape, float scale, float* dq, float* dk, float* dv) {
  const Problem p = make_problem(precision, key_mask, shape, scale, "attention_backward");
  if (shape.batch == 0 || shape.seq == 0) return;
  const gpu::Stream stream = gpu::as_stream(stream_);
  const int64_t rows = shape.batch * shape.seq * shape.heads;
  const int64_t q_count = rows * shape.head_dim;
  const int64_t kv_count = shape.batch * shape.seq * shape.kv_heads * shape.head_dim;
  // [B, H, S] f32 row dots, then (bf16) the bf16 copies of q, k, v and dO.
  std::vector<size_t> sizes = {size_t(rows) * sizeof(float)};
  if (p.bf16) {
    for (const int64_t count : {q_count, kv_count, kv_count, q_count}) sizes.push_back(bf16_bytes(count));
  }
  const std::vector<void*> parts = scratch_parts(sizes);
  float* row_dot = static_cast<float*>(parts[0]);
  gpu::launch("attention_row_dot", attention_row_dot_kernel, gpu::cover(rows, kRowDotThreads / kLanes),
              {kRowDotThreads}, 0, stream, p, rows, o, dout, row_dot);
  const bool wide = p.dim > Dq64::kDim;
  if (p.bf16) {
    (wide ? backward_matrix<MatrixDq128, MatrixDkv128>
          : backward_matrix<MatrixDq64, MatrixDkv64>)(p, shape.batch, round_into(*this, parts[1], q, q_count),
                                                      round_into(*this, parts[2], k, kv_count),
                                                      round_into(*this, parts[3], v, kv_count), lse, row_dot,
                                                      round_into(*this, parts[4], dout, q_count), dq, dk, dv,
                                                      stream);
  } else {
    (wide ? backward<Dq128, Dkv128> : backward<Dq64, Dkv64>)(p, shape.batch, q, k, v, lse, row_dot, dout, dq,
                                                             dk, dv, stream);
  }
}

void GpuOps::attention_decode(const float* q, const float* const* keys, const float* const* values,
                              const int64_t* lengths, const AttentionShape& shape, float scale, float* out) {
  const Problem p = make_problem(Precision::F32, nullptr, shape, scale, "attention_decode");
  int64_t widest = 0;
  for (int64_t b = 0; b < shape.batch; ++b) widest = std::max(widest, lengths[b]);
  float* scores = scratch(size_t(p.heads * widest) * sizeof(float));  // [H, widest]
  // A launch per sequence (the caches' pointers are the host's): in stream order, so they share `scores`.
  for (int64_t b = 0; b < shape.batch; ++b) {
    const int64_t first = shape.window > 0 && lengths[b] > shape.window ? lengths[b] - shape.window : 0;
    const int64_t width = lengths[b] > first ? lengths[b] - first : 0;
    const int64_t at = b * p.heads * p.dim;
    gpu::launch("attention_decode", attention_decode_kernel, {unsigned(p.heads)}, {kDecodeThreads}, 0,
                gpu::as_stream(stream_), q + at, keys[b], values[b], first, width, p.heads, p.kv_heads, p.dim,
                scale, scores, out + at);
  }
}

}  // namespace zaya
