#pragma once
// One optimizer step over a global batch: every micro-batch's forward and backward accumulated into the
// gradients, then the Muon/AdamW update and the balancing-bias update, with the metrics of the step.
// Data parallel: each rank runs its own micro-batches of the global batch; the gradients are summed over
// the ranks that hold the parameter onto the rank that owns its optimizer state (reduce-scatters in
// buckets, started during the last backward pass: train/gradient_reducer.h), each owner updates its
// parameters, and the new values are all-gathered over the same ranks. The dense parameters are held by
// every rank; the expert weights, under expert parallelism, by the ranks with the same experts. Loss,
// token counts and routing counts are summed over all ranks first, so the step is the one-process step of
// the whole global batch.

#include <cstdint>
#include <memory>
#include <vector>

#include "model/zaya_model.h"
#include "optim/balancing.h"
#include "optim/optimizer.h"
#include "optim/optimizer_shards.h"

namespace zaya {

class Communicator;
class DeviceCommunicator;
class GradientReducer;

struct RoutingMetrics {
  std::vector<double> fractions;  // [routes] share of the batch's tokens per route (skip last)
  double max_over_mean = 0;       // the busiest expert's load over the mean expert load (1 = balanced)
  double skip_share = 0;
  double entropy = 0;  // mean router entropy per token, in nats
};

// A region of the parameter layout, the ranks that hold it alike (their collectives on the model's device),
// and their optimizer ranges in it.
struct ShardedRegion {
  DeviceCommunicator* comm = nullptr;
  OptimizerShards shards;
};

struct StepReport {
  double loss = 0;                   // mean cross-entropy over the labelled positions of the global batch
  double aux_loss = 0;               // auxiliary router losses per token (0 when off)
  int64_t tokens = 0, labelled = 0;  // of the global batch
  double communication_seconds = 0;  // in collectives (including waiting for the slowest rank), not
                                     // counting the gradient buckets' time in flight behind the backward
  double gradient_seconds = 0;       // of which the gradient reduction's
  double context_seconds = 0;        // of which context parallelism's exchanges (inside the model's passes)
  int64_t communication_bytes = 0;   // handed to them by this rank (the experts' all-to-alls not counted)
  double lr_factor = 0;
  OptimizerStepStats optimizer;
  bool skipped = false;                 // a non-finite loss or gradient: no update was made
  std::vector<RoutingMetrics> routing;  // per layer
};

class TrainStep {
 public:
  // dense: the dense parameters over all ranks (its host communicator sums the step's metrics too); experts:
  // the expert weights over the ranks holding this rank's experts. `optimizer` owns this rank's range of
  // each. bucket_floats: the size of a gradient bucket (0: one reduction after the backward pass).
  TrainStep(ZayaModel& model, Optimizer& optimizer, BalancingController& balancing, ShardedRegion dense,
            ShardedRegion experts, int64_t bucket_floats);
  ~TrainStep();

  // micro_batches: this rank's part of the global batch. The loss of each micro-batch is scaled by
  // 1 / (labelled positions of the global batch), so that K micro-batches over R ranks give the gradient
  // of one batch K x R times larger.
  StepReport run(const std::vector<Batch>& micro_batches, double lr_factor);

 private:
  // A step's sums before they are turned into metrics: losses and each layer's router statistics.
  struct RoutedSums {
    double loss = 0, aux_loss = 0;
    std::vector<RouterLayerStats> routing;  // per layer
  };
  // The step's tokens and labelled positions over all ranks.
  void count_tokens(const std::vector<Batch>& micro_batches, StepReport& report);
  // Every micro-batch forward and backward, the gradients summed over ranks as the last one finishes.
  RoutedSums forward_backward(const std::vector<Batch>& micro_batches, StepReport& report);
  void sum_over_ranks(RoutedSums& sums, StepReport& report);
  void update(const std::vector<RouterLayerStats>& routing, double lr_factor, StepReport& report);

  ZayaModel& model_;
  Optimizer& optimizer_;
  BalancingController& balancing_;
  Communicator& comm_;                                      // all ranks
  std::vector<ShardedRegion> shared_;                       // the regions held by more than one rank
  std::vector<std::unique_ptr<GradientReducer>> reducers_;  // one per shared region
  int64_t shared_bytes_ = 0;                                // their size
  std::vector<const ParamInfo*> biases_;                    // each layer's balancing_biases
  std::vector<std::vector<float>> bias_values_;             // their host copy, which the controller updates
  std::vector<float*> bias_pointers_;                       // into bias_values_
};

// The metrics of per-layer route counts and router statistics summed over a batch of `tokens` tokens.
std::vector<RoutingMetrics> routing_metrics(const std::vector<RouterLayerStats>& stats, int64_t tokens);

}  // namespace zaya
