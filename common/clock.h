// The clock of every deadline, timer and timestamp in the daemon and the
// client library: monotonic (CLOCK_MONOTONIC on Linux, which the timeline
// and the segment's heartbeats share).
#pragma once

#include <chrono>
#include <cstdint>

namespace collective {

// libstdc++'s steady_clock reads CLOCK_MONOTONIC, one clock for every process
// of the host: a time the client takes and one the daemon takes compare.
using Clock = std::chrono::steady_clock;

// A Clock time as the nanoseconds that the timeline, the copy-out spans and
// the segment's heartbeats carry.
inline uint64_t MonotonicNanos(Clock::time_point time) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count());
}

// Now, in those nanoseconds.
inline uint64_t MonotonicNanos() { return MonotonicNanos(Clock::now()); }

}  // namespace collective
