#pragma once
// The GPU backend: Ops as kernels of our own (backend/gpu/*.cu, one source for CUDA, HIP and the emulator)
// and the vendor's matrix products (cuBLASLt, hipBLASLt). Each family of ops (op_table.h) lives in its own
// source file, named as in the CPU backend; this header is their common class. Every pointer an op takes
// is device memory.

#include <array>
#include <memory>
#include <vector>

#include "backend/gpu/blas.h"
#include "backend/ops.h"
#include "core/buffer.h"

namespace zaya {

class GpuOps final : public Ops {
 public:
  GpuOps();
  ~GpuOps() override;
  MemoryResource& memory() override;
  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void zero(void* data, size_t bytes) override;
  void synchronize() override;
  int64_t rate_probe_size() const override;
  int64_t loss_chunk_logits(bool f32_gradients) const override;
  int64_t loss_gradient_logits() const override;

  bool fast_bf16() const override;
  int64_t cca_conv_scratch(const AttentionShape& shape, int64_t k0, int64_t k1) override;

  using Ops::gemm;  // the f32 shorthand, which the override below would otherwise hide
#define ZAYA_OP(name, params, args) void name params override;
#include "backend/op_table.h"

 protected:
  void copy_to_host(void* dst, const void* src, size_t bytes) override;

 private:
  // An operand of a bf16 product as bf16 values: a bf16 operand as it is, an f32 one [rows, cols] (row
  // stride ld) rounded into bf16_operands_[slot], packed (its row stride is then cols).
  const void* as_bf16(Operand operand, int64_t rows, int64_t cols, int64_t& ld, int slot);
  // Device memory for one op's intermediate values, valid until the next op asks for scratch (ops run in
  // order on one stream, so the next op's kernels start after this op's have finished with it).
  float* scratch(size_t bytes);
  // The same memory cut into consecutive parts of the given bytes (each 256-byte aligned), asked for at
  // once so that no part moves when the buffer grows for another.
  std::vector<void*> scratch_parts(const std::vector<size_t>& sizes);

  void* stream_ = nullptr;  // the stream every kernel and product runs on, in order (the default one)
  std::unique_ptr<gpu::Blas> blas_;
  std::array<AlignedBuffer, 2> bf16_operands_;
  AlignedBuffer scratch_;
};

}  // namespace zaya
