#pragma once
// The backend op table: every computation of the model's forward and backward passes, as coarse ops on
// device pointers and shapes. Model code calls only these, never a device API, so a GPU backend (CUDA or
// HIP from one source) is a new implementation of this interface and leaves the model untouched.
//
// Conventions: row-major, contiguous unless a leading dimension (ld*) says otherwise. T = tokens of the
// micro-batch (B sequences of S positions, token t = b * S + s). "accumulate" outputs are added to (+=),
// others are overwritten. Parameter-gradient reductions run in a fixed order, so results do not depend
// on the thread count. The ops themselves, with what each computes, are listed in op_table.h.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/buffer.h"
#include "core/dtype.h"
#include "core/precision.h"

namespace zaya {

enum class Trans : uint8_t { No, Yes };

// One matrix of a product as it is stored: f32, or bf16 (a weight's low-precision copy).
struct Operand {
  const void* data = nullptr;
  DType type = DType::F32;
  Operand() = default;
  Operand(const float* values) : data(values), type(DType::F32) {}
  Operand(const BFloat16* values) : data(values), type(DType::BF16) {}
  // The operand `elements` further on (an expert's matrix inside a layer's [E, ...] tensor).
  Operand offset(int64_t elements) const {
    return type == DType::BF16 ? Operand(static_cast<const BFloat16*>(data) + elements)
                               : Operand(static_cast<const float*>(data) + elements);
  }
};

// Where an op writes an activation that products read next: f32, or bf16, rounded to nearest even as the op
// writes it (the bits a rounding pass would give), so that a bf16 step's products read it with no rounding
// pass of their own and no f32 copy is kept.
struct Destination {
  void* data = nullptr;
  DType type = DType::F32;
  Destination() = default;
  Destination(float* values) : data(values), type(DType::F32) {}
  Destination(BFloat16* values) : data(values), type(DType::BF16) {}
  float* f32() const { return type == DType::F32 ? static_cast<float*>(data) : nullptr; }
  BFloat16* bf16() const { return type == DType::BF16 ? static_cast<BFloat16*>(data) : nullptr; }
  // What a product reads from it.
  Operand operand() const {
    return type == DType::BF16 ? Operand(static_cast<const BFloat16*>(data))
                               : Operand(static_cast<const float*>(data));
  }
};

// The shape of the CCA attention of one layer.
struct AttentionShape {
  int64_t batch = 0, seq = 0;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t window = 0;  // sliding window in keys (query included); 0 = full causal
};

class Ops {
 public:
  virtual ~Ops() = default;

  // AdamW's settings of one step (adamw_step).
  struct AdamWStep {
    float lr, beta1, beta2, eps, weight_decay, grad_scale;
    float bias_correction1, bias_correction2;  // 1 - beta^t
  };

  // f32 operands, an f32 product (the common case, spelled short).
  void gemm(Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
            int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    gemm(Precision::F32, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }

  // ---- not ops: memory, copies, waits and properties -------------------------------------------------
  // Written by hand, not in the table: they compute nothing the op check could compare, several return a
  // value or have a default every backend but one keeps, and the profiler times the copies under its own
  // names (op_profiler.cpp).

  // Where this backend's values live: parameters, gradients, optimizer state and activation arenas are
  // allocated here, and every pointer the ops take points into it.
  virtual MemoryResource& memory() = 0;
  // The one way the host reads a device value (expert offsets, the loss and router statistics, the
  // gradient norm): each call is a synchronisation on a GPU, so they are counted, to be kept few.
  void read_to_host(void* dst, const void* src, size_t bytes) {
    ++host_reads_;
    copy_to_host(dst, src, bytes);
  }
  int64_t host_reads() const { return host_reads_; }
  // Waits until the work queued so far has finished (a GPU runs asynchronously; timing needs this).
  virtual void synchronize() {}
  // The side of the square product at which this backend's matrix products reach their rate (the MFU
  // denominator's measure): a CPU's at 1024, a GPU's only at several thousand.
  virtual int64_t rate_probe_size() const { return 1024; }
  // How many logits the LM head and the loss score at once (ZayaModel::head's chunks of tokens), held in
  // f32. In an f32 training step they are the gradient too, and each chunk adds its share into the head's
  // whole f32 gradient, so small chunks cost a pass over that gradient each (2 GB at a 262k vocabulary): the
  // CPU bounds its scratch at 64 MiB, a GPU takes 4 GiB then to keep the product's depth in the thousands.
  // Otherwise (a bf16 step, whose gradients go to the product in bf16 groups of loss_gradient_logits; no
  // gradient) a GPU takes 512 MiB.
  virtual int64_t loss_chunk_logits(bool f32_gradients) const {
    (void)f32_gradients;
    return int64_t(1) << 24;
  }
  // A bf16 step's loss gradients kept in bf16 for one product of the head's weight gradient (its depth):
  // 128 MiB on the CPU, 2 GiB on a GPU.
  virtual int64_t loss_gradient_logits() const { return int64_t(1) << 26; }
  // Copies bytes from the host into this backend's memory (weights read from a file, a batch's tokens).
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;
  // bytes of device memory set to zero.
  virtual void zero(void* data, size_t bytes) = 0;
  // Whether this device has bf16 product instructions (a GPU; a CPU with AVX512-BF16 or AMX). Having them is
  // not running them fast: precision "auto" measures (precision_policy.h).
  virtual bool fast_bf16() const = 0;
  // The floats of working memory cca_conv_forward and cca_conv_backward take (a size, used by both).
  virtual int64_t cca_conv_scratch(const AttentionShape& shape, int64_t k0, int64_t k1) = 0;

  // ---- the ops: computations on this backend's values, declared once in op_table.h ------------------
#define ZAYA_OP(name, params, args) virtual void name params = 0;
#include "backend/op_table.h"

 protected:
  // Copies bytes from this backend's memory to the host, after the work that writes them has finished.
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;

 private:
  int64_t host_reads_ = 0;
};

// The ops' names, in the table's order: what check_ops covers (each has a call there) and the profiler's
// rows are called.
inline constexpr std::array kOpNames{
#define ZAYA_OP(name, params, args) std::string_view(#name),
#include "backend/op_table.h"
};

// The CPU implementation: oneDNN for matrix products, OpenMP for everything else. A GPU's is reached
// through select_device (devices.h).
Ops& cpu_ops();

}  // namespace zaya
