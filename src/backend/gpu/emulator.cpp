// The emulator's fibers: one per thread of the running block, each with its own stack, switched to and from
// a scheduler that releases barriers and performs warp exchanges once every participant has arrived.
// A fiber is created once (ucontext) and then lives from launch to launch, running one block's thread after
// another; every switch after its creation is a _setjmp/_longjmp pair, because swapcontext saves and
// restores the signal mask with a system call on each switch, which made the emulator spend more time in
// the kernel than in the kernels (a training step switches millions of times).

// glibc's checked longjmp (with _FORTIFY_SOURCE) refuses to jump to another stack, which is what a fiber
// switch does.
#undef _FORTIFY_SOURCE

#include "backend/gpu/emulator.h"

#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <exception>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "core/error.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define ZAYA_ASAN_FIBERS 1
#endif

namespace zaya::gpu::emulator {
namespace {

// Enough for a kernel's locals (an attention row's accumulators), with room for the sanitizers' frames.
constexpr size_t kStackBytes = 256 * 1024;
constexpr unsigned kMaxThreadsPerBlock = 1024;
// A block's static shared memory (ZAYA_SHARED_ARRAY), at most: more than CUDA's 48 KiB.
constexpr size_t kStaticSharedBytes = 64 * 1024;
// Blocks that run at once, their phases (from one barrier to the next) interleaved.
constexpr size_t kConcurrentBlocks = 3;

enum class State : uint8_t { Runnable, AtBarrier, AtExchange, AtGather, Done };

struct Fiber {
  jmp_buf resume;  // where the fiber continues when the scheduler switches to it
  std::unique_ptr<char[]> stack;
  bool started = false;  // false: the next switch starts fiber_main afresh on the stack
  Dim3 index;
  State state = State::Runnable;
  uint64_t exchange_bits = 0;
  int exchange_mask = 0;
  const void* gather_mine = nullptr;  // a gather's contribution and destination, gather_bytes each lane
  void* gather_all = nullptr;
  size_t gather_bytes = 0;
#if defined(ZAYA_ASAN_FIBERS)
  void* fake_stack = nullptr;
#endif
};

// A block being run: its fibers, the scheduler they return to, its shared memory.
struct BlockRun {
  jmp_buf scheduler;
  std::vector<Fiber> fibers = std::vector<Fiber>(kMaxThreadsPerBlock);  // never moved: fibers hold jumps
  size_t count = 0;                                                     // fibers of this block
  Fiber* current = nullptr;
  Dim3 block, grid, block_dim;
  bool active = false;                // running a block of the launch now
  std::vector<unsigned char> shared;  // dynamic
  // Static: a declaration's array at the offset of its site, in the order the block's threads reach them.
  std::vector<unsigned char> statics = std::vector<unsigned char>(kStaticSharedBytes, 0xff);
  std::vector<std::pair<const void*, size_t>> sites;
  size_t statics_used = 0;
  const std::function<void()>* thread = nullptr;
  std::exception_ptr error;
#if defined(ZAYA_ASAN_FIBERS)
  const void* scheduler_stack = nullptr;
  size_t scheduler_stack_size = 0;
#endif
};

thread_local BlockRun* running = nullptr;

BlockRun& active() {
  if (running == nullptr) throw Error("a GPU device function ran outside an emulated kernel launch");
  return *running;
}

// From the current fiber back to the scheduler (at a barrier, an exchange, or the end of its thread).
void yield_to_scheduler(BlockRun& run) {
  Fiber& self = *run.current;
#if defined(ZAYA_ASAN_FIBERS)
  __sanitizer_start_switch_fiber(&self.fake_stack, run.scheduler_stack, run.scheduler_stack_size);
#endif
  if (_setjmp(self.resume) == 0) _longjmp(run.scheduler, 1);
#if defined(ZAYA_ASAN_FIBERS)
  __sanitizer_finish_switch_fiber(self.fake_stack, &run.scheduler_stack, &run.scheduler_stack_size);
#endif
}

// A fiber's whole life: the thread it is given in each block it takes part in, until the program ends.
void fiber_main() {
#if defined(ZAYA_ASAN_FIBERS)
  __sanitizer_finish_switch_fiber(nullptr, &running->scheduler_stack, &running->scheduler_stack_size);
#endif
  for (;;) {
    BlockRun& run = *running;
    try {
      (*run.thread)();
    } catch (...) {
      if (!run.error) run.error = std::current_exception();
    }
    run.current->state = State::Done;
    yield_to_scheduler(run);
  }
}

void switch_to(BlockRun& run, Fiber& fiber) {
  run.current = &fiber;
  // Before the switch is announced to ASan, which records the stack's bounds (a fresh fiber's stack given as
  // null made an exception thrown in its first run a false stack-buffer-underflow).
  if (!fiber.stack) fiber.stack = std::make_unique<char[]>(kStackBytes);
#if defined(ZAYA_ASAN_FIBERS)
  void* scheduler_fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&scheduler_fake_stack, fiber.stack.get(), kStackBytes);
#endif
  if (_setjmp(run.scheduler) == 0) {
    if (fiber.started) _longjmp(fiber.resume, 1);
    fiber.started = true;
    ucontext_t start{};
    getcontext(&start);
    start.uc_stack.ss_sp = fiber.stack.get();
    start.uc_stack.ss_size = kStackBytes;
    start.uc_link = nullptr;  // fiber_main never returns
    makecontext(&start, fiber_main, 0);
    setcontext(&start);
  }
#if defined(ZAYA_ASAN_FIBERS)
  __sanitizer_finish_switch_fiber(scheduler_fake_stack, nullptr, nullptr);
#endif
}

std::string where(const BlockRun& run) {
  return cat("block (", run.block.x, ", ", run.block.y, ", ", run.block.z, ")");
}

// Performs the exchanges and gathers of every warp whose lanes have all arrived; true when one was released.
bool release_exchanges(BlockRun& run) {
  bool released = false;
  for (size_t first = 0; first < run.count; first += kWarpSize) {
    const size_t lanes = std::min<size_t>(kWarpSize, run.count - first);
    Fiber* warp = &run.fibers[first];
    size_t exchanging = 0, gathering = 0, done = 0;
    for (size_t lane = 0; lane < lanes; ++lane) {
      exchanging += warp[lane].state == State::AtExchange;
      gathering += warp[lane].state == State::AtGather;
      done += warp[lane].state == State::Done;
    }
    const size_t waiting = exchanging + gathering;
    if (waiting == 0 || waiting + done < lanes) continue;
    if (done > 0) {
      throw Error(cat("emulated GPU: a warp exchange in ", where(run), " with lanes that have exited"));
    }
    if (gathering > 0) {
      for (size_t lane = 0; lane < lanes; ++lane) {
        if (warp[lane].state != State::AtGather || warp[lane].gather_bytes != warp[0].gather_bytes) {
          throw Error(
              cat("emulated GPU: the lanes of a warp in ", where(run), " meet at different exchanges"));
        }
      }
      const size_t bytes = warp[0].gather_bytes;
      for (size_t to = 0; to < lanes; ++to) {
        for (size_t from = 0; from < lanes; ++from) {
          std::memcpy(static_cast<char*>(warp[to].gather_all) + from * bytes, warp[from].gather_mine, bytes);
        }
      }
    } else {
      uint64_t results[kWarpSize];
      for (size_t lane = 0; lane < lanes; ++lane) {
        const size_t source = lane ^ size_t(warp[lane].exchange_mask);
        if (source >= lanes) {
          throw Error(cat("emulated GPU: a warp exchange in ", where(run), " reads lane ", source,
                          " of a warp of ", lanes));
        }
        results[lane] = warp[source].exchange_bits;
      }
      for (size_t lane = 0; lane < lanes; ++lane) warp[lane].exchange_bits = results[lane];
    }
    for (size_t lane = 0; lane < lanes; ++lane) warp[lane].state = State::Runnable;
    released = true;
  }
  return released;
}

// Releases the block barrier once every thread waits at it; true when it did.
bool release_barrier(BlockRun& run) {
  size_t waiting = 0, done = 0;
  for (size_t i = 0; i < run.count; ++i) {
    waiting += run.fibers[i].state == State::AtBarrier;
    done += run.fibers[i].state == State::Done;
  }
  if (waiting == 0 || waiting + done < run.count) return false;
  if (done > 0) {
    throw Error(cat("emulated GPU: sync_threads in ", where(run), " that ", done,
                    " threads of the block never reach (they returned)"));
  }
  for (size_t i = 0; i < run.count; ++i) run.fibers[i].state = State::Runnable;
  return true;
}

// Starts block `index` of the launch in `run`: its shared memory, dynamic and static, holds whatever the
// block before left on a GPU, here all bits set (NaN as f32), so that a read of what this block did not
// write shows in the results.
void start_block(BlockRun& run, uint32_t index) {
  const Dim3& grid = run.grid;
  run.block = {index % grid.x, index / grid.x % grid.y, unsigned(index / (size_t(grid.x) * grid.y))};
  std::fill(run.shared.begin(), run.shared.end(), 0xff);
  std::fill(run.statics.begin(), run.statics.begin() + ptrdiff_t(run.statics_used), 0xff);
  run.statics_used = 0;
  run.sites.clear();
  for (size_t i = 0; i < run.count; ++i) run.fibers[i].state = State::Runnable;
  run.active = true;
}

// One phase of a block: every runnable thread runs until it waits or ends, then the warp exchanges or the
// barrier they all reached are released. False once every thread has ended.
bool step_block(BlockRun& run) {
  for (size_t i = 0; i < run.count; ++i) {
    if (run.fibers[i].state == State::Runnable) switch_to(run, run.fibers[i]);
    if (run.error) std::rethrow_exception(run.error);
  }
  bool all_done = true;
  for (size_t i = 0; i < run.count; ++i) all_done = all_done && run.fibers[i].state == State::Done;
  if (all_done) return false;
  const bool exchanged = release_exchanges(run);
  if (!exchanged && !release_barrier(run)) {
    throw Error(cat("emulated GPU: the threads of ", where(run),
                    " wait at different barriers or exchanges (a deadlock on a GPU)"));
  }
  return true;
}

// The blocks of a launch in a shuffled order, a new one at every launch (seeded by the launch's number, so
// that a failure repeats): a GPU runs blocks in no set order, and a kernel whose blocks read each other's
// results must fail here too rather than pass because block 0 happened to run first.
std::vector<uint32_t> block_order(size_t blocks) {
  if (blocks > UINT32_MAX) throw Error(cat("emulated GPU: a grid of ", blocks, " blocks"));
  thread_local uint64_t launches = 0;
  uint64_t state = ++launches * 0x9e3779b97f4a7c15ull;
  const auto next = [&state] {  // splitmix64
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  std::vector<uint32_t> order(blocks);
  for (size_t i = 0; i < blocks; ++i) order[i] = uint32_t(i);
  for (size_t i = blocks; i > 1; --i) std::swap(order[i - 1], order[next() % i]);  // Fisher-Yates
  return order;
}

}  // namespace

const Dim3& thread_index() {
  return active().current->index;
}
const Dim3& block_index() {
  return active().block;
}
const Dim3& block_dim() {
  return active().block_dim;
}
const Dim3& grid_dim() {
  return active().grid;
}

void sync_threads() {
  BlockRun& run = active();
  run.current->state = State::AtBarrier;
  yield_to_scheduler(run);
}

uint64_t exchange_in_warp(uint64_t bits, int lane_mask) {
  BlockRun& run = active();
  Fiber& self = *run.current;
  self.exchange_bits = bits;
  self.exchange_mask = lane_mask;
  self.state = State::AtExchange;
  yield_to_scheduler(run);
  return self.exchange_bits;
}

void gather_in_warp(const void* mine, size_t bytes, void* all) {
  BlockRun& run = active();
  Fiber& self = *run.current;
  self.gather_mine = mine;
  self.gather_all = all;
  self.gather_bytes = bytes;
  self.state = State::AtGather;
  yield_to_scheduler(run);
}

void* dynamic_shared() {
  return active().shared.data();
}

namespace {

std::mutex opted_in_mutex;
std::map<std::string, size_t>& opted_in() {  // kernel name -> the dynamic shared bytes it may take
  static std::map<std::string, size_t> kernels;
  return kernels;
}

}  // namespace

void allow_shared(const char* kernel, size_t bytes, size_t limit) {
  if (bytes > limit) {
    throw Error(
        cat("emulated GPU: ", kernel, " asks for ", bytes, " bytes of shared memory (at most ", limit, ")"));
  }
  const std::lock_guard<std::mutex> lock(opted_in_mutex);
  opted_in()[kernel] = bytes;
}

void check_shared(const char* kernel, size_t bytes) {
  if (bytes <= kDefaultSharedBytes) return;
  const std::lock_guard<std::mutex> lock(opted_in_mutex);
  const auto found = opted_in().find(kernel);
  if (found == opted_in().end() || found->second < bytes) {
    throw Error(cat("emulated GPU: launch of ", kernel, " with ", bytes,
                    " bytes of dynamic shared memory, more than it opted in to (allow_shared)"));
  }
}

void* static_shared(const void* site, size_t bytes, size_t alignment) {
  BlockRun& run = active();
  for (const auto& [known, offset] : run.sites) {
    if (known == site) return run.statics.data() + offset;
  }
  const size_t offset = (run.statics_used + alignment - 1) / alignment * alignment;
  if (offset + bytes > kStaticSharedBytes) {
    throw Error(cat("emulated GPU: ", offset + bytes, " bytes of static shared memory in ", where(run),
                    " (at most ", kStaticSharedBytes, ")"));
  }
  run.sites.emplace_back(site, offset);
  run.statics_used = offset + bytes;
  return run.statics.data() + offset;
}

void run(Dim3 grid, Dim3 block, size_t shared_bytes, const std::function<void()>& thread) {
  if (running != nullptr) throw Error("emulated GPU: a kernel launched from inside a kernel");
  const size_t threads = size_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > kMaxThreadsPerBlock) {
    throw Error(cat("emulated GPU: a block of ", threads, " threads (1 to ", kMaxThreadsPerBlock, ")"));
  }
  thread_local std::array<BlockRun, kConcurrentBlocks> slots;
  for (BlockRun& run : slots) {
    run.count = threads;
    run.grid = grid;
    run.block_dim = block;
    run.thread = &thread;
    run.error = nullptr;
    run.shared.resize(shared_bytes);
    size_t i = 0;
    for (unsigned z = 0; z < block.z; ++z)
      for (unsigned y = 0; y < block.y; ++y)
        for (unsigned x = 0; x < block.x; ++x) run.fibers[i++].index = {x, y, z};
  }
  const std::vector<uint32_t> order = block_order(size_t(grid.x) * grid.y * grid.z);
  const DeviceAccess access;
  try {
    // Up to kConcurrentBlocks blocks at once, taken in the shuffled order, a phase of each in turn: a block
    // that reads what another writes without a launch between them sees it half done, as on a GPU.
    size_t next = 0, active = 0;
    do {
      for (BlockRun& run : slots) {
        if (!run.active && next < order.size()) {
          start_block(run, order[next++]);
          ++active;
        }
        if (!run.active) continue;
        running = &run;
        if (!step_block(run)) {
          run.active = false;
          --active;
        }
        running = nullptr;
      }
    } while (active > 0 || next < order.size());
  } catch (...) {
    // The threads that had not finished wait inside a kernel that is gone: they start afresh next time.
    for (BlockRun& run : slots) {
      for (size_t j = 0; j < run.count; ++j) run.fibers[j].started = run.fibers[j].state == State::Done;
      run.active = false;
    }
    running = nullptr;
    throw;
  }
}

