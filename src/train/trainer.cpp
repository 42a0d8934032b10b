#include "train/trainer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>

#include "backend/devices.h"
#include "backend/ops.h"
#include "backend/precision_policy.h"
#include "backend/throughput.h"
#include "core/error.h"
#include "core/thread_governor.h"
#include "core/threads.h"
#include "data/tokenizer.h"
#include "dist/communicator.h"
#include "dist/hang_watchdog.h"
#include "dist/watched_communicator.h"
#include "infer/generator.h"
#include "io/atomic_file.h"
#include "model/model_dims.h"
#include "model/model_io.h"
#include "model/model_stats.h"
#include "optim/optimizer_shards.h"
#include "train/checkpoint.h"
#include "train/checkpoint_writer.h"
#include "train/metrics.h"
#include "train/run_checks.h"

namespace zaya {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

ZayaConfig resolve_model_config(const TrainConfig& config, int64_t tokenizer_vocab,
                                std::optional<int32_t> pad, std::optional<int32_t> bos,
                                std::optional<int32_t> eos) {
  const ModelSection& m = config.model;
  ZayaConfig out;
  if (!m.preset.empty()) {
    out = preset_config(m.preset);
  } else if (!m.config.empty()) {
    out = load_config(m.config);
  } else {
    out = load_config((fs::path(m.init) / "config.json").string());
  }
  if (m.init.empty()) {
    out.vocab_size = m.vocab_size > 0 ? m.vocab_size : tokenizer_vocab;
    out.pad_token_id = pad;
    out.bos_token_id = bos;
    out.eos_token_id.clear();
    if (eos) out.eos_token_id.push_back(*eos);
  }
  if (out.vocab_size < tokenizer_vocab) {
    throw Error(cat("the model's vocabulary (", out.vocab_size, ") is smaller than the tokenizer's (",
                    tokenizer_vocab, ")"))
        .file(config.source)
        .field("model.vocab_size");
  }
  for (const StageConfig& stage : config.stages) {
    out.max_position_embeddings = std::max(out.max_position_embeddings, stage.seq_len);
  }
  validate_config(out, config.source);
  return out;
}

namespace {

// The next step: which stage it belongs to and how many sequences it takes. A stage ends when its
// budget cannot hold one more whole micro-batch; the last step of a stage is cut to what is left.
struct StepPlan {
  int64_t stage = 0, sequences = 0;
};

StepPlan plan_step(const TrainConfig& config, const BatchRamp& ramp, int64_t stage, int64_t stage_tokens,
                   int64_t tokens) {
  const int64_t unit = ramp.config().micro_batch * ramp.ranks();
  while (stage < int64_t(config.stages.size())) {
    const StageConfig& s = config.stages[size_t(stage)];
    const int64_t fits = (s.tokens - stage_tokens) / s.seq_len / unit * unit;
    const int64_t sequences = std::min(ramp.global_sequences(tokens), fits);
    if (sequences > 0) return {stage, sequences};
    ++stage;
    stage_tokens = 0;
  }
  return {stage, 0};
}

// Windows [count, seq + 1] into model inputs [count, seq] and their next-token labels [count, seq].
void split_windows(const std::vector<int32_t>& windows, int64_t count, int64_t seq, std::vector<int32_t>& ids,
                   std::vector<int32_t>& labels) {
  ids.clear();
  labels.clear();
  for (int64_t w = 0; w < count; ++w) {
    const int32_t* window = windows.data() + w * (seq + 1);
    ids.insert(ids.end(), window, window + seq);
    labels.insert(labels.end(), window + 1, window + seq + 1);
  }
}

// Builds this rank's part of the next global batch on a background thread while the current step trains:
// of the batch's micro-batches, rank r takes the r-th share of an even split.
class BatchPrefetcher {
 public:
  struct Batch {
    std::vector<int32_t> windows;        // [mine, seq_len + 1]: this rank's sequences
    int64_t sequences = 0, seq_len = 0;  // sequences: of the global batch
    int64_t mine = 0;
    LoaderState after;  // the loader's position once this batch is drawn
  };
  BatchPrefetcher(DataLoader& loader, int64_t micro_batch, int rank, int ranks)
      : loader_(loader), micro_batch_(micro_batch), rank_(rank), ranks_(ranks) {}
  ~BatchPrefetcher() {
    if (pending_.valid()) pending_.wait();
  }
  void request(int64_t stage, int64_t sequences) {
    if (loader_.stage() != stage) loader_.start_stage(stage);
    pending_ = std::async(std::launch::async, [this, sequences] {
      Batch batch;
      batch.sequences = sequences;
      batch.seq_len = loader_.seq_len();
      const Share share = even_share(sequences / micro_batch_, ranks_, rank_);
      batch.mine = share.count * micro_batch_;
      batch.windows.resize(size_t(batch.mine * (batch.seq_len + 1)));
      loader_.next(sequences, share.first * micro_batch_, batch.mine, batch.windows.data());
      batch.after = loader_.state();
      return batch;
    });
  }
  Batch take() { return pending_.get(); }

