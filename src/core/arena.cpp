#include "core/arena.h"

#include <algorithm>

namespace zaya {

Arena::Arena(size_t initial_bytes, MemoryResource& memory) : memory_(&memory) {
  if (initial_bytes) add_block(initial_bytes);
}

void Arena::add_block(size_t bytes) {
  blocks_.emplace_back(align_up(bytes), *memory_);
  current_ = blocks_.size() - 1;
  offset_ = 0;
  ++system_allocations_;
}

void* Arena::allocate(size_t bytes) {
  bytes = align_up(std::max<size_t>(bytes, 1));
  if (blocks_.empty() || offset_ + bytes > blocks_[current_].size()) {
    if (current_ + 1 < blocks_.size() && bytes <= blocks_[current_ + 1].size()) {
      ++current_;  // a block a rewind passed
      offset_ = 0;
    } else {
      // The next block is too small for it: a new one, twice this one or as large as asked, replaces the
      // blocks past this one.
      const size_t last = blocks_.empty() ? 0 : blocks_[current_].size();
      if (!blocks_.empty()) blocks_.resize(current_ + 1);
      add_block(std::max(bytes, 2 * last));
    }
  }
  void* out = static_cast<char*>(blocks_[current_].data()) + offset_;
  offset_ += bytes;
  used_ += bytes;
  high_water_ = std::max(high_water_, used_);
  return out;
}

void Arena::rewind(const Mark& mark) {
  current_ = mark.block;
  offset_ = mark.offset;
  used_ = mark.used;
}

void Arena::reset() {
  // One block of the high-water size serves every later step of this shape: the largest block when it holds
  // that much (its pages are touched already, where a fresh block's first touches can cost more than the
  // pass that grew it, on a VM), else a new one.
  if (blocks_.size() > 1 || capacity() < high_water_) {
    auto largest =
        std::max_element(blocks_.begin(), blocks_.end(),
                         [](const AlignedBuffer& a, const AlignedBuffer& b) { return a.size() < b.size(); });
    if (largest != blocks_.end() && largest->size() >= high_water_) {
      AlignedBuffer kept = std::move(*largest);
      blocks_.clear();
      blocks_.push_back(std::move(kept));
    } else {
      blocks_.clear();
      add_block(high_water_);
    }
  }
  current_ = 0;
  offset_ = 0;
  used_ = 0;
}

void Arena::reserve(size_t bytes) {
  if (blocks_.size() == 1 && blocks_[0].size() >= bytes) return;
  blocks_.clear();  // released first: the old blocks and the new one need not fit together
  add_block(bytes);
}

size_t Arena::capacity() const {
  size_t total = 0;
  for (const AlignedBuffer& block : blocks_) total += block.size();
  return total;
}

}  // namespace zaya
