#include "train/training_run.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "backend/devices.h"
#include "backend/ops.h"
#include "backend/throughput.h"
#include "core/error.h"
#include "core/thread_governor.h"
#include "core/threads.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "dist/hang_watchdog.h"
#include "dist/watched_communicator.h"
#include "infer/generator.h"
#include "io/atomic_file.h"
#include "model/model_io.h"
#include "model/model_stats.h"
#include "model/zaya_model.h"
#include "optim/balancing.h"
#include "optim/batch_ramp.h"
#include "optim/optimizer.h"
#include "optim/optimizer_shards.h"
#include "optim/param_groups.h"
#include "train/checkpoint_writer.h"
#include "train/evaluator.h"
#include "train/metrics.h"
#include "train/run_checks.h"
#include "train/run_lock.h"
#include "train/train_step.h"

namespace zaya {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// The run's precision: as configured, and for "auto" decided by rank 0 for every rank: as the run began (its
// checkpoints record it, so that a resumed run multiplies as before whatever a measurement would choose now),
// or for a new run measured on the first stage's micro-batch. `recorded`: what rank 0 read in the resumed
// checkpoint ("" for a new run, or a checkpoint from before precisions were kept).
PrecisionChoice run_precision(const TrainConfig& config, const std::string& resume,
                              const std::string& recorded, const Device& device, const ModelDims& dims,
                              Communicator& comm) {
  if (config.run.precision != "auto")
    return resolve_precision(config.run.precision, device, {}, "run.precision");
  std::string decided;  // "<name>\n<description>"
  if (comm.rank() == 0) {
    PrecisionChoice choice;
    if (recorded.empty()) {
      const int64_t rows = config.batch.micro_batch * config.stages.front().seq_len;
      choice = resolve_precision("auto", device, dominant_products(dims, rows), "run.precision");
    } else {
      choice.precision = precision_setting(recorded, "run.precision");
      choice.description = describe_precision(choice.precision, cat("auto, as the run began (", resume, ")"));
    }
    decided = cat(precision_name(choice.precision), "\n", choice.description);
  }
  decided = comm.all_gather_strings(decided)[0];
  const size_t cut = decided.find('\n');
  return {precision_setting(decided.substr(0, cut), "run.precision"), decided.substr(cut + 1)};
}

std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return text;
}

}  // namespace

struct TrainingRun::StepDone {
  StepReport report;
  double seconds = 0, lr_factor = 0;
  int64_t tokens = 0;
};

TrainingRun::TrainingRun(const TrainConfig& config, std::string run_dir, const std::atomic<bool>& stop,
                         Communicator& world, bool force)
    : config_(config), run_dir_(std::move(run_dir)), stop_(stop) {
  watch_collectives(world);
  take_run_directory(force);
  check_inputs();
  build_model();
  restore_state();
  build_step();
  build_data();
}

TrainingRun::~TrainingRun() = default;

// Every collective of the run goes through the watched communicator: when one does not complete within
// run.hang_timeout_s, the watchdog says which and ends the job.
void TrainingRun::watch_collectives(Communicator& world) {
  if (config_.run.hang_timeout_s > 0) {
    watchdog_ = std::make_unique<HangWatchdog>(
        config_.run.hang_timeout_s, cat("rank ", world.rank(), " of ", world.size(), " on ", host_name()));
    watched_ = watch_communicator(
        world, *watchdog_, world.size() == 1 ? std::string("rank 0") : cat("ranks 0-", world.size() - 1));
  }
  comm_ = watched_ ? watched_.get() : &world;
  rank_ = comm_->rank();
  ranks_ = comm_->size();
  leader_ = rank_ == 0;
  if (config_.run.threads > 0) {
    set_user_thread_count(config_.run.threads, config_.source + ": run.threads");
  } else if (comm_->local_size() > 1) {
    set_num_threads(std::max(1, num_threads() / comm_->local_size()));
  }
}

