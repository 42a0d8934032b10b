// The token embedding, forward and backward. The table's gradient is summed without atomics, so that it
// repeats bit for bit: the tokens are sorted by id (a merge sort of (id, token) keys, which needs no bound on
// the vocabulary), the runs of equal ids are listed, and each run's rows are summed by one block in an order
// fixed by the run alone. dbias and dscale are the deterministic column sums of kernel_util.h.

#include <algorithm>
#include <cstdint>
#include <utility>

#include "backend/gpu/gpu_ops.h"
#include "backend/gpu/kernel_util.h"

namespace zaya {
namespace {

using gpu::block_dim_x;
using gpu::block_x;
using gpu::block_y;
using gpu::grid_dim_x;
using gpu::thread_x;
using gpu::thread_y;

ZAYA_DEVICE int64_t global_index() {
  return int64_t(block_x()) * block_dim_x() + thread_x();
}
ZAYA_DEVICE int64_t smaller(int64_t a, int64_t b) {
  return a < b ? a : b;
}

size_t aligned(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

// out[t, j] = (table[ids[t], j] + bias[j]) * scale[j].
ZAYA_KERNEL(gpu::kThreads)
void embedding_forward_kernel(const int32_t* ids, int64_t tokens, const float* table, int64_t hidden,
                              const float* bias, const float* scale, float* out) {
  const int64_t i = global_index();
  if (i >= tokens * hidden) return;
  const int64_t t = i / hidden, j = i % hidden;
  out[i] = (table[int64_t(ids[t]) * hidden + j] + bias[j]) * scale[j];
}

// ---- sorting tokens by id ----------------------------------------------------------------------------
// A token's key: its id in the high half, its index in the low half. Keys are distinct, so sorting them puts
// each id's tokens together in token order (the order the CPU sums them in).
ZAYA_DEVICE uint64_t make_key(int32_t id, int64_t token) {
  return (uint64_t(uint32_t(id)) << 32) | uint64_t(uint32_t(token));
}
ZAYA_DEVICE int32_t key_id(uint64_t key) {
  return int32_t(uint32_t(key >> 32));
}
ZAYA_DEVICE int64_t key_token(uint64_t key) {
  return int64_t(key & 0xffffffffu);
}

// Where keys[i] goes when the sorted runs of `width` keys in keys[0, n) are merged pairwise: its place in
// its own run plus the number of keys of the other run before it. Ties (only the padding of a partial tile
// has them) go to the left run first, so every key gets a distinct place.
ZAYA_DEVICE int64_t merged_position(const uint64_t* keys, int64_t n, int64_t i, int64_t width) {
  const int64_t base = i / (2 * width) * (2 * width);
  const int64_t middle = smaller(base + width, n), end = smaller(base + 2 * width, n);
  const uint64_t key = keys[i];
  const bool left = i < middle;
  // Binary search of the other run for its first key that goes after this one: for a key of the left run,
  // the first >= it; for a key of the right run, the first > it.
  int64_t low = left ? middle : base, high = left ? end : middle;
  while (low < high) {
    const int64_t mid = low + (high - low) / 2;
    if (left ? keys[mid] < key : keys[mid] <= key) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return left ? i + (low - middle) : base + (i - middle) + (low - base);
}

// Each block sorts a tile of kSortTile keys in shared memory: merges of runs of 1, 2, 4, ... keys, one pass
// per width, ping-ponging between two buffers. The last tile is padded with the largest key, which stays
// behind the real ones.
constexpr int kSortTile = 1024;
constexpr unsigned kSortThreads = 256;

ZAYA_KERNEL(kSortThreads) void sort_tiles_kernel(const int32_t* ids, int64_t tokens, uint64_t* keys) {
  ZAYA_SHARED_ARRAY(buffers, uint64_t[2][kSortTile]);
  const int64_t first = int64_t(block_x()) * kSortTile;
  for (int i = thread_x(); i < kSortTile; i += block_dim_x()) {
    const int64_t t = first + i;
    buffers[0][i] = t < tokens ? make_key(ids[t], t) : ~uint64_t(0);
  }
  gpu::sync_threads();
  int from = 0;
  for (int width = 1; width < kSortTile; width *= 2) {
    for (int i = thread_x(); i < kSortTile; i += block_dim_x()) {
      buffers[1 - from][merged_position(buffers[from], kSortTile, i, width)] = buffers[from][i];
    }
    gpu::sync_threads();
    from = 1 - from;
  }
  for (int i = thread_x(); i < kSortTile; i += block_dim_x()) {
    if (first + i < tokens) keys[first + i] = buffers[from][i];
  }
}

// One pass of the sort past a tile: out = in with its sorted runs of `width` keys merged pairwise.
ZAYA_KERNEL(gpu::kThreads)
void merge_runs_kernel(const uint64_t* in, int64_t n, int64_t width, uint64_t* out) {
  const int64_t i = global_index();
  if (i < n) out[merged_position(in, n, i, width)] = in[i];
}

ZAYA_DEVICE bool starts_run(const uint64_t* sorted, int64_t p) {
  return p == 0 || key_id(sorted[p]) != key_id(sorted[p - 1]);
}

// The runs of equal ids in sorted[0, n): starts[run] is where run `run` begins, starts[runs] = n, *runs their
// number. One block: each thread counts the run starts in its stretch of the keys, a scan of the counts
// places each thread's starts, and the thread writes them.
constexpr unsigned kScanThreads = 1024;

ZAYA_KERNEL(kScanThreads)
void list_runs_kernel(const uint64_t* sorted, int64_t n, int32_t* starts, int32_t* runs) {
  ZAYA_SHARED_ARRAY(scan, int32_t[2][kScanThreads]);
  const int threads = block_dim_x(), me = thread_x();
  const int64_t stretch = (n + threads - 1) / threads;
  const int64_t first = smaller(n, me * stretch), last = smaller(n, first + stretch);
  int32_t count = 0;
  for (int64_t p = first; p < last; ++p) count += starts_run(sorted, p) ? 1 : 0;
  // An inclusive scan of the counts (Hillis-Steele), ping-ponging between two rows of shared memory.
  scan[0][me] = count;
  gpu::sync_threads();
  int from = 0;
  for (int offset = 1; offset < threads; offset *= 2) {
    scan[1 - from][me] = scan[from][me] + (me >= offset ? scan[from][me - offset] : 0);
    gpu::sync_threads();
    from = 1 - from;
  }
  int32_t run = scan[from][me] - count;
  for (int64_t p = first; p < last; ++p) {
    if (starts_run(sorted, p)) starts[run++] = int32_t(p);
  }
  if (me == threads - 1) {
    starts[run] = int32_t(n);
    *runs = run;
  }
}

// dtable[id] += the sum over the run's tokens t of dout[t] * scale, for every run but the padding id's.
// Blocks of 32 columns x 8 token lanes (as the column sums): lane y sums tokens y, y + 8, ... of the run,
// then the lanes are added in order, so a long run (a frequent token) is not one thread's sequential loop.
// Grid (run blocks, column tiles): each block takes runs block_x, block_x + grid_dim_x, ... as the device's
// run count says, so the host needs no read of it.
ZAYA_KERNEL(gpu::kColumnTile* gpu::kRowLanes)
void table_gradient_kernel(const uint64_t* sorted, const int32_t* starts, const int32_t* runs,
                           const float* dout, const float* scale, int64_t hidden, int32_t skip_id,
                           float* dtable) {
  ZAYA_SHARED_ARRAY(lanes, float[gpu::kRowLanes][gpu::kColumnTile]);
  const int64_t column = int64_t(block_y()) * gpu::kColumnTile + thread_x();
  const bool inside = column < hidden;
  const float column_scale = inside ? scale[column] : 0.0f;
  const int64_t run_count = *runs;
  for (int64_t run = block_x(); run < run_count; run += grid_dim_x()) {
    const int64_t first = starts[run], last = starts[run + 1];
    const int32_t id = key_id(sorted[first]);
    if (id == skip_id) continue;  // the same for the whole block: no thread misses the barriers below
    float sum = 0;
    if (inside) {
      for (int64_t p = first + thread_y(); p < last; p += gpu::kRowLanes) {
        sum += dout[key_token(sorted[p]) * hidden + column] * column_scale;
      }
    }
    lanes[thread_y()][thread_x()] = sum;
    gpu::sync_threads();
    if (thread_y() == 0 && inside) {
      float total = 0;
      for (unsigned lane = 0; lane < gpu::kRowLanes; ++lane) total += lanes[lane][thread_x()];
      dtable[int64_t(id) * hidden + column] += total;
    }
    gpu::sync_threads();  // the lanes are read before the next run writes them
  }
}

// The terms of the column sums.
struct ScaledGradient {  // dout[t, j] * scale[j]: dbias
  const float* dout;
  const float* scale;
  int64_t hidden;
  ZAYA_DEVICE float operator()(int64_t t, int64_t j) const { return dout[t * hidden + j] * scale[j]; }
};
struct BiasedRowGradient {  // dout[t, j] * (table[ids[t], j] + bias[j]): dscale
  const float* dout;
  const int32_t* ids;
  const float* table;
  const float* bias;
  int64_t hidden;
  ZAYA_DEVICE float operator()(int64_t t, int64_t j) const {
    return dout[t * hidden + j] * (table[int64_t(ids[t]) * hidden + j] + bias[j]);
  }
};

// Blocks of the table gradient along the runs: enough, with the column tiles, to fill a GPU; a block takes
// several runs where there are more.
constexpr int64_t kRunBlocks = 512;

}  // namespace

void GpuOps::embedding_forward(const int32_t* ids, int64_t tokens, const float* table, int64_t hidden,
                               const float* bias, const float* scale, float* out) {
  gpu::launch("embedding_forward", embedding_forward_kernel, gpu::cover(tokens * hidden, gpu::kThreads),
              {gpu::kThreads}, 0, gpu::as_stream(stream_), ids, tokens, table, hidden, bias, scale, out);
}

void GpuOps::embedding_backward(const int32_t* ids, int64_t tokens, const float* table, int64_t hidden,
                                const float* bias, const float* scale, const float* dout, int32_t skip_id,
                                float* dtable, float* dbias, float* dscale) {
  if (tokens == 0 || hidden == 0) return;
  const gpu::Stream stream = gpu::as_stream(stream_);
  // One scratch allocation: the sort's two key buffers, the run list and the column sums' partials.
  const size_t keys_bytes = aligned(size_t(tokens) * sizeof(uint64_t));
  const size_t starts_bytes = aligned(size_t(tokens + 1) * sizeof(int32_t));
  const size_t runs_bytes = aligned(sizeof(int32_t));
  const size_t partial_bytes = size_t(gpu::column_chunks(tokens) * hidden) * sizeof(float);
  unsigned char* memory =
      reinterpret_cast<unsigned char*>(scratch(2 * keys_bytes + starts_bytes + runs_bytes + partial_bytes));
  const auto take = [&memory](size_t part) {
    unsigned char* start = memory;
    memory += part;
    return start;
  };
  auto* keys = reinterpret_cast<uint64_t*>(take(keys_bytes));     // [tokens]
  auto* spare = reinterpret_cast<uint64_t*>(take(keys_bytes));    // [tokens]
  auto* starts = reinterpret_cast<int32_t*>(take(starts_bytes));  // [tokens + 1]
  auto* runs = reinterpret_cast<int32_t*>(take(runs_bytes));      // [1]
  auto* partial = reinterpret_cast<float*>(take(partial_bytes));  // [chunks, hidden]

  gpu::sum_columns(ScaledGradient{dout, scale, hidden}, tokens, hidden, dbias, partial, stream);
  gpu::sum_columns(BiasedRowGradient{dout, ids, table, bias, hidden}, tokens, hidden, dscale, partial,
                   stream);

  // Sort: tiles in shared memory, then global merges of ever wider runs; the pass count depends on the token
  // count only.
  gpu::launch("sort_tiles", sort_tiles_kernel, gpu::cover(tokens, kSortTile), {kSortThreads}, 0, stream, ids,
              tokens, keys);
  for (int64_t width = kSortTile; width < tokens; width *= 2) {
    gpu::launch("merge_runs", merge_runs_kernel, gpu::cover(tokens, gpu::kThreads), {gpu::kThreads}, 0,
                stream, keys, tokens, width, spare);
    std::swap(keys, spare);
  }
  gpu::launch("list_runs", list_runs_kernel, {1}, {kScanThreads}, 0, stream, keys, tokens, starts, runs);
  const unsigned run_blocks = unsigned(std::min(tokens, kRunBlocks));
  const unsigned column_tiles = unsigned((hidden + gpu::kColumnTile - 1) / gpu::kColumnTile);
  gpu::launch("table_gradient", table_gradient_kernel, {run_blocks, column_tiles, 1},
              {gpu::kColumnTile, gpu::kRowLanes}, 0, stream, keys, starts, runs, dout, scale, hidden, skip_id,
              dtable);
}

}  // namespace zaya
