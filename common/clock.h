// The clock of every deadline, timer and timestamp in the daemon and the
// client library: monotonic (CLOCK_MONOTONIC on Linux, which the timeline
// and the segment's heartbeats share).
#pragma once

#include <chrono>

namespace collective {

using Clock = std::chrono::steady_clock;

}  // namespace collective
