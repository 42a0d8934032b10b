#pragma once
// The machine's own matrix-product speed, measured through the backend: the denominator of MFU.

#include <cstdint>

namespace zaya {

class Ops;

// FLOP/s of a square f32 GEMM of side `size`: the median of `repeats` timed runs after one warm-up.
double measure_gemm_flops(Ops& ops, int64_t size = 1024, int repeats = 15);

}  // namespace zaya
