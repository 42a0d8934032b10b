// The router's top-1 choice, its statistics and gradients, the dropless MoE data movement (grouping tokens by
// expert, gathering their rows, scattering the results back) and the experts' SwiGLU. Every sum runs in a
// fixed order and no kernel uses atomics, so a run repeats bit for bit.

#include "backend/gpu/gpu_ops.h"
#include "backend/gpu/kernel_util.h"
#include "core/error.h"

namespace zaya {
namespace {

using gpu::block_dim_x;
using gpu::block_x;
using gpu::kWarpSize;
using gpu::lane;
using gpu::sync_threads;
using gpu::thread_x;
using gpu::warp;

ZAYA_DEVICE int64_t global_index() {
  return int64_t(block_x()) * block_dim_x() + thread_x();
}

// ---- the router --------------------------------------------------------------------------------------
// One thread per token: routes are few (experts + 1), and a sequential loop sums in the CPU's order.
ZAYA_KERNEL(gpu::kThreads)
void route_top1_kernel(const float* logits, const float* biases, int64_t tokens, int64_t routes, float* probs,
                       int32_t* choice, float* gate, float* lse) {
  const int64_t t = global_index();
  if (t >= tokens) return;
  const float* z = logits + t * routes;  // [routes]
  float* p = probs + t * routes;         // [routes]
  float max = z[0];
  for (int64_t e = 1; e < routes; ++e) max = z[e] > max ? z[e] : max;
  float sum = 0;
  for (int64_t e = 0; e < routes; ++e) {
    p[e] = expf(z[e] - max);
    sum += p[e];
  }
  lse[t] = max + logf(sum);
  // Strictly greater: the first of equal scores wins, as on the CPU.
  int64_t best = 0;
  float best_score = 0;
  for (int64_t e = 0; e < routes; ++e) {
    p[e] = p[e] / sum;
    const float score = p[e] + biases[e];
    if (e == 0 || score > best_score) {
      best = e;
      best_score = score;
    }
  }
  choice[t] = int32_t(best);
  gate[t] = best == routes - 1 ? 0.0f : p[best];  // the last route is the skip route: no expert output
}

// One thread per (token, route): dz[e] = dgate p[c] (delta(e, c) - p[e]), zero for skip-routed tokens.
ZAYA_KERNEL(gpu::kThreads)
void route_top1_backward_kernel(const float* probs, const int32_t* choice, const float* dgate, int64_t tokens,
                                int64_t routes, float* dlogits) {
  const int64_t i = global_index();
  if (i >= tokens * routes) return;
  const int64_t t = i / routes, e = i % routes, c = choice[t];
  if (c == routes - 1) {
    dlogits[i] = 0.0f;
    return;
  }
  const float through = dgate[t] * probs[t * routes + c];
  const float value = -through * probs[i];
  dlogits[i] = e == c ? value + through : value;
}

// One thread per token: the mean over routes is a sequential sum, in the CPU's order.
ZAYA_KERNEL(gpu::kThreads)
void router_aux_backward_kernel(const float* probs, const float* lse, int64_t tokens, int64_t routes,
                                const float* route_coef, float z_coef, float* dlogits) {
  const int64_t t = global_index();
  if (t >= tokens) return;
  const float* p = probs + t * routes;  // [routes]
  float mean = 0;
  for (int64_t e = 0; e < routes; ++e) mean += p[e] * route_coef[e];
  const float z = z_coef * lse[t];
  for (int64_t e = 0; e < routes; ++e) dlogits[t * routes + e] += p[e] * (route_coef[e] - mean + z);
}

// ---- router statistics -------------------------------------------------------------------------------
// First each block sums a chunk of kStatTokens tokens into partials; then one thread per output adds the
// chunks in order to the accumulated values. Both orders are fixed, so the sums repeat exactly.
constexpr int64_t kStatTokens = 256;
constexpr unsigned kStatThreads = 256;

struct StatPartials {
  int64_t* counts;    // [chunks, routes]
  double* prob_sums;  // [chunks, routes]
  double* scalars;    // [chunks, 2]: the entropy sum, the lse^2 sum
};

ZAYA_KERNEL(kStatThreads)
void router_statistics_partials(const float* probs, const float* lse, const int32_t* choice, int64_t tokens,
                                int64_t routes, StatPartials partials) {
  ZAYA_SHARED_ARRAY(scratch, double[gpu::kMaxWarps + 1]);
  const int64_t chunk = block_x();
  const int64_t first = chunk * kStatTokens;
  const int64_t last = first + kStatTokens < tokens ? first + kStatTokens : tokens;
  // A thread per route: at each token the threads read neighbouring probabilities.
  for (int64_t e = thread_x(); e < routes; e += block_dim_x()) {
    int64_t count = 0;
    double sum = 0;
    for (int64_t t = first; t < last; ++t) {
      count += choice[t] == e ? 1 : 0;
      sum += probs[t * routes + e];
    }
    partials.counts[chunk * routes + e] = count;
    partials.prob_sums[chunk * routes + e] = sum;
  }
  // A thread per token for its entropy (summed over routes as the CPU does) and lse^2.
  double entropy = 0, lse_square = 0;
  for (int64_t t = first + thread_x(); t < last; t += block_dim_x()) {
    const float* p = probs + t * routes;
    double token_entropy = 0;
    for (int64_t e = 0; e < routes; ++e) {
      if (p[e] > 0) token_entropy -= double(p[e]) * log(double(p[e]));
    }
    entropy += token_entropy;
    lse_square += double(lse[t]) * lse[t];
  }
  entropy = gpu::block_sum(entropy, scratch);
  lse_square = gpu::block_sum(lse_square, scratch);
  if (thread_x() == 0) {
    partials.scalars[chunk * 2] = entropy;
    partials.scalars[chunk * 2 + 1] = lse_square;
  }
}

// Thread i < routes adds route i's chunks; threads routes and routes + 1 the two scalar sums.
ZAYA_KERNEL(gpu::kThreads)
void router_statistics_totals(StatPartials partials, int64_t chunks, int64_t routes, int64_t* counts,
                              double* prob_sums, double* entropy_sum, double* lse_square_sum) {
  const int64_t i = global_index();
  if (i < routes) {
    int64_t count = 0;
    double sum = 0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      count += partials.counts[chunk * routes + i];
      sum += partials.prob_sums[chunk * routes + i];
    }
    counts[i] += count;
    prob_sums[i] += sum;
  } else if (i < routes + 2) {
    const int64_t which = i - routes;
    double sum = 0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) sum += partials.scalars[chunk * 2 + which];
    *(which == 0 ? entropy_sum : lse_square_sum) += sum;
  }
}

