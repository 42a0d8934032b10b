#pragma once
// A MemoryResource over the host's memory that counts what passes through it: what a backend's memory
// would hold (tests of where buffers are allocated, and how much).

#include <cstddef>
#include <map>

#include "core/buffer.h"

namespace zaya {

// Counts what passes through it, on top of the host's memory.
class CountingMemory final : public MemoryResource {
 public:
  void* allocate(size_t bytes) override {
    void* data = host_memory().allocate(bytes);
    sizes[data] = bytes;
    ++allocations;
    live_bytes += bytes;
    return data;
  }
  void release(void* data) noexcept override {
    ++releases;
    live_bytes -= sizes[data];
    sizes.erase(data);
    host_memory().release(data);
  }
  void zero(void* data, size_t bytes) override { host_memory().zero(data, bytes); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    host_memory().copy_from_host(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    host_memory().copy_to_host(dst, src, bytes);
  }
  int allocations = 0, releases = 0;
  size_t live_bytes = 0;

 private:
  std::map<void*, size_t> sizes;
};

}  // namespace zaya
