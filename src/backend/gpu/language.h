#pragma once
// The device language of zaya's GPU kernels: one source compiled three ways.
//   nvcc            -> CUDA (NVIDIA)
//   hipcc           -> HIP (AMD)
//   a host compiler -> the emulator (backend/gpu/emulator.h): every kernel runs on the CPU, thread by
//                      thread, so the kernels are tested where no GPU exists (CI, this project's machines).
// Kernels use only what this header provides (indices, barriers, warp exchanges, shared memory, matrix
// units, launch) and plain C++ arithmetic, never a vendor intrinsic directly.

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
// ZAYA_UNROLL before a loop of a constant count: unrolled on a GPU, so that the register arrays it indexes
// stay registers (a loop left rolled indexes them at run time, which puts them in local memory).
#if defined(ZAYA_GPU_CUDA) || defined(ZAYA_GPU_HIP)
#define ZAYA_UNROLL _Pragma("unroll")
#else
#define ZAYA_UNROLL
#endif

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

// The most shared memory a block may hold, static and dynamic together, once its kernel has opted in
// (allow_shared): MI300X's 64 KiB of LDS per workgroup, the least of the targets (an H100 allows 227 KiB).
// Without opting in a block may hold 48 KiB.
inline constexpr size_t kOptInSharedBytes = 64 * 1024;

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

// ---- matrix units ------------------------------------------------------------------------------------
// A warp's product of two 16 x 16 bf16 tiles on the matrix units (NVIDIA's tensor cores, AMD's matrix
// cores), summed in f32: acc [16, 16] += A @ B^T with A [m][k] and B [n][k], both bf16 bits with k
// contiguous, row stride `ld` elements (a multiple of 4) from an 8-byte aligned start. Every lane of the
// warp calls load_mma_a, load_mma_b and mma together.
//
// Each lane holds a part (a fragment) of A, B and acc, in the layout the vendor's instruction defines:
// NVIDIA's mma.m16n8k16 (issued twice, for n 0..7 and 8..15) with 32-lane warps, CDNA's
// v_mfma_f32_16x16x16bf16_1k with 64-lane wavefronts. Kernels never see it: they load fragments from shared
// memory and find where their accumulator elements lie with mma_acc_place. The emulator keeps the same
// fragments (its 32-lane build NVIDIA's, its wave-64 build AMD's) and multiplies the tiles the lanes hold
// together, so a kernel that misplaces a value fails in the emulated tests; that the places below are the
// hardware's is checked where the GPU suite runs on a GPU.
inline constexpr int kMmaTile = 16;
inline constexpr int kMmaRegisters = kMmaTile * kMmaTile / 2 / kWarpSize;  // two bf16 per register
inline constexpr int kMmaResults = kMmaTile * kMmaTile / kWarpSize;        // f32 per lane
static_assert(kWarpSize == 32 || kWarpSize == 64, "the matrix units' layouts are for 32 or 64 lanes");

struct MmaFragment {
  uint32_t registers[kMmaRegisters];  // bf16 pairs: the lower address in the low half
};
struct MmaAccumulator {
  float values[kMmaResults];
};
struct TilePlace {
  int row, col;
};

// A's register r of lane l holds A[row][col] and A[row][col + 1].
ZAYA_DEVICE TilePlace mma_a_place(int l, int r) {
  if constexpr (kWarpSize == 32) return {l / 4 + 8 * (r % 2), 2 * (l % 4) + 8 * (r / 2)};
  return {l % 16, 4 * (l / 16) + 2 * r};
}
// B's register r of lane l holds B[row][col] and B[row][col + 1] (row is n, col is k).
ZAYA_DEVICE TilePlace mma_b_place(int l, int r) {
  if constexpr (kWarpSize == 32) return {l / 4 + 8 * (r / 2), 2 * (l % 4) + 8 * (r % 2)};
  return {l % 16, 4 * (l / 16) + 2 * r};
}
// Accumulator element i of lane l is acc[row][col].
ZAYA_DEVICE TilePlace mma_acc_place(int l, int i) {
  if constexpr (kWarpSize == 32) return {l / 4 + 8 * (i % 4 / 2), 8 * (i / 4) + 2 * (l % 4) + i % 2};
  return {4 * (l / 16) + i, l % 16};
}

// Rows of the accumulator: each lane holds parts of kMmaLaneRows rows (its slots), each row shared by the
// kMmaRowLanes lanes that differ in the lowest bits of their index (so a row's max or sum is an exchange
// over those bits). Element i of lane l lies in slot mma_acc_slot(i), row mma_slot_row(l, slot).
inline constexpr int kMmaLaneRows = kWarpSize == 32 ? 2 : 4;
inline constexpr int kMmaRowLanes = kWarpSize == 32 ? 4 : 16;
ZAYA_DEVICE int mma_acc_slot(int i) {
  return kWarpSize == 32 ? i % 4 / 2 : i;
}
ZAYA_DEVICE int mma_slot_row(int l, int slot) {
  return kWarpSize == 32 ? l / 4 + 8 * slot : 4 * (l / 16) + slot;
}

