#include <gtest/gtest.h>

#include "core/thread_governor.h"

namespace zaya {
namespace {

// decide(threads, max, wall, seconds the process's threads waited to run, machine idle CPU), over one second.
TEST(ThreadGovernor, DropsAThreadOnlyWhenAnotherProcessHoldsACore) {
  EXPECT_EQ(ThreadGovernor::decide(2, 2, 1.0, 0.02, 0.02), 2) << "alone: the process gets its cores";
  EXPECT_EQ(ThreadGovernor::decide(2, 2, 1.0, 0.67, 0.0), 1) << "a busy neighbour: 2 of 3 runnable";
  EXPECT_EQ(ThreadGovernor::decide(64, 64, 1.0, 0.98, 0.01), 63) << "one of 64 cores taken";
  EXPECT_EQ(ThreadGovernor::decide(2, 2, 1.0, 0.0, 0.6), 2) << "serial phases leave a core idle";
  EXPECT_EQ(ThreadGovernor::decide(2, 2, 1.0, 0.01, 0.0), 2)
      << "a process of lower priority fills the idle moments but never keeps a thread waiting";
  EXPECT_EQ(ThreadGovernor::decide(1, 2, 1.0, 0.9, 0.0), 1) << "never below one thread";
  EXPECT_EQ(ThreadGovernor::decide(2, 2, 1.0, -0.2, 0.0), 2) << "a thread that ended took its count with it";
}

TEST(ThreadGovernor, TakesAThreadBackWhenACoreIsIdle) {
  EXPECT_EQ(ThreadGovernor::decide(1, 2, 1.0, 0.0, 0.95), 2);
  EXPECT_EQ(ThreadGovernor::decide(1, 2, 1.0, 0.0, 0.1), 1) << "the neighbour is still there";
  EXPECT_EQ(ThreadGovernor::decide(2, 2, 1.0, 0.0, 1.0), 2) << "never above the count it started with";
  EXPECT_EQ(ThreadGovernor::decide(2, 2, 0.0, 0.0, 0.0), 2) << "no time measured, no decision";
}

}  // namespace
}  // namespace zaya
