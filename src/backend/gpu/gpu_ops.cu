// The GPU backend's members that are not ops: memory, copies, waits and properties. The ops live in their
// families' files (op_table.h).

#include <mutex>

#include "backend/devices.h"
#include "backend/gpu/device.h"
#include "backend/gpu/gpu_ops.h"
#include "backend/gpu/language.h"  // ZAYA_GPU_EMULATED: the probe size below
#include "core/error.h"

namespace zaya {
namespace {

class DeviceMemory final : public MemoryResource {
 public:
  void* allocate(size_t bytes) override {
    void* data = gpu::allocate(align_up(bytes));
    gpu::zero(data, align_up(bytes));  // the contract of MemoryResource: a device hands out old contents
    return data;
  }
  void release(void* data) noexcept override { gpu::release(data); }
  void zero(void* data, size_t bytes) override { gpu::zero(data, bytes); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { gpu::copy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { gpu::copy(dst, src, bytes); }
};

}  // namespace

GpuOps::GpuOps() {
  if (gpu::device_count() == 0)
    throw Error(cat("no GPU: this ", gpu::language_name(), " build found no device"));
  blas_ = gpu::make_blas();
}

GpuOps::~GpuOps() = default;

MemoryResource& GpuOps::memory() {
  // Never destroyed: buffers held by statics (gpu::ops()'s scratch) release into it at exit, whatever the
  // order of static destruction.
  static DeviceMemory& memory = *new DeviceMemory;
  return memory;
}

void GpuOps::copy_from_host(void* dst, const void* src, size_t bytes) {
  gpu::copy(dst, src, bytes);
}
void GpuOps::copy_to_host(void* dst, const void* src, size_t bytes) {
  gpu::copy(dst, src, bytes);
}
void GpuOps::zero(void* data, size_t bytes) {
  gpu::zero(data, bytes);
}
void GpuOps::synchronize() {
  gpu::synchronize();
}

int64_t GpuOps::rate_probe_size() const {
#if defined(ZAYA_GPU_EMULATED)
  return 256;  // the emulator's products are loops on the CPU
#else
  return 8192;
#endif
}

int64_t GpuOps::loss_chunk_logits(bool f32_gradients) const {
  // At a 262k vocabulary: 4096 tokens' f32 logits, 4 GiB, where they are the gradient the head's weight
  // gradient product reads; else 512 tokens', 512 MiB (the products over them are still thousands deep).
  return int64_t(1) << (f32_gradients ? 30 : 27);
}

int64_t GpuOps::loss_gradient_logits() const {
  return int64_t(1) << 30;  // 2 GiB of bf16: 4096 tokens of a 262k vocabulary per weight gradient product
}

float* GpuOps::scratch(size_t bytes) {
  if (scratch_.size() < bytes) {
    scratch_ = AlignedBuffer();  // freed first: the old and the new need not fit together
    scratch_ = AlignedBuffer(bytes + bytes / 4, memory());
  }
  return scratch_.as<float>();
}

std::vector<void*> GpuOps::scratch_parts(const std::vector<size_t>& sizes) {
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const size_t bytes : sizes) {
    offsets.push_back(total);
    total += (bytes + 255) / 256 * 256;
  }
  char* base = reinterpret_cast<char*>(scratch(total));
  std::vector<void*> parts;
  for (const size_t offset : offsets) parts.push_back(base + offset);
  return parts;
}

Ops& gpu::ops() {
  static std::once_flag made;
  static std::unique_ptr<GpuOps> ops;
  std::call_once(made, [] { ops = std::make_unique<GpuOps>(); });
  return *ops;
}

GpuBackend gpu::backend() {
  return {gpu::language_name(), gpu::ops,        gpu::device_count,       gpu::device_name,
          gpu::memory_bytes,    gpu::use_device, gpu::collectives_name(), gpu::collectives_unavailable,
          gpu::make_collectives};
}

}  // namespace zaya
