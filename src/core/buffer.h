#pragma once
// Owning, 64-byte aligned memory: the storage behind parameters, gradients, optimizer state and arenas.
// It lives where its MemoryResource puts it: the host by default, a backend's device when given
// Ops::memory() (so a GPU backend places parameters, gradients, state and activations in device memory).

#include <cstddef>

namespace zaya {

inline constexpr size_t kAlignment = 64;

inline constexpr size_t align_up(size_t bytes, size_t alignment = kAlignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

// Hands out and takes back memory on one device.
class MemoryResource {
 public:
  virtual ~MemoryResource() = default;
  // kAlignment-aligned and zero-filled, so a fresh buffer never leaks old memory into results; throws
  // std::bad_alloc when there is not enough.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* data) noexcept = 0;
  // Sets bytes of this memory to zero (where the host cannot write, the device does).
  virtual void zero(void* data, size_t bytes) = 0;
  // Copies between this memory and the host's, after the work queued on the device has finished.
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
};

// The host's memory (aligned_alloc).
MemoryResource& host_memory();

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes, MemoryResource& memory = host_memory());
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t size() const { return size_; }

  template <class T>
  T* as() {
    return static_cast<T*>(data_);
  }
  template <class T>
  const T* as() const {
    return static_cast<const T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  MemoryResource* memory_ = nullptr;
};

}  // namespace zaya
