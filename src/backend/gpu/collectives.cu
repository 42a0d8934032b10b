// The device collectives of NCCL on CUDA and RCCL on HIP (which has NCCL's C API under the same names):
// a step's gradients, parameters and expert rows move between GPUs directly. The library is loaded when a
// run first asks for it, as cuBLASLt is, so zaya builds and runs without it (the staged communicator takes
// its place), and its API is declared here, so the build needs neither library's header.
//
// The collectives run on the stream the backend's kernels run on (the default one), so each starts after
// the kernels that wrote its data and the kernels after it see its result. Each returns once the device has
// finished it: the hang watchdog then sees a collective that never ends as one (a GPU that waits for a lost
// peer never returns an error), at the cost of the overlap of the gradients' reduction with the backward
// pass that the host collectives have.

#include "backend/gpu/device.h"
#include "backend/gpu/language.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"

#if defined(ZAYA_GPU_CUDA) || defined(ZAYA_GPU_HIP)
#include <dlfcn.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <utility>
#include <vector>

#if defined(ZAYA_GPU_CUDA) && __has_include(<nccl.h>)
#include <nccl.h>  // only to check the declarations below against it
#endif

namespace zaya::gpu {
namespace {

// NCCL's C API as zaya calls it (nccl.h; RCCL's rccl.h declares the same). Its enums are C enums, passed as
// int.
struct NcclUniqueId {
  char internal[128];
};
using NcclComm = struct NcclCommState*;
using NcclResult = int;
constexpr NcclResult kNcclSuccess = 0;
constexpr int kNcclFloat32 = 7, kNcclSum = 0;

#if defined(NCCL_MAJOR)
static_assert(sizeof(ncclUniqueId) == sizeof(NcclUniqueId) && ncclSuccess == kNcclSuccess &&
                  ncclFloat32 == kNcclFloat32 && ncclSum == kNcclSum,
              "the NCCL declarations differ from nccl.h");
#endif

#define ZAYA_NCCL_FUNCTIONS(X)                                                             \
  X(GetErrorString, const char* (*)(NcclResult))                                           \
  X(GetVersion, NcclResult (*)(int*))                                                      \
  X(GetUniqueId, NcclResult (*)(NcclUniqueId*))                                            \
  X(CommInitRank, NcclResult (*)(NcclComm*, int, NcclUniqueId, int))                       \
  X(CommDestroy, NcclResult (*)(NcclComm))                                                 \
  X(ReduceScatter, NcclResult (*)(const void*, void*, size_t, int, int, NcclComm, Stream)) \
  X(Reduce, NcclResult (*)(const void*, void*, size_t, int, int, int, NcclComm, Stream))   \
  X(AllGather, NcclResult (*)(const void*, void*, size_t, int, NcclComm, Stream))          \
  X(Broadcast, NcclResult (*)(const void*, void*, size_t, int, int, NcclComm, Stream))     \
  X(Send, NcclResult (*)(const void*, size_t, int, int, NcclComm, Stream))                 \
  X(Recv, NcclResult (*)(void*, size_t, int, int, NcclComm, Stream))                       \
  X(GroupStart, NcclResult (*)())                                                          \
  X(GroupEnd, NcclResult (*)())

template <class Function>
using Pointer = Function;  // lets a function pointer type stand before its member's name

struct Nccl {
#define ZAYA_NCCL_MEMBER(name, type) Pointer<type> name = nullptr;
  ZAYA_NCCL_FUNCTIONS(ZAYA_NCCL_MEMBER)
#undef ZAYA_NCCL_MEMBER
  std::string version;      // "nccl 2.28.3"
  std::string unavailable;  // why it could not be loaded; "" when it was
};

#if defined(ZAYA_GPU_CUDA)
constexpr const char* kName = "nccl";
constexpr const char* kLibrary = "libnccl.so.2";
#else
constexpr const char* kName = "rccl";
constexpr const char* kLibrary = "librccl.so.1";
#endif

const Nccl& nccl() {
  static const Nccl loaded = [] {
    Nccl api;
    // The loader's path first (LD_LIBRARY_PATH, ld.so.conf), then, for CUDA, the toolkit zaya was built with.
    void* library = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
#if defined(ZAYA_GPU_CUDA)
    if (library == nullptr) library = dlopen(ZAYA_CUDA_LIBRARY_DIR "/libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
#endif
    if (library == nullptr) {
      api.unavailable = cat(kLibrary, " cannot be loaded");
      return api;
    }
#define ZAYA_NCCL_LOAD(name, type)                                 \
  api.name = reinterpret_cast<type>(dlsym(library, "nccl" #name)); \
  if (api.name == nullptr) {                                       \
    api.unavailable = cat(kLibrary, " has no nccl" #name);         \
    return api;                                                    \
  }
    ZAYA_NCCL_FUNCTIONS(ZAYA_NCCL_LOAD)
#undef ZAYA_NCCL_LOAD
    int version = 0;
    api.GetVersion(&version);
    // NCCL_VERSION(major, minor, patch): major * 10000 + minor * 100 + patch since 2.9.
    api.version = cat(kName, " ", version / 10000, ".", version / 100 % 100, ".", version % 100);
    return api;
  }();
  return loaded;
}

void check(NcclResult result, const char* what) {
  if (result != kNcclSuccess) throw Error(cat(kName, " ", what, ": ", nccl().GetErrorString(result)));
}

std::vector<size_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<size_t> offsets(counts.size(), 0);
  std::exclusive_scan(counts.begin(), counts.end(), offsets.begin(), size_t(0));
  return offsets;
}

bool all_equal(const std::vector<int64_t>& counts) {
  return std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) == counts.end();
}

// Calls made between GroupStart and GroupEnd, which NCCL runs as one.
template <class Calls>
void grouped(Calls&& calls) {
  check(nccl().GroupStart(), "GroupStart");
  calls();
  check(nccl().GroupEnd(), "GroupEnd");
}

// A reduce-scatter already queued on the stream: done once the device has finished it.
class QueuedCollective final : public PendingCollective {
 public:
  bool progress() override { return false; }  // the device moves it on; only wait() tells
  void wait() override { synchronize(); }
};

class NcclCommunicator final : public DeviceCommunicator {
 public:
  explicit NcclCommunicator(Communicator& host) : host_(host) {
    NcclUniqueId id{};
    if (host.rank() == 0) check(nccl().GetUniqueId(&id), "GetUniqueId");
    host.broadcast(&id, sizeof id, 0);
    check(nccl().CommInitRank(&comm_, host.size(), id, host.rank()), "CommInitRank");
  }
  ~NcclCommunicator() override { nccl().CommDestroy(comm_); }

  Communicator& host() override { return host_; }
  std::string engine() const override { return nccl().version; }

  // Equal parts are NCCL's reduce-scatter; unequal ones (ZeRO-1's ranges follow whole matrices) one reduce
  // per part, onto its rank.
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const float* send, float* recv,
                                                              std::vector<int64_t> counts) override {
    if (all_equal(counts)) {
      check(nccl().ReduceScatter(send, recv, size_t(counts[0]), kNcclFloat32, kNcclSum, comm_, nullptr),
            "ReduceScatter");
    } else {
      const std::vector<size_t> offsets = offsets_of(counts);
      grouped([&] {
        for (int r = 0; r < host_.size(); ++r) {
          if (counts[size_t(r)] == 0) continue;
          check(nccl().Reduce(send + offsets[size_t(r)], recv, size_t(counts[size_t(r)]), kNcclFloat32,
                              kNcclSum, r, comm_, nullptr),
                "Reduce");
        }
      });
    }
    return std::make_unique<QueuedCollective>();
  }
  // Equal parts gathered in place; unequal ones broadcast each from its rank.
  void all_gather(float* data, const std::vector<int64_t>& counts) override {
    const std::vector<size_t> offsets = offsets_of(counts);
    if (all_equal(counts)) {
      const size_t count = size_t(counts[0]);
      check(nccl().AllGather(data + offsets[size_t(host_.rank())], data, count, kNcclFloat32, comm_, nullptr),
            "AllGather");
    } else {
      grouped([&] {
        for (int r = 0; r < host_.size(); ++r) {
          if (counts[size_t(r)] == 0) continue;
          float* part = data + offsets[size_t(r)];
          check(nccl().Broadcast(part, part, size_t(counts[size_t(r)]), kNcclFloat32, r, comm_, nullptr),
                "Broadcast");
        }
      });
    }
    synchronize();
  }
  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) override {
    const std::vector<size_t> send_at = offsets_of(send_counts), recv_at = offsets_of(recv_counts);
    grouped([&] {
      for (int r = 0; r < host_.size(); ++r) {
        const size_t out = size_t(send_counts[size_t(r)]), in = size_t(recv_counts[size_t(r)]);
        if (out > 0)
          check(nccl().Send(send + send_at[size_t(r)], out, kNcclFloat32, r, comm_, nullptr), "Send");
        if (in > 0)
          check(nccl().Recv(recv + recv_at[size_t(r)], in, kNcclFloat32, r, comm_, nullptr), "Recv");
      }
    });
    synchronize();
  }

 private:
  Communicator& host_;
  NcclComm comm_ = nullptr;
};

}  // namespace

const char* collectives_name() {
  return kName;
}

std::string collectives_unavailable(int ranks_here) {
  if (!nccl().unavailable.empty()) return nccl().unavailable;
  const int gpus = device_count();
  if (ranks_here > gpus)
    return cat(ranks_here, " ranks share this machine's ", gpus, " GPU", gpus == 1 ? "" : "s", ", and ",
               kName, " needs a GPU per rank");
  return "";
}

std::unique_ptr<DeviceCommunicator> make_collectives(Communicator& host) {
  return std::make_unique<NcclCommunicator>(host);
}

}  // namespace zaya::gpu

#else  // the emulator: neither library

namespace zaya::gpu {

const char* collectives_name() {
  return nullptr;
}
std::string collectives_unavailable(int) {
  return "the emulated backend has neither NCCL nor RCCL";
}
std::unique_ptr<DeviceCommunicator> make_collectives(Communicator&) {
  throw Error("the emulated backend has neither NCCL nor RCCL");
}

}  // namespace zaya::gpu

#endif
