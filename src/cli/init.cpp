// `zaya init (--config FILE | --preset NAME) --out DIR [--tokenizer FILE] [--seed S] [--dtype ...]`: a
// randomly initialised model directory, initialised as transformers' _init_weights does; with a tokenizer,
// its special tokens' ids go into config.json and the tokenizer files beside the weights.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/model_source.h"
#include "cli/output_guard.h"
#include "core/error.h"
#include "data/model_tokenizer_files.h"
#include "io/output_directory.h"
#include "model/model_io.h"
#include "tokenizer/tokenizer.h"

namespace zaya::cli {
namespace {

struct InitArgs {
  ModelSource source;
  std::string out, tokenizer, dtype = "float32";
  uint64_t seed = 0;
  bool force = false;
};

void run_init(const InitArgs& args) {
  refuse_input_as_output(args.out, "--out", {args.source.config_file, args.source.model_dir, args.tokenizer},
                         args.force);
  ZayaConfig config = args.source.config();
  if (!args.tokenizer.empty()) {
    const Tokenizer tokenizer = Tokenizer::load(args.tokenizer);
    if (tokenizer.vocab_size() > config.vocab_size) {
      throw Error(cat("has ", tokenizer.vocab_size(), " tokens, more than the model's vocab_size of ",
                      config.vocab_size))
          .file(args.tokenizer);
    }
    config.pad_token_id = tokenizer.pad_id();
    config.bos_token_id = tokenizer.bos_id();
    config.eos_token_id.clear();
    if (tokenizer.eos_id()) config.eos_token_id.push_back(*tokenizer.eos_id());
  }
  const SaveOptions save{args.dtype};
  OutputDirectory out(args.out, "--out", args.force,
                      model_directory_files(config, save, !args.tokenizer.empty()));
  ParameterStore params(model_dims(config));
  init_parameters(params, config.initializer_range, args.seed);
  save_model(config, params, out.staging(), save);
  if (!args.tokenizer.empty())
    write_model_tokenizer(out.staging(), args.tokenizer, config.max_position_embeddings);
  out.publish();
  std::printf("initialised %s (seed %llu) into %s\n", args.source.describe().c_str(),
              (unsigned long long)args.seed, args.out.c_str());
}

}  // namespace

void add_init_command(CLI::App& app) {
  auto args = std::make_shared<InitArgs>();
  CLI::App* command = app.add_subcommand("init", "write a randomly initialised model directory");
  args->source.add_options(*command, true, false);
  command->add_option("--out", args->out, "the model directory to write")->required();
  command->add_option(
      "--tokenizer", args->tokenizer,
      "tokenizer.json to write beside the weights (its special tokens' ids go into config.json)");
  command->add_option("--seed", args->seed, "random seed");
  command->add_option("--dtype", args->dtype, "weight dtype on disk")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  command->add_flag("--force", args->force,
                    "write into --out though it holds files zaya did not write (replacing only zaya's)");
  command->callback([args] { run_init(*args); });
}

}  // namespace zaya::cli
