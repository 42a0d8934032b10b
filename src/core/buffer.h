#pragma once
// Owning, 64-byte aligned memory: the storage behind parameters, gradients, optimizer state and arenas.

#include <cstddef>

namespace zaya {

inline constexpr size_t kAlignment = 64;

inline constexpr size_t align_up(size_t bytes, size_t alignment = kAlignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Zero-filled, so a fresh buffer never leaks old memory into results.
  explicit AlignedBuffer(size_t bytes);
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
};

}  // namespace zaya
