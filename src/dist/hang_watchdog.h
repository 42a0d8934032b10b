#pragma once
// The hang watchdog: ends this process when it makes no progress for a set time. A rank whose peer's host
// froze, or whose link to it went down, waits in a collective for ever (MPI over TCP sees no error), and so
// does every rank waiting on it; a job that hangs holds its nodes and never restarts. The watchdog prints
// what the process was waiting for and exits with kExitHung, which makes the MPI launcher end the other
// ranks; the last published checkpoint is intact, and the job resumes from it, on the same hosts or fewer.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/exit_codes.h"

namespace zaya {

class HangWatchdog {
 public:
  // timeout_s > 0. `who` names this process in the message ("rank 1 of 4 on host b").
  HangWatchdog(double timeout_s, std::string who);
  ~HangWatchdog();
  HangWatchdog(const HangWatchdog&) = delete;
  HangWatchdog& operator=(const HangWatchdog&) = delete;

  // Something completed (a collective, a step): the clock starts again, and `doing` says what the process
  // does next, for the message ("computing step 12").
  void progress(const std::string& doing);
  // What the process waits for from now ("waiting in all-reduce of 2 values with ranks 0-3"), without
  // resetting the clock.
  void waiting(const std::string& what);
  // Added to the message: where the run stands ("step 12; the last checkpoint is runs/x/.../step_10").
  void set_context(const std::string& context);

 private:
  void watch();

  const std::chrono::duration<double> timeout_;
  const std::string who_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point last_progress_;
  std::string doing_, context_;
  std::thread thread_;
};

}  // namespace zaya
