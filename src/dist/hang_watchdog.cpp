#include "dist/hang_watchdog.h"

#include <cstdio>
#include <cstdlib>

namespace zaya {

HangWatchdog::HangWatchdog(double timeout_s, std::string who)
    : timeout_(timeout_s),
      who_(std::move(who)),
      last_progress_(std::chrono::steady_clock::now()),
      doing_("starting"),
      thread_([this] { watch(); }) {}

HangWatchdog::~HangWatchdog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void HangWatchdog::progress(const std::string& doing) {
  std::lock_guard lock(mutex_);
  last_progress_ = std::chrono::steady_clock::now();
  doing_ = doing;
}

void HangWatchdog::waiting(const std::string& what) {
  std::lock_guard lock(mutex_);
  doing_ = what;
}

void HangWatchdog::set_context(const std::string& context) {
  std::lock_guard lock(mutex_);
  context_ = context;
}

void HangWatchdog::watch() {
  std::unique_lock lock(mutex_);
  // Checked a few times per timeout (at least once a second): the job ends within about a quarter of the
  // timeout after it runs out.
  const auto period = std::min<std::chrono::duration<double>>(timeout_ / 4, std::chrono::seconds(1));
  while (!wake_.wait_for(lock, period, [&] { return stopping_; })) {
    const std::chrono::duration<double> idle = std::chrono::steady_clock::now() - last_progress_;
    if (idle < timeout_) continue;
    std::fprintf(
        stderr,
        "zaya: %s: no progress for %.0f s (run.hang_timeout_s), %s%s%s; ending the job (exit %d) so that "
        "a restart resumes from the last checkpoint\n",
        who_.c_str(), idle.count(), doing_.c_str(), context_.empty() ? "" : "; ", context_.c_str(),
        kExitHung);
    std::fflush(stderr);
    // Not exit(): the other threads are stuck inside the MPI library, whose finalisers would wait for them.
    std::_Exit(kExitHung);
  }
}

}  // namespace zaya
