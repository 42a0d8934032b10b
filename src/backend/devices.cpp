#include "backend/devices.h"

#include <unistd.h>

#include <optional>

#include "backend/ops.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"

namespace zaya {
namespace {

std::optional<GpuBackend>& registered() {
  static std::optional<GpuBackend> backend;
  return backend;
}

}  // namespace

void register_gpu_backend(const GpuBackend& backend) {
  if (backend.language)
    registered() = backend;
  else
    registered().reset();
}

Device select_device(const std::string& setting, const char* field, int local_rank) {
  if (!is_device_name(setting)) {
    throw Error("expected \"auto\", \"cpu\", \"cuda\" or \"hip\", got \"" + setting + "\"").field(field);
  }
  const std::optional<GpuBackend>& gpu = registered();
  const Device cpu{"cpu", "cpu", &cpu_ops(), int64_t(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE)};
  const bool automatic = setting == "auto";
  if (setting == "cpu" || (automatic && !gpu)) return cpu;
  if (!automatic && (!gpu || setting != gpu->language)) {
    throw Error(cat("this zaya was built ",
                    gpu ? cat("with the ", gpu->language, " GPU backend, not ", setting)
                        : cat("without a GPU backend (", setting, " needs its toolkit when zaya is built)")))
        .field(field);
  }
  int count = 0;
  try {
    count = gpu->device_count();
  } catch (const Error& e) {  // a driver that fails is reported, never taken for a machine without a GPU
    throw Error(cat(e.message(), "; choose cpu to run without it")).field(field);
  }
  if (count == 0) {
    if (automatic) return cpu;
    throw Error(cat("no ", setting, " device is present on this machine")).field(field);
  }
  const int index = local_rank % count;
  gpu->use_device(index);
  const std::string which = count > 1 ? cat(" (GPU ", index, " of ", count, ")") : "";
  return {gpu->language, cat(gpu->language, ": ", gpu->device_name(), which), &gpu->ops(),
          gpu->memory_bytes(), index};
}

std::unique_ptr<DeviceCommunicator> make_device_communicator(const std::string& setting, const Device& device,
                                                             Communicator& host, const char* field,
                                                             std::string* note) {
  if (!is_communicator_name(setting))
    throw Error("expected \"auto\", \"mpi\" or \"nccl\", got \"" + setting + "\"").field(field);
  if (note) note->clear();
  if (device.on_host()) {
    if (setting == "nccl")
      throw Error("nccl moves data between GPUs, and this run is on the CPU: choose mpi or auto")
          .field(field);
    return make_host_device_communicator(host);
  }
  if (setting == "mpi") return make_staged_communicator(host, device.ops->memory());
  // NCCL or RCCL only where every rank can use it: each says why not, and one reason stops them all.
  const GpuBackend& gpu = *registered();
  std::string why_not = gpu.collectives ? gpu.collectives_unavailable(host.local_size())
                                        : cat("the ", gpu.language, " backend has neither NCCL nor RCCL");
  for (const std::string& reason : host.all_gather_strings(why_not)) {
    if (!reason.empty()) {
      why_not = reason;
      break;
    }
  }
  if (why_not.empty()) return gpu.make_collectives(host);
  if (setting == "auto") {
    if (note) *note = why_not;
    return make_staged_communicator(host, device.ops->memory());
  }
  throw Error(cat("nccl cannot run here: ", why_not, "; choose mpi (staged through host memory) or auto"))
      .field(field);
}

}  // namespace zaya
