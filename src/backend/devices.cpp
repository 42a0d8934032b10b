#include "backend/devices.h"

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
  registered() = backend;
}

Device select_device(const std::string& setting, const char* field) {
  if (!is_device_name(setting)) {
    throw Error("expected \"auto\", \"cpu\", \"cuda\" or \"hip\", got \"" + setting + "\"").field(field);
  }
  const std::optional<GpuBackend>& gpu = registered();
  const bool gpu_present = gpu && gpu->device_count() > 0;
  if (setting == "cpu" || (setting == "auto" && !gpu_present)) return {"cpu", "cpu", &cpu_ops()};
  if (setting != "auto") {
    if (!gpu || setting != gpu->language) {
      throw Error(
          cat("this zaya was built ",
              gpu ? cat("with the ", gpu->language, " GPU backend, not ", setting)
                  : cat("without a GPU backend (", setting, " needs its toolkit when zaya is built)")))
          .field(field);
    }
    if (!gpu_present) throw Error(cat("no ", setting, " device is present on this machine")).field(field);
  }
  return {gpu->language, cat(gpu->language, ": ", gpu->device_name()), &gpu->ops()};
}

}  // namespace zaya
