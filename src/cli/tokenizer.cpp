// `zaya tokenizer train | encode | decode | bench`: train a byte-level BPE tokenizer.json, turn text into ids
// and back with any supported tokenizer.json, and measure encoding throughput.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/output_guard.h"
#include "cli/validators.h"
#include "core/error.h"
#include "core/threads.h"
#include "io/atomic_file.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace zaya::cli {
namespace {

namespace fs = std::filesystem;

// Files of a directory given to `train`, searched recursively.
constexpr const char* kTextExtensions[] = {".txt", ".rst", ".md", ".py"};

struct TrainArgs {
  std::vector<std::string> inputs;
  std::string output;
  BpeTrainOptions options;
  bool force = false;
};

struct EncodeArgs {
  std::string tokenizer, text, file;
  bool json = false;
};

struct DecodeArgs {
  std::string tokenizer;
  std::vector<int32_t> ids;
  bool skip_special = false;
};

struct BenchArgs {
  std::string tokenizer, file;
  int64_t document_bytes = 4096;
  int repeat = 3;
  bool json = false;
};

// The files named, with directories replaced by their text files (sorted, so the order is reproducible).
std::vector<std::string> collect_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code error;
    if (!fs::is_directory(input, error)) {
      if (!fs::exists(input, error)) throw Error("no such file or directory").file(input);
      files.push_back(input);
      continue;
    }
    std::vector<std::string> found;
    std::string last = input;  // a failed step names the entry it failed past
    for (fs::recursive_directory_iterator it(input, error), end; !error && it != end; it.increment(error)) {
      last = it->path().string();
      if (!it->is_regular_file(error)) continue;
      const std::string extension = it->path().extension().string();
      if (std::find(std::begin(kTextExtensions), std::end(kTextExtensions), extension) !=
          std::end(kTextExtensions)) {
        found.push_back(it->path().string());
      }
    }
    if (error) throw Error(cat("cannot list: ", error.message())).file(last);
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  if (files.empty()) throw Error("no input files (directories are searched for *.txt, *.rst, *.md, *.py)");
  return files;
}

void run_train(const TrainArgs& args) {
  const std::vector<std::string> files = collect_files(args.inputs);
  check_output_file(args.output, "--output", files, args.force);
  const auto start = std::chrono::steady_clock::now();
  const BpeTrainSummary summary = train_byte_level_bpe(files, args.options, args.output);
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  std::printf(
      "%s: %lld tokens (%zu special, 256 bytes, %lld merges) from %.1f MB in %zu files, %lld distinct "
      "pre-tokens, %.1f s on %d threads\n",
      args.output.c_str(), (long long)summary.vocab_size, args.options.special_tokens.size(),
      (long long)summary.merges, double(summary.bytes) / 1e6, files.size(), (long long)summary.distinct_words,
      elapsed.count(), num_threads());
}

// The text of a file, checked to be UTF-8 so that an error names its line.
std::string read_utf8(const std::string& path) {
  std::string text = read_text_file(path);
  if (const size_t bad = unicode::find_invalid_utf8(text); bad != unicode::npos) {
    const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<long>(bad), '\n');
    throw Error(cat("invalid UTF-8 at line ", line, " (byte ", bad, ")")).file(path);
  }
  return text;
}

void run_encode(const EncodeArgs& args) {
  const Tokenizer tokenizer = Tokenizer::load(args.tokenizer);
  const std::vector<int32_t> ids = tokenizer.encode(args.file.empty() ? args.text : read_utf8(args.file));
  if (args.json) {
    std::printf("%s\n", nlohmann::json(ids).dump().c_str());
    return;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
}

void run_decode(const DecodeArgs& args) {
  const Tokenizer tokenizer = Tokenizer::load(args.tokenizer);
  const std::string text = tokenizer.decode(args.ids, args.skip_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::printf("\n");
}

// Documents of whole lines of at most `limit` bytes (a longer line is a document of its own).
std::vector<std::string_view> documents(std::string_view text, size_t limit) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = start;
    while (end < text.size()) {
      size_t line_end = text.find('\n', end);
      line_end = line_end == std::string_view::npos ? text.size() : line_end + 1;
      if (end > start && line_end - start > limit) break;
      end = line_end;
    }
    out.push_back(text.substr(start, end - start));
    start = end;
  }
  return out;
}