namespace {

// All device memory lies in one reserved region, so that opening it to the host or closing it again is one
// mprotect, whatever the number of buffers (a training step launches thousands of kernels over a thousand
// buffers). Inside it, pages are handed out first fit and given back coalesced.
constexpr size_t kPageBytes = 4096;
constexpr size_t kRegionBytes = size_t(16) << 30;  // address space only: pages exist once written

struct DeviceMemory {
  std::mutex mutex;
  char* base = nullptr;
  size_t touched = 0;                   // bytes from base that have ever been allocated: what opening covers
  std::map<size_t, size_t> free;        // offset -> bytes, no two adjacent
  std::map<void*, size_t> allocations;  // live: start -> bytes
  int open = 0;                         // DeviceAccess scopes
};

void protect(void* data, size_t bytes, bool open) {
  if (bytes > 0 && mprotect(data, bytes, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
    throw Error("emulated GPU: mprotect failed on device memory");
  }
}

DeviceMemory& device_memory() {
  static DeviceMemory& memory = []() -> DeviceMemory& {
    auto& created = *new DeviceMemory;  // never destroyed: buffers may be released at exit
    void* region = mmap(nullptr, kRegionBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (region == MAP_FAILED) throw Error("emulated GPU: cannot reserve the device memory region");
    created.base = static_cast<char*>(region);
    created.free[0] = kRegionBytes;
    return created;
  }();
  return memory;
}

}  // namespace

int64_t device_memory_bytes() {
  return int64_t(kRegionBytes);
}

void* allocate_device(size_t bytes) {
  const size_t size = (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  DeviceMemory& memory = device_memory();
  std::lock_guard<std::mutex> lock(memory.mutex);
  auto range = memory.free.begin();
  while (range != memory.free.end() && range->second < size) ++range;
  if (range == memory.free.end()) throw std::bad_alloc();
  const size_t offset = range->first;
  if (range->second > size) memory.free[offset + size] = range->second - size;
  memory.free.erase(range);
  char* data = memory.base + offset;
  memory.touched = std::max(memory.touched, offset + size);
  // Fresh device memory holds whatever was there before, on a GPU: here all bits set (NaN as f32 and bf16),
  // so that a kernel reading what nothing wrote shows in the results.
  protect(data, size, true);
  std::memset(data, 0xff, size);
  if (memory.open == 0) protect(data, size, false);
  memory.allocations[data] = size;
  return data;
}

void release_device(void* data) noexcept {
  if (data == nullptr) return;
  DeviceMemory& memory = device_memory();
  std::lock_guard<std::mutex> lock(memory.mutex);
  const auto found = memory.allocations.find(data);
  if (found == memory.allocations.end()) return;
  size_t offset = static_cast<char*>(data) - memory.base, size = found->second;
  memory.allocations.erase(found);
  madvise(data, size, MADV_DONTNEED);  // the pages go back to the system
  const auto next = memory.free.lower_bound(offset);
  if (next != memory.free.end() && next->first == offset + size) {
    size += next->second;
    memory.free.erase(next);
  }
  const auto after = memory.free.lower_bound(offset);
  if (after != memory.free.begin()) {
    const auto previous = std::prev(after);
    if (previous->first + previous->second == offset) {
      previous->second += size;
      return;
    }
  }
  memory.free[offset] = size;
}

// Opening covers freed pages too (a kernel reading a freed buffer goes unnoticed); the price of one mprotect.
DeviceAccess::DeviceAccess() {
  DeviceMemory& memory = device_memory();
  std::lock_guard<std::mutex> lock(memory.mutex);
  if (memory.open++ == 0) protect(memory.base, memory.touched, true);
}

DeviceAccess::~DeviceAccess() {
  DeviceMemory& memory = device_memory();
  std::lock_guard<std::mutex> lock(memory.mutex);
  if (--memory.open == 0) protect(memory.base, memory.touched, false);
}

}  // namespace zaya::gpu::emulator
