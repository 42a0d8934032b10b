#pragma once
// One `zaya train` run as an object; run_training (trainer.h) is its door. The constructor sets the run up
// in the order it needs: the collectives watched, the run directory taken, the inputs checked against each
// other (tokenizer, datasets, a resume's checkpoint), the model, optimizer and data built and restored.
// run() then trains step by step; each part of a step's life is a member of its own: the step, its
// metrics, a stage's end, evaluation, sampling, checkpoints, and the requests every rank agrees on (a
// checkpoint by time, a stop).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/devices.h"
#include "backend/precision_policy.h"
#include "io/hf_config.h"
#include "model/model_dims.h"
#include "tokenizer/tokenizer.h"
#include "train/batch_prefetcher.h"
#include "train/checkpoint.h"
#include "train/memory_plan.h"
#include "train/trainer.h"

namespace zaya {

class BalancingController;
class BatchRamp;
class CheckpointWriter;
class Communicator;
class ConsoleProgress;
class DataLoader;
class DeviceCommunicator;
class Error;
class Evaluator;
class GemmRate;
class HangWatchdog;
class MetricsLog;
class Optimizer;
struct OptimizerShards;
class ParameterStore;
class ParameterTable;
class RunLock;
class ThreadGovernor;
class TrainStep;
class ZayaModel;
struct StepMetrics;
struct StepReport;

class TrainingRun {
 public:
  // Throws Error for an input found wrong before training begins (nothing is trained or written then).
  TrainingRun(const TrainConfig& config, std::string run_dir, const std::atomic<bool>& stop,
              Communicator& world, bool force);
  ~TrainingRun();
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  // Trains until every stage is done, a stop is asked for, or too many steps in a row are non-finite.
  // Throws RunFailure for an error once training began.
  TrainResult run();

 private:
  // The next step: which stage it belongs to and how many sequences it takes.
  struct StepPlan {
    int64_t stage = 0, sequences = 0;
  };
  // What a step did, for its metrics.
  struct StepDone;

  // Set-up, in the constructor's order.
  void watch_collectives(Communicator& world);
  void take_run_directory(bool force);
  void check_inputs();
  void build_model();
  void build_context_groups();
  void build_collectives();
  void check_memory();
  void restore_state();
  void build_step();
  void build_data();

  // The run.
  void announce();
  TrainResult train();
  StepPlan plan_step(int64_t stage, int64_t stage_tokens, int64_t tokens) const;
  StepDone step(const BatchPrefetcher::Batch& batch);
  StepMetrics step_metrics(const StepDone& done, const BatchPrefetcher::Batch& batch);
  bool diverged(const StepReport& report);
  void end_stage_if(const StepPlan& next);
  void enter_stage(int64_t stage);
  bool between_steps();
  void evaluate();
  void sample();
  void save(bool wait);
  TrainResult result(TrainOutcome outcome) const;
  [[noreturn]] void fail(const Error& error);
  void say(const std::string& line);

  const TrainConfig& config_;
  const std::string run_dir_;
  const std::atomic<bool>& stop_;

  std::unique_ptr<HangWatchdog> watchdog_;
  std::unique_ptr<Communicator> watched_;
  Communicator* comm_ = nullptr;  // the world, watched where run.hang_timeout_s asks for it
  int rank_ = 0, ranks_ = 1;
  bool leader_ = true;
  std::unique_ptr<RunLock> lock_;

  Device device_;
  std::optional<Tokenizer> tokenizer_;
  std::string resume_;          // the checkpoint resumed, or "" for a new run
  std::string resume_reason_;   // why that one
  TrainerState resumed_state_;  // as the checkpoint records it (read on rank 0, for the checks)
  ZayaConfig configured_, model_config_;
  std::vector<std::string> input_notes_, changed_settings_;

  ModelDims dims_;
  int expert_parallel_ = 1;  // P: consecutive groups of P ranks share each layer's experts
  std::unique_ptr<Communicator> expert_group_, expert_holders_group_;
  // C: consecutive groups of C ranks share each sequence, a slice each; the data-parallel ranks are the
  // groups (ranks_ / C), rank_ / C this one's.
  int context_parallel_ = 1;
  std::unique_ptr<Communicator> context_group_;
  // Their collectives on the device's memory (the world's, the expert group's, its experts' holders', the
  // context group's).
  std::unique_ptr<DeviceCommunicator> dense_collectives_, expert_collectives_, expert_holders_collectives_,
      context_collectives_;
  std::string collectives_note_;  // why run.communicator "auto" did not take NCCL/RCCL ("" if it did)
  std::vector<std::string> rank_devices_;  // on a GPU with several ranks: each rank's host and GPU
  std::unique_ptr<ParameterStore> params_;
  std::unique_ptr<ParameterTable> whole_model_;  // what the parameter and FLOP counts are of
  PrecisionChoice precision_;
  MemoryPlan memory_plan_;  // per rank, at the longest stage
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<BalancingController> balancing_;
  std::unique_ptr<OptimizerShards> dense_shards_, expert_shards_;  // over the ranks; the experts' per group
  TrainerState state_;
  std::unique_ptr<ZayaModel> model_;
  std::unique_ptr<TrainStep> train_step_;
  std::unique_ptr<BatchRamp> ramp_;
  std::unique_ptr<DataLoader> loader_;
  std::unique_ptr<Evaluator> evaluator_;
  std::unique_ptr<MetricsLog> log_;
  std::unique_ptr<ConsoleProgress> console_;

  int64_t total_tokens_ = 0, stages_ = 0;
  StepPlan plan_;
  double eval_loss_ = 0, eval_bits_per_byte_ = 0;  // the last evaluation
  std::unique_ptr<GemmRate> gemm_;
  std::unique_ptr<ThreadGovernor> governor_;
  std::unique_ptr<CheckpointWriter> checkpoints_;
  std::string last_checkpoint_;
  int64_t saved_step_ = -1;     // the step last_checkpoint_ holds
  bool between_steps_ = true;   // the state is whole: no step is half done
  double flops_per_token_ = 0;  // of a training step at the current stage's sequence length
  double smoothed_rate_ = 0;    // tokens per second
  std::chrono::steady_clock::time_point last_save_;
  std::vector<int32_t> ids_, labels_;  // [this rank's sequences, seq_len], reused from step to step
};

}  // namespace zaya
