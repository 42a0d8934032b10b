// `zaya info (--model DIR | --preset NAME | --config FILE) [--seq S]`: the shape, parameter counts and
// training FLOPs per token of a model.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "model/model_stats.h"

namespace zaya::cli {
namespace {

struct InfoArgs {
  ModelSource source;
  int64_t seq = 4096;
};

void print_count(const char* label, int64_t count) {
  std::printf("  %-34s %15lld  (%.3f B)\n", label, (long long)count, double(count) / 1e9);
}

void run_info(const InfoArgs& args) {
  const ZayaConfig config = args.source.config();
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
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto args = std::make_shared<InfoArgs>();
  CLI::App* command = app.add_subcommand("info", "parameter counts and FLOPs per token of a model");
  args->source.add_options(*command, true, true);
  command->add_option("--seq", args->seq, "sequence length for the attention FLOPs")
      ->check(CLI::PositiveNumber);
  command->callback([args] { run_info(*args); });
}

}  // namespace zaya::cli
