#pragma once
// The machine's own matrix-product speed, measured through the backend: the denominator of MFU.

#include <cstdint>
#include <functional>
#include <string>

#include "core/precision.h"

namespace zaya {

class Ops;

// FLOP/s of a square GEMM of side `size` (0: the backend's Ops::rate_probe_size()) in `precision`: the
// fastest of `repeats` timed runs after one warm-up. Other work on a shared machine only ever slows a run
// down, so the fastest is the closest to the machine's rate (a median read from a busy moment made MFU come
// out high).
double measure_gemm_flops(Ops& ops, Precision precision = Precision::F32, int64_t size = 0, int repeats = 15);

// A run's MFU denominator: the best of repeated measurements, never lowered. A measurement taken while
// another process holds a core reads low, and every MFU after it high (a demo started on a busy machine
// printed 104-118%), so the rate is measured in rounds at start until a round no longer raises it, and again
// whenever a step shows it too low (an MFU above 100%) or the machine has become quieter (the thread
// governor gave a thread back).
class GemmRate {
 public:
  // `measure` takes one measurement in FLOP/s; `method` says what it measures, for the log.
  GemmRate(std::function<double()> measure, std::string method);

  double flops() const { return best_; }
  // "bf16 GEMM 1024^3 on 2 threads: 441 GFLOP/s, the best of 4 measurements (each the fastest of 15 runs)"
  std::string describe() const;
  // One more measurement; returns whether it raised the rate.
  bool remeasure();
  // The MFU of a step that ran `model_flops` FLOP/s. Above 100% the rate read low: it is measured again, and
  // where that still falls short, raised to the model's own rate (the machine did that much work). So the
  // MFU returned is at most 1. `raised` says whether the rate changed.
  double mfu(double model_flops, bool* raised = nullptr);

 private:
  std::function<double()> measure_;
  std::string method_;
  double best_ = 0;
  int measurements_ = 0;
};

// The rate of `ops`'s products in `precision` on `threads` threads (all of the run's, whatever the thread
// governor has left it), each measurement measure_gemm_flops's.
GemmRate gemm_rate(Ops& ops, Precision precision, int threads);

}  // namespace zaya
