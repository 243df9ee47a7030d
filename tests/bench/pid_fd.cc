#include "tests/bench/pid_fd.h"

#include <cerrno>

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace collective::bench {

PidFd::PidFd(pid_t pid)
    : pid_(pid), fd_(pid > 0 ? static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)) : -1) {
  if (fd_ < 0) error_ = pid > 0 ? errno : ESRCH;
}

PidFd::~PidFd() {
  if (fd_ >= 0) ::close(fd_);
}

bool PidFd::AwaitExit(absl::Duration timeout) const {
  if (fd_ < 0) return true;
  pollfd fd{fd_, POLLIN, 0};
  const int millis = static_cast<int>(absl::ToInt64Milliseconds(timeout));
  int ready;
  do {
    ready = ::poll(&fd, 1, millis);
  } while (ready < 0 && errno == EINTR);
  return ready > 0;
}

void PidFd::Signal(int signal) const {
  if (fd_ >= 0) ::syscall(SYS_pidfd_send_signal, fd_, signal, nullptr, 0);
}

}  // namespace collective::bench
