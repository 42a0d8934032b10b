#include "unit/train_reference.h"

#include "optim/schedule.h"
#include "unit/test_util.h"

namespace zaya::test {

TrainReference::TrainReference()
    : data_(fixture("train/reference.safetensors")),
      windows_(data_.ints("windows")),
      loss_(data_.floats("loss")),
      grad_norm_(data_.floats("grad_norm")) {
  const Shape shape = data_.shape("windows");
  steps_ = shape[0];
  micro_ = shape[1];
  batch_ = shape[2];
  seq_ = shape[3] - 1;
}

OptimizerConfig TrainReference::optimizer_config() {
  OptimizerConfig config;
  config.lr = 0.01f;
  config.weight_decay = 0.1f;
  config.grad_clip = 1.0f;
  config.adamw = {0.9f, 0.95f, 1e-8f, 1.0f};
  return config;
}

BalancingConfig TrainReference::balancing_config() {
  BalancingConfig config;
  config.lr = 1e-2f;
  return config;
}

std::vector<Batch> TrainReference::batches(int64_t step) {
  ids_.assign(size_t(micro_), {});
  labels_.assign(size_t(micro_), {});
  std::vector<Batch> out;
  for (int64_t m = 0; m < micro_; ++m) {
    for (int64_t b = 0; b < batch_; ++b) {
      const int32_t* w = windows_.data() + ((step * micro_ + m) * batch_ + b) * (seq_ + 1);
      ids_[size_t(m)].insert(ids_[size_t(m)].end(), w, w + seq_);
      labels_[size_t(m)].insert(labels_[size_t(m)].end(), w + 1, w + seq_ + 1);
    }
    out.push_back({ids_[size_t(m)].data(), labels_[size_t(m)].data(), nullptr, batch_, seq_});
  }
  return out;
}

double TrainReference::lr_factor(int64_t step) const {
  const ScheduleConfig schedule{ScheduleKind::Wsd, 256, 0.3, DecayShape::Linear, 0.1};
  const int64_t tokens_per_step = micro_ * batch_ * seq_;
  return lr_multiplier(schedule, (step + 1) * tokens_per_step, steps_ * tokens_per_step);
}

}  // namespace zaya::test
