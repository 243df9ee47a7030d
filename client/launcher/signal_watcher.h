// SignalWatcher: the signals the launcher forwards to the ranks (SIGINT,
// SIGTERM and SIGHUP, unless ignored when it starts), received through a
// signalfd so that the one poll loop sees them next to exits and output,
// and no handler runs at a random point. Also ignores SIGPIPE: a closed
// stdout must not kill the launcher while ranks still run (the ranks get
// SIGPIPE and their signal mask back to default); and restores SIGCHLD.
// An elastic job also watches SIGUSR1, which asks for one more worker.
#pragma once

#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "client/launcher/unique_fd.h"

namespace collective::launcher {

class SignalWatcher {
 public:
  // Blocks the forwarded signals in this thread (start it before any other
  // thread) and opens the signalfd; with SIGUSR1 when `elastic`.
  static absl::StatusOr<SignalWatcher> Start(bool elastic = false);

  // Readable while a signal is pending.
  int fd() const { return fd_.get(); }
  // A pending signal, without waiting; nullopt if none.
  std::optional<int> Take() const;

 private:
  explicit SignalWatcher(UniqueFd fd) : fd_(std::move(fd)) {}

  UniqueFd fd_;
};

}  // namespace collective::launcher
