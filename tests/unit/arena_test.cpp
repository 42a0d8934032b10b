#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "core/arena.h"

namespace zaya {
namespace {

TEST(Arena, HandsOutAlignedDisjointMemory) {
  Arena arena(1024);
  auto* a = arena.alloc<char>(3);
  auto* b = arena.alloc<float>(10);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % kAlignment, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % kAlignment, 0u);
  EXPECT_GE(reinterpret_cast<char*>(b) - a, 3);
  std::memset(a, 1, 3);
  std::memset(b, 2, 40);
  EXPECT_EQ(a[2], 1);
}

// The contract the training step relies on: after one warm-up step of a given shape, further steps of
// that shape make no system allocation, even if the warm-up outgrew the initial block several times.
TEST(Arena, StopsAllocatingAfterWarmUp) {
  Arena arena(100);
  auto step = [&] {
    for (int i = 1; i <= 20; ++i) std::memset(arena.allocate(size_t(i) * 1000), 0, size_t(i) * 1000);
    arena.reset();
  };
  step();
  const size_t after_warm_up = arena.system_allocations();
  EXPECT_GE(after_warm_up, 2u);
  for (int i = 0; i < 5; ++i) step();
  EXPECT_EQ(arena.system_allocations(), after_warm_up);
  EXPECT_GE(arena.capacity(), arena.high_water());
}

// Scratch that is rewound inside a step (as each layer does) must not make every step allocate anew.
TEST(Arena, StopsAllocatingAfterWarmUpWithRewinds) {
  Arena arena(64);
  auto step = [&] {
    for (int layer = 0; layer < 4; ++layer) {
      const Arena::Mark mark = arena.mark();
      for (int i = 1; i <= 5; ++i) std::memset(arena.allocate(size_t(i) * 4096), 0, size_t(i) * 4096);
      arena.rewind(mark);
    }
    arena.reset();
  };
  step();
  const size_t after_warm_up = arena.system_allocations();
  for (int i = 0; i < 5; ++i) step();
  EXPECT_EQ(arena.system_allocations(), after_warm_up);
}

TEST(Arena, RewindReusesScratch) {
  Arena arena(1 << 16);
  arena.alloc<float>(100);
  const Arena::Mark mark = arena.mark();
  void* first = arena.allocate(4096);
  arena.rewind(mark);
  void* second = arena.allocate(4096);
  EXPECT_EQ(first, second);
  EXPECT_EQ(arena.used(), align_up(400) + 4096);
}

TEST(Arena, GrowsPastItsFirstBlock) {
  Arena arena(64);
  void* big = arena.allocate(1 << 20);
  std::memset(big, 0, 1 << 20);
  EXPECT_GE(arena.capacity(), size_t(1) << 20);
}

}  // namespace
}  // namespace zaya
