#include "backend/planning_ops.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <new>

namespace zaya {

// Reserved, never-touched pages: a read sees zeros (the kernel's shared zero page), so a "device" value read
// back (the loss, a norm) is 0, and nothing is committed but what copy_from_host writes (a batch's tokens).
class PlanningOps::Reserve final : public MemoryResource {
 public:
  ~Reserve() override {
    for (const auto& [data, bytes] : live_) munmap(data, bytes);
  }
  void* allocate(size_t bytes) override {
    const size_t size = std::max<size_t>(align_up(bytes, 4096), 4096);
    void* data =
        mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (data == MAP_FAILED) throw std::bad_alloc();
    live_[data] = size;
    live_bytes_ += align_up(bytes);
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
    sizes_[data] = align_up(bytes);
    return data;
  }
  void release(void* data) noexcept override {
    const auto found = live_.find(data);
    if (found == live_.end()) return;
    munmap(data, found->second);
    live_.erase(found);
    live_bytes_ -= sizes_[data];
    sizes_.erase(data);
  }
  void zero(void*, size_t) override {}  // never written, still zero
  void copy_from_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

  size_t live_bytes() const { return live_bytes_; }
  size_t peak_bytes() const { return peak_bytes_; }

 private:
  std::map<void*, size_t> live_;   // mapping -> its length in pages
  std::map<void*, size_t> sizes_;  // mapping -> the bytes counted for it (as the target's allocator rounds)
  size_t live_bytes_ = 0, peak_bytes_ = 0;
};

PlanningOps::PlanningOps(Ops& target) : target_(target), memory_(std::make_unique<Reserve>()) {}
PlanningOps::~PlanningOps() = default;

size_t PlanningOps::live_bytes() const {
  return memory_->live_bytes();
}
size_t PlanningOps::peak_bytes() const {
  return memory_->peak_bytes();
}
MemoryResource& PlanningOps::memory() {
  return *memory_;
}
void PlanningOps::copy_from_host(void* dst, const void* src, size_t bytes) {
  memory_->copy_from_host(dst, src, bytes);
}
void PlanningOps::copy_to_host(void* dst, const void* src, size_t bytes) {
  memory_->copy_to_host(dst, src, bytes);
}
void PlanningOps::zero(void*, size_t) {}

void PlanningOps::group_by_expert(const int32_t*, int64_t tokens, int64_t experts, int32_t*,
                                  int64_t* offsets) {
  offsets[0] = 0;
  for (int64_t e = 1; e <= experts; ++e) offsets[e] = tokens;
}

}  // namespace zaya
