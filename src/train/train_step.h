#pragma once
// One optimizer step over a global batch: every micro-batch's forward and backward accumulated into the
// gradients, then the Muon/AdamW update and the balancing-bias update, with the metrics of the step.

#include <cstdint>
#include <vector>

#include "model/zaya_model.h"
#include "optim/balancing.h"
#include "optim/optimizer.h"

namespace zaya {

struct RoutingMetrics {
  std::vector<double> fractions;  // [routes] share of the batch's tokens per route (skip last)
  double max_over_mean = 0;       // the busiest expert's load over the mean expert load (1 = balanced)
  double skip_share = 0;
  double entropy = 0;  // mean router entropy per token, in nats
};

struct StepReport {
  double loss = 0;      // mean cross-entropy over the labelled positions of the global batch
  double aux_loss = 0;  // auxiliary router losses per token (0 when off)
  int64_t tokens = 0, labelled = 0;
  double lr_factor = 0;
  OptimizerStepStats optimizer;
  bool skipped = false;                 // a non-finite loss or gradient: no update was made
  std::vector<RoutingMetrics> routing;  // per layer
};

class TrainStep {
 public:
  TrainStep(ZayaModel& model, Optimizer& optimizer, BalancingController& balancing);

  // The loss of each micro-batch is scaled by 1 / (labelled positions of all micro-batches), so that K
  // micro-batches give the gradient of one batch K times larger.
  StepReport run(const std::vector<Batch>& micro_batches, double lr_factor);

 private:
  ZayaModel& model_;
  Optimizer& optimizer_;
  BalancingController& balancing_;
  std::vector<float*> biases_;  // each layer's balancing_biases
};

// The metrics of per-layer route counts and router statistics summed over a batch of `tokens` tokens.
std::vector<RoutingMetrics> routing_metrics(const std::vector<RouterLayerStats>& stats, int64_t tokens);

}  // namespace zaya
