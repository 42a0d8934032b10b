#pragma once
// The run's TOML configuration: every constant of training, with the defaults documented in
// docs/CONFIG.md. Unknown keys and bad values are errors naming the file, line and key.

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "data/loader.h"
#include "model/zaya_model.h"
#include "optim/balancing.h"
#include "optim/batch_ramp.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace zaya {

struct RunSection {
  uint64_t seed = 0;
  int threads = 0;  // 0: all cores (or OMP_NUM_THREADS), shared among the ranks on one machine
  // Drop a thread while another process holds a core, and take it back once the core is free
  // (ThreadGovernor): without it a step on a shared machine ran 2.3x slower than on one thread fewer. The
  // bits of a bf16 step depend on the thread count, so a run compared bit for bit with another (a resume
  // against an uninterrupted run) fixes it: false.
  bool adapt_threads = true;
  // Ranks that share each layer's experts (consecutive ranks; must divide the rank count and the experts).
  int expert_parallel = 1;
  // Ranks that share each sequence, one consecutive slice each (consecutive ranks; must divide the rank
  // count, the attention heads and every stage's seq_len): ranks = data parallel x context parallel.
  int context_parallel = 1;
  // Data parallel: the size of a gradient bucket, whose reduction over the ranks starts as soon as the
  // backward pass has finished its layers (0: one reduction after the backward pass).
  double gradient_bucket_mb = 25;
  // Of the matrix products: "auto" (bf16 where the CPU has AVX512-BF16 or AMX, else fp32), "fp32", "bf16".
  std::string precision = "auto";
  // Where the run computes: "auto" (the GPU where zaya was built with a GPU backend and the machine has one,
  // else the CPU), "cpu", "cuda" or "hip". Checkpoints are the same files whatever the device.
  std::string device = "auto";
  // What moves a step's data between ranks on a GPU: "nccl" (NCCL on CUDA, RCCL on HIP, GPU to GPU), "mpi"
  // (staged through host memory: any device, the emulator included), or "auto" (nccl where every rank can
  // use it, else mpi, saying why). On the CPU, MPI's own collectives ("nccl" is refused there).
  std::string communicator = "auto";
  // What the backward pass computes again rather than keep from the forward pass: "none", "attention" (each
  // layer's attention block) or "layer" (each whole layer from its input). Gradients are byte-identical;
  // the memory a micro-batch keeps falls (zaya info --memory shows each), its step takes longer.
  Recompute recompute = Recompute::None;
  // A rank that makes no progress this long (a collective that does not complete: a peer's host frozen, a
  // link down; a step that does not end) says what it waited for and ends the job with exit code 4, so that
  // a scheduler restarts it from the last checkpoint (dist/hang_watchdog.h). More than the longest step or
  // checkpoint write; 0: never.
  double hang_timeout_s = 600;
};

// Where the model comes from: a preset, a ZAYA config.json, or a model directory to continue from.
struct ModelSection {
  std::string preset, config, init;
  int64_t vocab_size = 0;                 // 0: the tokenizer's
  std::string router_init = "reference";  // or "fan_in" (see init_parameters in model/model_io.h)
  std::string dtype = "float32";          // of the exported weights: "float32" or "bfloat16"
};

struct DataSection {
  std::string tokenizer;   // tokenizer.json: its vocabulary, end-of-document token and decoding
  std::string validation;  // an indexed dataset held out for evaluation ("" for none)
};

// One phase of training, as ZAYA1 was trained in three.
struct StageConfig {
  std::string name;
  int64_t tokens = 0;  // this stage's budget
  int64_t seq_len = 0;
  double rope_theta = 0;  // 0: keep the model's
  double lr_multiplier = 1.0;
  std::vector<MixtureEntry> mixture;
};

struct CheckpointSection {
  int64_t every_steps = 0;   // 0: not by steps
  double every_minutes = 0;  // 0: not by time
  int keep = 3;              // the newest checkpoints kept
};

struct EvalSection {
  int64_t every_steps = 0;  // 0: only at the end
  int64_t tokens = 65536;   // held-out tokens per evaluation
  int64_t micro_batch = 8;  // sequences per forward pass
};

struct SampleSection {
  int64_t every_steps = 0;  // 0: only at the end
  std::string prompt = "The";
  int64_t max_new_tokens = 48;
  double temperature = 0.8;
  double top_p = 0.95;
};

struct LogSection {
  int64_t every_steps = 1;      // metrics.jsonl and TensorBoard
  double console_seconds = 10;  // off a terminal: one plain line this often
  bool tensorboard = true;
  int max_bad_steps = 5;  // non-finite steps in a row before the run stops
};

// Fault injection, for testing the guardrails: the listed steps (1-based) get a NaN weight; rank
// fail_rank fails with an error at the start of step fail_step (0: never).
struct DebugSection {
  std::vector<int64_t> nan_steps;
  int64_t fail_rank = 0, fail_step = 0;
};

struct TrainConfig {
  std::string source;  // the file it came from
  // Every key as read (the --set overrides applied) with its value printed as TOML: a resumed run names what
  // changed since its checkpoint.
  std::map<std::string, std::string> settings;
  RunSection run;
  ModelSection model;
  DataSection data;
  std::vector<StageConfig> stages;
  CheckpointSection checkpoint;
  EvalSection eval;
  SampleSection sample;
  LogSection log;
  DebugSection debug;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  BalancingConfig balancing;
  RouterAuxLoss aux_loss;
  BatchRampConfig batch;

  int64_t total_tokens() const;
};

// overrides: "section.key=value", value in TOML syntax (a bare word is taken as a string); applied before
// validation, so they are checked like the file's own values.
TrainConfig parse_train_config(std::string_view text, const std::string& source,
                               const std::vector<std::string>& overrides = {});
TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides = {});

}  // namespace zaya
