// `zaya generate --model DIR --prompt TEXT [--max-new-tokens N --temperature T --top-p P --top-k K --seed
// S]`: text from a model directory, streamed as it is produced.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "backend/ops.h"
#include "cli/commands.h"
#include "cli/device_option.h"
#include "cli/model_with_tokenizer.h"
#include "cli/validators.h"
#include "core/error.h"
#include "infer/generator.h"
#include "model/zaya_model.h"
#include "tokenizer/tokenizer.h"

namespace zaya::cli {
namespace {

struct GenerateArgs {
  std::string model, prompt, tokenizer;
  std::string device, precision;
  SamplingOptions sampling;
};

void run_generate(const GenerateArgs& args) {
  ModelWithTokenizer loaded =
      load_model_with_tokenizer(args.model, args.tokenizer, args.device, args.precision, 1);
  if (args.precision == "auto")
    std::fprintf(stderr, "zaya generate: %s\n", loaded.precision_description.c_str());
  const Tokenizer& tokenizer = loaded.tokenizer;
  ZayaModel model(loaded.params(), *loaded.device.ops, loaded.precision);
  SamplingOptions options = args.sampling;
  options.stop_token = tokenizer.eos_id();
  std::vector<int32_t> produced;
  size_t printed = 0;
  const std::vector<int32_t> prompt = tokenizer.encode(args.prompt);
  const int64_t context = loaded.model.config.max_position_embeddings;
  // A prompt that leaves no room is the prompt's fault, whatever --max-new-tokens says.
  if (int64_t(prompt.size()) >= context) {
    throw Error(cat("the prompt is ", prompt.size(), " tokens; the model's context of ", context,
                    " (max_position_embeddings) leaves no room for a new one"))
        .field("--prompt");
  }
  if (options.max_new_tokens > context - int64_t(prompt.size())) {
    throw Error(cat("the prompt's ", prompt.size(), " tokens and ", options.max_new_tokens,
                    " new ones are more than the model's context of ", context, " (max_position_embeddings)"))
        .field("--max-new-tokens");
  }
  std::printf("%s", args.prompt.c_str());
  generate(model, prompt, options, [&](int32_t id) {
    if (options.stop_token && id == *options.stop_token) return;
    // Decode everything so far and print what is new and settled: a character may take several tokens.
    produced.push_back(id);
    const std::string text = tokenizer.decode(produced, true);
    const size_t settled = Tokenizer::settled_length(text);
    if (settled > printed) {
      std::printf("%.*s", int(settled - printed), text.c_str() + printed);
      std::fflush(stdout);
      printed = settled;
    }
  });
  const std::string text = tokenizer.decode(produced, true);  // with a character the budget left unfinished
  std::printf("%s\n", text.substr(std::min(printed, text.size())).c_str());
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
  command->add_option("--top-k", args->sampling.top_k, "sample from the k most likely tokens (0: all)")
      ->check(non_negative());
  command->add_option("--seed", args->sampling.seed, "random seed");
  add_device_option(*command, args->device);
  add_precision_option(*command, args->precision);
  command->callback([args] { run_generate(*args); });
}

}  // namespace zaya::cli
