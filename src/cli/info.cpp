// `zaya info (--model DIR | --preset NAME | --config FILE) [--seq S]`: the shape, parameter counts and
// training FLOPs per token of a model.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "cli/validators.h"
#include "core/error.h"
#include "model/model_stats.h"
#include "train/train_config.h"

namespace zaya::cli {
namespace {

struct InfoArgs {
  ModelSource source;
  std::string train_config;
  int64_t seq = 4096;
};

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
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto args = std::make_shared<InfoArgs>();
  CLI::App* command = app.add_subcommand("info", "parameter counts and FLOPs per token of a model");
  CLI::Option* train_config =
      command->add_option("--train-config", args->train_config, "a run's TOML file: its model and stages");
  args->source.add_options(*command, true, true, train_config);
  command->add_option("--seq", args->seq, "sequence length for the attention FLOPs")->check(positive());
  command->callback([args] { run_info(*args); });
}

}  // namespace zaya::cli
