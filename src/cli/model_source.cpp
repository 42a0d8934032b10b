#include "cli/model_source.h"

#include <CLI/CLI.hpp>
#include <array>
#include <filesystem>

#include "core/error.h"
#include "model/model_dims.h"

namespace zaya::cli {

void ModelSource::add_options(CLI::App& command, bool allow_config, bool allow_model, bool optional) {
  std::string names;
  for (const std::string& name : preset_names()) names += (names.empty() ? "" : ", ") + name;
  CLI::Option* preset_option = command.add_option("--preset", preset, "a named shape: " + names);
  CLI::Option* config_option = nullptr;
  CLI::Option* model_option = nullptr;
  if (allow_config) {
    config_option =
        command.add_option("--config", config_file, "a ZAYA config.json")->excludes(preset_option);
  }
  if (allow_model) {
    model_option = command.add_option("--model", model_dir, "a model directory")->excludes(preset_option);
    if (config_option) model_option->excludes(config_option);
  }
  const std::array<CLI::Option*, 3> options = {preset_option, config_option, model_option};
  command.parse_complete_callback([&command, options, optional] {
    int given = 0;
    for (CLI::Option* option : options) given += option && option->count() > 0;
    if (given > 1 || (given == 0 && !optional)) {
      std::string which = "--preset";
      if (options[1]) which += ", --config";
      if (options[2]) which += ", --model";
      throw CLI::ValidationError(command.get_name() + ": give exactly one of " + which);
    }
    if (given == 0 && optional && command.get_option("--train-config")->count() == 0) {
      throw CLI::ValidationError(command.get_name() +
                                 ": give a model (--preset, --config, --model) or --train-config");
    }
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
