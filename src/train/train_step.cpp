#include "train/train_step.h"

#include <algorithm>
#include <cmath>

namespace zaya {

TrainStep::TrainStep(ZayaModel& model, Optimizer& optimizer, BalancingController& balancing)
    : model_(model), optimizer_(optimizer), balancing_(balancing) {
  for (const ParamInfo& param : model.params().table().params()) {
    if (param.role == ParamRole::BalancingBias) biases_.push_back(model.params().value(param));
  }
}

StepReport TrainStep::run(const std::vector<Batch>& micro_batches, double lr_factor) {
  StepReport report;
  report.lr_factor = lr_factor;
  for (const Batch& batch : micro_batches) {
    report.tokens += batch.tokens();
    for (int64_t t = 0; t < batch.tokens(); ++t) report.labelled += batch.labels[t] != kIgnoreLabel;
  }
  const float loss_scale = report.labelled ? 1.0f / float(report.labelled) : 0.0f;

  ParameterStore& params = model_.params();
  params.zero_grads();
  const int64_t layers = params.dims().layers, routes = params.dims().routes();
  std::vector<RouterLayerStats> routing(static_cast<size_t>(layers));
  for (RouterLayerStats& stats : routing) {
    stats.counts.assign(size_t(routes), 0);
    stats.prob_sums.assign(size_t(routes), 0.0);
  }
  double loss_sum = 0, aux_sum = 0;
  for (const Batch& batch : micro_batches) {
    const ForwardResult result = model_.forward_backward(batch, loss_scale);
    loss_sum += result.loss_sum;
    aux_sum += result.aux_loss_sum;
    for (int64_t l = 0; l < layers; ++l) {
      const RouterLayerStats& from = (*result.routing)[size_t(l)];
      RouterLayerStats& to = routing[size_t(l)];
      for (int64_t e = 0; e < routes; ++e) {
        to.counts[size_t(e)] += from.counts[size_t(e)];
        to.prob_sums[size_t(e)] += from.prob_sums[size_t(e)];
      }
      to.entropy_sum += from.entropy_sum;
      to.lse_square_sum += from.lse_square_sum;
    }
  }
  report.loss = report.labelled ? loss_sum / double(report.labelled) : 0.0;
  report.aux_loss = report.tokens ? aux_sum / double(report.tokens) : 0.0;
  report.routing = routing_metrics(routing, report.tokens);

  if (!std::isfinite(report.loss) || !std::isfinite(report.aux_loss)) {
    report.skipped = true;
    return report;
  }
  report.optimizer = optimizer_.step(lr_factor);
  if (!report.optimizer.finite) {
    report.skipped = true;
    return report;
  }
  std::vector<std::vector<int64_t>> counts;
  for (const RouterLayerStats& stats : routing) counts.push_back(stats.counts);
  balancing_.update(counts, biases_);
  return report;
}

std::vector<RoutingMetrics> routing_metrics(const std::vector<RouterLayerStats>& stats, int64_t tokens) {
  std::vector<RoutingMetrics> out;
  for (const RouterLayerStats& layer : stats) {
    RoutingMetrics m;
    const int64_t routes = int64_t(layer.counts.size()), experts = routes - 1;
    int64_t routed = 0, busiest = 0;
    for (int64_t e = 0; e < routes; ++e) {
      m.fractions.push_back(tokens ? double(layer.counts[size_t(e)]) / double(tokens) : 0.0);
      if (e < experts) {
        routed += layer.counts[size_t(e)];
        busiest = std::max(busiest, layer.counts[size_t(e)]);
      }
    }
    m.max_over_mean = routed ? double(busiest) / (double(routed) / double(experts)) : 0.0;
    m.skip_share = m.fractions.back();
    m.entropy = tokens ? layer.entropy_sum / double(tokens) : 0.0;
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace zaya
