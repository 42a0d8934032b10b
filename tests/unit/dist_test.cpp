// The single-process communicator and the even split of work over ranks (the MPI communicator is tested
// across processes by tests/integration/distributed_test.sh).

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"

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

}  // namespace
}  // namespace zaya
