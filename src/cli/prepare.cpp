// `zaya prepare --tokenizer T --input PATH... --output PREFIX [--val-fraction F]`: text to token datasets.

#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/output_guard.h"
#include "core/error.h"
#include "data/dataset_provenance.h"
#include "data/prepare.h"
#include "train/metrics.h"

namespace zaya::cli {
namespace {

void show_progress(const PrepareProgress& p, bool terminal, double& last_line) {
  const double mb = double(p.bytes_read) / 1e6, total = double(p.total_bytes) / 1e6;
  const double rate = p.seconds > 0 ? mb / p.seconds : 0;
  const double eta = rate > 0 ? (total - mb) / rate : 0;
  char line[256];
  std::snprintf(line, sizeof line,
                "prepare: %.1f / %.1f MB | %.1f MB/s | %lld documents | %.2fM tokens | ETA %s", mb, total,
                rate, (long long)p.documents, double(p.tokens) / 1e6, format_duration(eta).c_str());
  if (terminal) {
    std::printf("\r\033[K%s", line);
    std::fflush(stdout);
  } else if (p.seconds - last_line >= 10) {
    std::printf("%s\n", line);
    last_line = p.seconds;
  }
}

// The files of the dataset at `prefix`, which prepare writes: replaced without --force only where zaya wrote
// them (the dataset's record describes them as they are).
void check_dataset_output(const std::string& prefix, const std::vector<std::string>& inputs, bool force) {
  const bool ours = dataset_files_are_zayas(prefix);
  for (const std::string& file : {prefix + ".bin", prefix + ".idx", provenance_path(prefix)})
    check_output_file(file, "--output", inputs, force, ours);
}

void run_prepare(const PrepareOptions& options, bool force) {
  std::vector<std::string> inputs = options.inputs;
  inputs.push_back(options.tokenizer);
  check_dataset_output(options.output + "_train", inputs, force);
  if (options.val_fraction > 0) check_dataset_output(options.output + "_val", inputs, force);
  const bool terminal = ::isatty(STDOUT_FILENO) == 1;
  double last_line = -1e9;
  const PrepareReport r =
      prepare_dataset(options, [&](const PrepareProgress& p) { show_progress(p, terminal, last_line); });
  if (terminal) std::printf("\n");
  std::printf("wrote %s: %lld documents, %lld tokens", r.train_prefix.c_str(), (long long)r.train_documents,
              (long long)r.train_tokens);
  if (!r.val_prefix.empty()) {
    std::printf("; %s: %lld documents, %lld tokens", r.val_prefix.c_str(), (long long)r.val_documents,
                (long long)r.val_tokens);
  }
  std::printf(" (%.1f MB of text, %.2f bytes per token, %.1fs)\n", double(r.bytes) / 1e6,
              double(r.bytes) / double(std::max<int64_t>(1, r.train_tokens + r.val_tokens)), r.seconds);
}

}  // namespace

void add_prepare_command(CLI::App& app) {
  auto options = std::make_shared<PrepareOptions>();
  auto force = std::make_shared<bool>(false);
  CLI::App* command = app.add_subcommand("prepare", "tokenize text into Megatron indexed datasets");
  command->add_option("--tokenizer", options->tokenizer, "tokenizer.json")->required();
  command
      ->add_option("--input", options->inputs, "files or directories (.txt .rst .md .py .jsonl, .gz, .zst)")
      ->required();
  command->add_option("--output", options->output, "writes OUTPUT_train.{bin,idx} (and OUTPUT_val)")
      ->required();
  command->add_option("--val-fraction", options->val_fraction, "share of documents held out for validation");
  command->add_option("--text-field", options->text_field, "the JSON lines field holding the text");
  command->add_option("--eos-token", options->eos_token,
                      "the end-of-document token (default: the tokenizer's)");
  command->add_option("--seed", options->seed, "seed of the validation split");
  command->add_flag(
      "--force", *force,
      "replace datasets at --output that zaya did not write (or that changed since), or an input");
  command->callback([options, force] { run_prepare(*options, *force); });
}

}  // namespace zaya::cli
