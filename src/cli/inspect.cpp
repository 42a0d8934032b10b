// `zaya inspect PATH`: what a safetensors file or a model directory holds, read with the same validating
// readers the trainer uses.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "io/hf_config.h"
#include "io/safetensors_index.h"

namespace zaya::cli {
namespace {

void print_tensor(const SafetensorsEntry& entry) {
  std::printf("  %-72s %-6s %s\n", entry.name.c_str(), std::string(dtype_name(entry.dtype)).c_str(),
              entry.shape.to_string().c_str());
}

void inspect(const std::string& path) {
  namespace fs = std::filesystem;
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
      app.add_subcommand("inspect", "list the tensors of a safetensors file or model directory");
  command->add_option("path", *path, "a .safetensors file or a model directory")->required();
  command->callback([path] { inspect(*path); });
}

}  // namespace zaya::cli
