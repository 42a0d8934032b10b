// The memory plan (train/memory_plan.h): its parts against sums worked out from the parameter table and the
// optimizer's rules, and its activations against the real model's on the CPU, whose first step, given the
// plan's arenas, allocates nothing more.

#include "train/memory_plan.h"

#include <gtest/gtest.h>

#include "backend/ops.h"
#include "core/error.h"
#include "model/model_io.h"
#include "model/zaya_model.h"
#include "optim/optimizer.h"

namespace zaya {
namespace {

constexpr int64_t kFloat = sizeof(float);

struct Counts {
  int64_t all = 0, dense = 0, experts = 0, adamw = 0;  // floats
};

Counts count(const ModelDims& dims) {
  const ParameterTable table(dims);
  Counts c;
  c.all = table.total_floats();
  c.dense = table.dense_floats();
  c.experts = c.all - c.dense;
  for (const ParamAssignment& a : assign_param_groups(table, default_group_rules())) {
    if (a.optimizer == OptimizerKind::AdamW) c.adamw += a.param->numel();
  }
  return c;
}

// One rank: the whole model, its gradients, momentum for every float and a second moment for AdamW's alone.
TEST(MemoryPlan, OneRankHoldsTheWholeModelAndItsState) {
  for (const char* preset : {"tiny", "small"}) {
    const ModelDims dims = model_dims(preset_config(preset));
    const Counts c = count(dims);
    const MemoryPlan plan =
        plan_memory(dims, default_group_rules(), {1, 1, 2, 64, Precision::F32}, cpu_ops());
    EXPECT_EQ(plan.weights, c.all * kFloat) << preset;
    EXPECT_EQ(plan.gradients, c.all * kFloat) << preset;
    EXPECT_EQ(plan.momentum, c.all * kFloat) << preset;
    EXPECT_EQ(plan.second_moment, c.adamw * kFloat) << preset;
    EXPECT_LT(plan.model_buffers, 4096) << preset;  // constants alone: f32 products read the master weights
    EXPECT_GT(plan.activations, 0) << preset;
    EXPECT_EQ(plan.total(), plan.weights + plan.model_buffers + plan.gradients + plan.momentum +
                                plan.second_moment + plan.optimizer_work + plan.activations + plan.scratch +
                                plan.transient);
  }
}

// Context parallel: a rank keeps the activations of its slice of each sequence, 1/C of them and a little
// more: the attention output in both layouts (the slice's, o_proj's input; the whole sequences' of its
// heads, attention's backward's), and with more ranks than key-value heads each rank's copy of one (small's
// 4 heads, 2 key-value heads: 1.10/C at C = 2, 1.14/C at C = 4). The model's state is unchanged; a layout
// whose sequence or ranks C does not divide is refused.
TEST(MemoryPlan, ContextParallelKeepsASliceOfTheActivations) {
  const ModelDims dims = model_dims(preset_config("small"));
  MemoryLayout layout{4, 1, 2, 1024, Precision::F32};
  const MemoryPlan whole = plan_memory(dims, default_group_rules(), layout, cpu_ops());
  for (const int C : {2, 4}) {
    layout.context_parallel = C;
    const MemoryPlan split = plan_memory(dims, default_group_rules(), layout, cpu_ops());
    EXPECT_EQ(split.weights, whole.weights) << C;
    EXPECT_EQ(split.momentum, whole.momentum) << C;
    EXPECT_GT(split.activations, whole.activations / C) << C;
    EXPECT_LT(split.activations, whole.activations / C * 23 / 20) << C;
  }
  layout.context_parallel = 3;
  EXPECT_THROW(plan_memory(dims, default_group_rules(), layout, cpu_ops()), Error);
}

// Four ranks, experts over groups of two: a rank holds the dense parameters and half the experts, and
// keeps optimizer state for about a quarter of the dense floats and half of its experts' (ZeRO-1 over the
// ranks, and over the two ranks holding the same experts), never less than an even share.
TEST(MemoryPlan, ExpertParallelAndZeroOneShareTheModelAndItsState) {
  const ModelDims dims = model_dims(preset_config("small"));
  const Counts c = count(dims);
  const MemoryPlan plan = plan_memory(dims, default_group_rules(), {4, 2, 2, 64, Precision::BF16}, cpu_ops());
  EXPECT_EQ(plan.weights, (c.dense + c.experts / 2) * kFloat);
  EXPECT_EQ(plan.gradients, plan.weights);
  // bf16 products read bf16 copies of the weights: at most half the f32 bytes, and a few KiB of constants.
  EXPECT_GT(plan.model_buffers, plan.weights / 4);
  EXPECT_LE(plan.model_buffers, plan.weights / 2 + 4096);
  const int64_t even_share = (c.dense / 4 + c.experts / 4) * kFloat;
  EXPECT_GE(plan.momentum, even_share);
  EXPECT_LT(plan.momentum, 2 * even_share);
  EXPECT_LE(plan.second_moment, c.adamw * kFloat);
}

// The plan's activations are the real model's to the byte, its scratch is at least the real one's (the plan
// routes every token to one expert), and a real model given the plan's arenas allocates nothing in its
// first step.
TEST(MemoryPlan, ActivationsAreTheRealModelsAndReservedArenasNeverGrow) {
  for (const Precision precision : {Precision::F32, Precision::BF16}) {
    if (precision == Precision::BF16 && !cpu_ops().fast_bf16()) continue;
    const ZayaConfig config = preset_config("tiny");
    const ModelDims dims = model_dims(config);
    const int64_t batch = 3, seq = 70;
    const MemoryPlan plan =
        plan_memory(dims, default_group_rules(), {1, 1, batch, seq, precision}, cpu_ops());
    ParameterStore params(dims);
    init_parameters(params, 0.3, 5);
    std::vector<int32_t> ids(size_t(batch * seq));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i * 7919 % size_t(dims.vocab));
    const std::vector<int32_t> labels = shifted_labels(ids.data(), batch, seq);
    const Batch step{ids.data(), labels.data(), nullptr, batch, seq};

    ZayaModel grown(params, cpu_ops(), precision);
    params.zero_grads();
    grown.forward_backward(step, 1.0f / float(batch * seq));
    EXPECT_EQ(int64_t(grown.activation_bytes()), plan.activations);
    EXPECT_LE(int64_t(grown.scratch_bytes()), plan.scratch);

    ZayaModel reserved(params, cpu_ops(), precision);
    reserved.reserve_arenas(size_t(plan.activations), size_t(plan.recomputed), size_t(plan.scratch));
    const size_t allocations = reserved.arena_allocations();
    reserved.forward_backward(step, 1.0f / float(batch * seq));
    EXPECT_EQ(reserved.arena_allocations(), allocations);
  }
}

// Recompute trades kept activations for one layer's recomputed ones: each mode's plan is the real model's to
// the byte, attention keeps less than none and layer less than attention (the recomputed layer included),
// and with the plan's arenas reserved no step allocates.
TEST(MemoryPlan, RecomputeKeepsLessAndItsArenasNeverGrow) {
  const ModelDims dims = model_dims(preset_config("tiny"));
  const int64_t batch = 2, seq = 96;
  std::vector<int32_t> ids(size_t(batch * seq));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i * 7919 % size_t(dims.vocab));
  const std::vector<int32_t> labels = shifted_labels(ids.data(), batch, seq);
  const Batch step{ids.data(), labels.data(), nullptr, batch, seq};
  ParameterStore params(dims);
  init_parameters(params, 0.3, 5);
  std::vector<MemoryPlan> plans;
  for (const Recompute recompute : {Recompute::None, Recompute::Attention, Recompute::Layer}) {
    const MemoryPlan plan =
        plan_memory(dims, default_group_rules(), {1, 1, batch, seq, Precision::F32, recompute}, cpu_ops());
    ZayaModel model(params, cpu_ops(), Precision::F32);
    model.set_recompute(recompute);
    model.reserve_arenas(size_t(plan.activations), size_t(plan.recomputed), size_t(plan.scratch));
    const size_t allocations = model.arena_allocations();
    params.zero_grads();
    model.forward_backward(step, 1.0f / float(batch * seq));
    EXPECT_EQ(model.arena_allocations(), allocations) << recompute_name(recompute);
    EXPECT_EQ(int64_t(model.activation_bytes()), plan.activations) << recompute_name(recompute);
    EXPECT_EQ(int64_t(model.recomputed_bytes()), plan.recomputed) << recompute_name(recompute);
    plans.push_back(plan);
  }
  EXPECT_EQ(plans[0].recomputed, 0);
  EXPECT_LT(plans[1].activations, plans[0].activations);
  EXPECT_LT(plans[2].activations, plans[1].activations);
  EXPECT_LT(plans[1].activations + plans[1].recomputed, plans[0].activations);
  EXPECT_LT(plans[2].activations + plans[2].recomputed, plans[1].activations + plans[1].recomputed);
}

