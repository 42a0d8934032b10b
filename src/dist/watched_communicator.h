#pragma once
// A Communicator (or DeviceCommunicator) that tells a HangWatchdog what it waits for: each collective says
// so before it starts ("waiting in all-reduce of 2 values with ranks 0-3") and counts as progress when it
// completes. Groups split from it are watched too.

#include <memory>
#include <string>

#include "dist/communicator.h"

namespace zaya {

class DeviceCommunicator;
class HangWatchdog;

// `peers` names the ranks of `inner` in messages ("ranks 0-3"). inner and watchdog outlive the result.
std::unique_ptr<Communicator> watch_communicator(Communicator& inner, HangWatchdog& watchdog,
                                                 std::string peers);
// The device collectives of `inner` (NCCL's and RCCL's, which do not pass through a watched host
// communicator); its host() stays as it is.
std::unique_ptr<DeviceCommunicator> watch_device_communicator(std::unique_ptr<DeviceCommunicator> inner,
                                                              HangWatchdog& watchdog, std::string peers);

}  // namespace zaya
