#pragma once
// bf16 matrix products on the CPU: oneDNN's matmul primitive (AMX or AVX512-BF16 kernels, f32
// accumulation), created once per shape and kept, run on one thread per piece of a product
// (product_pieces.h). f32 operands are rounded to bf16 once per product, before its pieces run.
//
// The rows an expert receives change every step. Sizes of m and k on a short list (bf16_fixed_size) get
// primitives of their own (creating one costs ~0.5 ms, as much as the product of an expert's rows); any
// other size shares a primitive whose m or k is given at run time. A run thus creates a bounded number of
// primitives, and every operand is read in place.

#include <cstdint>
#include <memory>

#include "backend/cpu/product_pieces.h"
#include "backend/ops.h"

namespace zaya {

class Bf16Products {
 public:
  Bf16Products();
  ~Bf16Products();

  // As Ops::gemm with Precision::BF16, run as `split` says; m, n, k >= 1. Thread-safe: the threads of an
  // OpenMP parallel loop run their products at once (each with its own workspace); other callers take turns.
  void run(const Product& product, ProductSplit split);
  // Primitives created so far (bounded by the fixed sizes; tested).
  int64_t primitives() const;

 private:
  struct State;
  // One piece with bf16 operands, on the calling thread.
  void multiply(const Product& piece);

  std::unique_ptr<State> state_;
};

// dst[i] = bf16(src[i]), round to nearest even, a NaN kept a NaN: the bits of core's f32_to_bf16, in
// vectors (in hardware where the CPU has AVX512-BF16). Serial: callers split the work over threads.
void round_to_bf16(const float* src, int64_t count, BFloat16* dst);

// Whether a size of m or k gets primitives of its own: multiples of 16 up to 256, then of 1/16th of the
// power of two at or below it (16 sizes per doubling).
bool bf16_fixed_size(int64_t size);

Bf16Products& cpu_bf16_products();

}  // namespace zaya