// ---- grouping by expert --------------------------------------------------------------------------------
// A stable counting sort in four kernels, with no atomics, over groups = experts + 1 (the skip route's
// tokens last, so that order is a permutation of the tokens):
//   1. group_count: each block takes a tile of kGroupTile tokens, split into warp-wide segments. Lanes of a
//      warp exchange their groups (shuffle_xor) to find each token's rank among the segment's tokens of the
//      same group; a per-group exclusive scan over the tile's segments turns these into the token's rank in
//      the tile, and gives the tile's count of each group, tile_counts[g, tile] (group-major).
//   2. scan_tiles: a block per group scans its row of tile counts (exclusive): where each tile's tokens of
//      that group start within the group; the row's total is the group's size.
//   3. group_offsets: one block scans the sizes into offsets [groups] (int64: experts + 1 entries, the last
//      where the skip-routed tokens start).
//   4. group_scatter: token t of group g in tile b goes to offsets[g] + tile_start[g, b] + rank[t].
// Ranks follow token order inside segments, segments inside tiles, tiles inside groups: the CPU's order.
constexpr int kGroupTile = 1024;
constexpr unsigned kGroupThreads = 256;
constexpr int kGroupRounds = kGroupTile / int(kGroupThreads);  // segments each warp takes in turn
// The segment counts live in shared memory, [segments, groups] int32, sized for the narrowest warp (32
// lanes, the most segments) so that host and device agree whatever the device's warp width.
constexpr int kMaxSegments = kGroupTile / 32;
constexpr size_t kGroupSharedLimit = 48 * 1024;  // what every target gives a launch without opting in
constexpr int64_t kMaxGroups = int64_t(kGroupSharedLimit / (kMaxSegments * sizeof(int32_t)));

