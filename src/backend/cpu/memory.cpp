// The CPU's device memory is the host's: a read by the host is a copy and waits for nothing.

#include <sys/resource.h>

#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace zaya {

void CpuOps::zero(void* data, size_t bytes) {
  std::memset(data, 0, bytes);
}

void CpuOps::copy_from_host(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

void CpuOps::copy_to_host(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

void require_address_space() {
  // oneDNN's code generator crashes, instead of reporting, when it cannot map memory for the kernels it
  // writes: under `ulimit -v` of 400 MB the tiny model's first bf16 product did. Our own allocations report
  // what they need; below 1 GiB of address space the backend refuses to start rather than crash later.
  constexpr rlim_t kLeast = rlim_t(1) << 30;
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < kLeast) {
    throw Error(cat("this process may map ", limit.rlim_cur >> 20,
                    " MiB (ulimit -v); running a model needs at least ", kLeast >> 20, " MiB"));
  }
}

}  // namespace zaya
