#include "core/buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace zaya {

namespace {

class HostMemory final : public MemoryResource {
 public:
  void* allocate(size_t bytes) override {
    void* data = std::aligned_alloc(kAlignment, align_up(bytes));
    if (!data) throw std::bad_alloc();
    std::memset(data, 0, align_up(bytes));
    return data;
  }
  void release(void* data) noexcept override { std::free(data); }
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