void run_bench(const BenchArgs& args) {
  const Tokenizer tokenizer = Tokenizer::load(args.tokenizer);
  const std::string text = read_utf8(args.file);
  const std::vector<std::string_view> docs = documents(text, static_cast<size_t>(args.document_bytes));
  int64_t tokens = 0;
  for (const auto& ids : tokenizer.encode_batch(docs)) tokens += static_cast<int64_t>(ids.size());  // warm-up
  std::vector<double> seconds;
  for (int r = 0; r < args.repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    const auto encoded = tokenizer.encode_batch(docs);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  const int threads = num_threads();
  const double mb_per_second = double(text.size()) / 1e6 / median;
  if (args.json) {
    const nlohmann::json out = {{"tokenizer", args.tokenizer},
                                {"file", args.file},
                                {"bytes", text.size()},
                                {"documents", docs.size()},
                                {"tokens", tokens},
                                {"threads", threads},
                                {"seconds", median},
                                {"mb_per_second", mb_per_second},
                                {"mb_per_second_per_thread", mb_per_second / threads}};
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf("%s: %.2f MB in %zu documents -> %lld tokens (%.2f bytes/token)\n", args.file.c_str(),
              double(text.size()) / 1e6, docs.size(), (long long)tokens,
              double(text.size()) / double(tokens));
  std::printf("encode: %.3f s (median of %d), %.2f MB/s total, %.2f MB/s per thread on %d threads\n", median,
              args.repeat, mb_per_second, mb_per_second / threads, threads);
}

}  // namespace

void add_tokenizer_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand("tokenizer", "train, apply and measure tokenizers (tokenizer.json)");
  command->require_subcommand(1);

  auto train = std::make_shared<TrainArgs>();
  CLI::App* train_cmd = command->add_subcommand(
      "train", "train a byte-level BPE tokenizer.json (GPT-2 pre-tokenizer) from text files");
  train_cmd
      ->add_option("--input", train->inputs,
                   "text files, or directories searched recursively for *.txt, *.rst, *.md and *.py")
      ->required();
  train_cmd->add_option("--output", train->output, "tokenizer.json to write")->required();
  train_cmd->add_flag("--force", train->force, "replace the file at --output, or write it over an input");
  train_cmd->add_option("--vocab-size", train->options.vocab_size, "special tokens + 256 bytes + merges")
      ->default_val(train->options.vocab_size);
  train_cmd->add_option("--special", train->options.special_tokens, "special tokens, ids 0.. in this order")
      ->default_str("<pad> <bos> <eos> <unk>");
  train_cmd->add_option("--min-frequency", train->options.min_frequency, "least count of a pair to merge")
      ->default_val(train->options.min_frequency)
      ->check(positive());
  train_cmd->callback([train] { run_train(*train); });

  auto encode = std::make_shared<EncodeArgs>();
  CLI::App* encode_cmd = command->add_subcommand("encode", "print the ids of a text");
  encode_cmd->add_option("--tokenizer", encode->tokenizer, "tokenizer.json")->required();
  CLI::Option* text = encode_cmd->add_option("--text", encode->text, "the text");
  CLI::Option* file = encode_cmd->add_option("--file", encode->file, "a UTF-8 file, encoded as one text");
  text->excludes(file);
  encode_cmd->add_flag("--json", encode->json, "print a JSON array");
  encode_cmd->callback([encode, text, file] {
    if (text->count() + file->count() != 1) throw CLI::ValidationError("encode", "give --text or --file");
    run_encode(*encode);
  });

  auto decode = std::make_shared<DecodeArgs>();
  CLI::App* decode_cmd = command->add_subcommand("decode", "print the text of ids");
  decode_cmd->add_option("--tokenizer", decode->tokenizer, "tokenizer.json")->required();
  decode_cmd->add_option("ids", decode->ids, "token ids")->required();
  decode_cmd->add_flag("--skip-special", decode->skip_special, "leave out special tokens");
  decode_cmd->callback([decode] { run_decode(*decode); });

  auto bench = std::make_shared<BenchArgs>();
  CLI::App* bench_cmd = command->add_subcommand(
      "bench", "encode throughput over a file cut into documents of whole lines, on all threads");
  bench_cmd->add_option("--tokenizer", bench->tokenizer, "tokenizer.json")->required();
  bench_cmd->add_option("--file", bench->file, "a UTF-8 text file")->required();
  bench_cmd->add_option("--document-bytes", bench->document_bytes, "largest document (whole lines)")
      ->default_val(bench->document_bytes)
      ->check(positive());
  bench_cmd->add_option("--repeat", bench->repeat, "timed passes after one warm-up pass (median reported)")
      ->default_val(bench->repeat)
      ->check(positive());
  bench_cmd->add_flag("--json", bench->json, "print one JSON line");
  bench_cmd->callback([bench] { run_bench(*bench); });
}

}  // namespace zaya::cli
