#include "core/buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace zaya {

AlignedBuffer::AlignedBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  data_ = std::aligned_alloc(kAlignment, align_up(bytes));
  if (!data_) throw std::bad_alloc();
  std::memset(data_, 0, align_up(bytes));
}

AlignedBuffer::~AlignedBuffer() {
  std::free(data_);
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace zaya
