#include "train/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "backend/planning_ops.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "model/parameters.h"
#include "model/zaya_model.h"
#include "optim/optimizer.h"
#include "optim/optimizer_shards.h"

namespace zaya {
namespace {

// A context group for planning: C ranks whose collectives move nothing (the planning backend computes
// nothing either); the model allocates for its slice as it would on rank 0 of a real group.
class PlanningHost final : public Communicator {
 public:
  explicit PlanningHost(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  int local_size() const override { return 1; }
  int local_rank() const override { return 0; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_reduce_sum(double*, int64_t) override {}
  void all_reduce_sum(int64_t*, int64_t) override {}
  void all_reduce_max(int64_t*, int64_t) override {}
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const float*, float*,
                                                              std::vector<int64_t>) override {
    throw Error("a planning group does not reduce");
  }
  void all_gather(float*, const std::vector<int64_t>&) override {}
  void all_to_all(const float*, const std::vector<int64_t>&, float*, const std::vector<int64_t>&) override {}
  void broadcast(void*, int64_t, int) override {}
  std::vector<std::string> all_gather_strings(const std::string& mine) override {
    return std::vector<std::string>(size_t(size_), mine);
  }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int) override { throw Error("a planning group does not split"); }
  [[noreturn]] void abort(int code) override { std::exit(code); }

 private:
  int size_;
};

class PlanningGroup final : public DeviceCommunicator {
 public:
  explicit PlanningGroup(int size) : host_(size) {}
  Communicator& host() override { return host_; }
  std::string engine() const override { return "planning"; }
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const float*, float*,
                                                              std::vector<int64_t>) override {
    throw Error("a planning group does not reduce");
  }
  void all_gather(float*, const std::vector<int64_t>&) override {}
  void all_to_all(const float*, const std::vector<int64_t>&, float*, const std::vector<int64_t>&) override {}

 private:
  PlanningHost host_;
};

// ZeRO-1 as TrainingRun shards it: the dense parameters over every rank, the experts over the ranks that
// hold the same ones.
struct ZeroShards {
  OptimizerShards dense, experts;
  ZeroShards(const std::vector<ParamAssignment>& assignments, const ParameterTable& table,
             const MemoryLayout& layout)
      : dense(plan_optimizer_shards(assignments, 0, table.dense_floats(), layout.ranks)),
        experts(plan_optimizer_shards(assignments, table.dense_floats(), table.total_floats(),
                                      layout.ranks / layout.expert_parallel)) {}
  // The float ranges of the layout whose optimizer state `rank` keeps.
  std::vector<std::pair<int64_t, int64_t>> owned(int rank, const MemoryLayout& layout) const {
    return {dense.range(rank), experts.range(rank / layout.expert_parallel)};
  }
};

// The floats of state that `owned` gives a rank: one per parameter, and one more per AdamW parameter.
int64_t state_floats(const std::vector<ParamAssignment>& assignments,
                     const std::vector<std::pair<int64_t, int64_t>>& owned) {
  int64_t floats = 0;
  for (const ParamAssignment& a : assignments) {
    for (const auto& [begin, end] : owned) {
      if (a.param->offset < begin || a.param->offset >= end) continue;
      floats += a.param->numel() * (a.optimizer == OptimizerKind::AdamW ? 2 : 1);
    }
  }
  return floats;
}

// The rank whose optimizer state is the largest.
int fullest_rank(const std::vector<ParamAssignment>& assignments, const ZeroShards& shards,
                 const MemoryLayout& layout) {
  int fullest = 0;
  int64_t most = -1;
  for (int rank = 0; rank < layout.ranks; ++rank) {
    const int64_t floats = state_floats(assignments, shards.owned(rank, layout));
    if (floats > most) {
      most = floats;
      fullest = rank;
    }
  }
  return fullest;
}

// Activations and scratch of one micro-batch's forward and backward, on a model holding every expert (the
// rows an expert-parallel rank receives are planned as one rank's whole micro-batch): a pass measures the
// arenas' high water, and a second, with the arenas reserved at that as the trainer reserves them, what a
// step allocates besides.
void plan_step(const ModelDims& dims, const MemoryLayout& layout, Ops& device, MemoryPlan& plan) {
  // Context parallel, a rank's slice of each sequence.
  const int64_t slice = layout.seq / layout.context_parallel;
  const std::vector<int32_t> ids(size_t(layout.micro_batch * slice), 0);
  const std::vector<int32_t> labels = shifted_labels(ids.data(), layout.micro_batch, slice);
  Batch batch{ids.data(), labels.data(), nullptr, layout.micro_batch, slice};
  batch.context_slice = layout.context_parallel > 1;
  const float loss_scale = 1.0f / float(batch.tokens());
  PlanningGroup context(layout.context_parallel);
  {
    PlanningOps planning(device);
    ParameterStore params(dims, ExpertSlice{}, planning.memory());
    ZayaModel model(params, planning, layout.precision);
    model.set_recompute(layout.recompute);
    model.set_context_group(&context);
    model.forward_backward(batch, loss_scale);
    plan.activations = int64_t(model.activation_bytes());
    plan.recomputed = int64_t(model.recomputed_bytes());
    plan.scratch = int64_t(model.scratch_bytes());
  }
  PlanningOps planning(device);
  ParameterStore params(dims, ExpertSlice{}, planning.memory());
  ZayaModel model(params, planning, layout.precision);
  model.set_recompute(layout.recompute);
  model.set_context_group(&context);
  params.zero_grads();  // allocates the gradients, counted apart
  model.reserve_arenas(size_t(plan.activations), size_t(plan.recomputed), size_t(plan.scratch));
  const size_t before = planning.live_bytes();
  model.forward_backward(batch, loss_scale);
  plan.transient = int64_t(planning.peak_bytes() - before);
}

std::string pad(const std::string& text, size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}

}  // namespace

