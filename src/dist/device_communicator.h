#pragma once
// The collectives a training step makes on a device's memory: the gradients' reduce-scatter, the
// parameters' all-gather and the experts' all-to-all, whose buffers live where the backend keeps its values
// (Ops::memory(): the host for the CPU, the GPU's own memory otherwise). Everything else a run sums or
// shares (token counts, losses, router statistics, strings) is a few host values and goes through host().
// Three engines, chosen by run.communicator (dist/communicator_choice.h): the host's own collectives for the
// CPU; the staged one for any device (each collective copies to the host, runs MPI, copies back); NCCL on
// CUDA and RCCL on HIP (backend/gpu/nccl_communicator.cu), which move the data between GPUs directly.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zaya {

class Communicator;
class MemoryResource;
class PendingCollective;

class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;
  // The same ranks, for values in host memory.
  virtual Communicator& host() = 0;
  // What moves the data, for the run's log: "mpi", "mpi, staged through host memory", "nccl", "rccl".
  virtual std::string engine() const = 0;
  int rank();
  int size();

  // As Communicator's collectives of the same names (dist/communicator.h), on device memory.
  virtual std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const float* send, float* recv,
                                                                      std::vector<int64_t> counts) = 0;
  virtual void all_gather(float* data, const std::vector<int64_t>& counts) = 0;
  virtual void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                          const std::vector<int64_t>& recv_counts) = 0;
};

// The CPU's: its device memory is host memory, which the host communicator's collectives take as it is.
std::unique_ptr<DeviceCommunicator> make_host_device_communicator(Communicator& host);
// Any device: each collective copies its input from `memory` to the host, runs host's collective there (MPI,
// or whatever host is) and copies the result back. It works wherever MPI does (the emulator, a GPU without
// NCCL or RCCL), at the cost of two copies and a wait for the device per collective; its sums are MPI's, so
// a run on it repeats bit for bit, and equals the CPU's collectives.
std::unique_ptr<DeviceCommunicator> make_staged_communicator(Communicator& host, MemoryResource& memory);

}  // namespace zaya
