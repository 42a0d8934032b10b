// The single-process communicator and the even split of work over ranks (the MPI communicator is tested
// across processes by tests/integration/distributed_test.sh).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "dist/hang_watchdog.h"
#include "dist/watched_communicator.h"

namespace zaya {
namespace {

TEST(EvenShare, CoversEverythingOnceInOrderWithinOne) {
  for (int64_t total : {0, 1, 7, 16, 101}) {
    for (int parts : {1, 2, 3, 8}) {
      int64_t next = 0, smallest = total, largest = 0;
      for (int index = 0; index < parts; ++index) {
        const Share share = even_share(total, parts, index);
        EXPECT_EQ(share.first, next) << total << " over " << parts;
        next += share.count;
        smallest = std::min(smallest, share.count);
        largest = std::max(largest, share.count);
      }
      EXPECT_EQ(next, total);
      EXPECT_LE(largest - smallest, 1);
    }
  }
}

TEST(SingleProcessCommunicator, IsRankZeroOfOneAndItsCollectivesCopy) {
  const std::unique_ptr<Communicator> comm = make_single_process_communicator();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  std::vector<float> send = {1, 2, 3}, recv(3);
  comm->reduce_scatter_sum(send.data(), recv.data(), {3});
  EXPECT_EQ(recv, send);
  std::vector<float> exchanged(3);
  comm->all_to_all(send.data(), {3}, exchanged.data(), {3});
  EXPECT_EQ(exchanged, send);
  double sum = 2.5;
  comm->all_reduce_sum(&sum, 1);
  EXPECT_EQ(sum, 2.5);
  EXPECT_EQ(comm->all_gather_strings("me"), std::vector<std::string>{"me"});
  EXPECT_EQ(comm->split(3, 0)->size(), 1);
  require_agreement(*comm, "anything", "value");
}

// The watched communicator passes every collective through (the single-process results above), and a
// split group is watched too.
// Sets an environment variable for the scope of a test, or removes it (nullptr).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST(Launch, SeveralSrunTasksWithoutMpiAreRefused) {
  const ScopedEnv no_pmix("PMIX_RANK", nullptr), no_pmi("PMI_RANK", nullptr),
      no_pmi_size("PMI_SIZE", nullptr), no_ompi("OMPI_COMM_WORLD_SIZE", nullptr);
  EXPECT_NO_THROW(refuse_tasks_without_mpi());  // not under srun
  {
    const ScopedEnv tasks("SLURM_STEP_NUM_TASKS", "1");
    EXPECT_NO_THROW(refuse_tasks_without_mpi());  // one task is a one-process run
  }
  const ScopedEnv tasks("SLURM_STEP_NUM_TASKS", "2");
  EXPECT_THAT([] { refuse_tasks_without_mpi(); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("srun started 2 tasks without MPI")));
  const ScopedEnv pmix("PMIX_RANK", "0");
  EXPECT_NO_THROW(refuse_tasks_without_mpi());  // srun --mpi=pmix
}

TEST(WatchedCommunicator, PassesCollectivesThrough) {
  const std::unique_ptr<Communicator> inner = make_single_process_communicator();
  HangWatchdog watchdog(60, "rank 0 of 1");
  const std::unique_ptr<Communicator> comm = watch_communicator(*inner, watchdog, "rank 0");
  std::vector<float> send = {1, 2, 3}, recv(3);
  comm->reduce_scatter_sum(send.data(), recv.data(), {3});
  EXPECT_EQ(recv, send);
  int64_t values[2] = {4, 5};
  comm->all_reduce_max(values, 2);
  EXPECT_EQ(values[1], 5);
  EXPECT_EQ(comm->all_gather_strings("me"), std::vector<std::string>{"me"});
  const std::unique_ptr<Communicator> group = comm->split(1, 0);
  EXPECT_EQ(group->size(), 1);
  group->barrier();
}

// What a collective with a frozen peer does.
[[noreturn]] void wait_forever() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

// A communicator whose all-reduce never completes: a peer whose host froze.
class StuckCommunicator final : public Communicator {
 public:
  int rank() const override { return 1; }
  int size() const override { return 2; }
  int local_size() const override { return 1; }
  int local_rank() const override { return 0; }
  void all_reduce_sum(float*, int64_t) override { wait_forever(); }
  void all_reduce_sum(double*, int64_t) override { wait_forever(); }
  void all_reduce_sum(int64_t*, int64_t) override { wait_forever(); }
  void all_reduce_max(int64_t*, int64_t) override { wait_forever(); }
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const float*, float*,
                                                              std::vector<int64_t>) override {
    wait_forever();
  }
  void all_gather(float*, const std::vector<int64_t>&) override { wait_forever(); }
  void all_to_all(const float*, const std::vector<int64_t>&, float*, const std::vector<int64_t>&) override {
    wait_forever();
  }
  void broadcast(void*, int64_t, int) override { wait_forever(); }
  std::vector<std::string> all_gather_strings(const std::string&) override { wait_forever(); }
  void barrier() override { wait_forever(); }
  std::unique_ptr<Communicator> split(int, int) override { wait_forever(); }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }
};