void TrainingRun::take_run_directory(bool force) {
  if (leader_) claim_run_directory(run_dir_, force);
  try {
    fs::create_directories(run_dir_);
  } catch (const fs::filesystem_error& e) {
    throw Error(cat("cannot create the run directory: ", e.code().message())).file(run_dir_);
  }
  if (!leader_) return;
  lock_ = std::make_unique<RunLock>(run_dir_);
  const std::string recorded_config = (fs::path(run_dir_) / "config.toml").string();
  if (!fs::exists(recorded_config)) write_file_atomic(recorded_config, read_text_file(config_.source));
}

// Before anything is built: the device is here, the datasets belong to the tokenizer, and a resume to its
// checkpoint's run.
void TrainingRun::check_inputs() {
  device_ = select_device(config_.run.device, "run.device", comm_->local_rank());
  // Rank 0 says where each rank runs: its host, its GPU's index and name.
  if (!device_.on_host() && ranks_ > 1)
    rank_devices_ =
        comm_->all_gather_strings(cat("rank ", rank_, " on ", host_name(), ": ", device_.description));
  tokenizer_.emplace(Tokenizer::load(config_.data.tokenizer));
  // Rank 0 chooses the checkpoint (and alone reports damaged ones); every rank reads it.
  const CheckpointChoice choice = leader_ ? choose_checkpoint(run_dir_) : CheckpointChoice{};
  resume_ = comm_->all_gather_strings(choice.path)[0];
  resume_reason_ = choice.reason;  // rank 0's: the one that prints
  configured_ = resolve_model_config(config_, tokenizer_->vocab_size(), tokenizer_->pad_id(),
                                     tokenizer_->bos_id(), tokenizer_->eos_id());
  model_config_ = resume_.empty() ? configured_ : load_config((fs::path(resume_) / "config.json").string());
  if (leader_ && !resume_.empty()) resumed_state_ = read_trainer_state(resume_);
  if (leader_) {
    // A resume with another tokenizer is said as such, before its datasets are found to be of the other.
    if (!resume_.empty())
      changed_settings_ =
          check_resume(resume_, resumed_state_, model_config_, config_, *tokenizer_, configured_);
    input_notes_ = check_datasets(config_, *tokenizer_, model_config_.vocab_size);
  }
  comm_->all_gather_strings("");  // every rank waits for those checks (a failing one ends the job)
}

// Expert parallel: consecutive groups of P ranks share each layer's experts, rank r holding the (r mod P)-th
// E / P of them; the ranks with the same experts (every P-th) reduce their gradients together.
void TrainingRun::build_model() {
  dims_ = model_dims(model_config_);
  build_context_groups();
  const int P = expert_parallel_ = std::max(1, config_.run.expert_parallel);
  if (ranks_ % P != 0 || dims_.experts % P != 0) {
    throw Error(cat("expert parallelism over ", P, " ranks needs the ranks (", ranks_, ") and the experts (",
                    dims_.experts, ") to be multiples of ", P))
        .file(config_.source)
        .field("run.expert_parallel");
  }
  if (P > 1) {
    expert_group_ = comm_->split(rank_ / P, rank_);
    expert_holders_group_ = comm_->split(rank_ % P, rank_);
  }
  Communicator& expert_holders = P > 1 ? *expert_holders_group_ : *comm_;
  build_collectives();
  const int64_t local_experts = dims_.experts / P;
  precision_ = run_precision(config_, resume_, resumed_state_.precision, device_, dims_, *comm_);
  check_memory();
  Ops& ops = *device_.ops;
  params_ = std::make_unique<ParameterStore>(dims_, ExpertSlice{(rank_ % P) * local_experts, local_experts},
                                             ops.memory());
  whole_model_ = std::make_unique<ParameterTable>(dims_);
  const ParameterTable& table = params_->table();
  const std::vector<ParamAssignment> assignments = assign_param_groups(table, config_.optimizer.groups);
  const OptimizerShards dense = plan_optimizer_shards(assignments, 0, table.dense_floats(), ranks_);
  const OptimizerShards experts =
      plan_optimizer_shards(assignments, table.dense_floats(), table.total_floats(), expert_holders.size());
  const std::vector<std::pair<int64_t, int64_t>> owned = {dense.range(rank_),
                                                          experts.range(expert_holders.rank())};
  optimizer_ = std::make_unique<Optimizer>(*params_, config_.optimizer, ops, owned, precision_.precision);
  balancing_ = std::make_unique<BalancingController>(config_.balancing, dims_.layers, dims_.experts);
  dense_shards_ = std::make_unique<OptimizerShards>(dense);
  expert_shards_ = std::make_unique<OptimizerShards>(experts);
}

