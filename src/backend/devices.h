#pragma once
// The devices a command can run on: the CPU always, and a GPU where this program was built with a GPU
// backend (which the program registers at start: src/cli/main.cpp) and the machine has one. This is the one
// door to a device: every command and the trainer ask select_device, so library code never depends on a
// GPU library itself.

#include <cstdint>
#include <string>

namespace zaya {

class Ops;

// A GPU backend this program can use.
struct GpuBackend {
  const char* language = nullptr;  // "cuda", "hip" or "emulated" (the tests' CPU emulator)
  Ops& (*ops)() = nullptr;         // made on first use
  int (*device_count)() = nullptr;
  std::string (*device_name)() = nullptr;
  int64_t (*memory_bytes)() = nullptr;  // of this process's device
};

// The backend select_device offers; registering an empty GpuBackend (no language) takes it away.
void register_gpu_backend(const GpuBackend& backend);

struct Device {
  std::string name;         // "cpu", or the GPU backend's language
  std::string description;  // for the run's log: "cpu", "cuda: NVIDIA H200"
  Ops* ops = nullptr;
  int64_t memory_bytes = 0;  // what it holds: the machine's RAM for the CPU, the GPU's own memory
  bool on_host() const { return name == "cpu"; }
};

// "cpu", a GPU language ("cuda", "hip", "emulated") or "auto" (the GPU where this program has a backend and
// the machine a device, else the CPU). Throws Error naming `field` when the device asked for is not here.
// `host_only_work`, when given, names what the command runs that only the CPU backend has yet (say,
// "incremental decoding"): "auto" then takes the CPU, and a GPU asked for by name is refused with an
// error naming that work, never quietly replaced by the CPU.
Device select_device(const std::string& setting, const char* field, const char* host_only_work = nullptr);

// Whether `setting` can name a device at all (a config is checked before anything runs). Inline: the
// config's parser uses it without the backends.
inline bool is_device_name(const std::string& setting) {
  return setting == "auto" || setting == "cpu" || setting == "cuda" || setting == "hip" ||
         setting == "emulated";
}

}  // namespace zaya
