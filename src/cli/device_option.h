#pragma once
// The --device flag of every command that runs a model, and what some of them run that only the CPU
// backend has yet.

#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace zaya::cli {

// Adds --device into `setting`: auto (the default: a GPU where there is one), cpu, cuda or hip, which the
// command hands to select_device.
void add_device_option(CLI::App& command, std::string& setting);

// What generate, eval, serve and bench decode run and the GPU backend lacks yet (select_device's
// host_only_work): ZayaModel's decoding keeps its caches in host memory and the scoring reads logits there.
inline constexpr const char* kDecodingAndScoring =
    "decoding and scoring (their caches and logits are host memory)";

}  // namespace zaya::cli
