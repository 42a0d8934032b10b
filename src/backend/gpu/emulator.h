#pragma once
// The GPU emulator: runs zaya's kernels on the CPU with the GPU's execution model, so that every kernel is
// tested against the CPU backend where no GPU exists. The blocks of a launch are taken in a shuffled order,
// three at a time, their phases (barrier to barrier) interleaved, each finding its shared memory, dynamic
// and static, poisoned (all bits set); the threads of a block run as fibers on one host thread, each until
// it reaches a barrier (sync_threads) or a warp exchange (shuffle_xor), which is where a GPU's threads meet
// too. It is strict where a GPU is
// undefined: a barrier that not every thread of the block reaches, or an exchange with a lane that has
// exited or does not exist, is reported (Error), not papered over. Not a fast path: tests only.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

namespace zaya::gpu::emulator {

// Lanes of a warp: 32 as on NVIDIA, or 64 as a CDNA wavefront in the wave-64 build (ZAYA_EMULATED_WAVE64),
// in which the emulated suite runs again so that AMD's paths are tested on every machine too.
#if defined(ZAYA_EMULATED_WAVE64)
inline constexpr int kWarpSize = 64;
#else
inline constexpr int kWarpSize = 32;
#endif

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// The running thread's indices, as threadIdx, blockIdx, blockDim and gridDim.
const Dim3& thread_index();
const Dim3& block_index();
const Dim3& block_dim();
const Dim3& grid_dim();

// __syncthreads(): waits until every thread of the block arrives.
void sync_threads();
// The 8 bytes of lane (this lane ^ lane_mask), once every lane of the warp has called it.
uint64_t exchange_in_warp(uint64_t bits, int lane_mask);
// Every lane's `bytes` at `mine`, lane by lane into all [kWarpSize * bytes], once every lane of the warp has
// called it with the same size (what a matrix-unit instruction reads of the warp's registers).
void gather_in_warp(const void* mine, size_t bytes, void* all);
// The launch's dynamic shared memory, the running block's.
void* dynamic_shared();
// Dynamic shared memory past kDefaultSharedBytes, as a GPU takes it: only for a kernel that opted in
// (gpu::allow_shared records `bytes` for it, refused past `limit`), checked at each launch of it.
inline constexpr size_t kDefaultSharedBytes = 48 * 1024;
void allow_shared(const char* kernel, size_t bytes, size_t limit);
void check_shared(const char* kernel, size_t bytes);
// The running block's static shared memory for the declaration at `site` (ZAYA_SHARED_ARRAY): the same for
// every thread of the block, its own for each block.
void* static_shared(const void* site, size_t bytes, size_t alignment);
template <class Array>
Array& block_shared(const void* site) {
  return *static_cast<Array*>(static_shared(site, sizeof(Array), alignof(Array)));
}

template <class T>
T shuffle_xor(T value, int lane_mask) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8);
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof value);
  bits = exchange_in_warp(bits, lane_mask);
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Runs `thread` once for every thread of every block of the grid; returns when all have finished.
void run(Dim3 grid, Dim3 block, size_t shared_bytes, const std::function<void()>& thread);

// The emulator's device memory: pages the host cannot touch (PROT_NONE) except while a kernel, a copy or a
// product runs, so that host code reading or writing device memory crashes in the tests as it would fault
// on a GPU, instead of passing unnoticed. A fresh allocation has all bits set (NaN as f32 and bf16), not
// zeros: a GPU does not clear what it hands out either.
void* allocate_device(size_t bytes);
void release_device(void* data) noexcept;
// What allocate_device can hand out in all (the region it reserves).
int64_t device_memory_bytes();

// While one lives, device memory is open to the host (kernels, copies and products only). Nests.
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

}  // namespace zaya::gpu::emulator
