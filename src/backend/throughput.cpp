#include "backend/throughput.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "backend/ops.h"
#include "core/buffer.h"
#include "core/rng.h"

namespace zaya {

double measure_gemm_flops(Ops& ops, Precision precision, int64_t size, int repeats) {
  const size_t n = size_t(size * size);
  AlignedBuffer a(n * sizeof(float)), b(n * sizeof(float)), c(n * sizeof(float));
  const RandomStream rng(1, RngPurpose::Test, 0);
  for (size_t i = 0; i < n; ++i) {
    a.as<float>()[i] = rng.uniform(i);
    b.as<float>()[i] = rng.uniform(n + i);
  }
  // In bf16 the operands are stored as bf16, as the model's weights are: the rate is the product's alone.
  AlignedBuffer a16(n * sizeof(BFloat16)), b16(n * sizeof(BFloat16));
  ops.convert_to_bf16(a.as<float>(), int64_t(n), a16.as<BFloat16>());
  ops.convert_to_bf16(b.as<float>(), int64_t(n), b16.as<BFloat16>());
  const bool bf16 = precision == Precision::BF16;
  const Operand a_in = bf16 ? Operand(a16.as<BFloat16>()) : Operand(a.as<float>());
  const Operand b_in = bf16 ? Operand(b16.as<BFloat16>()) : Operand(b.as<float>());
  std::vector<double> seconds;
  for (int run = 0; run <= repeats; ++run) {
    const auto start = std::chrono::steady_clock::now();
    ops.gemm(precision, Trans::No, Trans::No, size, size, size, 1.0f, a_in, size, b_in, size, 0.0f,
             c.as<float>(), size);
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    if (run > 0) seconds.push_back(elapsed.count());  // run 0 warms caches and oneDNN's kernel selection
  }
  return 2.0 * double(size) * double(size) * double(size) / *std::min_element(seconds.begin(), seconds.end());
}

}  // namespace zaya
