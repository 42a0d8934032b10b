// `zaya inspect PATH`: what a safetensors file or a model directory holds, read with the same validating
// readers the trainer uses.

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "data/indexed_dataset.h"
#include "io/hf_config.h"
#include "io/safetensors_index.h"

namespace zaya::cli {
namespace {

void print_tensor(const SafetensorsEntry& entry) {
  std::printf("  %-72s %-6s %s\n", entry.name.c_str(), std::string(dtype_name(entry.dtype)).c_str(),
              entry.shape.to_string().c_str());
}

// A token dataset: its size and the unigram entropy of its tokens, the loss of the best model that ignores
// context (the baseline a trained model must beat).
void inspect_dataset(const std::string& prefix) {
  const IndexedDataset data(prefix);
  std::vector<int64_t> counts;
  std::vector<int32_t> tokens;
  for (int64_t s = 0; s < data.sequence_count(); ++s) {
    tokens.resize(size_t(data.sequence_length(s)));
    data.read(s, 0, data.sequence_length(s), tokens.data());
    for (int32_t token : tokens) {
      if (size_t(token) >= counts.size()) counts.resize(size_t(token) + 1, 0);
      ++counts[size_t(token)];
    }
  }
  double entropy = 0;
  int64_t distinct = 0;
  for (int64_t count : counts) {
    if (count == 0) continue;
    ++distinct;
    const double p = double(count) / double(data.total_tokens());
    entropy -= p * std::log(p);
  }
  std::printf("%s: %lld documents, %lld sequences, %lld tokens (%s), %lld distinct token ids\n",
              prefix.c_str(), (long long)data.document_count(), (long long)data.sequence_count(),
              (long long)data.total_tokens(), data.dtype() == TokenDType::UInt16 ? "uint16" : "int32",
              (long long)distinct);
  std::printf("unigram entropy: %.4f nats = %.4f bits per token\n", entropy, entropy / std::log(2.0));
}

void inspect(const std::string& path) {
  namespace fs = std::filesystem;
  for (const char* suffix : {".idx", ".bin"}) {
    if (path.size() > 4 && path.ends_with(suffix)) return inspect_dataset(path.substr(0, path.size() - 4));
  }
  if (fs::exists(path + ".idx")) return inspect_dataset(path);
  if (!fs::is_directory(path)) {
    const SafetensorsFile file(path);
    std::printf("%s: %zu tensors\n", path.c_str(), file.entries().size());
    for (const auto& [key, value] : file.metadata())
      std::printf("  metadata %s = %s\n", key.c_str(), value.c_str());
    for (const SafetensorsEntry& entry : file.entries()) print_tensor(entry);
    return;
  }
  const ZayaConfig config = load_config((fs::path(path) / "config.json").string());
  std::printf("%s: zaya, %lld layers, hidden %lld, %lld experts, vocab %lld\n", path.c_str(),
              (long long)config.num_hidden_layers, (long long)config.hidden_size,
              (long long)config.num_experts, (long long)config.vocab_size);
  const WeightSet weights(path);
  for (const std::string& name : weights.names()) print_tensor(*weights.find(name).entry);
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* command =
      app.add_subcommand("inspect", "what a safetensors file, model directory or token dataset holds");
  command
      ->add_option("path", *path,
                   "a .safetensors file, a model directory, or a dataset prefix (or its .idx / .bin)")
      ->required();
  command->callback([path] { inspect(*path); });
}

}  // namespace zaya::cli
