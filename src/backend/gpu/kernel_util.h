#pragma once
// Building blocks the kernels share: reductions across a warp and a block, and deterministic sums over
// the rows of a matrix (parameter gradients). Device code only; included by backend/gpu/*.cu.

#include <cmath>
#include <cstdint>

#include "backend/gpu/language.h"
#include "backend/ops.h"

namespace zaya::gpu {

inline constexpr unsigned kThreads = 256;  // threads per block of the one-item-per-thread kernels
inline constexpr int kMaxWarps = 1024 / 32;

inline Stream as_stream(void* stream) {
  return static_cast<Stream>(stream);
}

// A Destination (ops.h) as a kernel writes it: f32 values, or the bf16 bits of each, rounded as it is
// stored; the other pointer is null.
struct Output {
  float* f32;
  uint16_t* bf16;
  ZAYA_DEVICE void store(int64_t i, float value) const {
    if (bf16) {
      bf16[i] = bf16_bits(value);
    } else {
      f32[i] = value;
    }
  }
  ZAYA_DEVICE float load(int64_t i) const { return bf16 ? bf16_value(bf16[i]) : f32[i]; }
};

inline Output output(Destination dst) {
  return Output{dst.f32(), reinterpret_cast<uint16_t*>(dst.bf16())};
}

ZAYA_DEVICE float warp_sum(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value += shuffle_xor(value, offset);
  return value;
}

ZAYA_DEVICE float warp_max(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value = fmaxf(value, shuffle_xor(value, offset));
  return value;
}

ZAYA_DEVICE double warp_sum(double value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value += shuffle_xor(value, offset);
  return value;
}

// The sum (or max) of `value` over every thread of the block, returned to all of them. The order is fixed
// by the block's shape, so results repeat exactly. `scratch` is shared memory of kMaxWarps + 1 values,
// free for reuse once this returns. Every thread of the block must call it.
template <class T, class Combine>
ZAYA_DEVICE T block_reduce(T value, T* scratch, Combine combine, T identity) {
  const int warps = (block_dim_x() * block_dim_y() + kWarpSize - 1) / kWarpSize;
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    value = combine(value, shuffle_xor(value, offset));
  if (lane() == 0) scratch[warp()] = value;
  sync_threads();
  if (warp() == 0) {
    T total = lane() < warps ? scratch[lane()] : identity;
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
      total = combine(total, shuffle_xor(total, offset));
    if (lane() == 0) scratch[kMaxWarps] = total;
  }
  sync_threads();
  const T result = scratch[kMaxWarps];
  sync_threads();
  return result;
}

struct Add {
  template <class T>
  ZAYA_DEVICE T operator()(T a, T b) const {
    return a + b;
  }
};
struct Max {
  ZAYA_DEVICE float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <class T>
ZAYA_DEVICE T block_sum(T value, T* scratch) {
  return block_reduce(value, scratch, Add{}, T(0));
}
ZAYA_DEVICE float block_max(float value, float* scratch) {
  return block_reduce(value, scratch, Max{}, -INFINITY);
}

// *sum += values[0], ..., values[count - 1], added by one block of kBlockThreads in a fixed order (launch
// with one block). A template so that every file that includes this header may hold its copy.
template <unsigned kBlockThreads>
ZAYA_KERNEL(kBlockThreads)
void add_values_kernel(const double* values, int64_t count, double* sum) {
  ZAYA_SHARED_ARRAY(scratch, double[kMaxWarps + 1]);
  double total = 0;
  for (int64_t i = thread_x(); i < count; i += block_dim_x()) total += values[i];
  total = block_sum(total, scratch);
  if (thread_x() == 0) *sum += total;
}

// ---- sums over rows ----------------------------------------------------------------------------------
// acc[j] += sum over rows r of term(r, j), for a matrix of `rows` x `n`: first partial sums over chunks of
// kChunkRows rows (blocks of 32 columns x 8 row lanes), then the chunks in order. The same inputs give the
// same bits on every run and every GPU of a kind.
inline constexpr int kChunkRows = 256;
inline constexpr unsigned kColumnTile = 32, kRowLanes = 8;

template <class Term>
ZAYA_KERNEL(kColumnTile* kRowLanes)
void column_partial_sums(Term term, int64_t rows, int64_t n, float* partial) {
  ZAYA_SHARED_ARRAY(lanes, float[kRowLanes][kColumnTile]);
  const int64_t column = int64_t(block_x()) * kColumnTile + thread_x();
  const int64_t chunk = block_y();
  const int64_t first = chunk * kChunkRows, last = first + kChunkRows < rows ? first + kChunkRows : rows;
  float sum = 0;
  if (column < n) {
    for (int64_t r = first + thread_y(); r < last; r += kRowLanes) sum += term(r, column);
  }
  lanes[thread_y()][thread_x()] = sum;
  sync_threads();
  if (thread_y() == 0 && column < n) {
    float total = 0;
    for (unsigned lane_row = 0; lane_row < kRowLanes; ++lane_row) total += lanes[lane_row][thread_x()];
    partial[chunk * n + column] = total;
  }
}

// A template so that every file that includes this header may hold its copy.
template <int = 0>
ZAYA_KERNEL(kThreads)
void add_column_partials(const float* partial, int64_t chunks, int64_t n, float* acc) {
  const int64_t column = int64_t(block_x()) * block_dim_x() + thread_x();
  if (column >= n) return;
  float total = 0;
  for (int64_t chunk = 0; chunk < chunks; ++chunk) total += partial[chunk * n + column];
  acc[column] += total;
}

// The term of a plain column sum: values[r, j] with row stride ld.
struct StridedValue {
  const float* values;
  int64_t ld;
  ZAYA_DEVICE float operator()(int64_t r, int64_t j) const { return values[r * ld + j]; }
};

// Needs chunks(rows) * n floats of device scratch.
inline int64_t column_chunks(int64_t rows) {
  return (rows + kChunkRows - 1) / kChunkRows;
}

template <class Term>
void sum_columns(const Term& term, int64_t rows, int64_t n, float* acc, float* scratch, Stream stream) {
  if (rows == 0 || n == 0) return;
  const int64_t chunks = column_chunks(rows);
  launch("column_partial_sums", column_partial_sums<Term>,
         {unsigned((n + kColumnTile - 1) / kColumnTile), unsigned(chunks), 1}, {kColumnTile, kRowLanes}, 0,
         stream, term, rows, n, scratch);
  launch("add_column_partials", add_column_partials<>, cover(n, kThreads), {kThreads, 1}, 0, stream, scratch,
         chunks, n, acc);
}

}  // namespace zaya::gpu
