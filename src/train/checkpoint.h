#pragma once
// Checkpoints: everything a run needs to continue exactly, under RUN/checkpoints/step_<N>/:
//   config.json, model.safetensors, generation_config.json  the model in Hugging Face's layout (float32)
//   tokenizer.json                                           the run's tokenizer, so export is a copy
//   optimizer.safetensors                                    AdamW moments / Muon momentum, balancing state
//   trainer_state.json                                       step, tokens, stage, data position, counters
//   checksums.json                                           CRC-32 of every file above
// written into a temporary directory, fsynced, renamed into place, and only then named by
// RUN/checkpoints/latest. A checkpoint whose checksums fail is reported and the previous one is used.

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/buffer.h"
#include "data/loader.h"
#include "io/hf_config.h"

namespace zaya {

class ParameterStore;
class Optimizer;
class BalancingController;

struct TrainerState {
  int64_t step = 0;    // optimizer steps done
  int64_t tokens = 0;  // consumed over all stages
  int64_t stage = 0;
  int64_t stage_tokens = 0;  // consumed in the current stage
  int64_t bad_steps = 0;     // non-finite steps in a row
  double seconds = 0;        // training time so far (for throughput and ETA across restarts)
  LoaderState loader;
};

// A copy of the run at one step, taken on the training thread so the copy can be written in the
// background while training goes on.
struct CheckpointSnapshot {
  ZayaConfig config;
  TrainerState state;
  int64_t optimizer_steps = 0, balancing_steps = 0;
  std::string tokenizer_path;
  std::vector<std::pair<std::string, std::vector<float>>> tensors;  // model, then optimizer entries
  size_t model_tensors = 0;                                         // the first ones are the model's
};

CheckpointSnapshot take_snapshot(const ZayaConfig& config, const ParameterStore& params, Optimizer& optimizer,
                                 BalancingController& balancing, const TrainerState& state,
                                 const std::string& tokenizer_path);

// Writes a snapshot as RUN/checkpoints/step_<N>, moves `latest` to it and keeps the newest `keep`.
void write_checkpoint(const CheckpointSnapshot& snapshot, const std::string& run_dir, int keep);

// One checkpoint write at a time on a background thread; wait() before the next or at exit.
class CheckpointWriter {
 public:
  explicit CheckpointWriter(std::string run_dir, int keep);
  ~CheckpointWriter();
  void write_async(CheckpointSnapshot snapshot);
  void wait();  // rethrows the writer's error, if any
  bool busy() const { return thread_.joinable(); }

 private:
  std::string run_dir_;
  int keep_;
  std::thread thread_;
  std::exception_ptr error_;
};

// The newest intact checkpoint of a run ("" when it has none). Damaged ones are reported on stderr and
// skipped; never deleted.
std::string find_checkpoint(const std::string& run_dir);
// Verifies the checksums; throws Error naming the file that fails.
void verify_checkpoint(const std::string& checkpoint_dir);

struct LoadedCheckpoint {
  ZayaConfig config;
  TrainerState state;
};

// Reads the model (into params, which must have the checkpoint's shape), the optimizer and balancing
// state, and the trainer state.
LoadedCheckpoint load_checkpoint(const std::string& checkpoint_dir, ParameterStore& params,
                                 Optimizer& optimizer, BalancingController& balancing);

}  // namespace zaya