ZAYA_KERNEL(kGroupThreads)
void group_count_kernel(const int32_t* choice, int64_t tokens, int64_t groups, int64_t tiles, int32_t* rank,
                        int32_t* tile_counts) {
  int32_t* segment_counts = gpu::dynamic_shared<int32_t>();  // [segments, groups]
  const int segments = kGroupTile / kWarpSize;
  const int warps = block_dim_x() / kWarpSize;
  const int64_t first = int64_t(block_x()) * kGroupTile;
  // A segment without a token of group g writes nothing for it: zeros first.
  for (int64_t i = thread_x(); i < segments * groups; i += block_dim_x()) segment_counts[i] = 0;
  sync_threads();

  int32_t segment_rank[kGroupRounds];  // this thread's token's rank in its segment, per round
  for (int round = 0; round < kGroupRounds; ++round) {
    const int segment = round * warps + warp();
    const int64_t t = first + int64_t(segment) * kWarpSize + lane();
    // -1: past the last token or out of range, never counted.
    const int32_t mine = t < tokens && choice[t] >= 0 && choice[t] < groups ? choice[t] : -1;
    int32_t before = 0, same = 0;  // lanes of the same group below this one, and in all
    for (int mask = 1; mask < kWarpSize; ++mask) {
      const int32_t other = gpu::shuffle_xor(mine, mask);
      if (other == mine) {
        ++same;
        if ((lane() ^ mask) < lane()) ++before;
      }
    }
    segment_rank[round] = before;
    // The group's first lane in the segment holds its count; no two lanes write one place.
    if (mine >= 0 && before == 0) segment_counts[segment * groups + mine] = same + 1;
  }
  sync_threads();

  // Per group, segment counts -> where the segment's tokens start in the tile (exclusive scan).
  for (int64_t g = thread_x(); g < groups; g += block_dim_x()) {
    int32_t running = 0;
    for (int segment = 0; segment < segments; ++segment) {
      const int32_t count = segment_counts[segment * groups + g];
      segment_counts[segment * groups + g] = running;
      running += count;
    }
    tile_counts[g * tiles + block_x()] = running;
  }
  sync_threads();

  for (int round = 0; round < kGroupRounds; ++round) {
    const int segment = round * warps + warp();
    const int64_t t = first + int64_t(segment) * kWarpSize + lane();
    if (t < tokens && choice[t] >= 0 && choice[t] < groups) {
      rank[t] = segment_counts[segment * groups + choice[t]] + segment_rank[round];
    }
  }
}

// The inclusive prefix sum of value over the lanes of a warp, with exchanges only: at each step a lane
// learns the total of the neighbouring group of `mask` lanes and adds it when that group lies below it.
ZAYA_DEVICE int32_t warp_inclusive_scan(int32_t value) {
  int32_t group_total = value;
  for (int mask = 1; mask < kWarpSize; mask *= 2) {
    const int32_t other = gpu::shuffle_xor(group_total, mask);
    if (lane() & mask) value += other;
    group_total += other;
  }
  return value;
}

