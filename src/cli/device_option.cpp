#include "cli/device_option.h"

#include <CLI/CLI.hpp>

namespace zaya::cli {

void add_device_option(CLI::App& command, std::string& setting) {
  setting = "auto";
  command.add_option("--device", setting, "auto (a GPU where there is one, the default), cpu, cuda or hip");
}

}  // namespace zaya::cli
