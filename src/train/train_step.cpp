#include "train/train_step.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "train/gradient_reducer.h"

namespace zaya {

TrainStep::TrainStep(ZayaModel& model, Optimizer& optimizer, BalancingController& balancing,
                     ShardedRegion dense, ShardedRegion experts, int64_t bucket_floats)
    : model_(model), optimizer_(optimizer), balancing_(balancing), comm_(dense.comm->host()) {
  ShardedRegion regions[] = {std::move(dense), std::move(experts)};
  for (ShardedRegion& region : regions) {
    if (region.comm->size() == 1) continue;
    shared_bytes_ += (region.shards.bounds.back() - region.shards.bounds.front()) * int64_t(sizeof(float));
    reducers_.push_back(std::make_unique<GradientReducer>(model.params().table(), region.shards, *region.comm,
                                                          model.ops(), bucket_floats));
    shared_.push_back(std::move(region));
  }
  for (const ParamInfo& param : model.params().table().params()) {
    if (param.role != ParamRole::BalancingBias) continue;
    biases_.push_back(&param);
    bias_values_.emplace_back(size_t(param.numel()));
  }
  for (std::vector<float>& values : bias_values_) bias_pointers_.push_back(values.data());
}

TrainStep::~TrainStep() = default;

namespace {

// Runs a collective, timed (waiting for the slowest rank included) and its payload counted.
template <class Call>
void timed_collective(StepReport& report, const Communicator& comm, int64_t bytes, Call&& call) {
  const auto start = std::chrono::steady_clock::now();
  call();
  report.communication_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.communication_bytes += comm.size() > 1 ? bytes : 0;
}

}  // namespace

StepReport TrainStep::run(const std::vector<Batch>& micro_batches, double lr_factor) {
  StepReport report;
  report.lr_factor = lr_factor;
  count_tokens(micro_batches, report);
  RoutedSums sums = forward_backward(micro_batches, report);
  sum_over_ranks(sums, report);
  report.loss = report.labelled ? sums.loss / double(report.labelled) : 0.0;
  report.aux_loss = report.tokens ? sums.aux_loss / double(report.tokens) : 0.0;
  report.routing = routing_metrics(sums.routing, report.tokens);
  if (!std::isfinite(report.loss) || !std::isfinite(report.aux_loss)) {
    report.skipped = true;
    return report;
  }
  update(sums.routing, lr_factor, report);
  return report;
}

void TrainStep::count_tokens(const std::vector<Batch>& micro_batches, StepReport& report) {
  for (const Batch& batch : micro_batches) {
    report.tokens += batch.tokens();
    for (int64_t t = 0; t < batch.tokens(); ++t) report.labelled += batch.labels[t] != kIgnoreLabel;
  }
  int64_t totals[2] = {report.tokens, report.labelled};
  timed_collective(report, comm_, sizeof totals, [&] { comm_.all_reduce_sum(totals, 2); });
  report.tokens = totals[0];
  report.labelled = totals[1];
}

TrainStep::RoutedSums TrainStep::forward_backward(const std::vector<Batch>& micro_batches,
                                                  StepReport& report) {
  const float loss_scale = report.labelled ? 1.0f / float(report.labelled) : 0.0f;
  ParameterStore& params = model_.params();
  params.zero_grads();
  const int64_t layers = params.dims().layers, routes = params.dims().routes();
  RoutedSums sums;
  sums.routing.resize(size_t(layers));
  for (RouterLayerStats& stats : sums.routing) {
    stats.counts.assign(size_t(routes), 0);
    stats.prob_sums.assign(size_t(routes), 0.0);
  }
  // The gradients are summed over ranks while the last micro-batch's backward pass goes on (each bucket
  // once the layers in it are final). Collective: a rank without micro-batches, or a step with a
  // non-finite loss, takes part all the same.
  for (auto& reducer : reducers_) reducer->start(params.grads());
  model_.reset_context_exchange();
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    if (!reducers_.empty() && m + 1 == micro_batches.size()) {
      model_.set_layer_backward_hook([this](int64_t layer) {
        for (auto& reducer : reducers_) reducer->layer_done(layer);
      });
    }
    const ForwardResult result = model_.forward_backward(micro_batches[m], loss_scale);
    sums.loss += result.loss_sum;
    sums.aux_loss += result.aux_loss_sum;
    for (int64_t l = 0; l < layers; ++l) {
      const RouterLayerStats& from = (*result.routing)[size_t(l)];
      RouterLayerStats& to = sums.routing[size_t(l)];
      for (int64_t e = 0; e < routes; ++e) {
        to.counts[size_t(e)] += from.counts[size_t(e)];
        to.prob_sums[size_t(e)] += from.prob_sums[size_t(e)];
      }
      to.entropy_sum += from.entropy_sum;
      to.lse_square_sum += from.lse_square_sum;
    }
  }
  report.context_seconds = model_.context_exchange().seconds;
  report.communication_seconds += report.context_seconds;
  report.communication_bytes += model_.context_exchange().bytes;
  if (!reducers_.empty()) {
    model_.set_layer_backward_hook({});
    for (auto& reducer : reducers_) {
      reducer->finish();
      report.gradient_seconds += reducer->seconds();
    }
    report.communication_seconds += report.gradient_seconds;
    report.communication_bytes += shared_bytes_;
  }
  return sums;
}

