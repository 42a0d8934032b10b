#pragma once
// Checkpoints: everything a run needs to continue exactly, under RUN/checkpoints/step_<N>/:
//   config.json, model*.safetensors, generation_config.json the model in Hugging Face's layout (float32;
//                                                            one shard per rank, written in parallel)
//   tokenizer.json, tokenizer_config.json                    the run's tokenizer, as transformers loads it
//   optimizer-<r>-of-<R>.safetensors                         each rank's shard of the optimizer state
//                                                            (AdamW moments / Muon momentum by parameter
//                                                            name, expert weights' per expert as
//                                                            <name>.<expert>; the balancing state in
//                                                            shard 0)
//   trainer_state.json                                       step, tokens, stage, data position, counters
//   checksums.json                                           CRC-32 of every file above
// Every rank writes its own files into a temporary directory; once all have, rank 0 writes the checksums,
// fsyncs, renames the directory into place, and only then names it in RUN/checkpoints/latest. Resume trusts
// the checkpoints, not `latest`: the newest step directory whose checksums and step verify is used, damaged
// ones are reported and skipped (never deleted), and rotation never deletes a checkpoint newer than the one
// just written. The optimizer state is found by name in
// whichever shard holds it, so a checkpoint loads at any rank count and any expert-parallel size.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "data/loader.h"
#include "io/hf_config.h"
#include "train/checkpoint_catalog.h"

namespace zaya {

class BalancingController;
class Communicator;
class Optimizer;
class ParameterStore;

struct TrainerState {
  int64_t step = 0;    // optimizer steps done
  int64_t tokens = 0;  // consumed over all stages
  int64_t stage = 0;
  int64_t stage_tokens = 0;  // consumed in the current stage
  int64_t bad_steps = 0;     // non-finite steps in a row
  double seconds = 0;        // training time so far (for throughput and ETA across restarts)
  LoaderState loader;
  // Of the run's products, "fp32" or "bf16" ("" in checkpoints from before it was kept).
  std::string precision;
  // The run's settings (TrainConfig::settings) when the checkpoint was written: a resume says what changed.
  std::map<std::string, std::string> settings;
};

// One rank's part of the run at one step, copied on the training thread so that it can be written in the
// background while training goes on: its share of the model's tensors (on several ranks, each writes one
// shard of a sharded model directory), its optimizer shard, and on rank 0 the configuration and state.
struct CheckpointSnapshot {
  int rank = 0, ranks = 1;
  ZayaConfig config;
  TrainerState state;
  int64_t optimizer_steps = 0, balancing_steps = 0;
  std::string tokenizer_path;
  std::vector<std::pair<std::string, std::vector<float>>> tensors;  // model share, then optimizer shard
  size_t model_tensors = 0;                                         // the first ones are the model's
  size_t first_model_param = 0;  // the model share's first tensor, as an index into the parameter table
};

// Collective over expert_group when the store holds some experts only (expert parallelism, the groups being
// consecutive runs of ranks): the experts of the tensors this rank writes are gathered from its group.
CheckpointSnapshot take_snapshot(const ZayaConfig& config, const ParameterStore& params, Optimizer& optimizer,
                                 BalancingController& balancing, const TrainerState& state,
                                 const std::string& tokenizer_path, int rank = 0, int ranks = 1,
                                 Communicator* expert_group = nullptr);

// Writes this rank's files into dir and returns their checksums.
FileChecksums write_checkpoint_files(const CheckpointSnapshot& snapshot, const std::string& dir);
// The two above and publish_checkpoint for a single process: RUN/checkpoints/step_<N>, published.
void write_checkpoint(const CheckpointSnapshot& snapshot, const std::string& run_dir, int keep);

// The trainer state of a checkpoint alone (trainer_state.json), and the optimizer's and balancing
// controller's step counts where asked. Its precision is what "auto" resumes with, so that a run multiplies
// as it began whatever a measurement would choose now. Throws Error naming the file and field.
TrainerState read_trainer_state(const std::string& checkpoint_dir, int64_t* optimizer_steps = nullptr,
                                int64_t* balancing_steps = nullptr);

struct LoadedCheckpoint {
  ZayaConfig config;
  TrainerState state;
};

// Reads the model (into params, which must have the checkpoint's shape), the state of the parameters the
// optimizer owns, the balancing state and the trainer state.
LoadedCheckpoint load_checkpoint(const std::string& checkpoint_dir, ParameterStore& params,
                                 Optimizer& optimizer, BalancingController& balancing);

}  // namespace zaya
