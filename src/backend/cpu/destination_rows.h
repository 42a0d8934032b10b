#pragma once
// Rows an op computes in f32 and writes to a Destination (ops.h): in place when it is f32; when it is bf16,
// through a row of the thread's own that is then rounded into it, the bits a separate rounding pass gives.

#include <cstdint>
#include <vector>

#include "backend/cpu/bf16_products.h"
#include "backend/ops.h"

namespace zaya {

// For each of `rows` rows of n values, in parallel over rows: fill(r, out) writes row r's values to out [n].
template <class Fill>
void write_rows(Destination dst, int64_t rows, int64_t n, const Fill& fill) {
  if (float* f32 = dst.f32()) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) fill(r, f32 + r * n);
    return;
  }
  BFloat16* bf16 = dst.bf16();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    // [n] this thread's row before rounding, kept from call to call (the pool's threads live on), so that a
    // step allocates nothing here once its widest row has been seen.
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(n));
    fill(r, row.data());
    round_to_bf16(row.data(), n, bf16 + r * n);
  }
}

}  // namespace zaya
