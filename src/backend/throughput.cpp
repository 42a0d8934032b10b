#include "backend/throughput.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>
#include <vector>

#include "backend/ops.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"

namespace zaya {

double measure_gemm_flops(Ops& ops, Precision precision, int64_t size, int repeats) {
  if (size == 0) size = ops.rate_probe_size();
  const size_t n = size_t(size * size);
  std::vector<float> host(2 * n);
  const RandomStream rng(1, RngPurpose::Test, 0);
  for (size_t i = 0; i < 2 * n; ++i) host[i] = rng.uniform(i);
  // The operands live where the backend's do ([2, size, size]: a then b); in bf16 they are stored as bf16,
  // as the model's weights are, so that the rate is the product's alone.
  AlignedBuffer ab(2 * n * sizeof(float), ops.memory()), c(n * sizeof(float), ops.memory());
  AlignedBuffer ab16(2 * n * sizeof(BFloat16), ops.memory());
  ops.copy_from_host(ab.data(), host.data(), 2 * n * sizeof(float));
  ops.convert_to_bf16(ab.as<float>(), int64_t(2 * n), ab16.as<BFloat16>());
  const bool bf16 = precision == Precision::BF16;
  const Operand a_in = bf16 ? Operand(ab16.as<BFloat16>()) : Operand(ab.as<float>());
  const Operand b_in = a_in.offset(int64_t(n));
  std::vector<double> seconds;
  for (int run = 0; run <= repeats; ++run) {
    ops.synchronize();
    const auto start = std::chrono::steady_clock::now();
    ops.gemm(precision, Trans::No, Trans::No, size, size, size, 1.0f, a_in, size, b_in, size, 0.0f,
             c.as<float>(), size);
    ops.synchronize();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    if (run > 0) seconds.push_back(elapsed.count());  // run 0 warms caches and the kernel selection
  }
  return 2.0 * double(size) * double(size) * double(size) / *std::min_element(seconds.begin(), seconds.end());
}

namespace {

// Start-up rounds end once a round raises the rate by less than this, or after kMostRounds.
constexpr double kSettled = 0.02;
constexpr int kMostRounds = 6;

}  // namespace

GemmRate::GemmRate(std::function<double()> measure, std::string method)
    : measure_(std::move(measure)), method_(std::move(method)) {
  best_ = measure_();
  measurements_ = 1;
  for (int round = 1; round < kMostRounds; ++round) {
    const double before = best_;
    remeasure();
    if (best_ <= before * (1 + kSettled)) break;
  }
}

bool GemmRate::remeasure() {
  const double measured = measure_();
  ++measurements_;
  if (!(measured > best_)) return false;
  best_ = measured;
  return true;
}

double GemmRate::mfu(double model_flops, bool* raised) {
  bool changed = false;
  if (model_flops > best_) {
    changed = remeasure();
    if (model_flops > best_) {
      best_ = model_flops;
      changed = true;
    }
  }
  if (raised) *raised = changed;
  return best_ > 0 ? model_flops / best_ : 0.0;
}

std::string GemmRate::describe() const {
  return cat(method_, ": ", std::lround(best_ / 1e9), " GFLOP/s, the best of ", measurements_,
             measurements_ == 1 ? " measurement" : " measurements");
}

GemmRate gemm_rate(Ops& ops, Precision precision, int threads) {
  const int64_t size = ops.rate_probe_size();
  return GemmRate(
      [&ops, precision, threads] {
        const ThreadCountScope scope(threads);
        return measure_gemm_flops(ops, precision);
      },
      cat(precision == Precision::BF16 ? "bf16 GEMM " : "sgemm ", size, "^3 on ", threads,
          threads == 1 ? " thread" : " threads", " (each measurement the fastest of 15 runs)"));
}

}  // namespace zaya
