// The products family: matrix products through the vendor's library (blas.h; loops in the emulator), the
// experts' grouped products (our kernels, on the matrix units), the rounding of their bf16 operands, and
// the bias add and reduction that go with linear layers.

#include <type_traits>

#include "backend/gpu/gpu_ops.h"
#include "backend/gpu/kernel_util.h"
#include "core/error.h"

namespace zaya {
namespace {

// dst [rows, cols] packed = bf16(src [rows, cols] with row stride ld).
ZAYA_KERNEL(gpu::kThreads)
void round_rows_to_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld, uint16_t* dst) {
  const int64_t i = int64_t(gpu::block_x()) * gpu::block_dim_x() + gpu::thread_x();
  if (i >= rows * cols) return;
  dst[i] = gpu::bf16_bits(src[(i / cols) * ld + i % cols]);
}

ZAYA_KERNEL(gpu::kThreads)
void add_bias_kernel(float* y, int64_t rows, int64_t n, int64_t ldy, const float* bias) {
  const int64_t i = int64_t(gpu::block_x()) * gpu::block_dim_x() + gpu::thread_x();
  if (i < rows * n) y[(i / n) * ldy + i % n] += bias[i % n];
}

// ---- the experts' grouped products ----------------------------------------------------------------------
// A block computes a kTile x kTile tile of one group's product, stepping along the summed dimension in
// chunks of kTileK that its threads first stage in shared memory, k contiguous: bf16 bits that the warps
// multiply on the matrix units (gpu::mma) in a bf16 product, floats that each thread sums in an f32 one.
// Every sum runs in a fixed order, so results repeat exactly. Blocks find their group from the offsets in
// device memory: no host reads them, and a block with no rows to do returns.
constexpr int kTile = 64, kTileK = 32;
constexpr int kPitch = kTileK + 8;  // a staged row's stride: a multiple of 4 (fragment loads), off the banks
constexpr unsigned kTileThreads = 128;

// Where a tile's elements come from: element (i, kk) of the chunk at k0 is data[base + i * row_step +
// (k0 + kk) * k_step] while i < rows and k0 + kk < depth, else 0.
struct TileSource {
  const void* data;
  bool bf16;
  int64_t base, row_step, k_step, rows, depth;
};

template <class Value>
struct StagedTiles {
  Value a[kTile][kPitch];  // [m][k]
  Value b[kTile][kPitch];  // [n][k]
};

template <class Value>
ZAYA_DEVICE Value staged_value(const TileSource& s, int64_t index) {
  if constexpr (std::is_same_v<Value, uint16_t>) {
    return s.bf16 ? static_cast<const uint16_t*>(s.data)[index]
                  : gpu::bf16_bits(static_cast<const float*>(s.data)[index]);
  } else {
    return static_cast<const float*>(s.data)[index];  // an f32 product's operands are f32
  }
}

// One chunk of one operand into shared memory, consecutive threads reading consecutive addresses.
template <class Value>
ZAYA_DEVICE void stage(const TileSource& s, int64_t k0, Value (*tile)[kPitch]) {
  const bool along_k = s.k_step == 1;
  for (int e = gpu::linear_thread(); e < kTile * kTileK; e += int(kTileThreads)) {
    const int i = along_k ? e / kTileK : e % kTile, kk = along_k ? e % kTileK : e / kTile;
    const int64_t k = k0 + kk;
    tile[i][kk] =
        i < s.rows && k < s.depth ? staged_value<Value>(s, s.base + i * s.row_step + k * s.k_step) : Value(0);
  }
}

// bf16: the warps split the tile into two rows of warps, each warp kRowTiles x kColTiles of the matrix
// units' 16 x 16 tiles.
constexpr int kTileWarps = int(kTileThreads) / gpu::kWarpSize;
constexpr int kRowTiles = kTile / gpu::kMmaTile / 2;
constexpr int kColTiles = kTile / gpu::kMmaTile / (kTileWarps / 2);

struct MatrixUnitSums {
  gpu::MmaAccumulator acc[kRowTiles][kColTiles] = {};

