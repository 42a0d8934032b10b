// The device runtime in each language: the vendor runtime (CUDA, HIP), or host memory for the emulator,
// whose kernels have finished when their launch returns.

#include <cstdlib>
#include <new>

#include "backend/gpu/device.h"
#include "backend/gpu/language.h"
#include "core/error.h"

#if defined(ZAYA_GPU_CUDA) || defined(ZAYA_GPU_HIP)
#include <dlfcn.h>
#include <unistd.h>
#endif

namespace zaya::gpu {

#if defined(ZAYA_GPU_CUDA) || defined(ZAYA_GPU_HIP)

#if defined(ZAYA_GPU_CUDA)
using RuntimeError = cudaError_t;
using DeviceProperties = cudaDeviceProp;
constexpr RuntimeError kSuccess = cudaSuccess;
constexpr RuntimeError kNoDevice = cudaErrorNoDevice;
// Whether the NVIDIA driver is installed: the runtime reports its absence as it reports a driver too old
// for it (cudaErrorInsufficientDriver), and only the second is a fault to report.
bool driver_installed() {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver) dlclose(driver);
  return driver != nullptr;
}
const char* error_text(RuntimeError error) {
  return cudaGetErrorString(error);
}
#define ZAYA_RT(name) cuda##name
#else
using RuntimeError = hipError_t;
using DeviceProperties = hipDeviceProp_t;
constexpr RuntimeError kSuccess = hipSuccess;
constexpr RuntimeError kNoDevice = hipErrorNoDevice;
// Whether the AMD kernel driver is loaded (its device file), the HIP runtime being zaya's own dependency.
bool driver_installed() {
  return access("/dev/kfd", F_OK) == 0;
}
const char* error_text(RuntimeError error) {
  return hipGetErrorString(error);
}
#define ZAYA_RT(name) hip##name
#endif

namespace {
void check(RuntimeError error, const char* what) {
  if (error != kSuccess) throw Error(cat(language_name(), " ", what, ": ", error_text(error)));
}
}  // namespace

const char* language_name() {
#if defined(ZAYA_GPU_CUDA)
  return "cuda";
#else
  return "hip";
#endif
}

int device_count() {
  int count = 0;
  const RuntimeError error = ZAYA_RT(GetDeviceCount)(&count);
  if (error == kSuccess) return count;
  (void)ZAYA_RT(GetLastError)();
  if (error == kNoDevice || !driver_installed()) return 0;  // nothing to use: not an error
  throw Error(cat("the ", language_name(), " runtime cannot count this machine's GPUs: ", error_text(error),
                  " (error ", int(error), ")"));
}

void use_device(int index) {
  check(ZAYA_RT(SetDevice)(index), "SetDevice");
}

std::string device_name() {
  int device = 0;
  check(ZAYA_RT(GetDevice)(&device), "GetDevice");
  DeviceProperties properties{};
  check(ZAYA_RT(GetDeviceProperties)(&properties, device), "GetDeviceProperties");
  return properties.name;
}

int64_t memory_bytes() {
  size_t free = 0, total = 0;
  check(ZAYA_RT(MemGetInfo)(&free, &total), "MemGetInfo");
  return int64_t(total);
}

void* allocate(size_t bytes) {
  void* data = nullptr;
  if (bytes == 0) return nullptr;
  if (ZAYA_RT(Malloc)(&data, bytes) != kSuccess) {
    (void)ZAYA_RT(GetLastError)();
    throw std::bad_alloc();
  }
  return data;
}

void release(void* data) noexcept {
  (void)ZAYA_RT(Free)(data);
}

void zero(void* data, size_t bytes) {
  if (bytes > 0) check(ZAYA_RT(Memset)(data, 0, bytes), "Memset");
}

void copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) check(ZAYA_RT(Memcpy)(dst, src, bytes, ZAYA_RT(MemcpyDefault)), "Memcpy");
}

void synchronize() {
  check(ZAYA_RT(DeviceSynchronize)(), "DeviceSynchronize");
}

void check_launch(const char* kernel) {
  const RuntimeError error = ZAYA_RT(GetLastError)();
  if (error != kSuccess) throw Error(cat(language_name(), " launch of ", kernel, ": ", error_text(error)));
}

#undef ZAYA_RT

#else  // the emulator

const char* language_name() {
  return "emulated";
}
int device_count() {
  return 1;
}
void use_device(int) {}  // its one device
std::string device_name() {
  return "the GPU emulator (kernels run on the CPU)";
}
int64_t memory_bytes() {
  return emulator::device_memory_bytes();
}

void* allocate(size_t bytes) {
  return bytes == 0 ? nullptr : emulator::allocate_device(bytes);
}
void release(void* data) noexcept {
  emulator::release_device(data);
}

void zero(void* data, size_t bytes) {
  const emulator::DeviceAccess access;
  if (bytes > 0) std::memset(data, 0, bytes);
}

void copy(void* dst, const void* src, size_t bytes) {
  const emulator::DeviceAccess access;
  if (bytes > 0) std::memmove(dst, src, bytes);
}

void synchronize() {}
void check_launch(const char*) {}

#endif

}  // namespace zaya::gpu