 private:
  DataLoader& loader_;
  int64_t micro_batch_;
  int rank_, ranks_;
  std::future<Batch> pending_;
};

// Held-out loss on the same windows every time (per sequence length), with perplexity and bits per byte.
// The windows are shared out over the ranks and the sums added up. In lockstep (expert parallelism, where
// each forward pass is a collective of the expert group) every rank makes as many passes as the busiest,
// the ones short of windows on a token whose loss does not count.
class Evaluator {
 public:
  Evaluator(const TrainConfig& config, int64_t vocab, const Tokenizer& tokenizer, Communicator& comm,
            bool lockstep)
      : config_(config), tokenizer_(tokenizer), comm_(comm), lockstep_(lockstep) {
    std::vector<StageData> stages;
    for (const StageConfig& stage : config.stages)
      stages.push_back({stage.seq_len, {{config.data.validation, 1.0}}});
    loader_ = std::make_unique<DataLoader>(stages, config.run.seed ^ 0xe7a1u, vocab);
    bytes_.assign(config.stages.size(), 0);
  }

  EvalMetrics run(ZayaModel& model, int64_t stage) {
    loader_->start_stage(stage);
    const int64_t seq = loader_->seq_len(), micro = config_.eval.micro_batch;
    const int64_t windows = std::max<int64_t>(1, (config_.eval.tokens + seq - 1) / seq);
    const Share share = even_share(windows, comm_.size(), comm_.rank());
    const int64_t mine = share.count;
    std::vector<int32_t> data(size_t(mine * (seq + 1))), ids, labels;
    loader_->next(windows, share.first, mine, data.data());
    split_windows(data, mine, seq, ids, labels);
    double loss = 0;
    int64_t labelled = 0, bytes = 0;
    const bool count_bytes = bytes_[size_t(stage)] == 0;
    for (int64_t w = 0; w < mine && count_bytes; ++w) {
      const int32_t* targets = labels.data() + w * seq;
      bytes += int64_t(tokenizer_.decode(std::vector<int32_t>(targets, targets + seq)).size());
    }
    const int64_t busiest = (windows + comm_.size() - 1) / comm_.size();
    const int64_t passes = ((lockstep_ ? busiest : mine) + micro - 1) / micro;
    for (int64_t pass = 0, first = 0; pass < passes; ++pass, first += micro) {
      const int32_t padding_id = 0, padding_label = kIgnoreLabel;
      const int64_t n = std::min(micro, mine - first);
      const ForwardResult result =
          n > 0 ? model.forward({ids.data() + first * seq, labels.data() + first * seq, nullptr, n, seq})
                : model.forward({&padding_id, &padding_label, nullptr, 1, 1});
      loss += result.loss_sum;
      labelled += result.labelled;
    }
    int64_t counts[2] = {labelled, bytes};
    comm_.all_reduce_sum(counts, 2);
    comm_.all_reduce_sum(&loss, 1);
    labelled = counts[0];
    if (count_bytes) bytes_[size_t(stage)] = counts[1];
    EvalMetrics m;
    m.eval_tokens = labelled;
    m.loss = loss / double(labelled);
    m.perplexity = std::exp(m.loss);
    m.bits_per_byte = loss / std::log(2.0) / double(std::max<int64_t>(1, bytes_[size_t(stage)]));
    return m;
  }

