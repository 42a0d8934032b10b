#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "core/arena.h"
#include "core/error.h"
#include "unit/counting_memory.h"

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

// The first step of a shape too: layers that each outgrow the block they start in map that growth once, not
// once per layer, and the block they filled is the one the next layer fills again.
TEST(Arena, RewindKeepsTheBlocksItPasses) {
  Arena arena(1024);
  arena.alloc<char>(512);
  const Arena::Mark mark = arena.mark();
  void* first = arena.allocate(1 << 16);
  EXPECT_EQ(arena.system_allocations(), 2u);
  for (int layer = 0; layer < 4; ++layer) {
    arena.rewind(mark);
    EXPECT_EQ(arena.allocate(1 << 16), first);
  }
  EXPECT_EQ(arena.system_allocations(), 2u);
  // Past the kept block's size, a larger one replaces it.
  arena.rewind(mark);
  arena.allocate(1 << 17);
  EXPECT_EQ(arena.system_allocations(), 3u);
  EXPECT_EQ(arena.capacity(), size_t(1024) + (1 << 17));
}

// reset folds a grown arena into one block; where one of its blocks already holds the high-water mark, that
// block is kept rather than a new one mapped.
TEST(Arena, ResetKeepsABlockThatHoldsTheHighWaterMark) {
  Arena arena(64);
  const Arena::Mark mark = arena.mark();
  void* big = arena.allocate(4096);
  arena.rewind(mark);
  arena.allocate(100);
  arena.reset();
  EXPECT_EQ(arena.system_allocations(), 2u);
  EXPECT_EQ(arena.capacity(), 4096u);
  EXPECT_EQ(arena.allocate(4096), big);
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

// A block larger than the machine is an Error that says what was asked and what there is, before any
// allocator is asked (overcommit could grant it and kill the process when it is touched).
TEST(AlignedBuffer, ABlockLargerThanTheMachineIsAClearError) {
  try {
    AlignedBuffer huge(size_t(1) << 60);
    FAIL() << "allocated an exabyte";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("needs 1073741824.0 GiB"), std::string::npos) << message;
    EXPECT_NE(message.find("this machine has"), std::string::npos) << message;
  }
}

// An arena's blocks and a buffer's memory come from the resource they are given (a backend's device memory)
// and go back to it.
TEST(Arena, TakesItsBlocksFromTheGivenMemory) {
  CountingMemory memory;
  {
    Arena arena(0, memory);
    std::memset(arena.allocate(1000), 1, 1000);
    arena.allocate(5000);
    arena.reset();
    EXPECT_EQ(memory.allocations, int(arena.system_allocations()));
    AlignedBuffer buffer(100, memory);
    EXPECT_EQ(static_cast<const char*>(buffer.data())[99], 0);  // zero-filled
    AlignedBuffer moved = std::move(buffer);
    EXPECT_GT(memory.live_bytes, 0u);
  }
  EXPECT_EQ(memory.releases, memory.allocations);
  EXPECT_EQ(memory.live_bytes, 0u);
}

}  // namespace
}  // namespace zaya