// Context parallel: consecutive groups of C ranks share each sequence, rank r of a group holding its r-th
// slice; every stage's sequences must split into slices at least as long as the convolutions' halo.
void TrainingRun::build_context_groups() {
  const int C = context_parallel_ = std::max(1, config_.run.context_parallel);
  auto refuse = [&](const std::string& why) {
    return Error(cat("context parallelism over ", C, " ranks ", why))
        .file(config_.source)
        .field("run.context_parallel");
  };
  if (ranks_ % C != 0) throw refuse(cat("needs a multiple of ", C, " ranks; the run has ", ranks_));
  const int64_t halo = (dims_.conv_time0 - 1) + (dims_.conv_time1 - 1);
  for (const StageConfig& stage : config_.stages) {
    if (stage.seq_len % C != 0 || stage.seq_len / C < std::max<int64_t>(1, halo)) {
      throw refuse(cat("cuts the sequences of stage '", stage.name, "' (", stage.seq_len, " tokens) into ", C,
                       " equal slices of at least ", std::max<int64_t>(1, halo), " tokens: they do not"));
    }
  }
  if (C > 1) context_group_ = comm_->split(rank_ / C, rank_);
}

// The collectives on the device's memory of the world and of the expert groups (collective: every rank
// makes them in the same order). NCCL's do not pass through the watched host communicators, so they are
// watched themselves.
void TrainingRun::build_collectives() {
  auto make = [&](Communicator& host, const std::string& peers) {
    std::unique_ptr<DeviceCommunicator> made = make_device_communicator(
        config_.run.communicator, device_, host, "run.communicator", &collectives_note_);
    if (!watchdog_) return made;
    return watch_device_communicator(std::move(made), *watchdog_, peers);
  };
  try {
    dense_collectives_ = make(*comm_, cat("ranks 0-", ranks_ - 1));
    if (expert_group_) {
      expert_collectives_ = make(*expert_group_, "its expert group");
      expert_holders_collectives_ = make(*expert_holders_group_, "the ranks holding its experts");
    }
    if (context_group_) context_collectives_ = make(*context_group_, "its context group");
  } catch (Error& e) {
    throw e.file(config_.source);
  }
}

// The run's memory per rank, planned before anything large is allocated (train/memory_plan.h), at the
// longest sequence of its stages: a run that cannot fit is refused with the plan and the setting to change,
// never an out-of-memory error at step 1 or when a longer stage begins.
void TrainingRun::check_memory() {
  MemoryLayout layout;
  layout.ranks = ranks_;
  layout.expert_parallel = expert_parallel_;
  layout.context_parallel = context_parallel_;
  layout.micro_batch = config_.batch.micro_batch;
  for (const StageConfig& stage : config_.stages) layout.seq = std::max(layout.seq, stage.seq_len);
  layout.precision = precision_.precision;
  layout.recompute = config_.run.recompute;
  memory_plan_ = plan_memory(dims_, config_.optimizer.groups, layout, *device_.ops);
  // The ranks on one machine share its memory; each GPU is its own.
  const int64_t capacity =
      device_.on_host() ? device_.memory_bytes / comm_->local_size() : device_.memory_bytes;
  if (memory_plan_.total() <= capacity) return;
  const int64_t fits = largest_micro_batch(dims_, config_.optimizer.groups, layout, *device_.ops, capacity);
  if (leader_) {
    std::fprintf(stderr, "zaya train: memory per rank at sequence %lld, micro-batch %lld on %s:\n%s",
                 (long long)layout.seq, (long long)layout.micro_batch, device_.description.c_str(),
                 describe_memory_plan(memory_plan_, capacity).c_str());
  }
  const auto gib = [](int64_t bytes) {
    return std::round(double(bytes) / double(int64_t(1) << 30) * 10) / 10;
  };
  // Recomputing each layer keeps the least: where that fits, it is the other way out.
  MemoryLayout lightest = layout;
  lightest.recompute = Recompute::Layer;
  const bool recompute_fits =
      layout.recompute != Recompute::Layer &&
      plan_memory(dims_, config_.optimizer.groups, lightest, *device_.ops).total() <= capacity;
  const std::string recompute = recompute_fits ? " (or set run.recompute = \"layer\")" : "";
  throw Error(cat("a rank needs ", gib(memory_plan_.total()), " GiB, more than its ", gib(capacity),
                  " GiB (the plan above): ",
                  fits > 0 ? cat("lower batch.micro_batch to at most ", fits, recompute)
                  : recompute_fits
                      ? cat("no micro-batch fits", recompute)
                      : std::string("no micro-batch fits; raise run.expert_parallel or use more ranks")))
      .file(config_.source)
      .field("batch.micro_batch");
}

