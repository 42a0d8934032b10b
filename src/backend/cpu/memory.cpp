// The CPU's device memory is the host's: a read by the host is a copy and waits for nothing.

#include <cstring>

#include "backend/cpu/cpu_ops.h"

namespace zaya {

void CpuOps::zero(void* data, size_t bytes) {
  std::memset(data, 0, bytes);
}

void CpuOps::copy_to_host(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

}  // namespace zaya
