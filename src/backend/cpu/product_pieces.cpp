#include "backend/cpu/product_pieces.h"

#include <omp.h>

#include <algorithm>
#include <vector>

namespace zaya {

namespace {

// Below this many multiply-adds a product is one piece: waking the threads costs more than they save.
constexpr double kSplitFromMacs = double(int64_t(1) << 21);
// Above it, at least this many pieces (so that up to 4 threads share the product evenly), then one per
// kPieceMacs, up to kMostPieces. oneDNN repacks each piece's operands, so pieces smaller than the threads
// need cost time: on 2 cores, `medium`'s products in 512-wide tiles ran as fast as oneDNN's own threading,
// in 128-wide tiles 20-30% slower.
constexpr int64_t kFewestPieces = 4, kMostPieces = 64;
constexpr double kPieceMacs = double(int64_t(1) << 28);
// A tile is halved only while its halves keep this many rows and columns; then the sum is cut into chunks of
// at least kSmallestChunk, whose partial sums cost a pass over C each.
constexpr int64_t kSmallestTileSide = 128, kSmallestChunk = 512;
// Tile sides and chunk depths are multiples of this (the kernels' register blocks divide it).
constexpr int64_t kAlign = 64;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The extent of each of `parts` parts of `size`, rounded up to kAlign (the last part takes what is left).
int64_t part_extent(int64_t size, int64_t parts) {
  return std::min(size, ceil_div(ceil_div(size, parts), kAlign) * kAlign);
}

}  // namespace

ProductPieces plan_product_pieces(int64_t m, int64_t n, int64_t k) {
  const double macs = double(m) * double(n) * double(k);
  int64_t wanted = 1;
  if (macs >= kSplitFromMacs) {
    const double fewest = std::min(double(kFewestPieces), macs / kSplitFromMacs);
    wanted = int64_t(std::clamp(macs / kPieceMacs, fewest, double(kMostPieces)));
  }
  int64_t row_parts = 1, col_parts = 1, depth_parts = 1;
  while (row_parts * col_parts * depth_parts < wanted) {
    const int64_t rows = m / row_parts, cols = n / col_parts;
    if (rows >= cols && rows >= 2 * kSmallestTileSide) {
      row_parts *= 2;
    } else if (cols >= 2 * kSmallestTileSide) {
      col_parts *= 2;
    } else if (rows >= 2 * kSmallestTileSide) {
      row_parts *= 2;
    } else if (k / depth_parts >= 2 * kSmallestChunk) {
      depth_parts *= 2;
    } else {
      break;
    }
  }
  ProductPieces pieces;
  pieces.tile_rows = part_extent(m, row_parts);
  pieces.tile_cols = part_extent(n, col_parts);
  pieces.chunk_depth = part_extent(k, depth_parts);
  pieces.row_tiles = ceil_div(m, pieces.tile_rows);
  pieces.col_tiles = ceil_div(n, pieces.tile_cols);
  pieces.depth_chunks = ceil_div(k, pieces.chunk_depth);
  return pieces;
}

ProductPieces product_pieces(ProductSplit split, int64_t m, int64_t n, int64_t k) {
  if (split == ProductSplit::Pieces) return plan_product_pieces(m, n, k);
  ProductPieces whole;
  whole.tile_rows = m;
  whole.tile_cols = n;
  whole.chunk_depth = k;
  return whole;
}

namespace detail {

bool in_parallel_region() {
  return omp_in_parallel() != 0;
}

Product product_piece(const Product& product, const ProductPieces& pieces, int64_t index, float* partial) {
  const int64_t chunk = index % pieces.depth_chunks, tile = index / pieces.depth_chunks;
  const int64_t i0 = tile / pieces.col_tiles * pieces.tile_rows,
                j0 = tile % pieces.col_tiles * pieces.tile_cols;
  const int64_t p0 = chunk * pieces.chunk_depth;
  Product piece = product;
  piece.m = std::min(pieces.tile_rows, product.m - i0);
  piece.n = std::min(pieces.tile_cols, product.n - j0);
  piece.k = std::min(pieces.chunk_depth, product.k - p0);
  // op(A) [m, k] is stored [m, k] or, transposed, [k, m]; op(B) [k, n] is stored [k, n] or [n, k].
  piece.a = product.a.offset(product.trans_a == Trans::Yes ? p0 * product.lda + i0 : i0 * product.lda + p0);
  piece.b = product.b.offset(product.trans_b == Trans::Yes ? j0 * product.ldb + p0 : p0 * product.ldb + j0);
  if (partial) {  // the chunk's own sum, scaled and added to C once every chunk is in
    piece.alpha = 1;
    piece.beta = 0;
    piece.c = partial + (chunk * product.m + i0) * product.n + j0;
    piece.ldc = product.n;
  } else {
    piece.c = product.c + i0 * product.ldc + j0;
  }
  return piece;
}

float* partial_sums(const Product& product, const ProductPieces& pieces) {
  // Grows to the largest product split this way, then stays: products are not allocated per call.
  thread_local std::vector<float> partial;
  const size_t size = size_t(pieces.depth_chunks * product.m * product.n);
  if (partial.size() < size) partial.resize(size);
  return partial.data();
}

void add_partial_sums(const Product& product, const ProductPieces& pieces, const float* partial) {
  const int64_t m = product.m, n = product.n, chunks = pieces.depth_chunks;
  const float alpha = product.alpha, beta = product.beta;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    float* row = product.c + i * product.ldc;
    const float* first = partial + i * n;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      float sum = first[j];
      for (int64_t chunk = 1; chunk < chunks; ++chunk) sum += first[chunk * m * n + j];
      // beta = 0 reads nothing of C (it may hold anything, NaN included), as in BLAS.
      row[j] = alpha * sum + (beta == 0.0f ? 0.0f : beta * row[j]);
    }
  }
}

}  // namespace detail

}  // namespace zaya
