#pragma once
// A Communicator that tells a HangWatchdog what it waits for: each collective says so before it starts
// ("waiting in all-reduce of 2 values with ranks 0-3") and counts as progress when it completes. Groups
// split from it are watched too.

#include <memory>
#include <string>

#include "dist/communicator.h"

namespace zaya {

class HangWatchdog;

// `peers` names the ranks of `inner` in messages ("ranks 0-3"). inner and watchdog outlive the result.
std::unique_ptr<Communicator> watch_communicator(Communicator& inner, HangWatchdog& watchdog,
                                                 std::string peers);

}  // namespace zaya