// A rank of two whose peer froze, waiting in the all-reduce that every step ends with.
void wait_for_a_frozen_peer() {
  StuckCommunicator peerless;
  HangWatchdog watchdog(0.5, "rank 1 of 2 on host b");
  const std::unique_ptr<Communicator> comm = watch_communicator(peerless, watchdog, "ranks 0-1");
  watchdog.set_context("step 12 done; the last checkpoint is run/checkpoints/step_10");
  std::vector<int64_t> requests(2, 0);
  comm->all_reduce_max(requests.data(), 2);
}

// The messages are matched as substrings: Oniguruma (linked for the tokenizer) exports POSIX regcomp and
// regexec, which take the place of the C library's in this process, so that gtest's regular expressions
// match nothing.
TEST(HangWatchdog, EndsAProcessStuckInACollectiveSayingWhere) {
  EXPECT_EXIT(
      wait_for_a_frozen_peer(), testing::ExitedWithCode(kExitHung),
      testing::AllOf(testing::HasSubstr("rank 1 of 2 on host b: no progress for "),
                     testing::HasSubstr("waiting in all-reduce (max) of 2 values with ranks 0-1; step 12 "
                                        "done; the last checkpoint is run/checkpoints/step_10")));
}

// Device collectives (NCCL's, RCCL's: not through a watched host communicator) whose all-to-all never ends.
class StuckDeviceCommunicator final : public DeviceCommunicator {
 public:
  Communicator& host() override { return host_; }
  std::string engine() const override { return "nccl 2.28.3"; }
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const float*, float*,
                                                              std::vector<int64_t>) override {
    wait_forever();
  }
  void all_gather(float*, const std::vector<int64_t>&) override { wait_forever(); }
  void all_to_all(const float*, const std::vector<int64_t>&, float*, const std::vector<int64_t>&) override {
    wait_forever();
  }

 private:
  StuckCommunicator host_;
};

void wait_for_a_frozen_gpu_peer() {
  HangWatchdog watchdog(0.5, "rank 1 of 2 on host b");
  const std::unique_ptr<DeviceCommunicator> comm =
      watch_device_communicator(std::make_unique<StuckDeviceCommunicator>(), watchdog, "its expert group");
  std::vector<int64_t> counts = {3, 4};
  comm->all_to_all(nullptr, counts, nullptr, counts);
}

TEST(HangWatchdog, EndsAProcessStuckInADeviceCollective) {
  EXPECT_EXIT(wait_for_a_frozen_gpu_peer(), testing::ExitedWithCode(kExitHung),
              testing::HasSubstr("waiting in all-to-all of 7 values with its expert group over nccl 2.28.3"));
}

TEST(HangWatchdog, ProgressKeepsAProcessAlive) {
  // A second of progress every 0.1 s under a 0.3 s timeout: the process ends by itself, with 0.
  EXPECT_EXIT(
      {
        HangWatchdog watchdog(0.3, "rank 0 of 1");
        for (int i = 0; i < 10; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          watchdog.progress("computing");
        }
        std::_Exit(0);
      },
      testing::ExitedWithCode(0), testing::_);
}

}  // namespace
}  // namespace zaya
