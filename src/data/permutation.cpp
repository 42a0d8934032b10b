#include "data/permutation.h"

#include "core/rng.h"

namespace zaya {

Permutation::Permutation(uint64_t n, uint64_t seed, uint64_t stream) : n_(n), seed_(seed), stream_(stream) {
  int bits = 2;
  while (bits < 64 && (uint64_t(1) << bits) < n) bits += 2;
  half_bits_ = bits / 2;
  half_mask_ = (uint64_t(1) << half_bits_) - 1;
}

uint64_t Permutation::round(uint64_t half, int step) const {
  const auto words = philox4x32({uint32_t(half), uint32_t(half >> 32), uint32_t(stream_), uint32_t(step)},
                                {uint32_t(seed_), uint32_t(seed_ >> 32)});
  return (uint64_t(words[1]) << 32 | words[0]) & half_mask_;
}

uint64_t Permutation::operator()(uint64_t index) const {
  // A bijection on [0, 2^(2 half_bits)); repeating it from an image outside [0, n) lands back inside after
  // a few tries on average (the domain is less than four times n).
  uint64_t value = index;
  do {
    uint64_t left = value >> half_bits_, right = value & half_mask_;
    for (int step = 0; step < 4; ++step) {
      const uint64_t next = left ^ round(right, step);
      left = right;
      right = next;
    }
    value = (left << half_bits_) | right;
  } while (value >= n_);
  return value;
}

}  // namespace zaya
