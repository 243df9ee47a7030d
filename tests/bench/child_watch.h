// Waiting for the processes of one benchmark phase (client workers, or
// mpirun) without busy-waiting: poll on pidfds, with a deadline, while
// watching the daemon they depend on. The first failure ends the wait, and
// the caller stops the rest, so a failed run leaves no process behind.
#pragma once

#include <string>
#include <vector>

#include <sys/types.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "tests/bench/interrupts.h"
#include "tests/common/subprocess.h"

namespace collective::bench {

struct WatchedChild {
  std::string name;  // for messages: "client worker 2", "mpirun"
  testing::Subprocess* process;
};

// OK when every child has exited 0. Otherwise an error naming the children
// that failed (with their stderr), a daemon of `daemon_pids` that exits
// first, the signal if one of `interrupts` arrives, or the children still
// running at the deadline.
absl::Status AwaitChildren(const std::vector<WatchedChild>& children,
                           const std::vector<pid_t>& daemon_pids, absl::Time deadline,
                           Interrupts& interrupts);

// SIGTERM to every child still running (mpirun passes it on to its ranks),
// up to `grace` for them to go, then SIGKILL; all are reaped.
void StopChildren(const std::vector<WatchedChild>& children, absl::Duration grace);

}  // namespace collective::bench
