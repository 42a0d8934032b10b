#include "dist/watched_communicator.h"

#include "core/error.h"
#include "dist/device_communicator.h"
#include "dist/hang_watchdog.h"

namespace zaya {
namespace {

class WatchedPending final : public PendingCollective {
 public:
  WatchedPending(std::unique_ptr<PendingCollective> inner, HangWatchdog& watchdog, std::string what)
      : inner_(std::move(inner)), watchdog_(watchdog), what_(std::move(what)) {}
  bool progress() override {
    const bool done = inner_->progress();
    if (done) watchdog_.progress("computing after " + what_);
    return done;
  }
  void wait() override {
    watchdog_.waiting("waiting in " + what_);
    inner_->wait();
    watchdog_.progress("computing after " + what_);
  }

 private:
  std::unique_ptr<PendingCollective> inner_;
  HangWatchdog& watchdog_;
  const std::string what_;
};

// What a collective with `peers` waits for, said to the watchdog before it starts and as progress when done.
class CollectiveWatch {
 public:
  CollectiveWatch(HangWatchdog& watchdog, std::string peers)
      : watchdog_(watchdog), peers_(std::move(peers)) {}

  template <class F>
  void run(const char* collective, int64_t count, F&& call) {
    const std::string what = describe(collective, count);
    watchdog_.waiting("waiting in " + what);
    call();
    watchdog_.progress("computing after " + what);
  }
  std::unique_ptr<PendingCollective> started(const char* collective, int64_t count,
                                             std::unique_ptr<PendingCollective> pending) {
    return std::make_unique<WatchedPending>(std::move(pending), watchdog_, describe(collective, count));
  }
  HangWatchdog& watchdog() const { return watchdog_; }
  const std::string& peers() const { return peers_; }

 private:
  std::string describe(const char* collective, int64_t count) const {
    return cat(collective, " of ", count, " values with ", peers_);
  }

  HangWatchdog& watchdog_;
  const std::string peers_;
};

class WatchedCommunicator final : public Communicator {
 public:
  WatchedCommunicator(Communicator& inner, HangWatchdog& watchdog, std::string peers,
                      std::unique_ptr<Communicator> owned = nullptr)
      : owned_(std::move(owned)), inner_(inner), watch_(watchdog, std::move(peers)) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  int local_size() const override { return inner_.local_size(); }
  int local_rank() const override { return inner_.local_rank(); }

  void all_reduce_sum(float* data, int64_t count) override {
    run("all-reduce", count, [&] { inner_.all_reduce_sum(data, count); });
  }
  void all_reduce_sum(double* data, int64_t count) override {
    run("all-reduce", count, [&] { inner_.all_reduce_sum(data, count); });
  }
  void all_reduce_sum(int64_t* data, int64_t count) override {
    run("all-reduce", count, [&] { inner_.all_reduce_sum(data, count); });
  }
  void all_reduce_max(int64_t* data, int64_t count) override {
    run("all-reduce (max)", count, [&] { inner_.all_reduce_max(data, count); });
  }
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const float* send, float* recv,
                                                              std::vector<int64_t> counts) override {
    const int64_t count = total_count(counts);
    return watch_.started("reduce-scatter", count,
                          inner_.start_reduce_scatter_sum(send, recv, std::move(counts)));
  }
  void all_gather(float* data, const std::vector<int64_t>& counts) override {
    run("all-gather", total_count(counts), [&] { inner_.all_gather(data, counts); });
  }
  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) override {
    run("all-to-all", total_count(send_counts),
        [&] { inner_.all_to_all(send, send_counts, recv, recv_counts); });
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    run("broadcast (bytes)", bytes, [&] { inner_.broadcast(data, bytes, root); });
  }
  std::vector<std::string> all_gather_strings(const std::string& mine) override {
    std::vector<std::string> out;
    run("all-gather of strings", int64_t(mine.size()), [&] { out = inner_.all_gather_strings(mine); });
    return out;
  }
  void barrier() override {
    run("barrier", 0, [&] { inner_.barrier(); });
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    std::unique_ptr<Communicator> group;
    run("split", 0, [&] { group = inner_.split(color, key); });
    Communicator& inner = *group;
    return std::make_unique<WatchedCommunicator>(
        inner, watch_.watchdog(), cat("a group of ", inner.size(), " of ", watch_.peers()), std::move(group));
  }
  [[noreturn]] void abort(int code) override {
    inner_.abort(code);
    __builtin_unreachable();  // the inner communicator's abort does not return either
  }

 private:
  template <class F>
  void run(const char* collective, int64_t count, F&& call) {
    watch_.run(collective, count, std::forward<F>(call));
  }

  std::unique_ptr<Communicator> owned_;  // a split group's own communicator
  Communicator& inner_;
  CollectiveWatch watch_;
};

// The device collectives of another communicator, watched the same way.
class WatchedDeviceCommunicator final : public DeviceCommunicator {
 public:
  WatchedDeviceCommunicator(std::unique_ptr<DeviceCommunicator> inner, HangWatchdog& watchdog,
                            std::string peers)
      : inner_(std::move(inner)), watch_(watchdog, cat(peers, " over ", inner_->engine())) {}

  Communicator& host() override { return inner_->host(); }
  std::string engine() const override { return inner_->engine(); }
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const float* send, float* recv,
                                                              std::vector<int64_t> counts) override {
    const int64_t count = total_count(counts);
    return watch_.started("reduce-scatter", count,
                          inner_->start_reduce_scatter_sum(send, recv, std::move(counts)));
  }
  void all_gather(float* data, const std::vector<int64_t>& counts) override {
    watch_.run("all-gather", total_count(counts), [&] { inner_->all_gather(data, counts); });
  }
  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) override {
    watch_.run("all-to-all", total_count(send_counts),
               [&] { inner_->all_to_all(send, send_counts, recv, recv_counts); });
  }

 private:
  std::unique_ptr<DeviceCommunicator> inner_;
  CollectiveWatch watch_;
};

}  // namespace

std::unique_ptr<DeviceCommunicator> watch_device_communicator(std::unique_ptr<DeviceCommunicator> inner,
                                                              HangWatchdog& watchdog, std::string peers) {
  return std::make_unique<WatchedDeviceCommunicator>(std::move(inner), watchdog, std::move(peers));
}

std::unique_ptr<Communicator> watch_communicator(Communicator& inner, HangWatchdog& watchdog,
                                                 std::string peers) {
  return std::make_unique<WatchedCommunicator>(inner, watchdog, std::move(peers));
}

}  // namespace zaya