  ZAYA_DEVICE int row0() const { return gpu::warp() / (kTileWarps / 2) * kRowTiles * gpu::kMmaTile; }
  ZAYA_DEVICE int col0() const { return gpu::warp() % (kTileWarps / 2) * kColTiles * gpu::kMmaTile; }

  ZAYA_DEVICE void add(const StagedTiles<uint16_t>& tiles) {
    for (int ks = 0; ks < kTileK; ks += gpu::kMmaTile) {
      gpu::MmaFragment a[kRowTiles], b[kColTiles];
      for (int i = 0; i < kRowTiles; ++i)
        a[i] = gpu::load_mma_a(&tiles.a[row0() + i * gpu::kMmaTile][ks], kPitch);
      for (int j = 0; j < kColTiles; ++j)
        b[j] = gpu::load_mma_b(&tiles.b[col0() + j * gpu::kMmaTile][ks], kPitch);
      for (int i = 0; i < kRowTiles; ++i) {
        for (int j = 0; j < kColTiles; ++j) gpu::mma(acc[i][j], a[i], b[j]);
      }
    }
  }

  // f(row, col, sum) for each of this thread's results in the tile.
  template <class F>
  ZAYA_DEVICE void each(F f) const {
    for (int i = 0; i < kRowTiles; ++i) {
      for (int j = 0; j < kColTiles; ++j) {
        for (int e = 0; e < gpu::kMmaResults; ++e) {
          const gpu::TilePlace p = gpu::mma_acc_place(gpu::lane(), e);
          f(row0() + i * gpu::kMmaTile + p.row, col0() + j * gpu::kMmaTile + p.col, acc[i][j].values[e]);
        }
      }
    }
  }
};

// f32: thread t sums rows t / 16 + 8 i and columns t % 16 + 16 j of the tile.
struct ScalarSums {
  static constexpr int kRows = kTile / 8, kCols = kTile / 16;
  float acc[kRows][kCols] = {};

  ZAYA_DEVICE void add(const StagedTiles<float>& tiles) {
    const int r0 = gpu::linear_thread() / 16, c0 = gpu::linear_thread() % 16;
    for (int kk = 0; kk < kTileK; ++kk) {
      float a[kRows], b[kCols];
      for (int i = 0; i < kRows; ++i) a[i] = tiles.a[r0 + 8 * i][kk];
      for (int j = 0; j < kCols; ++j) b[j] = tiles.b[c0 + 16 * j][kk];
      for (int i = 0; i < kRows; ++i) {
        for (int j = 0; j < kCols; ++j) acc[i][j] += a[i] * b[j];
      }
    }
  }

