#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011). Every value is a pure function of
// (seed, stream, index), so a tensor filled in parallel gets the same numbers whatever the thread count,
// and a run can be resumed without saving generator state. Streams separate purposes and steps.

#include <array>
#include <cstdint>

namespace zaya {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// What a stream of random numbers is for; part of the stream id so purposes never share numbers.
enum class RngPurpose : uint32_t { ParameterInit = 1, DataOrder = 2, Sampling = 3, Dropout = 4, Test = 5 };

class RandomStream {
 public:
  // `substream` tells apart streams of one purpose: a parameter's index, a step, an epoch.
  RandomStream(uint64_t seed, RngPurpose purpose, uint64_t substream);

  uint32_t bits(uint64_t index) const;          // uniform over all 32-bit values
  float uniform(uint64_t index) const;          // in [0, 1), 24 random bits
  double uniform_double(uint64_t index) const;  // in [0, 1), 53 random bits
  float normal(uint64_t index) const;           // standard normal (Box-Muller)
  // out[i] = normal(first + i) for i < count: each block of four values and each pair's logarithm computed
  // once, where normal() computes them for every value (half the time of initialising a model).
  void normals(uint64_t first, int64_t count, float* out) const;

 private:
  std::array<uint32_t, 4> block(uint64_t block_index) const;

  std::array<uint32_t, 2> key_;
  uint64_t stream_;
};

}  // namespace zaya
