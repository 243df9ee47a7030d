// A process handle that stays bound to its process: a pidfd can be polled
// for the exit and signalled without the risk of reaching another process
// that got the pid since, which is what stopping daemons that are not our
// own children (mpirun's) needs.
#pragma once

#include <utility>

#include <sys/types.h>

#include "absl/time/time.h"

namespace collective::bench {

class PidFd {
 public:
  // fd() is negative when `pid` could not be opened: error() says why
  // (ESRCH: no such process).
  explicit PidFd(pid_t pid);
  ~PidFd();
  PidFd(PidFd&& other) noexcept
      : pid_(std::exchange(other.pid_, -1)),
        fd_(std::exchange(other.fd_, -1)),
        error_(std::exchange(other.error_, 0)) {}
  PidFd(const PidFd&) = delete;
  PidFd& operator=(const PidFd&) = delete;
  PidFd& operator=(PidFd&&) = delete;

  int fd() const { return fd_; }
  int error() const { return error_; }
  pid_t pid() const { return pid_; }

  // Waits up to `timeout` for the process to exit; true once it has.
  bool AwaitExit(absl::Duration timeout) const;
  // Nothing happens to a process that has exited.
  void Signal(int signal) const;

 private:
  pid_t pid_;
  int fd_;
  int error_ = 0;
};

}  // namespace collective::bench