// The model over the restored weights, and the step that trains it.
void TrainingRun::build_step() {
  model_ = std::make_unique<ZayaModel>(*params_, *device_.ops, precision_.precision);
  model_->set_recompute(config_.run.recompute);
  model_->reserve_arenas(size_t(memory_plan_.activations), size_t(memory_plan_.recomputed),
                         size_t(memory_plan_.scratch));
  model_->set_router_aux_loss(config_.aux_loss);
  model_->set_expert_group(expert_collectives_.get());
  try {
    model_->set_context_group(context_collectives_.get());
  } catch (Error& e) {
    throw e.file(config_.source);
  }
  DeviceCommunicator& expert_holders =
      expert_holders_collectives_ ? *expert_holders_collectives_ : *dense_collectives_;
  train_step_ = std::make_unique<TrainStep>(*model_, *optimizer_, *balancing_,
                                            ShardedRegion{dense_collectives_.get(), *dense_shards_},
                                            ShardedRegion{&expert_holders, *expert_shards_},
                                            int64_t(config_.run.gradient_bucket_mb * 1e6 / sizeof(float)));
}

// The checkpoint's state, or the initial weights (from model.init, or drawn from the seed).
void TrainingRun::restore_state() {
  if (!resume_.empty()) {
    state_ = load_checkpoint(resume_, *params_, *optimizer_, *balancing_).state;
  } else if (!config_.model.init.empty()) {
    load_weights(config_.model.init, *params_, model_config_.tie_word_embeddings);
  } else {
    // Drawn on the host (the same numbers on every device), then placed.
    ParameterStore drawn(dims_, params_->table().experts());
    init_parameters(drawn, model_config_.initializer_range, config_.run.seed,
                    config_.model.router_init == "fan_in");
    params_->copy_values_from(drawn);
  }
  state_.precision = std::string(precision_name(precision_.precision));  // what the checkpoints record
  state_.settings = config_.settings;
  if (state_.stage > int64_t(config_.stages.size())) {
    throw Error(
        cat("the checkpoint is in stage ", state_.stage + 1, " but the config has ", config_.stages.size()))
        .file(config_.source)
        .field("stages");
  }
}

// Data parallel, the global batch does not depend on the rank count: its micro-batches are shared out over
// the ranks, as evenly as they go, so that a run sees the same data on any number of ranks. Expert parallel,
// every rank of a group must run as many micro-batches as the others (each is a collective of the group):
// the batch is a multiple of micro_batch x data-parallel ranks (the context groups).
void TrainingRun::build_data() {
  ramp_ = std::make_unique<BatchRamp>(config_.batch, expert_group_ ? ranks_ / context_parallel_ : 1);
  std::vector<StageData> stage_data;
  for (const StageConfig& stage : config_.stages) stage_data.push_back({stage.seq_len, stage.mixture});
  loader_ = std::make_unique<DataLoader>(stage_data, config_.run.seed, dims_.vocab);
  if (!resume_.empty()) loader_->restore(state_.loader);
  if (!config_.data.validation.empty())
    evaluator_ = std::make_unique<Evaluator>(config_, dims_.vocab, *tokenizer_, *comm_, expert_parallel_ > 1);
  if (leader_) log_ = std::make_unique<MetricsLog>(run_dir_, config_.log.tensorboard);
  console_ = std::make_unique<ConsoleProgress>(config_.log.console_seconds, ranks_ == 1);
  total_tokens_ = config_.total_tokens();
  stages_ = int64_t(config_.stages.size());
  plan_ = plan_step(state_.stage, state_.stage_tokens, state_.tokens);
  last_checkpoint_ = resume_;
  saved_step_ = resume_.empty() ? -1 : state_.step;
}

