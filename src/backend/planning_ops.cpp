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
    for (const auto& [data, mapping] : live_) munmap(data, mapping.pages);
  }
  void* allocate(size_t bytes) override {
    const Mapping mapping{std::max<size_t>(align_up(bytes, 4096), 4096), align_up(bytes)};
    void* data = mmap(nullptr, mapping.pages, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (data == MAP_FAILED) throw std::bad_alloc();
    live_[data] = mapping;
    live_bytes_ += mapping.counted;
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
    return data;
  }
  void release(void* data) noexcept override {
    const auto found = live_.find(data);
    if (found == live_.end()) return;
    munmap(data, found->second.pages);
    live_bytes_ -= found->second.counted;
    live_.erase(found);
  }
  void zero(void*, size_t) override {}  // never written, still zero
  void copy_from_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

  size_t live_bytes() const { return live_bytes_; }
  size_t peak_bytes() const { return peak_bytes_; }

 private:
  struct Mapping {
    size_t pages;    // the mapping's length, whole pages
    size_t counted;  // the bytes counted for it, as a backend's allocator rounds them
  };
  std::map<void*, Mapping> live_;
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
