// `zaya train CONFIG.toml --run-dir DIR [--set section.key=value ...] [--print-param-groups]`: the main job.
// Resumes by itself when DIR holds a checkpoint. SIGINT and SIGTERM finish the step, write a checkpoint and
// exit 0; too many non-finite steps in a row exit 3.

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "optim/param_groups.h"
#include "train/trainer.h"

namespace zaya::cli {
namespace {

std::atomic<bool> stop_requested{false};

extern "C" void request_stop(int) {
  stop_requested.store(true);
}

struct TrainArgs {
  std::string config, run_dir;
  std::vector<std::string> overrides;
  bool print_param_groups = false;
};

void run_train(const TrainArgs& args) {
  const TrainConfig config = load_train_config(args.config, args.overrides);
  if (args.print_param_groups) {
    const Tokenizer tokenizer = Tokenizer::load(config.data.tokenizer);
    const ZayaConfig model = resolve_model_config(config, tokenizer.vocab_size(), tokenizer.pad_id(),
                                                  tokenizer.bos_id(), tokenizer.eos_id());
    std::printf("%s", describe_param_groups(
                          assign_param_groups(ParameterTable(model_dims(model)), config.optimizer.groups))
                          .c_str());
    return;
  }
  if (args.run_dir.empty()) throw Error("is required to train").field("--run-dir");
  std::signal(SIGINT, request_stop);
  std::signal(SIGTERM, request_stop);
  const TrainResult result = run_training(config, args.run_dir, stop_requested);
  if (result.outcome == TrainOutcome::Diverged) std::exit(3);
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* command =
      app.add_subcommand("train", "train a model from a TOML run configuration (resumes by itself)");
  command->add_option("config", args->config, "the run's TOML file (see docs/CONFIG.md)")->required();
  command->add_option("--run-dir", args->run_dir, "where checkpoints, metrics and TensorBoard files go");
  command->add_option("--set", args->overrides, "override a key: section.key=value (repeatable)");
  command->add_flag("--print-param-groups", args->print_param_groups,
                    "print which optimizer each parameter gets, and exit");
  command->callback([args] { run_train(*args); });
}

}  // namespace zaya::cli