TEST(MemoryPlan, TheLargestMicroBatchIsTheLastThatFits) {
  const ModelDims dims = model_dims(preset_config("tiny"));
  MemoryLayout layout{1, 1, 1, 128, Precision::F32};
  const int64_t one = plan_memory(dims, default_group_rules(), layout, cpu_ops()).total();
  const int64_t capacity = 5 * one;
  const int64_t largest = largest_micro_batch(dims, default_group_rules(), layout, cpu_ops(), capacity);
  ASSERT_GT(largest, 1);
  layout.micro_batch = largest;
  EXPECT_LE(plan_memory(dims, default_group_rules(), layout, cpu_ops()).total(), capacity);
  layout.micro_batch = largest + 1;
  EXPECT_GT(plan_memory(dims, default_group_rules(), layout, cpu_ops()).total(), capacity);
  EXPECT_EQ(largest_micro_batch(dims, default_group_rules(), layout, cpu_ops(), one - 1), 0);
}

TEST(MemoryPlan, ALayoutThatCannotBeMadeIsAnError) {
  const ModelDims dims = model_dims(preset_config("tiny"));  // 4 experts
  EXPECT_THROW(plan_memory(dims, default_group_rules(), {3, 2, 1, 64, Precision::F32}, cpu_ops()), Error);
  EXPECT_THROW(plan_memory(dims, default_group_rules(), {3, 3, 1, 64, Precision::F32}, cpu_ops()), Error);
}

}  // namespace
}  // namespace zaya
