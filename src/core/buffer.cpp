#include "core/buffer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.h"

namespace zaya {

namespace {

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / double(1ull << 30));
  return text;
}

class HostMemory final : public MemoryResource {
 public:
  void* allocate(size_t bytes) override {
    // A block larger than the machine could only fail, or be granted by overcommit and then killed when
    // touched: refuse it with both sizes. One that merely does not fit now says the same.
    const double physical = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
    void* data = double(bytes) > physical ? nullptr : std::aligned_alloc(kAlignment, align_up(bytes));
    if (!data) {
      const double available = double(sysconf(_SC_AVPHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
      rlimit limit{};
      const bool limited = getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY;
      throw Error(cat("out of memory: needs ", gib(double(bytes)), " in one block; this machine has ",
                      gib(physical), " (", gib(available), " free)",
                      limited
                          ? cat(", and this process may map ", gib(double(limit.rlim_cur)), " (ulimit -v)")
                          : std::string()));
    }
    std::memset(data, 0, align_up(bytes));
    return data;
  }
  void release(void* data) noexcept override { std::free(data); }
  void zero(void* data, size_t bytes) override { std::memset(data, 0, bytes); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
};

}  // namespace

MemoryResource& host_memory() {
  // Never destroyed: buffers held by other statics (the CPU backend's scratch) release into it at exit,
  // whatever the order of static destruction.
  static HostMemory& memory = *new HostMemory;
  return memory;
}

AlignedBuffer::AlignedBuffer(size_t bytes, MemoryResource& memory) : size_(bytes), memory_(&memory) {
  if (bytes > 0) data_ = memory.allocate(bytes);
}

AlignedBuffer::~AlignedBuffer() {
  if (data_) memory_->release(data_);
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      memory_(std::exchange(other.memory_, nullptr)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) memory_->release(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    memory_ = std::exchange(other.memory_, nullptr);
  }
  return *this;
}

}  // namespace zaya