TrainingRun::StepPlan TrainingRun::plan_step(int64_t stage, int64_t stage_tokens, int64_t tokens) const {
  // A stage ends when its budget cannot hold one more whole micro-batch; its last step is cut to what is
  // left.
  const int64_t unit = ramp_->config().micro_batch * ramp_->ranks();
  while (stage < stages_) {
    const StageConfig& s = config_.stages[size_t(stage)];
    const int64_t fits = (s.tokens - stage_tokens) / s.seq_len / unit * unit;
    const int64_t sequences = std::min(ramp_->global_sequences(tokens), fits);
    if (sequences > 0) return {stage, sequences};
    ++stage;
    stage_tokens = 0;
  }
  return {stage, 0};
}

TrainResult TrainingRun::run() {
  if (plan_.stage >= stages_) {
    say(cat("the run in ", run_dir_, " finished at step ", state_.step, " (", state_.tokens,
            " tokens); nothing to do"));
    return result(TrainOutcome::AlreadyFinished);
  }
  announce();
  return train();
}

void TrainingRun::announce() {
  const ModelStats stats = model_stats(*whole_model_, dims_, config_.stages[size_t(plan_.stage)].seq_len);
  const int data_ranks = ranks_ / context_parallel_;
  const std::string parallel =
      ranks_ == 1 ? ""
                  : cat("; ", data_ranks, " data-parallel rank", data_ranks == 1 ? "" : "s",
                        context_parallel_ > 1
                            ? cat(" of ", context_parallel_, " sharing each sequence (context parallel)")
                            : "",
                        expert_group_ ? cat(", experts shared by groups of ", expert_parallel_, " (",
                                            dims_.experts / expert_parallel_, " of each layer's ",
                                            dims_.experts, " per rank)")
                                      : "",
                        ", ", num_threads(), " threads each");
  say(cat(resume_.empty() ? "starting " : "resuming ", run_dir_,
          resume_.empty() ? "" : cat(" from ", resume_, " (", resume_reason_, ")"), ": ", dims_.layers,
          " layers, hidden ", dims_.hidden, ", ", dims_.experts, " experts; ", stats.total, " parameters (",
          stats.active_non_embedding, " active non-embedding); ", stages_, " stage(s), ", total_tokens_,
          " tokens", parallel));
  for (const std::string& note : input_notes_) say(note);
  if (!changed_settings_.empty()) {
    std::string changes;
    for (const std::string& change : changed_settings_) changes += (changes.empty() ? "" : "; ") + change;
    say(cat("resuming with settings changed since the checkpoint, applied from here on: ", changes));
    if (log_)
      log_->event("settings_changed", state_.step, nlohmann::json({{"changes", changed_settings_}}).dump());
  }
  say(cat("device ", device_.description, "; ", precision_.description));
  for (const std::string& line : rank_devices_) say(line);
  if (ranks_ > 1) {
    say(cat("collectives: ", dense_collectives_->engine(),
            collectives_note_.empty() ? "" : cat(" (nccl: ", collectives_note_, ")")));
  }
  gemm_ = std::make_unique<GemmRate>(gemm_rate(*device_.ops, precision_.precision, num_threads()));
  say(cat("MFU is against this rank's ", gemm_->describe()));
  checkpoints_ = std::make_unique<CheckpointWriter>(run_dir_, config_.checkpoint.keep, *comm_);
}

