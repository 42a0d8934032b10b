#pragma once
// The device language of zaya's GPU kernels: one source compiled three ways.
//   nvcc            -> CUDA (NVIDIA)
//   hipcc           -> HIP (AMD)
//   a host compiler -> the emulator (backend/gpu/emulator.h): every kernel runs on the CPU, thread by
//                      thread, so the kernels are tested where no GPU exists (CI, this project's machines).
// Kernels use only what this header provides (indices, barriers, warp exchanges, shared memory, launch)
// and plain C++ arithmetic, never a vendor intrinsic directly.

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ZAYA_GPU_CUDA 1
#include <cuda_runtime.h>
#elif defined(__HIPCC__)
#define ZAYA_GPU_HIP 1
#include <hip/hip_runtime.h>
#else
#define ZAYA_GPU_EMULATED 1
#include <cmath>
#include <functional>

#include "backend/gpu/emulator.h"
#endif

// A kernel, with the most threads a block of it is launched with: the compiler keeps its registers within
// what a block that size may hold (an unbounded kernel can fail to launch at 1024 threads). Every kernel
// states it; a launch with a larger block is refused (check_launch).
//
// ZAYA_SHARED_ARRAY(name, type): a block's static shared memory, `type` an array type (float[64],
// double[2][32]). On a GPU a __shared__ variable; in the emulator, which runs several blocks at once, the
// running block's own, found by the address of a static marking the declaration.
#if defined(ZAYA_GPU_CUDA) || defined(ZAYA_GPU_HIP)
#define ZAYA_KERNEL(max_threads) __global__ __launch_bounds__(max_threads)
#define ZAYA_DEVICE __device__ __forceinline__
#define ZAYA_SHARED_ARRAY(name, ...) __shared__ ::zaya::gpu::SharedArray<__VA_ARGS__> name
#else
#define ZAYA_KERNEL(max_threads)
#define ZAYA_DEVICE inline
#define ZAYA_SHARED_ARRAY(name, ...)            \
  static char name##_site;                      \
  ::zaya::gpu::SharedArray<__VA_ARGS__>& name = \
      ::zaya::gpu::emulator::block_shared<::zaya::gpu::SharedArray<__VA_ARGS__>>(&name##_site)
#endif

namespace zaya::gpu {

template <class Array>
using SharedArray = Array;  // lets an array type stand before the name it declares

#if defined(ZAYA_GPU_CUDA)
using Stream = cudaStream_t;
inline constexpr int kWarpSize = 32;
#elif defined(ZAYA_GPU_HIP)
using Stream = hipStream_t;
// CDNA GPUs (gfx90a, gfx94x) run 64-lane wavefronts; the host pass of hipcc sees no wavefront size.
#if defined(__AMDGCN_WAVEFRONT_SIZE)
inline constexpr int kWarpSize = __AMDGCN_WAVEFRONT_SIZE;
#else
inline constexpr int kWarpSize = 64;
#endif
#else
using Stream = void*;
inline constexpr int kWarpSize = emulator::kWarpSize;
#endif

// ---- where this thread is --------------------------------------------------------------------------
#if defined(ZAYA_GPU_EMULATED)
ZAYA_DEVICE int thread_x() {
  return int(emulator::thread_index().x);
}
ZAYA_DEVICE int thread_y() {
  return int(emulator::thread_index().y);
}
ZAYA_DEVICE int block_x() {
  return int(emulator::block_index().x);
}
ZAYA_DEVICE int block_y() {
  return int(emulator::block_index().y);
}
ZAYA_DEVICE int block_z() {
  return int(emulator::block_index().z);
}
ZAYA_DEVICE int block_dim_x() {
  return int(emulator::block_dim().x);
}
ZAYA_DEVICE int block_dim_y() {
  return int(emulator::block_dim().y);
}
ZAYA_DEVICE int grid_dim_x() {
  return int(emulator::grid_dim().x);
}
ZAYA_DEVICE int grid_dim_y() {
  return int(emulator::grid_dim().y);
}
ZAYA_DEVICE void sync_threads() {
  emulator::sync_threads();
}
#else
ZAYA_DEVICE int thread_x() {
  return int(threadIdx.x);
}
ZAYA_DEVICE int thread_y() {
  return int(threadIdx.y);
}
ZAYA_DEVICE int block_x() {
  return int(blockIdx.x);
}
ZAYA_DEVICE int block_y() {
  return int(blockIdx.y);
}
ZAYA_DEVICE int block_z() {
  return int(blockIdx.z);
}
ZAYA_DEVICE int block_dim_x() {
  return int(blockDim.x);
}
ZAYA_DEVICE int block_dim_y() {
  return int(blockDim.y);
}
ZAYA_DEVICE int grid_dim_x() {
  return int(gridDim.x);
}
ZAYA_DEVICE int grid_dim_y() {
  return int(gridDim.y);
}
ZAYA_DEVICE void sync_threads() {
  __syncthreads();
}
#endif

// This thread's place in a block of blockDim.x * blockDim.y threads, and in its warp.
ZAYA_DEVICE int linear_thread() {
  return thread_y() * block_dim_x() + thread_x();
}
ZAYA_DEVICE int lane() {
  return linear_thread() % kWarpSize;
}
ZAYA_DEVICE int warp() {
  return linear_thread() / kWarpSize;
}

// ---- warp exchange -----------------------------------------------------------------------------------
// The value of lane (this lane ^ lane_mask). Every lane of the warp must call it together.
template <class T>
ZAYA_DEVICE T shuffle_xor(T value, int lane_mask) {
#if defined(ZAYA_GPU_CUDA)
  return __shfl_xor_sync(0xffffffffu, value, lane_mask);
#elif defined(ZAYA_GPU_HIP)
  return __shfl_xor(value, lane_mask);
#else
  return emulator::shuffle_xor(value, lane_mask);
#endif
}

// ---- shared memory -----------------------------------------------------------------------------------
// The launch's dynamic shared memory (its size is launch()'s shared_bytes), 16-byte aligned.
template <class T>
ZAYA_DEVICE T* dynamic_shared() {
#if defined(ZAYA_GPU_EMULATED)
  return static_cast<T*>(emulator::dynamic_shared());
#else
  extern __shared__ __align__(16) unsigned char zaya_dynamic_shared[];
  return reinterpret_cast<T*>(zaya_dynamic_shared);
#endif
}

// ---- numbers -----------------------------------------------------------------------------------------
ZAYA_DEVICE uint32_t float_bits(float value) {
#if defined(ZAYA_GPU_EMULATED)
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#else
  return __float_as_uint(value);
#endif
}

ZAYA_DEVICE float bits_float(uint32_t bits) {
#if defined(ZAYA_GPU_EMULATED)
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#else
  return __uint_as_float(bits);
#endif
}

// bf16 bits of a float, round to nearest even, NaN kept NaN (as core/dtype.h's f32_to_bf16).
ZAYA_DEVICE uint16_t bf16_bits(float value) {
  uint32_t bits = float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

ZAYA_DEVICE float bf16_value(uint16_t bits) {
  return bits_float(uint32_t(bits) << 16);
}

// value rounded to the nearest bf16 (what a bf16 product reads).
ZAYA_DEVICE float round_bf16(float value) {
  return bf16_value(bf16_bits(value));
}

// ---- launch ------------------------------------------------------------------------------------------
struct Grid {
  unsigned x = 1, y = 1, z = 1;
};
struct Block {
  unsigned x = 1, y = 1;
};

// Throws Error naming `kernel` when the launch failed (a bad configuration, no device).
void check_launch(const char* kernel);

// kernel<<<grid, block, shared_bytes, stream>>>(args...), in every language. The emulator runs it to the
// end before returning; a GPU queues it on the stream.
template <class... Params, class... Args>
void launch(const char* name, void (*kernel)(Params...), Grid grid, Block block, size_t shared_bytes,
            Stream stream, Args... args) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
#if defined(ZAYA_GPU_EMULATED)
  (void)stream;
  emulator::run({grid.x, grid.y, grid.z}, {block.x, block.y, 1}, shared_bytes,
                [&] { kernel(static_cast<Params>(args)...); });
#else
  // A .h file is formatted as C++, which would split CUDA's launch brackets.
  // clang-format off
  kernel<<<dim3(grid.x, grid.y, grid.z), dim3(block.x, block.y, 1), shared_bytes, stream>>>(
      static_cast<Params>(args)...);
  // clang-format on
#endif
  check_launch(name);
}

// Blocks of `threads` covering `count` items, one item per thread.
inline Grid cover(int64_t count, unsigned threads) {
  return {unsigned((count + threads - 1) / threads), 1, 1};
}

}  // namespace zaya::gpu
