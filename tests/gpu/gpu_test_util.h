#pragma once
// What the GPU backend's tests share: device copies of host values, random inputs, and the comparison of
// a GPU op's output with the CPU backend's. The same tests run in the emulator (label unit, everywhere) and
// on a real GPU (label gpu; skipped where there is none).

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/gpu/device.h"
#include "backend/ops.h"
#include "core/buffer.h"

namespace zaya::test {

// Values in device memory (the GPU backend's), filled from and read back to the host.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& values)
      : buffer_(values.size() * sizeof(T), gpu::ops().memory()), count_(values.size()) {
    gpu::ops().copy_from_host(buffer_.data(), values.data(), values.size() * sizeof(T));
  }
  explicit DeviceArray(size_t count) : DeviceArray(std::vector<T>(count)) {}
  T* data() { return buffer_.as<T>(); }
  size_t size() const { return count_; }
  std::vector<T> host() {
    std::vector<T> values(count_);
    gpu::ops().read_to_host(values.data(), buffer_.data(), count_ * sizeof(T));
    return values;
  }

 private:
  AlignedBuffer buffer_;
  size_t count_;
};

// Uniform in [-scale, scale), the same for the same seed.
std::vector<float> random_values(size_t count, uint64_t seed, float scale = 1.0f);

// Every |gpu - cpu| <= atol + rtol |cpu| (NaN and infinities must match); names the first index that is not.
testing::AssertionResult close(const std::vector<float>& gpu, const std::vector<float>& cpu, double atol,
                               double rtol);

// Skips where this build's GPU language finds no device; the emulator always has one.
class GpuOpsTest : public testing::Test {
 protected:
  void SetUp() override;
  Ops& gpu() { return gpu::ops(); }
  Ops& cpu() { return cpu_ops(); }
};

}  // namespace zaya::test
