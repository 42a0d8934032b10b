// `zaya generate --model DIR --prompt TEXT [--max-new-tokens N --temperature T --top-p P --seed S]`: text
// from a model directory, streamed as it is produced.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "backend/ops.h"
#include "cli/commands.h"
#include "cli/validators.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "infer/generator.h"
#include "model/model_io.h"
#include "model/zaya_model.h"

namespace zaya::cli {
namespace {

struct GenerateArgs {
  std::string model, prompt, tokenizer;
  SamplingOptions sampling;
};

void run_generate(const GenerateArgs& args) {
  const std::string tokenizer_path = args.tokenizer.empty()
                                         ? (std::filesystem::path(args.model) / "tokenizer.json").string()
                                         : args.tokenizer;
  const Tokenizer tokenizer = Tokenizer::load(tokenizer_path);
  LoadedModel loaded = load_model(args.model);
  if (tokenizer.vocab_size() > loaded.params->dims().vocab) {
    throw Error(
        cat("has ", tokenizer.vocab_size(), " tokens, more than the model's ", loaded.params->dims().vocab))
        .file(tokenizer_path);
  }
  ZayaModel model(*loaded.params, cpu_ops());
  SamplingOptions options = args.sampling;
  options.stop_token = tokenizer.eos_id();
  std::vector<int32_t> produced;
  size_t printed = 0;
  const std::vector<int32_t> prompt = tokenizer.encode(args.prompt);
  const int64_t context = loaded.config.max_position_embeddings;
  if (options.max_new_tokens > context - int64_t(prompt.size())) {
    throw Error(cat("the prompt's ", prompt.size(), " tokens and ", options.max_new_tokens,
                    " new ones are more than the model's context of ", context, " (max_position_embeddings)"))
        .field("--max-new-tokens");
  }
  std::printf("%s", args.prompt.c_str());
  generate(model, prompt, options, [&](int32_t id) {
    if (options.stop_token && id == *options.stop_token) return;
    // Decode everything so far and print what is new: a character may take several tokens.
    produced.push_back(id);
    const std::string text = tokenizer.decode(produced, true);
    if (text.size() > printed && (text.back() & 0xc0) != 0x80) {
      std::printf("%s", text.c_str() + printed);
      std::fflush(stdout);
      printed = text.size();
    }
  });
  std::printf("\n");
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* command = app.add_subcommand("generate", "generate text from a model directory");
  command->add_option("--model", args->model, "a model directory (with its tokenizer.json)")->required();
  command->add_option("--prompt", args->prompt, "the text to continue")->required();
  command->add_option("--tokenizer", args->tokenizer, "tokenizer.json (default: the model directory's)");
  command->add_option("--max-new-tokens", args->sampling.max_new_tokens, "tokens to generate")
      ->check(non_negative());
  command->add_option("--temperature", args->sampling.temperature, "0: greedy")->check(non_negative());
  command->add_option("--top-p", args->sampling.top_p, "nucleus sampling mass")->check(CLI::Range(1e-6, 1.0));
  command->add_option("--seed", args->sampling.seed, "random seed");
  command->callback([args] { run_generate(*args); });
}

}  // namespace zaya::cli