// From here on an error is a failure of the run in progress, not of its input (zaya train's exit codes).
TrainResult TrainingRun::train() {
  enter_stage(plan_.stage);
  BatchPrefetcher prefetch(*loader_, config_.batch.micro_batch, rank_ / context_parallel_,
                           ranks_ / context_parallel_);
  prefetch.request(plan_.stage, plan_.sequences);
  last_save_ = Clock::now();
  if (config_.run.adapt_threads) governor_ = std::make_unique<ThreadGovernor>();
  try {
    while (true) {
      const BatchPrefetcher::Batch batch = prefetch.take();
      const int64_t step_tokens = batch.sequences * batch.seq_len;
      const StepPlan next =
          plan_step(plan_.stage, state_.stage_tokens + step_tokens, state_.tokens + step_tokens);
      if (next.stage < stages_) prefetch.request(next.stage, next.sequences);
      const StepDone done = step(batch);
      StepMetrics m = step_metrics(done, batch);
      if (leader_) console_->step(m);
      if (log_ && (state_.step % config_.log.every_steps == 0 || done.report.skipped)) log_->step(m);
      if (diverged(done.report)) return result(TrainOutcome::Diverged);
      end_stage_if(next);
      plan_ = next;
      if (plan_.stage >= stages_) break;
      if (between_steps()) return result(TrainOutcome::Interrupted);
    }
    evaluate();
    sample();
    save(true);
    if (log_) {
      log_->event("finished", state_.step,
                  cat("{\"tokens\": ", state_.tokens, ", \"seconds\": ", state_.seconds, "}"));
      log_->flush();
    }
    say(cat("finished at step ", state_.step, ", ", state_.tokens, " tokens in ",
            format_duration(state_.seconds), "; checkpoint ", last_checkpoint_));
    return result(TrainOutcome::Finished);
  } catch (const Error& e) {
    fail(e);
  }
}

// One optimizer step on `batch`, with the faults a test may inject; the state advances past it.
TrainingRun::StepDone TrainingRun::step(const BatchPrefetcher::Batch& batch) {
  if (config_.debug.fail_step == state_.step + 1 && config_.debug.fail_rank == rank_)
    throw Error(cat("injected failure at step ", state_.step + 1)).field("debug.fail_step");
  const StageConfig& stage = config_.stages[size_t(plan_.stage)];
  const int64_t seq = batch.seq_len, micro = config_.batch.micro_batch;
  StepDone done;
  done.tokens = batch.sequences * seq;
  // Context parallel, this rank's slice of each sequence.
  const int64_t slice = seq / context_parallel_;
  split_windows(batch.windows, batch.mine, seq, rank_ % context_parallel_, context_parallel_, ids_, labels_);
  std::vector<Batch> micro_batches;
  for (int64_t first = 0; first < batch.mine; first += micro) {
    Batch& b = micro_batches.emplace_back(
        Batch{ids_.data() + first * slice, labels_.data() + first * slice, nullptr, micro, slice});
    b.context_slice = context_parallel_ > 1;
  }
  done.lr_factor = lr_multiplier(config_.schedule, state_.tokens + done.tokens, total_tokens_) *
                   ramp_->lr_factor(state_.tokens) * stage.lr_multiplier;

  // debug.nan_steps: a NaN weight makes this step's loss non-finite (the guardrail's test).
  const bool inject = std::find(config_.debug.nan_steps.begin(), config_.debug.nan_steps.end(),
                                state_.step + 1) != config_.debug.nan_steps.end();
  float* poisoned = params_->value(params_->table().params().front());
  float saved_weight = 0;
  const float nan = NAN;
  if (inject) {
    params_->memory().copy_to_host(&saved_weight, poisoned, sizeof saved_weight);
    params_->memory().copy_from_host(poisoned, &nan, sizeof nan);
    model_->weights_changed();
  }
  const auto start = Clock::now();
  between_steps_ = false;
  done.report = train_step_->run(micro_batches, done.lr_factor);
  done.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (inject) {
    params_->memory().copy_from_host(poisoned, &saved_weight, sizeof saved_weight);
    model_->weights_changed();
  }

  // A thread given back: the machine is quieter, and the GEMM rate may now measure higher.
  if (governor_) governor_->after_step();
  if (governor_ && governor_->gave_back() && gemm_->remeasure())
    say(cat("MFU is now against ", gemm_->describe()));
  if (watchdog_) {
    watchdog_->progress(cat("computing step ", state_.step + 2));
    watchdog_->set_context(cat("step ", state_.step + 1, " done; the last checkpoint is ",
                               last_checkpoint_.empty() ? std::string("none yet") : last_checkpoint_));
  }
  ++state_.step;
  state_.tokens += done.tokens;
  state_.stage_tokens += done.tokens;
  state_.seconds += done.seconds;
  state_.loader = batch.after;
  state_.bad_steps = done.report.skipped ? state_.bad_steps + 1 : 0;
  between_steps_ = true;
  return done;
}

