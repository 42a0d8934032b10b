// `zaya info (--model DIR | --preset NAME | --config FILE | --train-config FILE) [--seq S] [--memory ...]`:
// the shape, parameter counts and training FLOPs per token of a model, and with --memory what training it
// takes per rank (train/memory_plan.h).

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <optional>

#include "backend/devices.h"
#include "cli/commands.h"
#include "cli/device_option.h"
#include "cli/model_source.h"
#include "cli/validators.h"
#include "core/error.h"
#include "model/model_stats.h"
#include "train/memory_plan.h"
#include "train/train_config.h"

namespace zaya::cli {
namespace {

struct InfoArgs {
  ModelSource source;
  std::string train_config;
  int64_t seq = 4096;
  bool memory = false;
  int ranks = 0;              // 0: the fewest the parallel groups take
  int expert_parallel = 0;    // 0: the train config's, else 1
  int context_parallel = 0;   // 0: the train config's, else 1
  int64_t micro_batch = 0;    // 0: the train config's, else 1
  std::string device_memory;  // "80GB": the capacity to plan against; "": the device's own
  std::string precision = "bf16";
  std::string recompute;  // "": the train config's, else none
  std::string device = "auto";
};

// "80GB", "80 GiB", "192GB", "1.5TB" or a number of bytes.
int64_t parse_bytes(const std::string& text, const char* field) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw Error(cat("expected a size such as 80GB, got \"", text, "\"")).field(field);
  }
  std::string unit = text.substr(used);
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  static const std::map<std::string, double> units = {
      {"", 1},      {"B", 1},        {"KB", 1e3},        {"MB", 1e6},           {"GB", 1e9},
      {"TB", 1e12}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  const auto found = units.find(unit);
  if (found == units.end() || !(value > 0) || value * found->second > 9e18) {
    throw Error(cat("expected a size such as 80GB or 192GiB, got \"", text, "\"")).field(field);
  }
  return int64_t(value * found->second);
}

// The memory a run takes per rank at each sequence length it trains at, against the capacity given, and the
// largest micro-batch that fits there.
void print_memory(const InfoArgs& args, const ZayaConfig& config, const std::optional<TrainConfig>& run) {
  const Device device = select_device(args.device, "--device");
  std::vector<int64_t> lengths = {args.seq};
  if (run) {
    lengths.clear();
    for (const StageConfig& stage : run->stages) {
      if (std::find(lengths.begin(), lengths.end(), stage.seq_len) == lengths.end())
        lengths.push_back(stage.seq_len);
    }
  }
  MemoryLayout layout;
  layout.expert_parallel = args.expert_parallel > 0 ? args.expert_parallel
                           : run                    ? run->run.expert_parallel
                                                    : 1;
  layout.context_parallel = args.context_parallel > 0 ? args.context_parallel
                            : run                     ? run->run.context_parallel
                                                      : 1;
  layout.ranks = args.ranks > 0 ? args.ranks : std::lcm(layout.expert_parallel, layout.context_parallel);
  layout.micro_batch = args.micro_batch > 0 ? args.micro_batch : run ? run->batch.micro_batch : 1;
  layout.precision = args.precision == "fp32" ? Precision::F32 : Precision::BF16;
  layout.recompute = !args.recompute.empty() ? *recompute_from_name(args.recompute)
                     : run                   ? run->run.recompute
                                             : Recompute::None;
  const int64_t capacity =
      args.device_memory.empty() ? 0 : parse_bytes(args.device_memory, "--device-memory");
  const std::vector<GroupRule> groups = run ? run->optimizer.groups : default_group_rules();
  const ModelDims dims = model_dims(config);
  for (const int64_t seq : lengths) {
    layout.seq = seq;
    const MemoryPlan plan = plan_memory(dims, groups, layout, *device.ops);
    std::printf(
        "memory per rank: %d rank%s, expert parallel %d, context parallel %d, micro-batch %lld x %lld "
        "tokens, "
        "%s, recompute %s, sizes as %s takes them\n",
        layout.ranks, layout.ranks == 1 ? "" : "s", layout.expert_parallel, layout.context_parallel,
        (long long)layout.micro_batch, (long long)seq, std::string(precision_name(layout.precision)).c_str(),
        recompute_name(layout.recompute), device.description.c_str());
    std::printf("%s", describe_memory_plan(plan, capacity).c_str());
    // What each run.recompute would hold of activations (kept and recomputed), the rest being the same.
    std::string by_recompute;
    for (const Recompute recompute : {Recompute::None, Recompute::Attention, Recompute::Layer}) {
      MemoryLayout other = layout;
      other.recompute = recompute;
      const MemoryPlan with =
          recompute == layout.recompute ? plan : plan_memory(dims, groups, other, *device.ops);
      char size[32];
      std::snprintf(size, sizeof size, "%.2f GiB",
                    double(with.activations + with.recomputed) / double(1 << 30));
      by_recompute += cat(by_recompute.empty() ? "" : ", ", recompute_name(recompute), " ", size);
    }
    std::printf("  activations with run.recompute: %s\n", by_recompute.c_str());
    if (capacity > 0) {
      std::printf("  largest micro-batch that fits: %lld sequences of %lld\n",
                  (long long)largest_micro_batch(dims, groups, layout, *device.ops, capacity),
                  (long long)seq);
    }
  }
}

void print_count(const char* label, int64_t count) {
  std::printf("  %-34s %15lld  (%.3f B)\n", label, (long long)count, double(count) / 1e9);
}

// A run configuration's model, stages and training compute (its vocabulary as configured; the
// tokenizer's when it says 0 and the file exists is not consulted here).
void print_run(const TrainConfig& run, const ZayaConfig& model) {
  const ModelDims dims = model_dims(model);
  const ParameterTable table(dims);
  double flops = 0;
  std::printf("run %s: %zu stage(s), %.4g tokens\n", run.source.c_str(), run.stages.size(),
              double(run.total_tokens()));
  for (const StageConfig& stage : run.stages) {
    const ModelStats stats = model_stats(table, dims, stage.seq_len);
    flops += stats.training_flops_per_token * double(stage.tokens);
    std::printf("  stage %-20s %.4g tokens at seq_len %lld%s: %.4g training FLOPs per token\n",
                stage.name.c_str(), double(stage.tokens), (long long)stage.seq_len,
                stage.rope_theta > 0 ? cat(", RoPE base ", stage.rope_theta).c_str() : "",
                stats.training_flops_per_token);
  }
  std::printf("  training compute: %.4g FLOPs; global batch %lld sequences (from %lld)\n", flops,
              (long long)run.batch.end_sequences,
              (long long)(run.batch.start_sequences ? run.batch.start_sequences : run.batch.end_sequences));
}

void run_info(const InfoArgs& args) {
  std::optional<TrainConfig> run;
  ZayaConfig config;
  if (!args.train_config.empty()) {
    run = load_train_config(args.train_config);
    ModelSource from_run{run->model.preset, run->model.config, run->model.init};
    config = from_run.config();
    if (run->model.vocab_size > 0) config.vocab_size = run->model.vocab_size;
  } else {
    config = args.source.config();
  }
  const ModelDims dims = model_dims(config);
  const ParameterTable table(dims);
  const ModelStats stats = model_stats(table, dims, args.seq);
  std::printf(
      "%s: zaya, %lld layers, hidden %lld, %lld query / %lld KV heads of %lld, %lld experts (top-1 + skip) "
      "of %lld, router %lld, vocab %lld%s\n",
      args.source.describe().c_str(), (long long)dims.layers, (long long)dims.hidden, (long long)dims.heads,
      (long long)dims.kv_heads, (long long)dims.head_dim, (long long)dims.experts,
      (long long)dims.intermediate, (long long)dims.router, (long long)dims.vocab,
      dims.tied_embeddings ? ", tied head" : "");
  std::printf("parameters\n");
  print_count("total", stats.total);
  print_count("embedding", stats.embedding);
  print_count("non-embedding", stats.non_embedding);
  print_count("active non-embedding (per token)", stats.active_non_embedding);
  print_count("active incl. embedding", stats.active_non_embedding + stats.embedding);
  std::printf("training FLOPs per token at sequence length %lld: %.4g (forward %.4g)\n", (long long)args.seq,
              stats.training_flops_per_token, stats.forward_flops_per_token);
  if (run) print_run(*run, config);
  if (args.memory) print_memory(args, config, run);
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto args = std::make_shared<InfoArgs>();
  CLI::App* command = app.add_subcommand("info", "parameter counts and FLOPs per token of a model");
  CLI::Option* train_config =
      command->add_option("--train-config", args->train_config, "a run's TOML file: its model and stages");
  args->source.add_options(*command, true, true, train_config);
  command->add_option("--seq", args->seq, "sequence length for the attention FLOPs and --memory")
      ->check(positive());
  command->add_flag("--memory", args->memory,
                    "the memory training takes per rank: weights, gradients, optimizer state, activations");
  command
      ->add_option("--ranks", args->ranks,
                   "with --memory: ranks in all (default: the expert or context parallel group's, or 1)")
      ->check(positive());
  command
      ->add_option("--expert-parallel", args->expert_parallel,
                   "with --memory: ranks sharing one copy of the experts (default: the train config's, or 1)")
      ->check(positive());
  command
      ->add_option(
          "--context-parallel", args->context_parallel,
          "with --memory: ranks sharing each sequence, a slice each (default: the train config's, or 1)")
      ->check(positive());
  command
      ->add_option("--micro-batch", args->micro_batch,
                   "with --memory: sequences per forward pass (default: the train config's, or 1)")
      ->check(positive());
  command->add_option(
      "--device-memory", args->device_memory,
      "with --memory: the memory of one device (80GB, 192GiB): what fits, the largest micro-batch");
  command
      ->add_option("--precision", args->precision, "with --memory: of the products, bf16 (default) or fp32")
      ->check(CLI::IsMember({"bf16", "fp32"}));
  command
      ->add_option(
          "--recompute", args->recompute,
          "with --memory: what the backward pass computes again, none, attention or layer (default: the "
          "train config's, or none)")
      ->check(CLI::IsMember({"none", "attention", "layer"}));
  add_device_option(*command, args->device);
  command->callback([args] { run_info(*args); });
}

}  // namespace zaya::cli
