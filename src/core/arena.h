#pragma once
// A bump allocator for per-step scratch and activations. The first steps (warm-up) may grow it; reset()
// then folds everything into one block of the high-water size, so later steps of the same shape make no
// system allocation at all. system_allocations() lets tests check exactly that.

#include <cstddef>
#include <vector>

#include "core/buffer.h"

namespace zaya {

class Arena {
 public:
  // Blocks come from `memory` (the host's, or a backend's device memory through Ops::memory()).
  explicit Arena(size_t initial_bytes = 0, MemoryResource& memory = host_memory());

  // 64-byte aligned, uninitialised.
  void* allocate(size_t bytes);
  template <class T>
  T* alloc(size_t count) {
    return static_cast<T*>(allocate(count * sizeof(T)));
  }

  // A position to rewind to, for scratch that lives shorter than the step (last in, first out). The blocks
  // a rewind passes stay, and the allocations after it fill them again: a step that rewinds after each layer
  // maps (and the host zeroes) its blocks once, not once per layer.
  struct Mark {
    size_t block = 0, offset = 0, used = 0;
  };
  Mark mark() const { return {current_, offset_, used_}; }
  void rewind(const Mark& mark);

  // Ends the step: everything allocated since the last reset is released.
  void reset();
  // Before a step: one block of at least `bytes`, so that a step using that much never grows the arena
  // (whose doubling blocks would otherwise hold about twice the high water in the first step). Only
  // between steps, when nothing is allocated.
  void reserve(size_t bytes);

  size_t used() const { return used_; }
  size_t high_water() const { return high_water_; }
  size_t capacity() const;
  size_t system_allocations() const { return system_allocations_; }

 private:
  void add_block(size_t bytes);

  MemoryResource* memory_;
  std::vector<AlignedBuffer> blocks_;
  size_t current_ = 0;  // the block allocations come from; those after it were passed by a rewind
  size_t offset_ = 0;   // into blocks_[current_]
  size_t used_ = 0;     // bytes handed out since reset, over all blocks
  size_t high_water_ = 0;
  size_t system_allocations_ = 0;
};

}  // namespace zaya
