#pragma once
// The host's side of a GPU: how many there are, their memory, copies and waiting. One implementation per
// language (device.cu): CUDA, HIP, or the emulator's host memory. Host code includes this header, never a
// vendor runtime header.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace zaya {
class Communicator;
class DeviceCommunicator;
class Ops;
struct GpuBackend;
}  // namespace zaya

namespace zaya::gpu {

// This build's backend as the program registers it (register_gpu_backend, src/cli/main.cpp), after which
// commands reach it through select_device alone.
GpuBackend backend();
// Its ops (gpu_ops.h), made on first use on this process's device; throws Error where there is no GPU. The
// GPU tests call it directly, to compare the backend with the CPU's.
Ops& ops();

// "cuda", "hip" or "emulated": what this build's GPU backend is compiled as.
const char* language_name();
// GPUs this process can use; 0 when there is none or no driver (the emulator has one). Throws Error when a
// driver is there but fails (older than the runtime, say): a fault to fix, not a machine without a GPU.
int device_count();
// Makes the machine's index-th GPU this process's (its ranks take one each), before ops() is first made.
void use_device(int index);
// "NVIDIA H200" and the like.
std::string device_name();
// The device's memory in bytes (all of it, not what is free now).
int64_t memory_bytes();

// Device memory with whatever it held before (as cudaMalloc); throws std::bad_alloc when there is not enough.
void* allocate(size_t bytes);
void release(void* data) noexcept;
void zero(void* data, size_t bytes);
// Copies between host and device or within a device, after the queued work has finished.
void copy(void* dst, const void* src, size_t bytes);
// Waits for every kernel queued so far.
void synchronize();

// The NCCL (CUDA) or RCCL (HIP) library, loaded when first asked for (collectives.cu): why it cannot serve
// `ranks_here` ranks on this machine ("" when it can), and its communicator over host's ranks (collective).
// The emulator has neither.
const char* collectives_name();
std::string collectives_unavailable(int ranks_here);
std::unique_ptr<DeviceCommunicator> make_collectives(Communicator& host);

}  // namespace zaya::gpu