// out[i] = carry + in[0] + ... + in[i - 1] for i < n (an exclusive scan, in rounds of the block's width);
// returns carry + the sum of all of in. in and out may alias. Every thread of the block must call it.
template <class Out>
ZAYA_DEVICE int64_t block_exclusive_scan(const int32_t* in, int64_t n, int64_t carry, Out* out) {
  ZAYA_SHARED_ARRAY(warp_totals, int32_t[gpu::kMaxWarps]);
  const int warps = block_dim_x() / kWarpSize;
  for (int64_t start = 0; start < n; start += block_dim_x()) {
    const int64_t i = start + thread_x();
    const int32_t value = i < n ? in[i] : 0;
    const int32_t inclusive = warp_inclusive_scan(value);
    if (lane() == kWarpSize - 1) warp_totals[warp()] = inclusive;
    sync_threads();
    int64_t below = 0, round_total = 0;
    for (int w = 0; w < warps; ++w) {
      if (w < warp()) below += warp_totals[w];
      round_total += warp_totals[w];
    }
    if (i < n) out[i] = Out(carry + below + inclusive - value);
    carry += round_total;
    sync_threads();  // warp_totals is rewritten by the next round
  }
  return carry;
}

ZAYA_KERNEL(kGroupThreads)
void scan_tiles_kernel(int32_t* tile_counts, int64_t tiles, int32_t* group_sizes) {
  int32_t* row = tile_counts + int64_t(block_x()) * tiles;  // [tiles] of this block's group, in place
  const int64_t total = block_exclusive_scan(row, tiles, 0, row);
  if (thread_x() == 0) group_sizes[block_x()] = int32_t(total);
}

ZAYA_KERNEL(kGroupThreads)
void group_offsets_kernel(const int32_t* group_sizes, int64_t groups, int64_t* offsets) {
  block_exclusive_scan(group_sizes, groups, 0, offsets);
}

ZAYA_KERNEL(gpu::kThreads)
void group_scatter_kernel(const int32_t* choice, const int32_t* rank, const int32_t* tile_starts,
                          const int64_t* offsets, int64_t tokens, int64_t groups, int64_t tiles,
                          int32_t* order) {
  const int64_t t = global_index();
  if (t >= tokens || choice[t] < 0 || choice[t] >= groups) return;
  const int64_t g = choice[t];
  order[offsets[g] + tile_starts[g * tiles + t / kGroupTile] + rank[t]] = int32_t(t);
}

// ---- gathering and scattering rows ------------------------------------------------------------------
// One thread per element of the gathered rows [count, n].
ZAYA_KERNEL(gpu::kThreads)
void gather_rows_kernel(const float* src, const int32_t* order, const float* scale, int64_t count, int64_t n,
                        gpu::Output dst) {
  const int64_t i = global_index();
  if (i >= count * n) return;
  const int64_t row = order[i / n];
  const float value = src[row * n + i % n];
  dst.store(i, scale ? scale[row] * value : value);
}

// One thread per element of src [count, n]; order's rows are distinct, so no two threads write one place.
ZAYA_KERNEL(gpu::kThreads)
void scatter_rows_kernel(const float* src, const int32_t* order, const float* scale, int64_t count, int64_t n,
                         bool accumulate, float* dst) {
  const int64_t i = global_index();
  if (i >= count * n) return;
  const int64_t row = order[i / n];
  const float value = (scale ? scale[row] : 1.0f) * src[i];
  float* target = dst + row * n + i % n;
  *target = accumulate ? *target + value : value;
}

// A block per output: the block's threads stride over the row, then one block sum (a fixed order).
constexpr unsigned kDotThreads = 128;

ZAYA_KERNEL(kDotThreads)
void gather_dot_kernel(const float* a, const int32_t* order, const float* b, int64_t n, float* out) {
  ZAYA_SHARED_ARRAY(scratch, float[gpu::kMaxWarps + 1]);
  const int64_t i = block_x();
  const float* x = a + int64_t(order[i]) * n;  // [n]
  const float* y = b + i * n;                  // [n]
  float sum = 0;
  for (int64_t j = thread_x(); j < n; j += block_dim_x()) sum += x[j] * y[j];
  sum = gpu::block_sum(sum, scratch);
  if (thread_x() == 0) out[i] = sum;
}

// ---- SwiGLU -------------------------------------------------------------------------------------------
// One thread per output element; gate_up [rows, 2n] holds a row's gate then its up projection.
ZAYA_DEVICE float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

