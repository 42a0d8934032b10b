#pragma once
// The devices a command can run on: the CPU always, and a GPU where this program was built with a GPU
// backend (which the program registers at start: src/cli/main.cpp; the GPU tests register the emulator) and
// the machine has one. Library code asks here, so that it never depends on a GPU library itself.

#include <string>

namespace zaya {

class Ops;

// A GPU backend this program can use.
struct GpuBackend {
  const char* language = nullptr;  // "cuda", "hip" or "emulated" (the tests' CPU emulator)
  Ops& (*ops)() = nullptr;         // made on first use
  int (*device_count)() = nullptr;
  std::string (*device_name)() = nullptr;
};

void register_gpu_backend(const GpuBackend& backend);

struct Device {
  std::string name;         // "cpu", or the GPU backend's language
  std::string description;  // for the run's log: "cpu", "cuda: NVIDIA H200"
  Ops* ops = nullptr;
  bool on_host() const { return name == "cpu"; }
};

// "cpu", a GPU language ("cuda", "hip", "emulated") or "auto" (the GPU where this program has a backend and
// the machine a device, else the CPU). Throws Error naming `field` when the device asked for is not here.
Device select_device(const std::string& setting, const char* field);

// Whether `setting` can name a device at all (a config is checked before anything runs). Inline: the
// config's parser uses it without the backends.
inline bool is_device_name(const std::string& setting) {
  return setting == "auto" || setting == "cpu" || setting == "cuda" || setting == "hip" ||
         setting == "emulated";
}

}  // namespace zaya
