// PollSet: one poll(2) over everything the launcher waits for (output
// pipes, pidfds of children, the signalfd, the daemon's notify socket),
// rebuilt for every wait, with a callback per descriptor. Children are
// watched through pidfds rather than SIGCHLD so that exits, output and
// signals arrive through the same call, in one thread, without races.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include <poll.h>

#include "absl/time/time.h"

namespace collective::launcher {

class PollSet {
 public:
  // Calls `on_ready` when `fd` is readable, hung up or in error.
  void Add(int fd, std::function<void()> on_ready);
  // Calls `on_ready` when `fd` takes writing (or is in error).
  void AddWritable(int fd, std::function<void()> on_ready);

  // Waits until a descriptor is ready, then runs the callbacks of all that
  // are. Returns false if `deadline` passed first (nullopt: no deadline).
  // A deadline already past still looks once, without waiting: a caller
  // whose deadline stays behind it (a kill sent, its exit not yet reaped)
  // still gets what is ready, rather than spinning without it.
  bool Wait(std::optional<absl::Time> deadline);

 private:
  std::vector<pollfd> fds_;
  std::vector<std::function<void()>> callbacks_;
};

}  // namespace collective::launcher