StepMetrics TrainingRun::step_metrics(const StepDone& done, const BatchPrefetcher::Batch& batch) {
  const double rate = double(done.tokens) / done.seconds;
  smoothed_rate_ = smoothed_rate_ == 0 ? rate : 0.8 * smoothed_rate_ + 0.2 * rate;
  const StepReport& report = done.report;
  StepMetrics m;
  m.step = state_.step;
  m.tokens = state_.tokens;
  m.total_tokens = total_tokens_;
  m.stage = plan_.stage;
  m.stages = stages_;
  m.stage_name = config_.stages[size_t(plan_.stage)].name;
  m.loss = report.loss;
  m.aux_loss = report.aux_loss;
  m.lr = config_.optimizer.lr * done.lr_factor;
  m.grad_norm = report.optimizer.grad_norm;
  m.clip = report.optimizer.clip_factor;
  m.tokens_per_second = rate;
  bool rate_raised = false;
  m.mfu = gemm_->mfu(flops_per_token_ * rate / ranks_, &rate_raised);
  if (rate_raised) say(cat("MFU is now against ", gemm_->describe(), " (a step ran faster than it)"));
  m.eta_seconds = double(total_tokens_ - state_.tokens) / smoothed_rate_;
  m.step_seconds = done.seconds;
  m.communication_seconds = report.communication_seconds;
  m.gradient_seconds = report.gradient_seconds;
  m.context_seconds = report.context_seconds;
  m.communication_bytes = report.communication_bytes;
  m.sequences = batch.sequences;
  m.seq_len = batch.seq_len;
  m.ranks = ranks_;
  m.skipped = report.skipped;
  m.routing = report.routing;
  return m;
}

// A skipped step is logged; too many in a row end the run, naming the last good checkpoint.
bool TrainingRun::diverged(const StepReport& report) {
  if (!report.skipped) return false;
  if (log_) log_->event("skipped_step", state_.step, cat("{\"bad_steps_in_a_row\": ", state_.bad_steps, "}"));
  say(cat("step ", state_.step, ": non-finite loss or gradient; the update was skipped (", state_.bad_steps,
          " in a row)"));
  if (state_.bad_steps < config_.log.max_bad_steps) return false;
  checkpoints_->finish();
  say(cat("stopping: ", state_.bad_steps, " non-finite steps in a row; the last good checkpoint is ",
          last_checkpoint_.empty() ? std::string("(none yet)") : last_checkpoint_));
  if (log_) log_->flush();
  return true;
}

void TrainingRun::end_stage_if(const StepPlan& next) {
  if (next.stage == plan_.stage) return;
  const StageConfig& stage = config_.stages[size_t(plan_.stage)];
  state_.stage = next.stage;
  state_.stage_tokens = 0;
  if (log_)
    log_->event("stage", state_.step,
                nlohmann::json({{"from", stage.name}, {"tokens", state_.tokens}}).dump());
  say(cat("stage ", stage.name, " done at ", state_.tokens, " tokens",
          next.stage < stages_ ? "; now " + config_.stages[size_t(next.stage)].name : std::string()));
  if (next.stage < stages_) enter_stage(next.stage);
}

void TrainingRun::enter_stage(int64_t stage) {
  const StageConfig& s = config_.stages[size_t(stage)];
  flops_per_token_ = model_stats(*whole_model_, dims_, s.seq_len).training_flops_per_token;
  if (s.rope_theta > 0) {
    model_->set_rope_theta(s.rope_theta);
    for (auto& [type, rope] : model_config_.rope_parameters) rope.rope_theta = s.rope_theta;
  }
}