 private:
  const TrainConfig& config_;
  const Tokenizer& tokenizer_;
  Communicator& comm_;
  bool lockstep_;
  std::unique_ptr<DataLoader> loader_;
  std::vector<int64_t> bytes_;  // per stage: the UTF-8 bytes the evaluated targets decode to
};

// An exclusive lock on RUN/.lock for the life of the run: two processes training into one directory would
// overwrite each other's checkpoints. The kernel drops it when the process dies, however it dies.
class RunLock {
 public:
  explicit RunLock(const std::string& run_dir) {
    const std::string path = run_dir + "/.lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error("cannot create the run lock").file(path);
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0)
      throw Error("another zaya process is training in this run directory").file(run_dir);
  }
  ~RunLock() { ::close(fd_); }
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

// The run's precision: as configured, and for "auto" decided by rank 0 for every rank: as the run began (its
// checkpoints record it, so that a resumed run multiplies as before whatever a measurement would choose now),
// or for a new run measured on the first stage's micro-batch.
PrecisionChoice run_precision(const TrainConfig& config, const std::string& resume, const Device& device,
                              const ModelDims& dims, Communicator& comm) {
  if (config.run.precision != "auto")
    return resolve_precision(config.run.precision, device, {}, "run.precision");
  std::string decided;  // "<name>\n<description>"
  if (comm.rank() == 0) {
    const std::string recorded = resume.empty() ? "" : read_trainer_state(resume).precision;
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

TrainResult run_training(const TrainConfig& config, const std::string& run_dir, const std::atomic<bool>& stop,
                         Communicator& world, bool force) {
  // Every collective of the run goes through the watched communicator: when one does not complete within
  // run.hang_timeout_s, the watchdog says which and ends the job.
  std::unique_ptr<HangWatchdog> watchdog;
  std::unique_ptr<Communicator> watched;
  if (config.run.hang_timeout_s > 0) {
    watchdog = std::make_unique<HangWatchdog>(
        config.run.hang_timeout_s, cat("rank ", world.rank(), " of ", world.size(), " on ", host_name()));
    watched = watch_communicator(
        world, *watchdog, world.size() == 1 ? std::string("rank 0") : cat("ranks 0-", world.size() - 1));
  }
  Communicator& comm = watched ? *watched : world;
  const int rank = comm.rank(), ranks = comm.size();
  const bool leader = rank == 0;
  if (config.run.threads > 0) {
    set_user_thread_count(config.run.threads, config.source + ": run.threads");
  } else if (comm.local_size() > 1) {
    set_num_threads(std::max(1, num_threads() / comm.local_size()));
  }
  if (leader) claim_run_directory(run_dir, force);
  try {
    fs::create_directories(run_dir);
  } catch (const fs::filesystem_error& e) {
    throw Error(cat("cannot create the run directory: ", e.code().message())).file(run_dir);
  }
  std::unique_ptr<RunLock> lock;
  if (leader) {
    lock = std::make_unique<RunLock>(run_dir);
    const std::string recorded_config = (fs::path(run_dir) / "config.toml").string();
    if (!fs::exists(recorded_config)) write_file_atomic(recorded_config, read_text_file(config.source));
  }

  const Device device = select_device(config.run.device, "run.device");
  Ops& ops = *device.ops;
  if (!device.on_host() && ranks > 1) {
    throw Error(cat("training on ", device.name, " runs one process for now: more ranks need the NCCL/RCCL ",
                    "communicator, which zaya does not have yet"))
        .file(config.source)
        .field("run.device");
  }
  const Tokenizer tokenizer = Tokenizer::load(config.data.tokenizer);
  // Rank 0 chooses the checkpoint (and alone reports damaged ones); every rank reads it.
  const CheckpointChoice choice = leader ? choose_checkpoint(run_dir) : CheckpointChoice{};
  const std::string resume = comm.all_gather_strings(choice.path)[0];
  const ZayaConfig configured = resolve_model_config(config, tokenizer.vocab_size(), tokenizer.pad_id(),
                                                     tokenizer.bos_id(), tokenizer.eos_id());
  ZayaConfig model_config =
      resume.empty() ? configured : load_config((fs::path(resume) / "config.json").string());
  // Before anything is built: the datasets belong to the tokenizer, and a resume to its checkpoint's run.
  std::vector<std::string> input_notes, changed_settings;
  if (leader) {
    // A resume with another tokenizer is said as such, before its datasets are found to be of the other.
    if (!resume.empty())
      changed_settings = check_resume(resume, read_trainer_state(resume), config, tokenizer, configured);
    input_notes = check_datasets(config, tokenizer, model_config.vocab_size);
  }
  comm.all_gather_strings("");  // every rank waits for those checks (a failing one ends the job)
  // Expert parallel: consecutive groups of P ranks share each layer's experts, rank r holding the
  // (r mod P)-th E / P of them; the ranks with the same experts (every P-th) reduce their gradients together.
  const ModelDims dims = model_dims(model_config);
  const int P = std::max(1, config.run.expert_parallel);
  if (ranks % P != 0 || dims.experts % P != 0) {
    throw Error(cat("expert parallelism over ", P, " ranks needs the ranks (", ranks, ") and the experts (",
                    dims.experts, ") to be multiples of ", P))
        .file(config.source)
        .field("run.expert_parallel");
  }
  std::unique_ptr<Communicator> expert_group, expert_holders_group;
  if (P > 1) {
    expert_group = comm.split(rank / P, rank);
    expert_holders_group = comm.split(rank % P, rank);
  }
  Communicator& expert_holders = P > 1 ? *expert_holders_group : comm;
  const int64_t local_experts = dims.experts / P;
  ParameterStore params(dims, {(rank % P) * local_experts, local_experts}, ops.memory());
  const ParameterTable& table = params.table();
  const std::vector<ParamAssignment> assignments = assign_param_groups(table, config.optimizer.groups);
  const OptimizerShards dense_shards = plan_optimizer_shards(assignments, 0, table.dense_floats(), ranks);
  const OptimizerShards expert_shards =
      plan_optimizer_shards(assignments, table.dense_floats(), table.total_floats(), expert_holders.size());
  const PrecisionChoice precision_choice = run_precision(config, resume, device, dims, comm);
  const Precision precision = precision_choice.precision;
  Optimizer optimizer(params, config.optimizer, ops,
                      {dense_shards.range(rank), expert_shards.range(expert_holders.rank())}, precision);
  BalancingController balancing(config.balancing, params.dims().layers, params.dims().experts);
  TrainerState state;
  if (!resume.empty()) {
    state = load_checkpoint(resume, params, optimizer, balancing).state;
  } else if (!config.model.init.empty()) {
    load_weights(config.model.init, params, model_config.tie_word_embeddings);
  } else {
    // Drawn on the host (the same numbers on every device), then placed.
    ParameterStore drawn(dims, params.table().experts());
    init_parameters(drawn, model_config.initializer_range, config.run.seed,
                    config.model.router_init == "fan_in");
    params.copy_values_from(drawn);
  }
  state.precision = std::string(precision_name(precision));  // what the checkpoints record
  state.settings = config.settings;
  if (state.stage > int64_t(config.stages.size())) {
    throw Error(
        cat("the checkpoint is in stage ", state.stage + 1, " but the config has ", config.stages.size()))
        .file(config.source)
        .field("stages");
  }

  ZayaModel model(params, ops, precision);
  model.set_router_aux_loss(config.aux_loss);
  model.set_expert_group(expert_group.get());
  TrainStep train_step(model, optimizer, balancing, {&comm, dense_shards}, {&expert_holders, expert_shards},
                       int64_t(config.run.gradient_bucket_mb * 1e6 / sizeof(float)));
  // Data parallel, the global batch does not depend on the rank count: its micro-batches are shared out
  // over the ranks, as evenly as they go, so that a run sees the same data on any number of ranks. Expert
  // parallel, every rank of a group must run as many micro-batches as the others (each is a collective of
  // the group): the batch is a multiple of micro_batch x ranks.
  const BatchRamp ramp(config.batch, expert_group ? ranks : 1);
  std::vector<StageData> stage_data;
  for (const StageConfig& stage : config.stages) stage_data.push_back({stage.seq_len, stage.mixture});
  DataLoader loader(stage_data, config.run.seed, params.dims().vocab);
  if (!resume.empty()) loader.restore(state.loader);
  std::unique_ptr<Evaluator> evaluator;
  if (!config.data.validation.empty())
    evaluator = std::make_unique<Evaluator>(config, params.dims().vocab, tokenizer, comm, P > 1);

  std::unique_ptr<MetricsLog> log;
  if (leader) log = std::make_unique<MetricsLog>(run_dir, config.log.tensorboard);
  ConsoleProgress console(config.log.console_seconds, ranks == 1);
  auto say = [&](const std::string& line) {
    if (leader) console.print(line);
  };
  TrainResult result;
  const int64_t total = config.total_tokens(), stages = int64_t(config.stages.size());
  StepPlan plan = plan_step(config, ramp, state.stage, state.stage_tokens, state.tokens);
  if (plan.stage >= stages) {
    say(cat("the run in ", run_dir, " finished at step ", state.step, " (", state.tokens,
            " tokens); nothing to do"));
    result = {TrainOutcome::AlreadyFinished, state.step, state.tokens, resume, 0, 0};
    return result;
  }

  const ParameterTable whole_model(dims);  // what the counts are of, whatever experts this rank holds
  const ModelStats stats = model_stats(whole_model, dims, config.stages[size_t(plan.stage)].seq_len);
  say(cat(resume.empty() ? "starting " : "resuming ", run_dir,
          resume.empty() ? "" : cat(" from ", resume, " (", choice.reason, ")"), ": ", params.dims().layers,
          " layers, hidden ", params.dims().hidden, ", ", params.dims().experts, " experts; ", stats.total,
          " parameters (", stats.active_non_embedding, " active non-embedding); ", stages, " stage(s), ",
          total, " tokens",
          ranks > 1 ? cat("; ", ranks, " data-parallel ranks",
                          expert_group ? cat(", experts shared by groups of ", P, " (", local_experts,
                                             " of each layer's ", dims.experts, " per rank)")
                                       : "",
                          ", ", num_threads(), " threads each")
                    : ""));
  for (const std::string& note : input_notes) say(note);
  if (!changed_settings.empty()) {
    std::string changes;
    for (const std::string& change : changed_settings) changes += (changes.empty() ? "" : "; ") + change;
    say(cat("resuming with settings changed since the checkpoint, applied from here on: ", changes));
    if (log)
      log->event("settings_changed", state.step, nlohmann::json({{"changes", changed_settings}}).dump());
  }
  say(cat("device ", device.description, "; ", precision_choice.description));
  GemmRate gemm = gemm_rate(ops, precision, num_threads());  // the same measure as zaya bench step
  say(cat("MFU is against this rank's ", gemm.describe()));
  CheckpointWriter checkpoints(run_dir, config.checkpoint.keep, comm);
  std::string last_checkpoint = resume;
  int64_t saved_step = resume.empty() ? -1 : state.step;  // the step last_checkpoint holds
  auto save = [&](bool wait) {
    last_checkpoint =
        checkpoints.start(take_snapshot(model_config, params, optimizer, balancing, state,
                                        config.data.tokenizer, rank, ranks, expert_group.get()));
    saved_step = state.step;
    if (wait) checkpoints.finish();
  };
  double flops_per_token = 0;  // of a training step at the stage's sequence length
  auto enter_stage = [&](int64_t stage) {
    const StageConfig& s = config.stages[size_t(stage)];
    flops_per_token = model_stats(whole_model, dims, s.seq_len).training_flops_per_token;
    if (s.rope_theta > 0) {
      model.set_rope_theta(s.rope_theta);
      for (auto& [type, rope] : model_config.rope_parameters) rope.rope_theta = s.rope_theta;
    }
  };
  auto evaluate = [&] {
    if (!evaluator) return;
    EvalMetrics m = evaluator->run(model, std::min(state.stage, stages - 1));
    m.step = state.step;
    m.tokens = state.tokens;
    if (log) log->eval(m);
    result.eval_loss = m.loss;
    result.eval_bits_per_byte = m.bits_per_byte;
    say(cat("eval at step ", m.step, ": loss ", m.loss, ", perplexity ", m.perplexity, ", bits per byte ",
            m.bits_per_byte, " (", m.eval_tokens, " tokens)"));
  };
  // On rank 0, or with expert parallelism on the ranks of its group (which hold the experts between them).
  auto sample = [&] {
    if (config.sample.max_new_tokens == 0 || rank >= P) return;
    SamplingOptions options;
    options.temperature = config.sample.temperature;
    options.top_p = config.sample.top_p;
    options.max_new_tokens = config.sample.max_new_tokens;
    options.seed = config.run.seed + uint64_t(state.step);
    options.stop_token = tokenizer.eos_id();
    const std::vector<int32_t> prompt = tokenizer.encode(config.sample.prompt);
    std::vector<int32_t> tokens;
    if (expert_group) {
      tokens = generate_in_expert_group(model, prompt, options, *expert_group);
    } else if (device.on_host()) {
      tokens = generate(model, prompt, options);
    } else {
      // Generation decodes on the CPU (its cache lives on the host): from a copy of the weights.
      ParameterStore host(dims);
      params.copy_values_to(host);
      ZayaModel sampler(host, cpu_ops(), cpu_ops().fast_bf16() ? precision : Precision::F32);
      tokens = generate(sampler, prompt, options);
    }
    if (!leader) return;
    const std::string text = tokenizer.decode(tokens, true);
    log->event("sample", state.step,
               nlohmann::json({{"prompt", config.sample.prompt}, {"text", text}}).dump());
    say(cat("sample at step ", state.step, ": ", one_line(config.sample.prompt + text)));
  };

  enter_stage(plan.stage);
  BatchPrefetcher prefetch(loader, config.batch.micro_batch, rank, ranks);
  prefetch.request(plan.stage, plan.sequences);
  auto last_save = Clock::now();
  double smoothed_rate = 0;
  std::unique_ptr<ThreadGovernor> governor;
  if (config.run.adapt_threads) governor = std::make_unique<ThreadGovernor>();
  // From here on an error is a failure of the run in progress, not of its input (zaya train's exit codes).
  // Between steps the state is whole, and an error there (in evaluation, sampling, reading the next batch)
  // is saved from first: a single process checkpoints before it fails. Across ranks a checkpoint is
  // collective, and a rank that failed alone cannot take the others with it.
  bool between_steps = true;
  try {
    std::vector<int32_t> ids, labels;  // [this rank's sequences, seq_len], reused from step to step
    while (true) {
      BatchPrefetcher::Batch batch = prefetch.take();
      const StageConfig& stage = config.stages[size_t(plan.stage)];
      const int64_t seq = batch.seq_len, step_tokens = batch.sequences * seq;
      const StepPlan next =
          plan_step(config, ramp, plan.stage, state.stage_tokens + step_tokens, state.tokens + step_tokens);
      if (next.stage < stages) prefetch.request(next.stage, next.sequences);
      if (config.debug.fail_step == state.step + 1 && config.debug.fail_rank == rank)
        throw Error(cat("injected failure at step ", state.step + 1)).field("debug.fail_step");

      split_windows(batch.windows, batch.mine, seq, ids, labels);
      std::vector<Batch> micro_batches;
      const int64_t micro = config.batch.micro_batch;
      for (int64_t first = 0; first < batch.mine; first += micro)
        micro_batches.push_back({ids.data() + first * seq, labels.data() + first * seq, nullptr, micro, seq});
      const double lr_factor = lr_multiplier(config.schedule, state.tokens + step_tokens, total) *
                               ramp.lr_factor(state.tokens) * stage.lr_multiplier;

      // Fault injection for testing the guardrail: a NaN weight makes this step's loss non-finite.
      const bool inject = std::find(config.debug.nan_steps.begin(), config.debug.nan_steps.end(),
                                    state.step + 1) != config.debug.nan_steps.end();
      float* poisoned = params.value(params.table().params().front());
      float saved_weight = 0;
      const float nan = NAN;
      if (inject) {
        params.memory().copy_to_host(&saved_weight, poisoned, sizeof saved_weight);
        params.memory().copy_from_host(poisoned, &nan, sizeof nan);
        model.weights_changed();
      }
      const auto start = Clock::now();
      between_steps = false;
      const StepReport report = train_step.run(micro_batches, lr_factor);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (inject) {
        params.memory().copy_from_host(poisoned, &saved_weight, sizeof saved_weight);
        model.weights_changed();
      }

      // A thread given back: the machine is quieter, and the GEMM rate may now measure higher.
      if (governor) governor->after_step();
      if (governor && governor->gave_back() && gemm.remeasure())
        say(cat("MFU is now against ", gemm.describe()));
      if (watchdog) {
        watchdog->progress(cat("computing step ", state.step + 2));
        watchdog->set_context(cat("step ", state.step + 1, " done; the last checkpoint is ",
                                  last_checkpoint.empty() ? std::string("none yet") : last_checkpoint));
      }
      ++state.step;
      state.tokens += step_tokens;
      state.stage_tokens += step_tokens;
      state.seconds += seconds;
      state.loader = batch.after;
      state.bad_steps = report.skipped ? state.bad_steps + 1 : 0;
      between_steps = true;
      const double rate = double(step_tokens) / seconds;
      smoothed_rate = smoothed_rate == 0 ? rate : 0.8 * smoothed_rate + 0.2 * rate;

      StepMetrics m;
      m.step = state.step;
      m.tokens = state.tokens;
      m.total_tokens = total;
      m.stage = plan.stage;
      m.stages = stages;
      m.stage_name = stage.name;
      m.loss = report.loss;
      m.aux_loss = report.aux_loss;
      m.lr = config.optimizer.lr * lr_factor;
      m.grad_norm = report.optimizer.grad_norm;
      m.clip = report.optimizer.clip_factor;
      m.tokens_per_second = rate;
      bool rate_raised = false;
      m.mfu = gemm.mfu(flops_per_token * rate / ranks, &rate_raised);
      if (rate_raised) say(cat("MFU is now against ", gemm.describe(), " (a step ran faster than it)"));
      m.eta_seconds = double(total - state.tokens) / smoothed_rate;
      m.step_seconds = seconds;
      m.communication_seconds = report.communication_seconds;
      m.gradient_seconds = report.gradient_seconds;
      m.communication_bytes = report.communication_bytes;
      m.sequences = batch.sequences;
      m.seq_len = seq;
      m.ranks = ranks;
      m.skipped = report.skipped;
      m.routing = report.routing;
      if (leader) console.step(m);
      if (log && (state.step % config.log.every_steps == 0 || report.skipped)) log->step(m);
      if (report.skipped) {
        if (log)
          log->event("skipped_step", state.step, cat("{\"bad_steps_in_a_row\": ", state.bad_steps, "}"));
        say(cat("step ", state.step, ": non-finite loss or gradient; the update was skipped (",
                state.bad_steps, " in a row)"));
        if (state.bad_steps >= config.log.max_bad_steps) {
          checkpoints.finish();
          say(cat("stopping: ", state.bad_steps, " non-finite steps in a row; the last good checkpoint is ",
                  last_checkpoint.empty() ? std::string("(none yet)") : last_checkpoint));
          if (log) log->flush();
          return {TrainOutcome::Diverged, state.step,       state.tokens,
                  last_checkpoint,        result.eval_loss, result.eval_bits_per_byte};
        }
      }

      if (next.stage != plan.stage) {
        state.stage = next.stage;
        state.stage_tokens = 0;
        if (log)
          log->event("stage", state.step,
                     nlohmann::json({{"from", stage.name}, {"tokens", state.tokens}}).dump());
        say(cat("stage ", stage.name, " done at ", state.tokens, " tokens",
                next.stage < stages ? "; now " + config.stages[size_t(next.stage)].name : std::string()));
        if (next.stage < stages) enter_stage(next.stage);
      }
      plan = next;
      const bool done = plan.stage >= stages;
      if (done) break;
      if (config.eval.every_steps && state.step % config.eval.every_steps == 0) evaluate();
      if (config.sample.every_steps && state.step % config.sample.every_steps == 0) sample();
      checkpoints.poll();
      // Clocks and signals differ between ranks: a checkpoint by time or a stop happens when any rank asks.
      int64_t requests[2] = {config.checkpoint.every_minutes > 0 &&
                                 std::chrono::duration<double>(Clock::now() - last_save).count() >=
                                     60 * config.checkpoint.every_minutes,
                             stop.load()};
      comm.all_reduce_max(requests, 2);
      const bool by_steps = config.checkpoint.every_steps && state.step % config.checkpoint.every_steps == 0;
      if (by_steps || requests[0]) {
        save(false);
        last_save = Clock::now();
      }
      if (requests[1]) {
        save(true);
        say(cat("stopped at step ", state.step, "; checkpoint ", last_checkpoint));
        if (log) log->flush();
        return {TrainOutcome::Interrupted, state.step,       state.tokens,
                last_checkpoint,           result.eval_loss, result.eval_bits_per_byte};
      }
      if (log) log->flush();
    }

    evaluate();
    sample();
    save(true);
    if (log) {
      log->event("finished", state.step,
                 cat("{\"tokens\": ", state.tokens, ", \"seconds\": ", state.seconds, "}"));
      log->flush();
    }
    say(cat("finished at step ", state.step, ", ", state.tokens, " tokens in ",
            format_duration(state.seconds), "; checkpoint ", last_checkpoint));
    result.outcome = TrainOutcome::Finished;
    result.step = state.step;
    result.tokens = state.tokens;
    result.checkpoint = last_checkpoint;
    return result;
  } catch (const Error& e) {
    if (!between_steps || ranks > 1 || saved_step == state.step) throw RunFailure(e.what());
    try {
      save(true);
    } catch (const Error& save_error) {
      throw RunFailure(cat(e.what(), "; saving a checkpoint first failed too: ", save_error.what()));
    }
    if (log) log->flush();
    throw RunFailure(cat(e.what(), "; the work up to step ", state.step, " is saved in ", last_checkpoint));
  }
}

}  // namespace zaya
