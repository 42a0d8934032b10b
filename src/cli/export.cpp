// `zaya export --checkpoint PATH --out DIR [--dtype float32|bfloat16]`: a checkpoint (or a run directory,
// meaning its newest intact checkpoint) as a Hugging Face model directory with its tokenizer.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/output_guard.h"
#include "core/error.h"
#include "data/model_tokenizer_files.h"
#include "io/output_directory.h"
#include "model/model_io.h"
#include "train/checkpoint.h"

namespace zaya::cli {
namespace {

struct ExportArgs {
  std::string checkpoint, out, dtype = "float32";
  bool force = false;
};

void run_export(const ExportArgs& args) {
  namespace fs = std::filesystem;
  std::string source = args.checkpoint;
  if (fs::is_directory(fs::path(source) / "checkpoints")) {
    const CheckpointChoice choice = choose_checkpoint(source);
    if (choice.path.empty()) throw Error("the run has no intact checkpoint").file(args.checkpoint);
    std::printf("exporting %s: %s\n", choice.path.c_str(), choice.reason.c_str());
    source = choice.path;
  }
  refuse_input_as_output(args.out, "--out", {args.checkpoint, source}, args.force);
  verify_checkpoint(source);
  // --out is checked before the model is read: the files it will hold follow from the configuration.
  const SaveOptions save{args.dtype};
  const fs::path tokenizer = fs::path(source) / "tokenizer.json";
  OutputDirectory out(args.out, "--out", args.force,
                      model_directory_files(load_config((fs::path(source) / "config.json").string()), save,
                                            fs::exists(tokenizer)));
  const LoadedModel model = load_model(source);
  save_model(model.config, *model.params, out.staging(), save);
  if (fs::exists(tokenizer))
    write_model_tokenizer(out.staging(), tokenizer.string(), model.config.max_position_embeddings);
  out.publish();
  std::printf("exported %s to %s (%s)\n", source.c_str(), args.out.c_str(), args.dtype.c_str());
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* command = app.add_subcommand("export", "write a checkpoint as a Hugging Face model directory");
  command
      ->add_option("--checkpoint", args->checkpoint,
                   "a checkpoint directory, or a run directory (its newest)")
      ->required();
  command->add_option("--out", args->out, "the model directory to write")->required();
  command->add_flag("--force", args->force,
                    "write into --out though it holds files zaya did not write (replacing only zaya's)");
  command->add_option("--dtype", args->dtype, "weight dtype")->check(CLI::IsMember({"float32", "bfloat16"}));
  command->callback([args] { run_export(*args); });
}

}  // namespace zaya::cli
