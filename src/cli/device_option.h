#pragma once
// The --device flag of every command that runs a model.

#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace zaya::cli {

// Adds --device into `setting`: auto (the default: a GPU where there is one), cpu, cuda or hip, which the
// command hands to select_device.
void add_device_option(CLI::App& command, std::string& setting);

}  // namespace zaya::cli