  template <class F>
  ZAYA_DEVICE void each(F f) const {
    const int r0 = gpu::linear_thread() / 16, c0 = gpu::linear_thread() % 16;
    for (int i = 0; i < kRows; ++i) {
      for (int j = 0; j < kCols; ++j) f(r0 + 8 * i, c0 + 16 * j, acc[i][j]);
    }
  }
};
static_assert(kTileThreads == 128, "ScalarSums spreads a 64 x 64 tile over 8 x 16 threads");

template <class Value>
using TileSums = std::conditional_t<std::is_same_v<Value, uint16_t>, MatrixUnitSums, ScalarSums>;

// sums += the tile of A B^T over the summed dimension [0, depth).
template <class Value>
ZAYA_DEVICE void multiply_tiles(const TileSource& a, const TileSource& b, int64_t depth,
                                TileSums<Value>& sums) {
  ZAYA_SHARED_ARRAY(tiles, StagedTiles<Value>);
  for (int64_t k0 = 0; k0 < depth; k0 += kTileK) {
    stage(a, k0, tiles.a);
    stage(b, k0, tiles.b);
    gpu::sync_threads();
    sums.add(tiles);
    gpu::sync_threads();  // the tiles are staged again
  }
}

// Grid: x over the row tiles of the groups in turn, then of the rows past them (a worst case: blocks past
// the last tile return), y over the column tiles.
template <class Value>
ZAYA_KERNEL(kTileThreads)
void grouped_gemm_kernel(const int64_t* offsets, int64_t groups, int64_t rows, int64_t n, int64_t k,
                         TileSource a, TileSource b, int64_t b_stride, float* c, int64_t ldc) {
  int64_t tile = gpu::block_x(), g = 0;
  for (; g < groups; ++g) {
    const int64_t tiles = (offsets[g + 1] - offsets[g] + kTile - 1) / kTile;
    if (tile < tiles) break;
    tile -= tiles;
  }
  const int64_t first = offsets[g] + tile * kTile, end = g < groups ? offsets[g + 1] : rows;
  if (first >= end) return;
  const int64_t col0 = int64_t(gpu::block_y()) * kTile;
  const auto store = [&](int i, int j, float value) {
    if (first + i < end && col0 + j < n) c[(first + i) * ldc + col0 + j] = value;
  };
  if (g == groups) {  // rows of no group: zeros
    ScalarSums{}.each(store);
    return;
  }
  a.base = first * a.row_step;
  a.rows = end - first;
  b.base = g * b_stride + col0 * b.row_step;
  b.rows = n - col0;
  TileSums<Value> sums;
  multiply_tiles<Value>(a, b, k, sums);
  sums.each(store);
}

// Grid: x over m's tiles, y over n's, z over the groups; c [groups, m, n] accumulates.
template <class Value>
ZAYA_KERNEL(kTileThreads)
void grouped_weight_gradient_kernel(const int64_t* offsets, int64_t m, int64_t n, TileSource a, TileSource b,
                                    float* c) {
  const int64_t g = gpu::block_z(), first = offsets[g], count = offsets[g + 1] - first;
  if (count == 0) return;
  const int64_t row0 = int64_t(gpu::block_x()) * kTile, col0 = int64_t(gpu::block_y()) * kTile;
  a.base = first * a.k_step + row0;
  a.rows = m - row0;
  a.depth = count;
  b.base = first * b.k_step + col0;
  b.rows = n - col0;
  b.depth = count;
  TileSums<Value> sums;
  multiply_tiles<Value>(a, b, count, sums);
  float* cg = c + g * m * n;  // [m, n]
  sums.each([&](int i, int j, float value) {
    if (row0 + i < m && col0 + j < n) cg[(row0 + i) * n + col0 + j] += value;
  });
}

unsigned tiles_over(int64_t count) {
  return unsigned((count + kTile - 1) / kTile);
}

}  // namespace

void GpuOps::grouped_gemm(Precision precision, Trans trans_b, const int64_t* offsets, int64_t groups,
                          int64_t rows, int64_t n, int64_t k, Operand a, int64_t lda, Operand b,
                          int64_t b_stride, int64_t ldb, float* c, int64_t ldc) {
  if (rows == 0 || n == 0) return;
  const bool bf16 = precision == Precision::BF16;
  if (!bf16 && (a.type != DType::F32 || b.type != DType::F32))
    throw Error("an f32 product was given a bf16 operand");
  // A [rows, k] by rows; B_g [n, k] when transposed, else [k, n]. Bases and row counts are the block's.
  const TileSource as{a.data, a.type == DType::BF16, 0, lda, 1, 0, k};
  const TileSource bs = trans_b == Trans::Yes ? TileSource{b.data, b.type == DType::BF16, 0, ldb, 1, 0, k}
                                              : TileSource{b.data, b.type == DType::BF16, 0, 1, ldb, 0, k};
  // The groups' row tiles and the rows past them: at most one partial tile per part more than rows fill.
  const gpu::Grid grid{tiles_over(rows) + unsigned(groups), tiles_over(n), 1};
  const gpu::Stream stream = gpu::as_stream(stream_);
  if (bf16) {
    gpu::launch("grouped_gemm", grouped_gemm_kernel<uint16_t>, grid, {kTileThreads}, 0, stream, offsets,
                groups, rows, n, k, as, bs, b_stride, c, ldc);
  } else {
    gpu::launch("grouped_gemm", grouped_gemm_kernel<float>, grid, {kTileThreads}, 0, stream, offsets, groups,
                rows, n, k, as, bs, b_stride, c, ldc);
  }
}

