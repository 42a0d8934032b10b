#pragma once
// A pseudo-random permutation of [0, n) evaluated one index at a time in O(1) memory: a four-round
// Feistel network over the smallest even-width power of two that holds n, with Philox as the round
// function, and cycle-walking back into [0, n). The data order of any corpus size comes from it.

#include <cstdint>

namespace zaya {

class Permutation {
 public:
  Permutation(uint64_t n, uint64_t seed, uint64_t stream);
  uint64_t operator()(uint64_t index) const;  // index < n
  uint64_t size() const { return n_; }

 private:
  uint64_t round(uint64_t half, int step) const;

  uint64_t n_;
  int half_bits_;
  uint64_t half_mask_;
  uint64_t seed_, stream_;
};

}  // namespace zaya
