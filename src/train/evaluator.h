#pragma once
// A training run's held-out loss: on the same validation windows every time (per sequence length), with
// perplexity and bits per byte. The windows are shared out over the ranks and the sums added up. In
// lockstep (expert parallelism, where each forward pass is a collective of the expert group) every rank
// makes as many passes as the busiest, the ones short of windows on a token whose loss does not count.

#include <cstdint>
#include <memory>
#include <vector>

#include "train/metrics.h"
#include "train/train_config.h"

namespace zaya {

class Communicator;
class DataLoader;
class Tokenizer;
class ZayaModel;

class Evaluator {
 public:
  Evaluator(const TrainConfig& config, int64_t vocab, const Tokenizer& tokenizer, Communicator& comm,
            bool lockstep);
  ~Evaluator();

  // The model's loss on the validation windows of `stage`'s sequence length (every rank calls it alike).
  EvalMetrics run(ZayaModel& model, int64_t stage);

 private:
  const TrainConfig& config_;
  const Tokenizer& tokenizer_;
  Communicator& comm_;
  bool lockstep_;
  std::unique_ptr<DataLoader> loader_;
  std::vector<int64_t> bytes_;  // per stage: the UTF-8 bytes the evaluated targets decode to
};

}  // namespace zaya