MemoryPlan plan_memory(const ModelDims& dims, const std::vector<GroupRule>& groups,
                       const MemoryLayout& layout, Ops& device) {
  const int P = layout.expert_parallel;
  if (P < 1 || layout.ranks < 1 || layout.ranks % P != 0 || dims.experts % P != 0) {
    throw Error(cat("expert parallelism over ", P, " ranks needs the ranks (", layout.ranks,
                    ") and the experts (", dims.experts, ") to be multiples of ", P))
        .field("run.expert_parallel");
  }
  if (layout.micro_batch < 1 || layout.seq < 1)
    throw Error("a micro-batch of no tokens").field("micro_batch");
  const int C = layout.context_parallel;
  if (C < 1 || layout.ranks % C != 0 || layout.seq % C != 0) {
    throw Error(cat("context parallelism over ", C, " ranks needs the ranks (", layout.ranks,
                    ") and the sequence (", layout.seq, ") to be multiples of ", C))
        .field("run.context_parallel");
  }
  MemoryPlan plan;
  PlanningOps planning(device);
  ParameterStore params(dims, ExpertSlice{0, dims.experts / P}, planning.memory());
  plan.weights = int64_t(planning.live_bytes());
  plan.gradients = params.table().total_floats() * int64_t(sizeof(float));
  size_t before = planning.live_bytes();
  {
    const ZayaModel copies(params, planning, layout.precision);
    plan.model_buffers = int64_t(planning.live_bytes() - before);
  }

  const std::vector<ParamAssignment> assignments = assign_param_groups(params.table(), groups);
  const ZeroShards shards(assignments, params.table(), layout);
  const std::vector<std::pair<int64_t, int64_t>> owned =
      shards.owned(fullest_rank(assignments, shards, layout), layout);
  OptimizerConfig config;
  config.groups = groups;
  before = planning.live_bytes();
  const Optimizer optimizer(params, config, planning, owned, layout.precision);
  const int64_t state = optimizer.state_floats() * int64_t(sizeof(float));
  plan.second_moment = optimizer.second_moment_floats() * int64_t(sizeof(float));
  plan.momentum = state - plan.second_moment;
  plan.optimizer_work = int64_t(planning.live_bytes() - before) - state;
  // With more than one rank, the gradient reducer sums this rank's share into a buffer of its own.
  if (layout.ranks > 1) plan.optimizer_work += plan.momentum;
  plan_step(dims, layout, device, plan);
  return plan;
}

int64_t largest_micro_batch(const ModelDims& dims, const std::vector<GroupRule>& groups, MemoryLayout layout,
                            Ops& device, int64_t capacity) {
  const auto fits = [&](int64_t batch) {
    layout.micro_batch = batch;
    return plan_memory(dims, groups, layout, device).total() <= capacity;
  };
  if (!fits(1)) return 0;
  int64_t low = 1, high = 2;  // fits(low); high is tried next
  while (fits(high)) {
    low = high;
    if (high > (int64_t(1) << 20)) return high;  // far past any real micro-batch
    high *= 2;
  }
  while (high - low > 1) {
    const int64_t middle = low + (high - low) / 2;
    (fits(middle) ? low : high) = middle;
  }
  return low;
}

std::string describe_memory_plan(const MemoryPlan& plan, int64_t capacity) {
  // In GiB, or MiB for a plan under one GiB (a small model's), so that its lines do not all read 0.00.
  const bool small = plan.total() < (int64_t(1) << 30) && capacity < (int64_t(1) << 30);
  const auto size = [small](int64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%10.2f %s", double(bytes) / double(int64_t(1) << (small ? 20 : 30)),
                  small ? "MiB" : "GiB");
    return std::string(text);
  };
  std::string out;
  const auto line = [&](const char* name, int64_t bytes) {
    out += cat("  ", pad(name, 34), " ", size(bytes), "\n");
  };
  line("master weights (f32)", plan.weights);
  line("bf16 weight copies, constants", plan.model_buffers);
  line("gradients (f32)", plan.gradients);
  line("momentum / first moment", plan.momentum);
  line("AdamW second moment", plan.second_moment);
  line("optimizer working buffers", plan.optimizer_work);
  line("activations (one micro-batch)", plan.activations);
  if (plan.recomputed > 0) line("recomputed layer's activations", plan.recomputed);
  line("scratch (loss chunk, expert rows)", plan.scratch);
  line("other buffers of a step", plan.transient);
  line("total", plan.total());
  if (capacity > 0) {
    out += cat("  ", pad("device memory", 34), " ", size(capacity), ": ",
               plan.total() <= capacity ? "fits" : "does not fit", "\n");
  }
  return out;
}

}  // namespace zaya
