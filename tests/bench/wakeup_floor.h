// The wake-up floor of a small collective on one node: what it costs K
// processes to hand a step to one more process (the daemon's engine) and be
// woken back, with nothing else done. Each waits on a futex, as the clients
// and the engine do when processes outnumber cores (neither spins then), so
// no daemon that sleeps between steps can finish a step faster on this
// machine. Measured in the same run as the 4-byte latency that it bounds.
#pragma once

#include "absl/status/statusor.h"
#include "tests/bench/stats.h"

namespace collective::bench {

// Who wakes the parent when the clients arrive at a step.
enum class Arrival {
  kLastWakes,  // only the last: the least any design that sleeps can do
  kEachWakes,  // every one, as each submission wakes the engine here (it
               // cannot know which rank is the last to submit a tensor)
};

// Forks `clients` processes that, `iterations` times, each announce their
// arrival (waking the waiting parent through a futex as `arrival` says) and
// sleep on a futex until the parent, having seen them all, wakes them all.
// Returns the parent's time per step.
absl::StatusOr<Summary> MeasureWakeupFloor(int clients, int iterations, Arrival arrival);

struct WakeupFloor {
  Summary last_wakes;
  Summary each_wakes;
};

}  // namespace collective::bench
