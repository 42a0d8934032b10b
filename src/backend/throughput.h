#pragma once
// The machine's own matrix-product speed, measured through the backend: the denominator of MFU.

#include <cstdint>

#include "core/precision.h"

namespace zaya {

class Ops;

// FLOP/s of a square GEMM of side `size` (0: the backend's Ops::rate_probe_size()) in `precision`: the
// fastest of `repeats` timed runs after one warm-up. Other work on a shared machine only ever slows a run
// down, so the fastest is the closest to the machine's rate (a median read from a busy moment made MFU come
// out high).
double measure_gemm_flops(Ops& ops, Precision precision = Precision::F32, int64_t size = 0, int repeats = 15);

}  // namespace zaya
