#pragma once
// The devices a command can run on: the CPU always, and a GPU where this program was built with a GPU
// backend (which the program registers at start: src/cli/main.cpp) and the machine has one. This is the one
// door to a device: every command and the trainer ask select_device, so library code never depends on a
// GPU library itself.

#include <cstdint>
#include <memory>
#include <string>

namespace zaya {

class Communicator;
class DeviceCommunicator;
class Ops;

// A GPU backend this program can use.
struct GpuBackend {
  const char* language = nullptr;  // "cuda", "hip" or "emulated" (the tests' CPU emulator)
  Ops& (*ops)() = nullptr;         // made on first use
  int (*device_count)() = nullptr;
  std::string (*device_name)() = nullptr;
  int64_t (*memory_bytes)() = nullptr;      // of this process's device
  void (*use_device)(int index) = nullptr;  // makes the machine's index-th GPU this process's, before ops()
  // The library that moves a step's data between GPUs directly: "nccl" (CUDA), "rccl" (HIP), or null (the
  // emulator). Why it cannot serve `ranks_here` ranks on this machine ("" when it can), and its
  // communicator over host's ranks (collective: rank 0 hands out the id through host).
  const char* collectives = nullptr;
  std::string (*collectives_unavailable)(int ranks_here) = nullptr;
  std::unique_ptr<DeviceCommunicator> (*make_collectives)(Communicator& host) = nullptr;
};

// The backend select_device offers; registering an empty GpuBackend (no language) takes it away.
void register_gpu_backend(const GpuBackend& backend);

struct Device {
  std::string name;         // "cpu", or the GPU backend's language
  std::string description;  // for the run's log: "cpu", "cuda: NVIDIA H200"
  Ops* ops = nullptr;
  int64_t memory_bytes = 0;  // what it holds: the machine's RAM for the CPU, the GPU's own memory
  int index = 0;             // which of the machine's GPUs
  bool on_host() const { return name == "cpu"; }
};

// "cpu", a GPU language ("cuda", "hip", "emulated") or "auto" (the GPU where this program has a backend and
// the machine a device, else the CPU). Throws Error naming `field` when the device asked for is not here.
// `local_rank`: this process's place among the ranks on its machine, which takes the machine's
// (local_rank mod count)-th GPU.
Device select_device(const std::string& setting, const char* field, int local_rank = 0);

// The device collectives of a run on `device` over host's ranks (collective). setting: "mpi" (the host's own
// collectives on the CPU, the staged ones on a GPU: dist/device_communicator.h), "nccl" (NCCL on CUDA, RCCL
// on HIP) or "auto" (NCCL/RCCL where every rank can use it, else mpi). Throws Error
// naming `field` when the one asked for cannot run here, with the reason. `note`, when given, receives why
// auto did not take NCCL/RCCL ("" when it did, or on the CPU).
std::unique_ptr<DeviceCommunicator> make_device_communicator(const std::string& setting, const Device& device,
                                                             Communicator& host, const char* field,
                                                             std::string* note = nullptr);

inline bool is_communicator_name(const std::string& setting) {
  return setting == "auto" || setting == "mpi" || setting == "nccl";
}
// Whether `setting` can name a device at all (a config is checked before anything runs). Inline: the
// config's parser uses it without the backends.
inline bool is_device_name(const std::string& setting) {
  return setting == "auto" || setting == "cpu" || setting == "cuda" || setting == "hip" ||
         setting == "emulated";
}

}  // namespace zaya
