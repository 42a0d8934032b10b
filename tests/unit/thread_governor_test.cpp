#include <gtest/gtest.h>

#include "core/thread_governor.h"

namespace zaya {
namespace {

// decide(threads, max, wall, seconds the process's threads waited to run, machine idle CPU), over one second.
TEST(ThreadGovernor, DropsAThreadOnlyWhenAnotherProcessHoldsACore) {
  EXPECT_EQ(ThreadGovernor::decide(2, 2, 1.0, 0.02, 0.02), 2) << "alone: the process gets its cores";
  EXPECT_EQ(ThreadGovernor::decide(2, 2, 1.0, 0.67, 0.0), 1) << "a busy neighbour: 2 of 3 runnable";
  EXPECT_EQ(ThreadGovernor::decide(64, 64, 1.0, 0.98, 0.01), 63) << "one of 64 cores taken";
  EXPECT_EQ(ThreadGovernor::decide(2, 2, 1.0, 0.45, 0.0), 1) << "a thread that runs 55% of the time";
  EXPECT_EQ(ThreadGovernor::decide(2, 2, 1.0, 0.07, 0.0), 2) << "the noise of lower-priority work";
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

// A busy neighbour left and a process of lower priority took its core: no core is idle, so only a try shows
// that the thread can come back.
TEST(ThreadGovernor, TriesAThreadBackNowAndThenWhileShort) {
  ThreadGovernor::Probe state;
  for (int window = 1; window < 30; ++window) ASSERT_EQ(ThreadGovernor::probe(1, 2, 1, state), 1) << window;
  EXPECT_EQ(ThreadGovernor::probe(1, 2, 1, state), 2) << "the 30th quiet window tries one more";
  EXPECT_TRUE(state.trying);
  EXPECT_EQ(ThreadGovernor::probe(2, 2, 1, state), 1) << "threads waited in the try: back down";
  EXPECT_EQ(state.every, 60) << "the next try waits twice as long";
  for (int window = 1; window < 60; ++window) ASSERT_EQ(ThreadGovernor::probe(1, 2, 1, state), 1) << window;
  EXPECT_EQ(ThreadGovernor::probe(1, 2, 1, state), 2);
  EXPECT_EQ(ThreadGovernor::probe(2, 2, 2, state), 2) << "nobody waited: the thread stays";
  EXPECT_FALSE(state.trying);
  EXPECT_EQ(state.every, 30) << "and the tries start over from the shortest wait";
}

TEST(ThreadGovernor, TriesOnlyWhileShortAndDecidedNothing) {
  ThreadGovernor::Probe state;
  for (int window = 0; window < 100; ++window)
    ASSERT_EQ(ThreadGovernor::probe(2, 2, 2, state), 2) << "at its count";
  for (int window = 0; window < 29; ++window) ASSERT_EQ(ThreadGovernor::probe(1, 2, 1, state), 1);
  EXPECT_EQ(ThreadGovernor::probe(1, 2, 2, state), 2) << "an idle core gives the thread back at once";
  EXPECT_FALSE(state.trying);
  EXPECT_EQ(state.quiet_windows, 0);
  for (int tries = 0; tries < 10; ++tries) {  // every failed try doubles the wait, up to 600 windows
    while (!state.trying) ThreadGovernor::probe(1, 2, 1, state);
    ThreadGovernor::probe(2, 2, 1, state);
  }
  EXPECT_EQ(state.every, 600);
}

}  // namespace
}  // namespace zaya
