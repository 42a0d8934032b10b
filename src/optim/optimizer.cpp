#include "optim/optimizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "backend/ops.h"
#include "core/error.h"

namespace zaya {

namespace {

int64_t total_length(const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  int64_t total = 0;
  for (const auto& [begin, end] : ranges) total += end - begin;
  return total;
}

}  // namespace

Optimizer::Optimizer(ParameterStore& params, const OptimizerConfig& config, Ops& ops,
                     std::vector<std::pair<int64_t, int64_t>> owned, Precision precision)
    : params_(params),
      config_(config),
      ops_(ops),
      precision_(precision),
      assignments_(assign_param_groups(params.table(), config.groups)),
      owned_(owned.empty() ? std::vector<std::pair<int64_t, int64_t>>{{0, params.table().total_floats()}}
                           : std::move(owned)),
      owned_floats_(total_length(owned_)),
      m_(size_t(owned_floats_) * sizeof(float), ops.memory()),
      grad_sum_squares_(sizeof(double), ops.memory()) {
  if (config_.muon.ns_steps < 0) throw Error("must not be negative").field("optimizer.muon.ns_steps");
  // A second moment only for AdamW's parameters: Muon's (nearly all of ZAYA1's) never read one.
  for (const ParamAssignment& a : assignments_) {
    if (a.optimizer != OptimizerKind::AdamW || !owns(*a.param)) continue;
    second_moment_index_[a.param->offset] = second_moment_floats_;
    second_moment_floats_ += a.param->numel();
  }
  v_ = AlignedBuffer(size_t(second_moment_floats_) * sizeof(float), ops.memory());
  int64_t largest = 0;
  for (const ParamAssignment& a : assignments_) {
    if (a.optimizer != OptimizerKind::Muon || !owns(*a.param)) continue;
    const Shape& shape = a.param->shape;
    const bool experts = a.param->role == ParamRole::ExpertWeight;
    const MatrixBatch batch{&a, a.param->offset, experts ? shape[0] : 1, shape[experts ? 1 : 0],
                            shape[experts ? 2 : 1]};
    batches_.push_back(batch);
    largest = std::max(largest, batch.count * batch.rows * batch.cols);
  }
  update_ = AlignedBuffer(size_t(largest) * sizeof(float), ops.memory());
}

int64_t Optimizer::state_index(int64_t offset) const {
  int64_t before = 0;
  for (const auto& [begin, end] : owned_) {
    if (offset >= begin && offset < end) return before + (offset - begin);
    before += end - begin;
  }
  return -1;
}

float* Optimizer::second_moment(const ParamInfo& param) {
  const auto found = second_moment_index_.find(param.offset);
  return found == second_moment_index_.end() ? nullptr : v_.as<float>() + found->second;
}

double Optimizer::owned_grad_sum_squares() {
  double* sum = grad_sum_squares_.as<double>();
  ops_.zero(sum, sizeof(double));
  for (const ParamAssignment& a : assignments_) {
    if (owns(*a.param)) ops_.sum_squares(params_.grad(*a.param), a.param->numel(), sum);
  }
  double sum_squares = 0;
  ops_.read_to_host(&sum_squares, sum, sizeof sum_squares);
  return sum_squares;
}

OptimizerStepStats Optimizer::step(double lr_factor) {
  return step(lr_factor, std::sqrt(owned_grad_sum_squares()));
}

OptimizerStepStats Optimizer::step(double lr_factor, double grad_norm) {
  OptimizerStepStats stats;
  stats.grad_norm = grad_norm;
  if (!std::isfinite(stats.grad_norm)) {
    stats.finite = false;
    return stats;
  }
  // As torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below one.
  if (config_.grad_clip > 0)
    stats.clip_factor = float(std::min(1.0, config_.grad_clip / (stats.grad_norm + 1e-6)));
  ++steps_;

  const float base_lr = float(config_.lr * lr_factor);
  const AdamWConfig& adam = config_.adamw;
  const float correction1 = 1.0f - std::pow(adam.beta1, float(steps_));
  const float correction2 = 1.0f - std::pow(adam.beta2, float(steps_));
  using Clock = std::chrono::steady_clock;
  const auto adamw_start = Clock::now();
  for (const ParamAssignment& a : assignments_) {
    if (a.optimizer != OptimizerKind::AdamW || !owns(*a.param)) continue;
    const float lr = base_lr * adam.lr_multiplier * a.lr_multiplier;
    ops_.adamw_step(params_.value(*a.param), params_.grad(*a.param), first_moment(*a.param),
                    second_moment(*a.param), a.param->numel(),
                    {lr, adam.beta1, adam.beta2, adam.eps, a.weight_decay ? config_.weight_decay : 0.0f,
                     stats.clip_factor, correction1, correction2});
  }
  const auto muon_start = Clock::now();
  stats.adamw_seconds = std::chrono::duration<double>(muon_start - adamw_start).count();
  const float muon_lr = base_lr * config_.muon.lr_multiplier;
  for (const MatrixBatch& batch : batches_) muon_update(batch, muon_lr, stats.clip_factor);
  stats.muon_seconds = std::chrono::duration<double>(Clock::now() - muon_start).count();
  return stats;
}

void Optimizer::muon_update(const MatrixBatch& batch, float lr, float grad_scale) {
  const MuonConfig& muon = config_.muon;
  const int64_t n = batch.count * batch.rows * batch.cols;
  lr *= batch.assignment->lr_multiplier;
  float* update = update_.as<float>();
  ops_.momentum_step(m_.as<float>() + state_index(batch.offset), params_.grads() + batch.offset, n,
                     muon.momentum, muon.nesterov, grad_scale, update);
  ops_.newton_schulz(precision_, update, batch.count, batch.rows, batch.cols, muon.ns_steps,
                     muon.ns_coefficients);
  const float decay = batch.assignment->weight_decay ? lr * config_.weight_decay : 0.0f;
  const float scale = muon.rms_scale * std::sqrt(float(std::max(batch.rows, batch.cols)));
  ops_.decay_and_subtract(params_.values() + batch.offset, update, n, decay, lr * scale);
}

}  // namespace zaya