ZAYA_DEVICE uint32_t load_bf16_pair(const uint16_t* pair) {
#if defined(ZAYA_GPU_EMULATED)
  uint32_t bits;
  std::memcpy(&bits, pair, sizeof bits);
  return bits;
#else
  return *reinterpret_cast<const uint32_t*>(pair);
#endif
}

// A's fragment of a tile [m][k], or B's of a tile [n][k], as the places above lay them out.
template <bool kB>
ZAYA_DEVICE MmaFragment load_mma_fragment(const uint16_t* tile, int ld) {
  MmaFragment fragment;
  for (int r = 0; r < kMmaRegisters; ++r) {
    const TilePlace p = kB ? mma_b_place(lane(), r) : mma_a_place(lane(), r);
    fragment.registers[r] = load_bf16_pair(tile + p.row * ld + p.col);
  }
  return fragment;
}
ZAYA_DEVICE MmaFragment load_mma_a(const uint16_t* tile, int ld) {
  return load_mma_fragment<false>(tile, ld);
}
ZAYA_DEVICE MmaFragment load_mma_b(const uint16_t* tile, int ld) {
  return load_mma_fragment<true>(tile, ld);
}

ZAYA_DEVICE void mma(MmaAccumulator& acc, const MmaFragment& a, const MmaFragment& b) {
#if defined(ZAYA_GPU_CUDA) && defined(__CUDA_ARCH__)
  for (int half = 0; half < 2; ++half) {
    float* c = acc.values + 4 * half;
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a.registers[0]), "r"(a.registers[1]), "r"(a.registers[2]), "r"(a.registers[3]),
          "r"(b.registers[2 * half]), "r"(b.registers[2 * half + 1]));
  }
#elif defined(ZAYA_GPU_HIP) && defined(__HIP_DEVICE_COMPILE__)
  typedef short Bf16x4 __attribute__((ext_vector_type(4)));
  typedef float F32x4 __attribute__((ext_vector_type(4)));
  Bf16x4 av, bv;
  F32x4 c;
  __builtin_memcpy(&av, a.registers, sizeof av);
  __builtin_memcpy(&bv, b.registers, sizeof bv);
  __builtin_memcpy(&c, acc.values, sizeof c);
  c = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(av, bv, c, 0, 0, 0);
  __builtin_memcpy(acc.values, &c, sizeof c);
#elif defined(ZAYA_GPU_EMULATED)
  // The warp's tiles, rebuilt from every lane's fragments by the places above, then this lane's sums.
  struct Parts {
    MmaFragment a, b;
  };
  const Parts mine{a, b};
  Parts all[kWarpSize];
  emulator::gather_in_warp(&mine, sizeof mine, all);
  float ta[kMmaTile][kMmaTile], tb[kMmaTile][kMmaTile];
  for (int l = 0; l < kWarpSize; ++l) {
    for (int r = 0; r < kMmaRegisters; ++r) {
      const TilePlace pa = mma_a_place(l, r), pb = mma_b_place(l, r);
      ta[pa.row][pa.col] = bf16_value(uint16_t(all[l].a.registers[r]));
      ta[pa.row][pa.col + 1] = bf16_value(uint16_t(all[l].a.registers[r] >> 16));
      tb[pb.row][pb.col] = bf16_value(uint16_t(all[l].b.registers[r]));
      tb[pb.row][pb.col + 1] = bf16_value(uint16_t(all[l].b.registers[r] >> 16));
    }
  }
  for (int i = 0; i < kMmaResults; ++i) {
    const TilePlace p = mma_acc_place(lane(), i);
    float sum = acc.values[i];
    for (int k = 0; k < kMmaTile; ++k) sum += ta[p.row][k] * tb[p.col][k];
    acc.values[i] = sum;
  }
#else  // the host pass of a GPU build, which compiles no device code
  (void)acc, (void)a, (void)b;
#endif
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
  emulator::check_shared(name, shared_bytes);
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

// Lets `kernel` be launched with `bytes` of dynamic shared memory past the 48 KiB a launch may take without
// asking (CUDA's and HIP's MaxDynamicSharedMemorySize attribute), up to kOptInSharedBytes. Throws Error
// naming it when the device refuses; the emulator refuses more than kOptInSharedBytes itself.
template <class... Params>
void allow_shared(const char* name, void (*kernel)(Params...), size_t bytes) {
#if defined(ZAYA_GPU_CUDA)
  cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                       int(bytes));
#elif defined(ZAYA_GPU_HIP)
  (void)hipFuncSetAttribute(reinterpret_cast<const void*>(kernel), hipFuncAttributeMaxDynamicSharedMemorySize,
                            int(bytes));
#else
  (void)kernel;
  emulator::allow_shared(name, bytes, kOptInSharedBytes);
#endif
  check_launch(name);
}

// Blocks of `threads` covering `count` items, one item per thread.
inline Grid cover(int64_t count, unsigned threads) {
  return {unsigned((count + threads - 1) / threads), 1, 1};
}

}  // namespace zaya::gpu
