#include "gpu/gpu_test_util.h"

#include <cmath>
#include <random>
#include <sstream>

namespace zaya::test {

std::vector<float> random_values(size_t count, uint64_t seed, float scale) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<float> uniform(-scale, scale);
  std::vector<float> values(count);
  for (float& value : values) value = uniform(engine);
  return values;
}

testing::AssertionResult close(const std::vector<float>& gpu, const std::vector<float>& cpu, double atol,
                               double rtol) {
  if (gpu.size() != cpu.size()) {
    return testing::AssertionFailure() << "sizes differ: " << gpu.size() << " on the GPU, " << cpu.size();
  }
  double worst = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double g = gpu[i], c = cpu[i];
    const bool same_special = (std::isnan(g) && std::isnan(c)) || (std::isinf(g) && g == c);
    if (same_special) continue;
    const double error = std::abs(g - c);
    if (!(error <= atol + rtol * std::abs(c))) {
      return testing::AssertionFailure()
             << "element " << i << " of " << gpu.size() << ": GPU " << g << ", CPU " << c << " (error "
             << error << ", bound " << atol + rtol * std::abs(c) << ")";
    }
    worst = std::max(worst, error);
  }
  return testing::AssertionSuccess() << "largest error " << worst;
}

void GpuOpsTest::SetUp() {
  if (gpu::device_count() == 0) GTEST_SKIP() << "no GPU (" << gpu::language_name() << " build)";
}

}  // namespace zaya::test
