#include "cli/model_source.h"

#include <CLI/CLI.hpp>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "model/model_dims.h"

namespace zaya::cli {

void ModelSource::add_options(CLI::App& command, bool allow_config, bool allow_model,
                              CLI::Option* alternative, const std::string& default_preset) {
  std::string names;
  for (const std::string& name : preset_names()) names += (names.empty() ? "" : ", ") + name;
  const std::string by_default = default_preset.empty() ? "" : " (default " + default_preset + ")";
  CLI::Option* preset_option = command.add_option("--preset", preset, "a named shape: " + names + by_default);
  std::vector<CLI::Option*> options = {preset_option};
  if (allow_config) options.push_back(command.add_option("--config", config_file, "a ZAYA config.json"));
  if (allow_model) options.push_back(command.add_option("--model", model_dir, "a model directory"));
  std::string model_names;
  for (CLI::Option* option : options) model_names += (model_names.empty() ? "" : ", ") + option->get_name();
  if (alternative) options.push_back(alternative);
  command.parse_complete_callback([this, &command, options, model_names, alternative, default_preset] {
    int given = 0;
    for (CLI::Option* option : options) given += option->count() > 0;
    if (given == 1) return;
    if (given == 0 && !default_preset.empty()) {
      preset = default_preset;
      return;
    }
    if (given == 0 && alternative) {
      throw CLI::ValidationError(command.get_name() + ": give a model (" + model_names + ") or " +
                                 alternative->get_name());
    }
    std::string all = model_names;
    if (alternative) all += ", " + alternative->get_name();
    throw CLI::ValidationError(command.get_name() + ": give exactly one of " + all);
  });
}

ZayaConfig ModelSource::config() const {
  if (!preset.empty()) return preset_config(preset);
  if (!config_file.empty()) return load_config(config_file);
  return load_config((std::filesystem::path(model_dir) / "config.json").string());
}

std::string ModelSource::describe() const {
  if (!preset.empty()) return "preset " + preset;
  if (!config_file.empty()) return "config " + config_file;
  return "model " + model_dir;
}

}  // namespace zaya::cli
