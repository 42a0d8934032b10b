#pragma once
// A matrix product on the CPU cut into pieces whose boundaries depend on its shape alone, so that its bits
// are the same whatever the thread count. oneDNN splits a product for the threads it runs on, and for some
// shapes (a small output over a deep sum, a weight gradient's) it splits the sum itself: the bits then change
// with the thread count. Here each piece is one product run by oneDNN on one thread (its summation order is
// then a function of the piece's shape), the pieces are handed to the threads in any order, and a sum split
// into chunks is added up in chunk order.

#include <cstdint>
#include <exception>

#include "backend/ops.h"
#include "core/threads.h"

namespace zaya {

// The pieces of C [m, n] = alpha op(A) [m, k] op(B) [k, n] + beta C: tiles of C, and chunks of the sum.
struct ProductPieces {
  int64_t tile_rows = 0, tile_cols = 0, chunk_depth = 0;  // a piece's extent (the last ones' may be less)
  int64_t row_tiles = 1, col_tiles = 1, depth_chunks = 1;
  int64_t count() const { return row_tiles * col_tiles * depth_chunks; }
};

// From the shape alone: a product of fewer than 2^21 multiply-adds is one piece; a larger one gets up to 4
// pieces and then one per 2^28 multiply-adds (up to 64), by halving the longer side of the output's tiles
// while they stay at least 128 wide, then by cutting the sum into chunks of at least 512.
ProductPieces plan_product_pieces(int64_t m, int64_t n, int64_t k);

// How a product runs: in the pieces of plan_product_pieces over the threads (Ops::gemm), or whole on the
// calling thread (a kernel's products inside its own parallel loop). Either way its bits follow its shape.
enum class ProductSplit { Pieces, Whole };

// The pieces `split` gives a product of this shape.
ProductPieces product_pieces(ProductSplit split, int64_t m, int64_t n, int64_t k);

// One product as Ops::gemm takes it.
struct Product {
  Trans trans_a = Trans::No, trans_b = Trans::No;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1;
  Operand a;
  int64_t lda = 0;
  Operand b;
  int64_t ldb = 0;
  float beta = 0;
  float* c = nullptr;
  int64_t ldc = 0;
};

// Runs `product` as `pieces`, each through multiply(piece) with oneDNN held to the calling thread: over
// the OpenMP threads, or in turn on the calling thread inside a parallel region (nested regions run on one
// thread). A sum cut into chunks is added up in order, then scaled by alpha and added to beta C.
template <class Multiply>
void run_product_pieces(const Product& product, const ProductPieces& pieces, Multiply&& multiply);

namespace detail {
// The piece `index` of `product`: its operands, its C (or its chunk's partial sums) and its scalars.
Product product_piece(const Product& product, const ProductPieces& pieces, int64_t index, float* partial);
// Scratch for the chunks' partial sums, [depth_chunks, m, n], the calling thread's.
float* partial_sums(const Product& product, const ProductPieces& pieces);
// C = alpha (partial 0 + partial 1 + ...) + beta C, in chunk order.
void add_partial_sums(const Product& product, const ProductPieces& pieces, const float* partial);
bool in_parallel_region();
}  // namespace detail

template <class Multiply>
void run_product_pieces(const Product& product, const ProductPieces& pieces, Multiply&& multiply) {
  float* partial = pieces.depth_chunks > 1 ? detail::partial_sums(product, pieces) : nullptr;
  const int64_t count = pieces.count();
  auto run = [&](int64_t index) {
    const ThreadCountScope one_thread(1);  // oneDNN then runs the piece on the calling thread
    multiply(detail::product_piece(product, pieces, index, partial));
  };
  if (count == 1 || detail::in_parallel_region()) {
    for (int64_t index = 0; index < count; ++index) run(index);
  } else {
    // An exception must not leave a parallel region (that ends the process): the first one is kept.
    std::exception_ptr error;
#pragma omp parallel for schedule(dynamic)
    for (int64_t index = 0; index < count; ++index) {
      try {
        run(index);
      } catch (...) {
#pragma omp critical(zaya_product_piece_error)
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
  }
  if (partial) detail::add_partial_sums(product, pieces, partial);
}

}  // namespace zaya
