// The GPU backend's memory, copies and matrix products; the other ops live in their groups' files.

#include <mutex>

#include "backend/gpu/device.h"
#include "backend/gpu/gpu_ops.h"
#include "backend/gpu/kernel_util.h"
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

// dst [rows, cols] packed = bf16(src [rows, cols] with row stride ld).
ZAYA_KERNEL void round_rows_to_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld, uint16_t* dst) {
  const int64_t i = int64_t(gpu::block_x()) * gpu::block_dim_x() + gpu::thread_x();
  if (i >= rows * cols) return;
  dst[i] = gpu::bf16_bits(src[(i / cols) * ld + i % cols]);
}

}  // namespace

GpuOps::GpuOps() {
  if (gpu::device_count() == 0)
    throw Error(cat("no GPU: this ", gpu::language_name(), " build found no device"));
  blas_ = gpu::make_blas();
}

GpuOps::~GpuOps() = default;

MemoryResource& GpuOps::memory() {
  // Never destroyed: buffers held by statics (gpu_ops()'s scratch) release into it at exit, whatever the
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

int64_t GpuOps::loss_chunk_logits() const {
  // 4 GiB of f32 logits and 2 GiB of their gradient's bf16 copy: 4096 tokens of a 262k vocabulary.
  return int64_t(1) << 30;
}

float* GpuOps::scratch(size_t bytes) {
  if (scratch_.size() < bytes) {
    scratch_ = AlignedBuffer();  // freed first: the old and the new need not fit together
    scratch_ = AlignedBuffer(bytes + bytes / 4, memory());
  }
  return scratch_.as<float>();
}

bool GpuOps::fast_bf16() const {
  return true;
}  // every GPU this backend targets has bf16 matrix units

void GpuOps::convert_to_bf16(const float* src, int64_t count, BFloat16* dst) {
  gpu::launch("round_rows_to_bf16", round_rows_to_bf16, gpu::cover(count, gpu::kThreads), {gpu::kThreads}, 0,
              gpu::as_stream(stream_), src, int64_t(1), count, count, reinterpret_cast<uint16_t*>(dst));
}

const void* GpuOps::as_bf16(Operand operand, int64_t rows, int64_t cols, int64_t& ld, int slot) {
  if (operand.type == DType::BF16) return operand.data;
  AlignedBuffer& buffer = bf16_operands_[slot];
  const size_t bytes = size_t(rows * cols) * sizeof(uint16_t);
  if (buffer.size() < bytes) {
    buffer = AlignedBuffer();
    buffer = AlignedBuffer(bytes, memory());
  }
  gpu::launch("round_rows_to_bf16", round_rows_to_bf16, gpu::cover(rows * cols, gpu::kThreads),
              {gpu::kThreads}, 0, gpu::as_stream(stream_), static_cast<const float*>(operand.data), rows,
              cols, ld, buffer.as<uint16_t>());
  ld = cols;
  return buffer.data();
}

void GpuOps::gemm(Precision precision, Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k,
                  float alpha, Operand a, int64_t lda, Operand b, int64_t ldb, float beta, float* c,
                  int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (precision == Precision::F32) {
    if (a.type != DType::F32 || b.type != DType::F32) throw Error("an f32 product was given a bf16 operand");
    blas_->gemm(DType::F32, trans_a, trans_b, m, n, k, alpha, a.data, lda, 0, b.data, ldb, 0, beta, c, ldc, 0,
                1, stream_);
    return;
  }
  // op(A) is [m, k]: A is stored [m, k], or [k, m] when transposed; likewise B.
  const bool ta = trans_a == Trans::Yes, tb = trans_b == Trans::Yes;
  const void* a16 = as_bf16(a, ta ? k : m, ta ? m : k, lda, 0);
  const void* b16 = as_bf16(b, tb ? n : k, tb ? k : n, ldb, 1);
  blas_->gemm(DType::BF16, trans_a, trans_b, m, n, k, alpha, a16, lda, 0, b16, ldb, 0, beta, c, ldc, 0, 1,
              stream_);
}

Ops& gpu_ops() {
  static std::once_flag made;
  static std::unique_ptr<GpuOps> ops;
  std::call_once(made, [] { ops = std::make_unique<GpuOps>(); });
  return *ops;
}

}  // namespace zaya
