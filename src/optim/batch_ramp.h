#pragma once
// The global batch grows from a start to an end size (in sequences) over a token budget, always a multiple
// of micro_batch x ranks so every rank runs whole micro-batches. The learning rate may follow the square
// root of the batch (lr is set for the end batch).

#include <cstdint>

namespace zaya {

struct BatchRampConfig {
  int64_t micro_batch = 8;       // sequences per micro-batch on one rank
  int64_t start_sequences = 0;   // global batch at the start; 0 = end_sequences (no ramp)
  int64_t end_sequences = 8;     // global batch after the ramp
  int64_t ramp_tokens = 0;       // tokens over which it grows linearly
  bool sqrt_lr_scaling = false;  // lr *= sqrt(batch / end_sequences)
};

class BatchRamp {
 public:
  // Throws Error naming the batch.* field when the sizes do not divide into micro-batches over ranks.
  BatchRamp(const BatchRampConfig& config, int64_t ranks);

  int64_t global_sequences(int64_t tokens_seen) const;
  // Micro-batches each rank runs for the step that starts after tokens_seen tokens.
  int64_t micro_batches_per_rank(int64_t tokens_seen) const;
  double lr_factor(int64_t tokens_seen) const;
  const BatchRampConfig& config() const { return config_; }
  int64_t ranks() const { return unit_ / config_.micro_batch; }

 private:
  BatchRampConfig config_;
  int64_t unit_;  // micro_batch * ranks
};

}  // namespace zaya