ZAYA_KERNEL(gpu::kThreads)
void swiglu_forward_kernel(const float* gate_up, int64_t rows, int64_t n, gpu::Output out) {
  const int64_t i = global_index();
  if (i >= rows * n) return;
  const int64_t r = i / n, j = i % n;
  const float g = gate_up[r * 2 * n + j], u = gate_up[r * 2 * n + n + j];
  out.store(i, g * sigmoid(g) * u);
}

// out = silu(g) u: d up = d silu(g), d gate = d u sigmoid(g) (1 + g (1 - sigmoid(g))).
ZAYA_KERNEL(gpu::kThreads)
void swiglu_backward_kernel(const float* gate_up, const float* dout, int64_t rows, int64_t n,
                            gpu::Output dgate_up) {
  const int64_t i = global_index();
  if (i >= rows * n) return;
  const int64_t r = i / n, j = i % n;
  const float g = gate_up[r * 2 * n + j], u = gate_up[r * 2 * n + n + j], d = dout[i];
  const float sig = sigmoid(g);
  dgate_up.store(r * 2 * n + n + j, d * g * sig);
  dgate_up.store(r * 2 * n + j, d * u * sig * (1.0f + g * (1.0f - sig)));
}

// Rounds bytes up to a multiple of 8, so that the next piece of scratch is aligned for int64 and double.
size_t aligned8(size_t bytes) {
  return (bytes + 7) / 8 * 8;
}

}  // namespace

void GpuOps::route_top1(const float* logits, const float* biases, int64_t tokens, int64_t routes,
                        float* probs, int32_t* choice, float* gate, float* lse) {
  gpu::launch("route_top1", route_top1_kernel, gpu::cover(tokens, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), logits, biases, tokens, routes, probs, choice, gate, lse);
}

void GpuOps::route_top1_backward(const float* probs, const int32_t* choice, const float* dgate,
                                 int64_t tokens, int64_t routes, float* dlogits) {
  gpu::launch("route_top1_backward", route_top1_backward_kernel, gpu::cover(tokens * routes, gpu::kThreads),
              {gpu::kThreads}, 0, gpu::as_stream(stream_), probs, choice, dgate, tokens, routes, dlogits);
}

void GpuOps::router_statistics(const float* probs, const float* lse, const int32_t* choice, int64_t tokens,
                               int64_t routes, int64_t* counts, double* prob_sums, double* entropy_sum,
                               double* lse_square_sum) {
  if (tokens == 0) return;  // nothing to add
  const int64_t chunks = (tokens + kStatTokens - 1) / kStatTokens;
  const size_t count_bytes = size_t(chunks * routes) * sizeof(int64_t);
  const size_t sum_bytes = size_t(chunks * routes) * sizeof(double);
  char* base =
      reinterpret_cast<char*>(scratch(count_bytes + sum_bytes + size_t(chunks * 2) * sizeof(double)));
  const StatPartials partials{reinterpret_cast<int64_t*>(base), reinterpret_cast<double*>(base + count_bytes),
                              reinterpret_cast<double*>(base + count_bytes + sum_bytes)};
  const gpu::Stream stream = gpu::as_stream(stream_);
  gpu::launch("router_statistics_partials", router_statistics_partials, {unsigned(chunks)}, {kStatThreads}, 0,
              stream, probs, lse, choice, tokens, routes, partials);
  gpu::launch("router_statistics_totals", router_statistics_totals, gpu::cover(routes + 2, gpu::kThreads),
              {gpu::kThreads}, 0, stream, partials, chunks, routes, counts, prob_sums, entropy_sum,
              lse_square_sum);
}

void GpuOps::router_aux_backward(const float* probs, const float* lse, int64_t tokens, int64_t routes,
                                 const float* route_coef, float z_coef, float* dlogits) {
  gpu::launch("router_aux_backward", router_aux_backward_kernel, gpu::cover(tokens, gpu::kThreads),
              {gpu::kThreads}, 0, gpu::as_stream(stream_), probs, lse, tokens, routes, route_coef, z_coef,
              dlogits);
}