void GpuOps::grouped_weight_gradient(Precision precision, const int64_t* offsets, int64_t groups, int64_t m,
                                     int64_t n, Operand a, int64_t lda, Operand b, int64_t ldb, float* c) {
  if (groups == 0 || m == 0 || n == 0) return;
  const bool bf16 = precision == Precision::BF16;
  if (!bf16 && (a.type != DType::F32 || b.type != DType::F32))
    throw Error("an f32 product was given a bf16 operand");
  // Both read down their rows (the summed dimension): element (i, r) at r * ld + i.
  const TileSource as{a.data, a.type == DType::BF16, 0, 1, lda, 0, 0};
  const TileSource bs{b.data, b.type == DType::BF16, 0, 1, ldb, 0, 0};
  const gpu::Grid grid{tiles_over(m), tiles_over(n), unsigned(groups)};
  const gpu::Stream stream = gpu::as_stream(stream_);
  if (bf16) {
    gpu::launch("grouped_weight_gradient", grouped_weight_gradient_kernel<uint16_t>, grid, {kTileThreads}, 0,
                stream, offsets, m, n, as, bs, c);
  } else {
    gpu::launch("grouped_weight_gradient", grouped_weight_gradient_kernel<float>, grid, {kTileThreads}, 0,
                stream, offsets, m, n, as, bs, c);
  }
}

bool GpuOps::fast_bf16() const {
  return true;
}  // every GPU this backend targets has bf16 matrix units

void GpuOps::convert_to_bf16(const float* src, int64_t count, BFloat16* dst) {
  gpu::launch("round_rows_to_bf16", round_rows_to_bf16, gpu::cover(count, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), src, int64_t(1), count, count, reinterpret_cast<uint16_t*>(dst));
}

const void* GpuOps::as_bf16(Operand operand, int64_t rows, int64_t cols, int64_t& ld, int slot) {
  if (operand.type == DType::BF16) return operand.data;
  AlignedBuffer& buffer = bf16_operands_[slot];
  const size_t bytes = size_t(rows * cols) * sizeof(uint16_t);
  if (buffer.size() < bytes) {
    buffer = AlignedBuffer();
    buffer = AlignedBuffer(bytes, memory());
  }
  gpu::launch("round_rows_to_bf16", round_rows_to_bf16, gpu::cover(rows * cols, gpu::kThreads),
              {gpu::kThreads}, 0, gpu::as_stream(stream_), static_cast<const float*>(operand.data), rows,
              cols, ld, buffer.as<uint16_t>());
  ld = cols;
  return buffer.data();
}

void GpuOps::gemm(Precision precision, Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k,
                  float alpha, Operand a, int64_t lda, Operand b, int64_t ldb, float beta, float* c,
                  int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (precision == Precision::F32) {
    if (a.type != DType::F32 || b.type != DType::F32) throw Error("an f32 product was given a bf16 operand");
    blas_->gemm(DType::F32, trans_a, trans_b, m, n, k, alpha, a.data, lda, 0, b.data, ldb, 0, beta, c, ldc, 0,
                1, stream_);
    return;
  }
  // op(A) is [m, k]: A is stored [m, k], or [k, m] when transposed; likewise B.
  const bool ta = trans_a == Trans::Yes, tb = trans_b == Trans::Yes;
  const void* a16 = as_bf16(a, ta ? k : m, ta ? m : k, lda, 0);
  const void* b16 = as_bf16(b, tb ? n : k, tb ? k : n, ldb, 1);
  blas_->gemm(DType::BF16, trans_a, trans_b, m, n, k, alpha, a16, lda, 0, b16, ldb, 0, beta, c, ldc, 0, 1,
              stream_);
}

void GpuOps::add_bias(float* y, int64_t rows, int64_t n, int64_t ldy, const float* bias) {
  gpu::launch("add_bias", add_bias_kernel, gpu::cover(rows * n, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), y, rows, n, ldy, bias);
}

void GpuOps::bias_backward(const float* dy, int64_t rows, int64_t n, int64_t ldy, float* dbias) {
  gpu::sum_columns(gpu::StridedValue{dy, ldy}, rows, n, dbias,
                   scratch(gpu::column_chunks(rows) * n * sizeof(float)), gpu::as_stream(stream_));
}

}  // namespace zaya
