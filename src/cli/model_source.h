#pragma once
// Where a command gets its model shape from: a named preset, a config.json file, or a model directory.

#include <string>

#include "io/hf_config.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace zaya::cli {

struct ModelSource {
  std::string preset, config_file, model_dir;

  // Adds --preset and, when asked, --config and --model, exactly one of which must be given, or none where
  // there is a `default_preset`; `alternative`, another option of the command that can name the model
  // instead, counts as one of them.
  void add_options(CLI::App& command, bool allow_config, bool allow_model, CLI::Option* alternative = nullptr,
                   const std::string& default_preset = "");
  ZayaConfig config() const;
  std::string describe() const;  // "preset small", "model runs/x", ...
};

}  // namespace zaya::cli
