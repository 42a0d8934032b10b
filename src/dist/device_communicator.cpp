#include "dist/device_communicator.h"

#include <numeric>

#include "core/buffer.h"
#include "dist/communicator.h"

namespace zaya {
namespace {

class HostDeviceCommunicator final : public DeviceCommunicator {
 public:
  explicit HostDeviceCommunicator(Communicator& host) : host_(host) {}

  Communicator& host() override { return host_; }
  std::string engine() const override { return "mpi"; }
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const float* send, float* recv,
                                                              std::vector<int64_t> counts) override {
    return host_.start_reduce_scatter_sum(send, recv, std::move(counts));
  }
  void all_gather(float* data, const std::vector<int64_t>& counts) override {
    host_.all_gather(data, counts);
  }
  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) override {
    host_.all_to_all(send, send_counts, recv, recv_counts);
  }

 private:
  Communicator& host_;
};

// A reduce-scatter on host copies; its result goes to the device once the host's is complete.
class StagedPending final : public PendingCollective {
 public:
  StagedPending(MemoryResource& memory, std::vector<float> send, int64_t recv_count, float* device_recv)
      : memory_(memory), send_(std::move(send)), recv_(size_t(recv_count)), device_recv_(device_recv) {}
  void start(Communicator& host, std::vector<int64_t> counts) {
    inner_ = host.start_reduce_scatter_sum(send_.data(), recv_.data(), std::move(counts));
  }
  bool progress() override { return inner_->progress(); }
  void wait() override {
    inner_->wait();
    if (!copied_) memory_.copy_from_host(device_recv_, recv_.data(), recv_.size() * sizeof(float));
    copied_ = true;
  }

 private:
  MemoryResource& memory_;
  std::vector<float> send_, recv_;  // host copies of the send buffer, and where the host's sums land
  float* device_recv_;
  std::unique_ptr<PendingCollective> inner_;
  bool copied_ = false;
};

class StagedCommunicator final : public DeviceCommunicator {
 public:
  StagedCommunicator(Communicator& host, MemoryResource& memory) : host_(host), memory_(memory) {}

  Communicator& host() override { return host_; }
  std::string engine() const override { return "mpi, staged through host memory"; }

  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const float* send, float* recv,
                                                              std::vector<int64_t> counts) override {
    auto pending = std::make_unique<StagedPending>(memory_, to_host(send, total_count(counts)),
                                                   counts.at(size_t(host_.rank())), recv);
    pending->start(host_, std::move(counts));
    return pending;
  }
  // Only this rank's part goes to the host: the others are filled in there.
  void all_gather(float* data, const std::vector<int64_t>& counts) override {
    recv_.resize(size_t(total_count(counts)));
    const int64_t mine = std::accumulate(counts.begin(), counts.begin() + host_.rank(), int64_t(0));
    memory_.copy_to_host(recv_.data() + mine, data + mine,
                         size_t(counts.at(size_t(host_.rank()))) * sizeof(float));
    host_.all_gather(recv_.data(), counts);
    memory_.copy_from_host(data, recv_.data(), recv_.size() * sizeof(float));
  }
  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) override {
    send_.resize(size_t(total_count(send_counts)));
    memory_.copy_to_host(send_.data(), send, send_.size() * sizeof(float));
    recv_.resize(size_t(total_count(recv_counts)));
    host_.all_to_all(send_.data(), send_counts, recv_.data(), recv_counts);
    memory_.copy_from_host(recv, recv_.data(), recv_.size() * sizeof(float));
  }

 private:
  std::vector<float> to_host(const float* device, int64_t count) const {
    std::vector<float> staged(static_cast<size_t>(count));
    memory_.copy_to_host(staged.data(), device, staged.size() * sizeof(float));
    return staged;
  }

  Communicator& host_;
  MemoryResource& memory_;
  // The blocking collectives' host copies, kept from call to call (their capacity: no allocation per step
  // once the largest has been seen). A reduce-scatter in flight holds copies of its own.
  std::vector<float> send_, recv_;
};

}  // namespace

int DeviceCommunicator::rank() {
  return host().rank();
}

int DeviceCommunicator::size() {
  return host().size();
}

std::unique_ptr<DeviceCommunicator> make_host_device_communicator(Communicator& host) {
  return std::make_unique<HostDeviceCommunicator>(host);
}

std::unique_ptr<DeviceCommunicator> make_staged_communicator(Communicator& host, MemoryResource& memory) {
  return std::make_unique<StagedCommunicator>(host, memory);
}

}  // namespace zaya