// What comes between steps: evaluation, sampling and checkpoints as configured, and the requests every rank
// agrees on. Returns true when the run stops here (its checkpoint written).
bool TrainingRun::between_steps() {
  if (config_.eval.every_steps && state_.step % config_.eval.every_steps == 0) evaluate();
  if (config_.sample.every_steps && state_.step % config_.sample.every_steps == 0) sample();
  checkpoints_->poll();
  // Clocks and signals differ between ranks: a checkpoint by time or a stop happens when any rank asks.
  int64_t requests[2] = {config_.checkpoint.every_minutes > 0 &&
                             std::chrono::duration<double>(Clock::now() - last_save_).count() >=
                                 60 * config_.checkpoint.every_minutes,
                         stop_.load()};
  comm_->all_reduce_max(requests, 2);
  const bool by_steps = config_.checkpoint.every_steps && state_.step % config_.checkpoint.every_steps == 0;
  if (by_steps || requests[0]) {
    save(false);
    last_save_ = Clock::now();
  }
  if (requests[1]) {
    save(true);
    say(cat("stopped at step ", state_.step, "; checkpoint ", last_checkpoint_));
    if (log_) log_->flush();
    return true;
  }
  if (log_) log_->flush();
  return false;
}

void TrainingRun::evaluate() {
  if (!evaluator_) return;
  EvalMetrics m = evaluator_->run(*model_, std::min(state_.stage, stages_ - 1));
  m.step = state_.step;
  m.tokens = state_.tokens;
  if (log_) log_->eval(m);
  eval_loss_ = m.loss;
  eval_bits_per_byte_ = m.bits_per_byte;
  say(cat("eval at step ", m.step, ": loss ", m.loss, ", perplexity ", m.perplexity, ", bits per byte ",
          m.bits_per_byte, " (", m.eval_tokens, " tokens)"));
}

// On rank 0, or with expert parallelism on the ranks of its group (which hold the experts between them).
void TrainingRun::sample() {
  if (config_.sample.max_new_tokens == 0 || rank_ >= expert_parallel_) return;
  SamplingOptions options;
  options.temperature = config_.sample.temperature;
  options.top_p = config_.sample.top_p;
  options.max_new_tokens = config_.sample.max_new_tokens;
  options.seed = config_.run.seed + uint64_t(state_.step);
  options.stop_token = tokenizer_->eos_id();
  const std::vector<int32_t> prompt = tokenizer_->encode(config_.sample.prompt);
  std::vector<int32_t> tokens;
  // The training model decodes on its own device (its decode cache in the device's memory).
  tokens = expert_group_ ? generate_in_expert_group(*model_, prompt, options, *expert_group_)
                         : generate(*model_, prompt, options);
  if (!leader_) return;
  const std::string text = tokenizer_->decode(tokens, true);
  log_->event("sample", state_.step,
              nlohmann::json({{"prompt", config_.sample.prompt}, {"text", text}}).dump());
  say(cat("sample at step ", state_.step, ": ", one_line(config_.sample.prompt + text)));
}

void TrainingRun::save(bool wait) {
  last_checkpoint_ =
      checkpoints_->start(take_snapshot(model_config_, *params_, *optimizer_, *balancing_, state_,
                                        config_.data.tokenizer, rank_, ranks_, expert_group_.get()));
  saved_step_ = state_.step;
  if (wait) checkpoints_->finish();
}

TrainResult TrainingRun::result(TrainOutcome outcome) const {
  return {outcome, state_.step, state_.tokens, last_checkpoint_, eval_loss_, eval_bits_per_byte_};
}

// Between steps the state is whole, and an error there (in evaluation, sampling, reading the next batch) is
// saved from first: a single process checkpoints before it fails. Across ranks a checkpoint is collective,
// and a rank that failed alone cannot take the others with it.
void TrainingRun::fail(const Error& error) {
  if (!between_steps_ || ranks_ > 1 || saved_step_ == state_.step) throw RunFailure(error.what());
  try {
    save(true);
  } catch (const Error& save_error) {
    throw RunFailure(cat(error.what(), "; saving a checkpoint first failed too: ", save_error.what()));
  }
  if (log_) log_->flush();
  throw RunFailure(
      cat(error.what(), "; the work up to step ", state_.step, " is saved in ", last_checkpoint_));
}

void TrainingRun::say(const std::string& line) {
  if (leader_) console_->print(line);
}

}  // namespace zaya