void GpuOps::group_by_expert(const int32_t* choice, int64_t tokens, int64_t experts, int32_t* order,
                             int64_t* offsets) {
  const int64_t groups = experts + 1;  // the skip route's tokens are the last group
  if (groups > kMaxGroups) {
    throw Error(cat("group_by_expert on the GPU takes at most ", kMaxGroups - 1, " experts, not ", experts));
  }
  const int64_t tiles = (tokens + kGroupTile - 1) / kGroupTile;
  // Scratch: rank [tokens], tile_counts [groups, tiles] (scanned in place into tile starts), group_sizes
  // [groups]; all int32.
  const size_t rank_bytes = aligned8(size_t(tokens) * sizeof(int32_t));
  const size_t tile_bytes = aligned8(size_t(groups * tiles) * sizeof(int32_t));
  char* base = reinterpret_cast<char*>(scratch(rank_bytes + tile_bytes + size_t(groups) * sizeof(int32_t)));
  int32_t* rank = reinterpret_cast<int32_t*>(base);
  int32_t* tile_counts = reinterpret_cast<int32_t*>(base + rank_bytes);
  int32_t* group_sizes = reinterpret_cast<int32_t*>(base + rank_bytes + tile_bytes);
  const gpu::Stream stream = gpu::as_stream(stream_);
  const size_t shared_bytes = size_t(kMaxSegments * groups) * sizeof(int32_t);
  gpu::launch("group_count", group_count_kernel, {unsigned(tiles)}, {kGroupThreads}, shared_bytes, stream,
              choice, tokens, groups, tiles, rank, tile_counts);
  gpu::launch("scan_tiles", scan_tiles_kernel, {unsigned(groups)}, {kGroupThreads}, 0, stream, tile_counts,
              tiles, group_sizes);
  gpu::launch("group_offsets", group_offsets_kernel, {1}, {kGroupThreads}, 0, stream, group_sizes, groups,
              offsets);
  gpu::launch("group_scatter", group_scatter_kernel, gpu::cover(tokens, gpu::kThreads), {gpu::kThreads}, 0,
              stream, choice, rank, tile_counts, offsets, tokens, groups, tiles, order);
}

void GpuOps::gather_rows(const float* src, const int32_t* order, const float* scale, int64_t count, int64_t n,
                         Destination dst) {
  gpu::launch("gather_rows", gather_rows_kernel, gpu::cover(count * n, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), src, order, scale, count, n, gpu::output(dst));
}

void GpuOps::scatter_rows(const float* src, const int32_t* order, const float* scale, int64_t count,
                          int64_t n, bool accumulate, float* dst) {
  gpu::launch("scatter_rows", scatter_rows_kernel, gpu::cover(count * n, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), src, order, scale, count, n, accumulate, dst);
}

void GpuOps::gather_dot(const float* a, const int32_t* order, const float* b, int64_t count, int64_t n,
                        float* out) {
  gpu::launch("gather_dot", gather_dot_kernel, {unsigned(count)}, {kDotThreads}, 0, gpu::as_stream(stream_),
              a, order, b, n, out);
}

void GpuOps::swiglu_forward(const float* gate_up, int64_t rows, int64_t n, Destination out) {
  gpu::launch("swiglu_forward", swiglu_forward_kernel, gpu::cover(rows * n, gpu::kThreads), {gpu::kThreads},
              0, gpu::as_stream(stream_), gate_up, rows, n, gpu::output(out));
}

void GpuOps::swiglu_backward(const float* gate_up, const float* dout, int64_t rows, int64_t n,
                             Destination dgate_up) {
  gpu::launch("swiglu_backward", swiglu_backward_kernel, gpu::cover(rows * n, gpu::kThreads), {gpu::kThreads},
              0, gpu::as_stream(stream_), gate_up, dout, rows, n, gpu::output(dgate_up));
}

}  // namespace zaya
