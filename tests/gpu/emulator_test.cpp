// The emulator keeps the GPU's rules: barriers order the threads of a block, warp exchanges read the lane
// they name, and what a GPU leaves undefined (a barrier some threads skip, an exchange with a lane that
// exited) is an error, not a silent result.

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <vector>

#include "backend/gpu/emulator.h"
#include "backend/gpu/language.h"
#include "core/error.h"

namespace zaya::gpu::emulator {
namespace {

unsigned linear() {
  return thread_index().x;
}

TEST(GpuEmulator, RunsEveryThreadOfEveryBlock) {
  std::vector<int> seen(3 * 2 * 64, 0);
  run({3, 2, 1}, {64, 1, 1}, 0, [&] {
    const unsigned block = block_index().y * grid_dim().x + block_index().x;
    ++seen[block * block_dim().x + thread_index().x];
  });
  for (int count : seen) EXPECT_EQ(count, 1);
}

// A GPU runs a grid's blocks in no set order: the emulator shuffles them, anew at every launch, so that a
// kernel whose blocks depend on each other's results fails in the tests.
TEST(GpuEmulator, BlocksRunInAShuffledOrderThatChangesFromLaunchToLaunch) {
  std::vector<std::vector<unsigned>> orders(3);
  for (std::vector<unsigned>& order : orders) {
    run({4, 2, 2}, {1, 1, 1}, 0, [&] {
      order.push_back((block_index().z * grid_dim().y + block_index().y) * grid_dim().x + block_index().x);
    });
    std::vector<unsigned> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (unsigned i = 0; i < 16; ++i) ASSERT_EQ(sorted[i], i);  // each block once
  }
  std::vector<unsigned> ascending(16);
  for (unsigned i = 0; i < 16; ++i) ascending[i] = i;
  EXPECT_NE(orders[0], ascending);
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
}

// Every block finds its dynamic shared memory with all bits set (NaN as f32), whatever the block before it
// left there, as a GPU's shared memory holds garbage: a read of what the block never wrote shows.
TEST(GpuEmulator, EachBlockFindsItsSharedMemoryPoisoned) {
  std::vector<uint32_t> first_read(8);
  run({8, 1, 1}, {32, 1, 1}, 32 * sizeof(uint32_t), [&] {
    uint32_t* shared = static_cast<uint32_t*>(dynamic_shared());
    if (linear() == 0) first_read[block_index().x] = shared[5];
    sync_threads();
    shared[linear()] = 0;  // what the next block must not see
  });
  for (uint32_t bits : first_read) EXPECT_EQ(bits, 0xffffffffu);
}

// Blocks run three at a time, a phase each in turn: a read-modify-write of one global value across a barrier,
// which a GPU runs racily, loses updates here too, instead of passing because blocks ran one after another.
TEST(GpuEmulator, BlocksInterleaveSoThatARaceBetweenThemShows) {
  int counter = 0;
  run({12, 1, 1}, {32, 1, 1}, 0, [&] {
    int seen = 0;
    if (linear() == 0) seen = counter;
    sync_threads();
    if (linear() == 0) counter = seen + 1;
  });
  EXPECT_LT(counter, 12);
  EXPECT_GT(counter, 0);
}

// ZAYA_SHARED_ARRAY: every block its own static shared memory, the same for all its threads, with all bits
// set when it starts, however the blocks interleave.
TEST(GpuEmulator, EachBlockHasItsOwnPoisonedStaticSharedMemory) {
  std::vector<uint32_t> first_read(9), own(9 * 32);
  run({9, 1, 1}, {32, 1, 1}, 0, [&] {
    ZAYA_SHARED_ARRAY(values, uint32_t[32]);
    ZAYA_SHARED_ARRAY(pairs, double[2][4]);
    const unsigned block = block_index().x;
    if (linear() == 0) first_read[block] = values[7];
    sync_threads();
    values[linear()] = block * 1000 + linear();
    if (linear() < 8) pairs[linear() / 4][linear() % 4] = block;
    sync_threads();
    own[block * 32 + linear()] = values[(linear() + 1) % 32] - 1000 * uint32_t(pairs[1][3]);
  });
  for (uint32_t bits : first_read) EXPECT_EQ(bits, 0xffffffffu);
  for (unsigned i = 0; i < own.size(); ++i) EXPECT_EQ(own[i], (i % 32 + 1) % 32) << i;
}

TEST(GpuEmulator, ABarrierOrdersTheThreadsOfABlock) {
  std::vector<int> result(128, -1);
  run({1, 1, 1}, {128, 1, 1}, 128 * sizeof(int), [&] {
    int* shared = static_cast<int*>(dynamic_shared());
    shared[linear()] = int(linear()) * 10;
    sync_threads();
    // Every thread reads a value another thread wrote before the barrier.
    result[linear()] = shared[(linear() + 1) % 128];
  });
  for (int i = 0; i < 128; ++i) EXPECT_EQ(result[i], ((i + 1) % 128) * 10);
}

TEST(GpuEmulator, AWarpExchangeReadsTheNamedLane) {
  std::vector<float> result(64);
  run({1, 1, 1}, {64, 1, 1}, 0, [&] {
    float value = float(linear());
    value = shuffle_xor(value, 5);
    result[linear()] = value;
  });
  for (unsigned i = 0; i < 64; ++i) EXPECT_EQ(result[i], float(i ^ 5u));
}

TEST(GpuEmulator, OneWarpExchangesWhileTheOthersWaitAtABarrier) {
  std::vector<double> result(96);
  run({1, 1, 1}, {96, 1, 1}, 0, [&] {
    double value = 1.0;
    if (linear() < unsigned(kWarpSize)) {
      for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value += shuffle_xor(value, offset);
    }
    sync_threads();
    result[linear()] = value;
  });
  for (unsigned i = 0; i < 96; ++i) EXPECT_EQ(result[i], i < unsigned(kWarpSize) ? double(kWarpSize) : 1.0);
}

TEST(GpuEmulator, ABarrierThatSomeThreadsSkipIsAnError) {
  EXPECT_THROW(run({1, 1, 1}, {64, 1, 1}, 0,
                   [&] {
                     if (linear() < 10) return;
                     sync_threads();
                   }),
               Error);
}

TEST(GpuEmulator, AnExchangeWithAnExitedLaneIsAnError) {
  EXPECT_THROW(run({1, 1, 1}, {32, 1, 1}, 0,
                   [&] {
                     if (linear() == 3) return;
                     (void)shuffle_xor(1.0f, 1);
                   }),
               Error);
}

TEST(GpuEmulator, ThreadsWaitingAtDifferentPlacesIsADeadlock) {
  EXPECT_THROW(run({1, 1, 1}, {32, 1, 1}, 0,
                   [&] {
                     if (linear() % 2 == 0) {
                       sync_threads();
                     } else {
                       (void)shuffle_xor(1.0f, 1);
                     }
                   }),
               Error);
}

TEST(GpuEmulator, AnExceptionInAThreadReachesTheLauncher) {
  EXPECT_THROW(run({2, 1, 1}, {8, 1, 1}, 0,
                   [&] {
                     if (block_index().x == 1 && linear() == 7) throw Error("thread 7 failed");
                   }),
               Error);
  // The emulator is usable again afterwards.
  int ran = 0;
  run({1, 1, 1}, {4, 1, 1}, 0, [&] { ++ran; });
  EXPECT_EQ(ran, 4);
}

// Device memory is closed to the host outside kernels, copies and products: host code that writes a device
// pointer (a bug that a GPU would fault on) crashes in the emulator too.
TEST(GpuEmulatorDeathTest, TheHostCannotTouchDeviceMemory) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan's fault handler hangs in the death test's child; the release build runs it";
#endif
  float* device = static_cast<float*>(allocate_device(64 * sizeof(float)));
  {
    const DeviceAccess access;
    device[3] = 1.0f;  // as a kernel would
  }
  EXPECT_EXIT(device[3] = 2.0f, testing::KilledBySignal(SIGSEGV), ".*");
  release_device(device);
}

TEST(GpuEmulator, KernelsReachDeviceMemory) {
  float* device = static_cast<float*>(allocate_device(32 * sizeof(float)));
  run({1, 1, 1}, {32, 1, 1}, 0, [&] { device[thread_index().x] = float(thread_index().x); });
  float sum = 0;
  {
    const DeviceAccess access;
    for (int i = 0; i < 32; ++i) sum += device[i];
  }
  EXPECT_EQ(sum, 496.0f);
  release_device(device);
}

// Writes its block's dynamic shared memory, all of it.
void fill_shared(size_t bytes) {
  unsigned char* shared = gpu::dynamic_shared<unsigned char>();
  for (size_t i = thread_x(); i < bytes; i += block_dim_x()) shared[i] = 1;
}

// Dynamic shared memory past 48 KiB, as a GPU takes it: a kernel must opt in (allow_shared) to be launched
// with it, and no kernel may have more than kOptInSharedBytes (MI300X's LDS).
TEST(GpuEmulator, SharedMemoryPast48KibNeedsTheKernelToOptIn) {
  constexpr size_t bytes = 60 * 1024;
  EXPECT_THROW(launch("fill_shared", fill_shared, {1}, {64}, bytes, nullptr, bytes), Error);
  gpu::allow_shared("fill_shared", fill_shared, bytes);
  EXPECT_NO_THROW(launch("fill_shared", fill_shared, {1}, {64}, bytes, nullptr, bytes));
  EXPECT_THROW(launch("fill_shared", fill_shared, {1}, {64}, bytes + 1, nullptr, bytes + 1), Error);
  EXPECT_THROW(gpu::allow_shared("fill_shared", fill_shared, kOptInSharedBytes + 1), Error);
}

// The matrix units' fragments: between them, the lanes of a warp hold every element of A, B and the
// accumulator exactly once, each register a pair of neighbours along k; an accumulator row lies in one slot
// of each of the kMmaRowLanes lanes that hold it.
TEST(GpuEmulator, MatrixFragmentsCoverTheirTilesOnce) {
  int a_seen[kMmaTile][kMmaTile] = {}, b_seen[kMmaTile][kMmaTile] = {}, acc_seen[kMmaTile][kMmaTile] = {};
  for (int l = 0; l < kWarpSize; ++l) {
    for (int r = 0; r < kMmaRegisters; ++r) {
      const TilePlace a = mma_a_place(l, r), b = mma_b_place(l, r);
      ASSERT_EQ(a.col % 2, 0);
      ASSERT_EQ(b.col % 2, 0);
      ++a_seen[a.row][a.col];
      ++a_seen[a.row][a.col + 1];
      ++b_seen[b.row][b.col];
      ++b_seen[b.row][b.col + 1];
    }
    for (int i = 0; i < kMmaResults; ++i) {
      const TilePlace c = mma_acc_place(l, i);
      ++acc_seen[c.row][c.col];
      // Its row is the one of its slot, shared with the lanes that differ in the low bits alone.
      ASSERT_EQ(c.row, mma_slot_row(l, mma_acc_slot(i)));
      ASSERT_EQ(c.row, mma_slot_row(l ^ (kMmaRowLanes - 1), mma_acc_slot(i)));
      ASSERT_LT(mma_acc_slot(i), kMmaLaneRows);
    }
  }
  for (int i = 0; i < kMmaTile; ++i) {
    for (int j = 0; j < kMmaTile; ++j) {
      EXPECT_EQ(a_seen[i][j], 1) << i << ", " << j;
      EXPECT_EQ(b_seen[i][j], 1) << i << ", " << j;
      EXPECT_EQ(acc_seen[i][j], 1) << i << ", " << j;
    }
  }
}

// A warp's mma over fragments loaded from a strided tile equals the product summed in order, and adds to
// what the accumulator held (two k-steps here).
TEST(GpuEmulator, MatrixUnitsMultiplyTheWarpsTiles) {
  constexpr int ld = 2 * kMmaTile + 4;  // two k-steps side by side, and padding
  std::vector<uint16_t> a(kMmaTile * ld), b(kMmaTile * ld);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = bf16_bits(float(int(i * 37 % 23) - 11) / 8.0f);
    b[i] = bf16_bits(float(int(i * 53 % 19) - 9) / 16.0f);
  }
  std::vector<float> result(kMmaTile * kMmaTile, -1.0f);
  run({1, 1, 1}, {unsigned(kWarpSize), 1, 1}, 0, [&] {
    MmaAccumulator acc{};
    for (int k0 = 0; k0 < 2 * kMmaTile; k0 += kMmaTile) {
      mma(acc, load_mma_a(a.data() + k0, ld), load_mma_b(b.data() + k0, ld));
    }
    for (int i = 0; i < kMmaResults; ++i) {
      const TilePlace p = mma_acc_place(lane(), i);
      result[size_t(p.row * kMmaTile + p.col)] = acc.values[i];
    }
  });
  for (int m = 0; m < kMmaTile; ++m) {
    for (int n = 0; n < kMmaTile; ++n) {
      float expected = 0;
      for (int k = 0; k < 2 * kMmaTile; ++k) {
        expected += bf16_value(a[size_t(m * ld + k)]) * bf16_value(b[size_t(n * ld + k)]);
      }
      EXPECT_EQ(result[size_t(m * kMmaTile + n)], expected) << m << ", " << n;
    }
  }
}

}  // namespace
}  // namespace zaya::gpu::emulator
