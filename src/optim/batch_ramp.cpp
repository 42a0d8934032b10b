#include "optim/batch_ramp.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace zaya {

BatchRamp::BatchRamp(const BatchRampConfig& config, int64_t ranks)
    : config_(config), unit_(config.micro_batch * ranks) {
  if (config_.micro_batch <= 0) throw Error("must be positive").field("batch.micro_batch");
  if (config_.start_sequences == 0) config_.start_sequences = config_.end_sequences;
  for (auto [name, value] : {std::pair{"batch.start_sequences", config_.start_sequences},
                             std::pair{"batch.end_sequences", config_.end_sequences}}) {
    if (value <= 0 || value % unit_ != 0) {
      throw Error(cat(value, " is not a positive multiple of micro_batch x ranks = ", unit_)).field(name);
    }
  }
  if (config_.start_sequences > config_.end_sequences) {
    throw Error("the batch may only grow: start_sequences exceeds end_sequences")
        .field("batch.start_sequences");
  }
  if (config_.ramp_tokens < 0) throw Error("must not be negative").field("batch.ramp_tokens");
}

int64_t BatchRamp::global_sequences(int64_t tokens_seen) const {
  if (config_.ramp_tokens == 0 || tokens_seen >= config_.ramp_tokens) return config_.end_sequences;
  const double progress = double(tokens_seen) / double(config_.ramp_tokens);
  const double size =
      double(config_.start_sequences) + progress * double(config_.end_sequences - config_.start_sequences);
  return std::max(config_.start_sequences, int64_t(size) / unit_ * unit_);
}

int64_t BatchRamp::micro_batches_per_rank(int64_t tokens_seen) const {
  return global_sequences(tokens_seen) / unit_;
}

double BatchRamp::lr_factor(int64_t tokens_seen) const {
  if (!config_.sqrt_lr_scaling) return 1.0;
  return std::sqrt(double(global_sequences(tokens_seen)) / double(config_.end_sequences));
}

}  // namespace zaya