// Everything a metric or the balancing update reads is summed over ranks, in one call per type.
void TrainStep::sum_over_ranks(RoutedSums& sums, StepReport& report) {
  std::vector<int64_t> route_counts;
  std::vector<double> values = {sums.loss, sums.aux_loss};
  for (const RouterLayerStats& stats : sums.routing) {
    route_counts.insert(route_counts.end(), stats.counts.begin(), stats.counts.end());
    values.insert(values.end(), stats.prob_sums.begin(), stats.prob_sums.end());
    values.push_back(stats.entropy_sum);
    values.push_back(stats.lse_square_sum);
  }
  timed_collective(report, comm_,
                   int64_t(route_counts.size() * sizeof(int64_t) + values.size() * sizeof(double)), [&] {
                     comm_.all_reduce_sum(route_counts.data(), int64_t(route_counts.size()));
                     comm_.all_reduce_sum(values.data(), int64_t(values.size()));
                   });
  sums.loss = values[0];
  sums.aux_loss = values[1];
  for (size_t l = 0, c = 0, d = 2; l < sums.routing.size(); ++l) {
    RouterLayerStats& stats = sums.routing[l];
    for (size_t e = 0; e < stats.counts.size(); ++e) {
      stats.counts[e] = route_counts[c++];
      stats.prob_sums[e] = values[d++];
    }
    stats.entropy_sum = values[d++];
    stats.lse_square_sum = values[d++];
  }
}

// The optimizer's step on the summed gradients, the shared weights gathered back, and the balancing biases
// moved by the step's route counts. A step whose update is not finite is skipped.
void TrainStep::update(const std::vector<RouterLayerStats>& routing, double lr_factor, StepReport& report) {
  // Each rank holds the summed gradient of its own range; the squared norm is summed over ranges.
  double grad_sum_squares = optimizer_.owned_grad_sum_squares();
  timed_collective(report, comm_, sizeof grad_sum_squares,
                   [&] { comm_.all_reduce_sum(&grad_sum_squares, 1); });
  report.optimizer = optimizer_.step(lr_factor, std::sqrt(grad_sum_squares));
  if (!report.optimizer.finite) {
    report.skipped = true;
    return;
  }
  ParameterStore& params = model_.params();
  timed_collective(report, comm_, shared_bytes_, [&] {
    for (const ShardedRegion& region : shared_)
      region.comm->all_gather(params.values() + region.shards.bounds.front(), region.shards.counts());
  });
  model_.weights_changed();
  std::vector<std::vector<int64_t>> counts;
  for (const RouterLayerStats& stats : routing) counts.push_back(stats.counts);
  // The controller updates the biases on the host: read, updated, written back (a few floats per layer).
  for (size_t l = 0; l < biases_.size(); ++l) params.read_value(*biases_[l], bias_values_[l].data());
  balancing_.update(counts, bias_pointers_);
  for (size_t l = 0; l < biases_.size(); ++l) params.write_value(*biases_[l], bias_values_[l].data());
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
