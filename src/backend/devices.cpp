#include "backend/devices.h"

#include <unistd.h>

#include <optional>

#include "backend/ops.h"
#include "core/error.h"

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

Device select_device(const std::string& setting, const char* field, const char* host_only_work) {
  if (!is_device_name(setting)) {
    throw Error("expected \"auto\", \"cpu\", \"cuda\" or \"hip\", got \"" + setting + "\"").field(field);
  }
  const std::optional<GpuBackend>& gpu = registered();
  const Device cpu{"cpu", "cpu", &cpu_ops(), int64_t(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE)};
  const bool automatic = setting == "auto";
  if (setting == "cpu" || (automatic && (!gpu || host_only_work))) return cpu;
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
  if (host_only_work) {
    throw Error(cat("the ", setting, " backend cannot run ", host_only_work,
                    " yet (only the CPU backend has it): choose cpu"))
        .field(field);
  }
  return {gpu->language, cat(gpu->language, ": ", gpu->device_name()), &gpu->ops(), gpu->memory_bytes()};
}

}  // namespace zaya
