#pragma once
// A backend that computes nothing, for measuring what a step allocates. Its ops return at once; its memory
// is address space reserved and never written (mmap, MAP_NORESERVE), counted as it is allocated and
// released. So the model, the optimizer and a training step run on it allocate exactly what they would on
// `target` (whose sizes they ask: the attention convolution's scratch, the loss's chunk of logits), at any
// model size, in milliseconds and without the memory. The expert grouping sends every token to the first
// expert: the experts' buffers then hold every token, their most.

#include <cstddef>
#include <memory>

#include "backend/ops.h"

namespace zaya {

namespace planning {
// Every op of the table, doing nothing (its parameters, named in the table, unused).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
class NoOps : public Ops {
 public:
  using Ops::gemm;
#define ZAYA_OP(name, params, args) \
  void name params override {}
#include "backend/op_table.h"
};
#pragma GCC diagnostic pop
}  // namespace planning

class PlanningOps final : public planning::NoOps {
 public:
  explicit PlanningOps(Ops& target);
  ~PlanningOps() override;

  // The bytes allocated from memory() and not yet released, and the most there have been at once.
  size_t live_bytes() const;
  size_t peak_bytes() const;

  MemoryResource& memory() override;
  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void zero(void* data, size_t bytes) override;
  int64_t rate_probe_size() const override { return target_.rate_probe_size(); }
  int64_t loss_chunk_logits(bool f32_gradients) const override {
    return target_.loss_chunk_logits(f32_gradients);
  }
  int64_t loss_gradient_logits() const override { return target_.loss_gradient_logits(); }
  bool fast_bf16() const override { return target_.fast_bf16(); }
  int64_t cca_conv_scratch(const AttentionShape& shape, int64_t k0, int64_t k1) override {
    return target_.cca_conv_scratch(shape, k0, k1);
  }

  // offsets = [0, tokens, ..., tokens]: every token to expert 0.
  void group_by_expert(const int32_t* choice, int64_t tokens, int64_t experts, int32_t* order,
                       int64_t* offsets) override;

 protected:
  void copy_to_host(void* dst, const void* src, size_t bytes) override;

 private:
  class Reserve;
  Ops& target_;
  std::unique_ptr<Reserve> memory_;
};

}  // namespace zaya
