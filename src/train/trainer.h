#pragma once
// `zaya train`: the whole run. Resolves the model from the config and tokenizer (or resumes the newest
// intact checkpoint of the run directory), then trains stage by stage on the batch ramp and schedule,
// evaluating, sampling, logging and checkpointing as configured, until every stage's token budget is
// spent, a stop is requested (SIGINT/SIGTERM: the step finishes and a checkpoint is written), or too
// many non-finite steps in a row. Data parallel over the ranks of `comm`: every rank calls it alike; rank 0
// alone prints, writes metrics and holds the run-directory lock.

#include <atomic>
#include <stdexcept>
#include <string>

#include "train/train_config.h"

namespace zaya {

class Communicator;

enum class TrainOutcome { Finished, AlreadyFinished, Interrupted, Diverged };

// An error once the run has begun training (a write that failed, an injected fault): the last published
// checkpoint is intact and the same command resumes from it. run_training throws it in place of an Error
// from its training loop; an Error from it is one of the run's inputs, found before training began.
class RunFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TrainResult {
  TrainOutcome outcome = TrainOutcome::Finished;
  int64_t step = 0, tokens = 0;
  std::string checkpoint;                        // the newest checkpoint at exit
  double eval_loss = 0, eval_bits_per_byte = 0;  // the last evaluation (0 without a validation set)
};

// `force`: train in a run directory that holds files of someone else's (zaya touches only its own).
TrainResult run_training(const TrainConfig& config, const std::string& run_dir, const std::atomic<bool>& stop,
                         Communicator& comm, bool force = false);

// The model configuration a run trains: from the [model] section, with the vocabulary and special tokens
// of the tokenizer and room for the longest stage.
ZayaConfig resolve_model_config(const TrainConfig& config, int64_t tokenizer_vocab,
                                std::optional<int32_t> pad, std::optional<int32_t> bos,
                                std::optional<int32_t> eos);

}  // namespace zaya
