#pragma once
// The memory a training run takes per rank, measured rather than estimated: the parameter store, the model,
// the optimizer and one micro-batch's forward and backward are made on a backend that computes nothing and
// counts what they allocate (backend/planning_ops.h). `zaya info --memory` prints it; `zaya train` checks it
// against the device before it allocates anything.

#include <cstdint>
#include <string>
#include <vector>

#include "core/precision.h"
#include "model/model_dims.h"
#include "model/recompute.h"
#include "optim/param_groups.h"

namespace zaya {

class Ops;

struct MemoryLayout {
  int ranks = 1;            // ranks in all
  int expert_parallel = 1;  // ranks sharing one copy of the experts (run.expert_parallel)
  int64_t micro_batch = 1, seq = 1;
  Precision precision = Precision::F32;
  Recompute recompute = Recompute::None;
  int context_parallel = 1;  // ranks sharing each sequence, a slice each (run.context_parallel)
};

// Bytes on the rank that holds the most (ZeRO-1 shards are balanced by arithmetic, not bytes).
struct MemoryPlan {
  int64_t weights = 0;         // f32 master values of this rank's parameters (dense + its experts)
  int64_t model_buffers = 0;   // the products' bf16 copies of the weights (bf16 runs), the model's constants
  int64_t gradients = 0;       // f32, this rank's parameters whole (ZeRO-1 shards the state, not these)
  int64_t momentum = 0;        // Muon's momentum and AdamW's first moment, for this rank's ZeRO-1 share
  int64_t second_moment = 0;   // AdamW's, its parameters alone
  int64_t optimizer_work = 0;  // Newton-Schulz's working matrix (the largest Muon batch), the gradient sums
  int64_t activations = 0;     // what the forward keeps for the backward, and the backward's own
  int64_t recomputed = 0;      // with recompute: one layer's activations, computed again in the backward
  int64_t scratch = 0;         // what an op or a layer needs only while it runs: the loss's chunk of logits,
                               // the experts' rows, the convolution's buffers
  int64_t transient = 0;       // what a step allocates besides (freed by its end)
  int64_t total() const {
    return weights + model_buffers + gradients + momentum + second_moment + optimizer_work + activations +
           recomputed + scratch + transient;
  }
};

// The plan of one layout on `device` (whose sizes the step asks: loss chunks, scratch). Throws Error when
// the layout cannot be made (expert_parallel not dividing the ranks or the experts). Experts are planned at
// their fullest: every token of the micro-batch routed to this rank's experts.
MemoryPlan plan_memory(const ModelDims& dims, const std::vector<GroupRule>& groups,
                       const MemoryLayout& layout, Ops& device);

// The largest micro-batch of `layout.seq` tokens whose plan fits in `capacity` bytes, 0 if none does.
int64_t largest_micro_batch(const ModelDims& dims, const std::vector<GroupRule>& groups, MemoryLayout layout,
                            Ops& device, int64_t capacity);

// The plan as a table, a line per part, against `capacity` bytes when it is known (> 0).
std::string describe_memory_plan(const MemoryPlan& plan, int64_t capacity);

}  // namespace zaya
