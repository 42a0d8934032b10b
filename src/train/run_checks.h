#pragma once
// What zaya train checks before its first step, so that a run never trains on inputs that do not belong
// together and never finds a bad input hours in (docs/TRAINING.md, "Before the first step"): the run
// directory is the run's own, every dataset was made with the run's tokenizer and fits the model's
// vocabulary, and a resumed run still is the run its checkpoint holds.

#include <string>
#include <vector>

#include "io/hf_config.h"
#include "train/train_config.h"

namespace zaya {

class Tokenizer;
struct TrainerState;

// The run's own entries of a run directory (config.toml, metrics.jsonl, tb, checkpoints, .lock).
bool is_run_entry(const std::string& name);

// A run directory holds the run's own entries alone, or a run of zaya's (its checkpoints/ holds a
// checkpoint) beside which zaya touches only those entries; anything else is refused unless `force`, naming
// the directory, a file that is not the run's, and --force.
void claim_run_directory(const std::string& run_dir, bool force);

// The stages' datasets and the validation set against the run's tokenizer and the model's vocabulary
// (check_dataset: a validation set is read whole; a training set without a record of its tokenizer whole up
// to 2^28 tokens). Throws Error naming the dataset, and the config key that names it. Returns notes for the
// log (datasets from elsewhere).
std::vector<std::string> check_datasets(const TrainConfig& config, const Tokenizer& tokenizer, int64_t vocab);

// A resumed run against its checkpoint (`state` and `checkpoint`: its trainer_state.json and config.json,
// read once by the caller): the tokenizer must be the one it was made with (by fingerprint), and the model
// the configuration describes (`configured`, resolved as for a new run) the checkpoint's, with the RoPE theta
// of the checkpoint's stage applied as the run applies it (model_difference). Throws Error naming
// data.tokenizer or the model's field otherwise. Returns the settings changed since the checkpoint was
// written ("optimizer.lr: 0.006 -> 0.004"), which the run applies from here on.
std::vector<std::string> check_resume(const std::string& checkpoint_dir, const TrainerState& state,
                                      const ZayaConfig& checkpoint, const TrainConfig& config,
                                      const Tokenizer& tokenizer, ZayaConfig configured);

}  // namespace zaya
