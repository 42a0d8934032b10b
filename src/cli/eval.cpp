// `zaya eval --model DIR --task FILE... --text FILE... --dataset PREFIX... [--json OUT]`: a model scored as
// the field scores models. Multiple-choice tasks by log-likelihood (accuracy, and accuracy with each choice's
// log-likelihood divided by its length in characters, lm-evaluation-harness's acc_norm); perplexity and bits
// per byte of text files and of the documents of Megatron datasets (zaya prepare's). A table on stdout;
// every number, per item too, in the JSON.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "backend/ops.h"
#include "cli/commands.h"
#include "cli/device_option.h"
#include "cli/model_with_tokenizer.h"
#include "cli/output_guard.h"
#include "cli/validators.h"
#include "core/error.h"
#include "data/indexed_dataset.h"
#include "eval/loglikelihood.h"
#include "eval/task_file.h"
#include "io/atomic_file.h"
#include "model/zaya_model.h"

namespace zaya::cli {
namespace {

using json = nlohmann::json;

struct EvalArgs {
  std::string model, tokenizer, json_out;
  std::string device, precision;
  std::vector<std::string> tasks, texts, datasets;
  int64_t limit = 0, max_length = 0;
  bool force = false;
};

// Characters of UTF-8 text (Python's len of the string).
int64_t characters(const std::string& text) {
  int64_t count = 0;
  for (unsigned char c : text) count += (c & 0xc0) != 0x80;
  return count;
}

int64_t argmax(const std::vector<double>& values) {
  return int64_t(std::max_element(values.begin(), values.end()) - values.begin());
}

json score_task(ZayaModel& model, const Tokenizer& tokenizer, const TaskFile& task, int32_t empty_context,
                int64_t max_length) {
  std::vector<LoglikelihoodRequest> requests;
  for (const ChoiceItem& item : task.items) {
    for (const std::string& choice : item.choices)
      requests.push_back(encode_pair(tokenizer, item.context, " " + choice, empty_context));
  }
  const std::vector<LoglikelihoodResult> scores = score_loglikelihoods(model, requests, max_length);
  json per_item = json::array();
  double correct = 0, correct_norm = 0;
  size_t next = 0;
  for (const ChoiceItem& item : task.items) {
    std::vector<double> loglikelihoods, normalised;
    for (const std::string& choice : item.choices) {
      loglikelihoods.push_back(scores[next++].loglikelihood);
      normalised.push_back(loglikelihoods.back() / double(std::max<int64_t>(1, characters(choice))));
    }
    const int64_t predicted = argmax(loglikelihoods), predicted_norm = argmax(normalised);
    correct += predicted == item.label;
    correct_norm += predicted_norm == item.label;
    per_item.push_back({{"choice_loglikelihoods", loglikelihoods},
                        {"predicted", predicted},
                        {"predicted_norm", predicted_norm},
                        {"label", item.label}});
  }
  const double items = double(task.items.size());
  return {{"file", task.path},      {"layout", layout_name(task.layout)}, {"items", task.items.size()},
          {"acc", correct / items}, {"acc_norm", correct_norm / items},   {"per_item", per_item}};
}

// Perplexity and bits per byte of texts (each scored on its own, after `prefix`), given as token lists and
// their lengths in bytes.
json perplexity(ZayaModel& model, const std::vector<std::vector<int32_t>>& texts, int64_t bytes,
                int32_t prefix, int64_t max_length) {
  std::vector<LoglikelihoodRequest> windows;
  int64_t tokens = 0;
  for (const std::vector<int32_t>& text : texts) {
    const std::vector<LoglikelihoodRequest> mine = rolling_windows(text, max_length, prefix);
    windows.insert(windows.end(), mine.begin(), mine.end());
    tokens += int64_t(text.size());
  }
  double loglikelihood = 0;
  for (const LoglikelihoodResult& window : score_loglikelihoods(model, windows, max_length))
    loglikelihood += window.loglikelihood;
  return {{"tokens", tokens},
          {"bytes", bytes},
          {"loglikelihood", loglikelihood},
          {"perplexity", std::exp(-loglikelihood / double(tokens))},
          {"bits_per_byte", -loglikelihood / (double(bytes) * std::log(2.0))}};
}

json score_text(ZayaModel& model, const Tokenizer& tokenizer, const std::string& path, int32_t prefix,
                int64_t max_length) {
  const std::string text = read_text_file(path);
  std::vector<int32_t> tokens;
  try {
    tokens = tokenizer.encode(text);
  } catch (Error& e) {
    throw Error(e.message()).file(path);
  }
  if (tokens.empty()) throw Error("holds no text to score").file(path);
  json scores = perplexity(model, {tokens}, int64_t(text.size()), prefix, max_length);
  scores["file"] = path;
  return scores;
}

// Every document of a dataset (or the first `limit`), each scored on its own; its bytes are those of its
// tokens decoded without special tokens.
json score_dataset(ZayaModel& model, const Tokenizer& tokenizer, const std::string& prefix_path,
                   int32_t prefix, int64_t max_length, int64_t limit) {
  const IndexedDataset dataset(prefix_path);
  const int64_t vocab = model.params().dims().vocab;
  const int64_t documents = limit > 0 ? std::min(limit, dataset.sequence_count()) : dataset.sequence_count();
  std::vector<std::vector<int32_t>> texts;
  int64_t bytes = 0;
  for (int64_t s = 0; s < documents; ++s) {
    std::vector<int32_t> tokens(size_t(dataset.sequence_length(s)));
    dataset.read(s, 0, int64_t(tokens.size()), tokens.data(), vocab);
    if (tokens.empty()) continue;
    bytes += int64_t(tokenizer.decode(tokens, true).size());
    texts.push_back(std::move(tokens));
  }
  if (texts.empty() || bytes == 0) throw Error("holds no text to score").file(prefix_path);
  json scores = perplexity(model, texts, bytes, prefix, max_length);
  scores["file"] = prefix_path;
  scores["documents"] = texts.size();
  return scores;
}

void run_eval(const EvalArgs& args) {
  if (args.tasks.empty() && args.texts.empty() && args.datasets.empty())
    throw Error("give at least one --task, --text or --dataset");
  if (!args.json_out.empty()) {
    std::vector<std::string> inputs = args.tasks;
    inputs.insert(inputs.end(), args.texts.begin(), args.texts.end());
    for (const std::string& prefix : args.datasets)
      inputs.insert(inputs.end(), {prefix + ".bin", prefix + ".idx"});
    check_output_file(args.json_out, "--json", inputs, args.force);
  }
  // Read every input before the model runs: a bad line in the last file fails at once.
  std::vector<TaskFile> tasks;
  for (const std::string& path : args.tasks) tasks.push_back(read_task_file(path, args.limit));
  ModelWithTokenizer loaded =
      load_model_with_tokenizer(args.model, args.tokenizer, args.device, args.precision, 4096);
  if (args.precision == "auto") std::fprintf(stderr, "zaya eval: %s\n", loaded.precision_description.c_str());
  const Tokenizer& tokenizer = loaded.tokenizer;
  const int64_t context = loaded.model.config.max_position_embeddings;
  if (args.max_length > context) {
    throw Error(cat("must be at most the model's context of ", context, " (max_position_embeddings), got ",
                    args.max_length))
        .field("--max-length");
  }
  const int64_t max_length = args.max_length > 0 ? args.max_length : context;
  // A text or context that is empty is read after the beginning-of-text token (or else end-of-text), as
  // lm-evaluation-harness does.
  const std::optional<int32_t> boundary = tokenizer.bos_id() ? tokenizer.bos_id() : tokenizer.eos_id();
  if (!boundary) {
    throw Error("has no end-of-text or beginning-of-text token to start a text with")
        .file(loaded.tokenizer_path);
  }
  ZayaModel model(loaded.params(), *loaded.device.ops, loaded.precision);

  json report = {{"model", args.model}, {"tasks", json::array()}, {"text", json::array()}};
  for (const TaskFile& task : tasks)
    report["tasks"].push_back(score_task(model, tokenizer, task, *boundary, max_length));
  for (const std::string& path : args.texts)
    report["text"].push_back(score_text(model, tokenizer, path, *boundary, max_length));
  for (const std::string& prefix : args.datasets)
    report["text"].push_back(score_dataset(model, tokenizer, prefix, *boundary, max_length, args.limit));

  if (!tasks.empty()) std::printf("%-40s %-9s %6s %8s %8s\n", "task", "layout", "items", "acc", "acc_norm");
  for (const json& task : report["tasks"]) {
    std::printf("%-40s %-9s %6lld %8.4f %8.4f\n", task["file"].get<std::string>().c_str(),
                task["layout"].get<std::string>().c_str(), (long long)task["items"].get<int64_t>(),
                task["acc"].get<double>(), task["acc_norm"].get<double>());
  }
  if (!report["text"].empty())
    std::printf("%-40s %9s %10s %10s %9s\n", "text", "tokens", "bytes", "perplexity", "bits/byte");
  for (const json& text : report["text"]) {
    std::printf("%-40s %9lld %10lld %10.4g %9.4f\n", text["file"].get<std::string>().c_str(),
                (long long)text["tokens"].get<int64_t>(), (long long)text["bytes"].get<int64_t>(),
                text["perplexity"].get<double>(), text["bits_per_byte"].get<double>());
  }
  if (!args.json_out.empty()) write_file_atomic(args.json_out, report.dump(1) + "\n");
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* command = app.add_subcommand("eval", "score a model on multiple-choice tasks and texts");
  command->add_option("--model", args->model, "a model directory (with its tokenizer.json)")->required();
  command->add_option("--task", args->tasks, "a task file (JSON lines: hellaswag, arc or mmlu layout)");
  command->add_option("--text", args->texts, "a text file: perplexity and bits per byte");
  command->add_option(
      "--dataset", args->datasets,
      "a Megatron dataset (PREFIX of .bin/.idx, as zaya prepare writes): perplexity and bits per "
      "byte of its documents");
  command->add_option("--tokenizer", args->tokenizer, "tokenizer.json (default: the model directory's)");
  command->add_option("--json", args->json_out, "write every score (per item too) to this JSON file");
  command
      ->add_option("--limit", args->limit,
                   "score the first N items of each task and documents of each dataset")
      ->check(positive());
  command
      ->add_option("--max-length", args->max_length,
                   "tokens the model reads at once (default: max_position_embeddings)")
      ->check(positive());
  command->add_flag("--force", args->force, "replace the file at --json, or write it over an input");
  add_device_option(*command, args->device);
  add_precision_option(*command, args->precision);
  command->callback([args] { run_eval(*args); });
}

}  // namespace zaya::cli
