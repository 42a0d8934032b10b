#include "backend/throughput.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "backend/ops.h"
#include "core/buffer.h"
#include "core/rng.h"

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

}  // namespace zaya
